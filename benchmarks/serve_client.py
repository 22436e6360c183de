"""The client of the serving benchmarks: `hlobundle serve` of the shipped LeNet on a loopback
port or a unix socket (`serve --uds`), one connection to it, binary inference requests, many
clients at once (threads of this process, or forked processes), and the server's /metrics.
`serving.py` measures with it, `accelerator.py` through `serving.serve_uds_cost`, and
tests/on_accelerator.py asks `serve --uds` through `connection`; tests/test_benchmarks.py
checks it against a stand-in server."""

from __future__ import annotations

import json
import subprocess
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks.harness import PY, ROOT, free_port

# Where a served process listens: a loopback port, or the path of a unix socket (`serve --uds`).
Where = int | str


def connection(where: Where, timeout: float | None = None) -> Any:
    """An http.client connection to the server at `where`, over TCP or a unix socket."""
    import http.client
    import socket

    if isinstance(where, int):
        return http.client.HTTPConnection("127.0.0.1", where, timeout=timeout)

    class UnixConnection(http.client.HTTPConnection):
        def connect(self) -> None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(timeout)
            self.sock.connect(where)

    return UnixConnection("localhost", timeout=timeout)


def start_lenet(
    max_batch: int,
    uds: str | None = None,
    ready_s: float = 60.0,
    flags: tuple[str, ...] = (),
    more: tuple[str, ...] = (),
    bundle: object = None,
) -> tuple[subprocess.Popen, Where]:
    """`hlobundle serve` of the LeNet (and the bundles `more`), batching up to `max_batch`, on
    a free loopback port or the unix socket `uds`, with `flags`, once it answers ready (within
    `ready_s`); `bundle`: another bundle served as `lenet5` in its place (its input and result
    named and shaped as the LeNet's)."""
    if uds is None:
        where: Where = free_port()
        listen = ["--port", str(where)]
    else:
        where, listen = uds, ["--uds", uds]
    proc = subprocess.Popen(
        [
            PY,
            "-m",
            "hlobundle",
            "serve",
            str(bundle or ROOT / "examples" / "lenet5.hlobundle"),
            *more,
            *listen,
            "--backend",
            "xla",
            "--max-batch-size",
            str(max_batch),
            "--trust-batched",
            *flags,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + ready_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            conn = connection(where, timeout=1)
            conn.request("GET", "/v2/health/ready")
            if conn.getresponse().status == 200:
                return proc, where
        except OSError:  # not listening yet
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the server did not start")


def load(
    where: Where,
    body: bytes,
    header: int,
    want: np.ndarray,
    clients: int,
    each: int,
    processes: bool = False,
) -> tuple[float, int]:
    """Requests per second from `clients` threads (or processes), each with its own keep-alive
    connection sending `each` binary requests; and how many answers were lost or wrong. Each
    client is a `Lean` one: what a request costs here is the server's to pay, not the client's
    (http.client cost 300 us of this process's CPU a request, on the same 2 CPUs as the server)."""
    ask = request_bytes("POST", "/v2/models/lenet5/infer", body, header)
    exact = want.astype("<f4").tobytes()

    def client() -> int:
        conn, bad = Lean(where), 0
        for k in range(each):
            try:
                status, fields, data = conn.exchange(ask)
            except OSError:  # the connection lost: this answer and the rest are
                return bad + each - k
            n = int(fields.get(b"inference-header-content-length", len(data)))
            bad += status != 200 or not matches(data[n:], want, exact)
        conn.close()
        return bad

    seconds, bad = (in_processes if processes else in_threads)(client, clients)
    return clients * each / seconds, bad


def matches(data: bytes, want: np.ndarray, exact: bytes) -> bool:
    """Whether the answer's bytes `data` are `want`'s (float32): `exact` (its bytes), or within
    SPEC's float32 tolerance (a batched call's answer may be 1 ulp apart)."""
    if data == exact:
        return True
    got = np.frombuffer(data, "<f4") if len(data) % 4 == 0 else None
    return (
        got is not None and got.size == want.size and np.allclose(got, want, rtol=1e-5, atol=1e-6)
    )


def request_bytes(method: str, path: str, body: bytes = b"", header: int | None = None) -> bytes:
    """One HTTP/1.1 request, whole, as a `Lean` client sends it (a binary inference request
    when `header`, the length of its JSON header, is given)."""
    lines = [f"{method} {path} HTTP/1.1", "Host: localhost", f"Content-Length: {len(body)}"]
    if header is not None:
        lines.append(f"Inference-Header-Content-Length: {header}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


class Lean:
    """A keep-alive HTTP/1.1 client on one socket that sends prepared request bytes and reads
    each answer by its Content-Length: the load's clients, which should cost the machine the
    system calls and little more."""

    def __init__(self, where: Where) -> None:
        import socket

        if isinstance(where, int):
            self.sock = socket.create_connection(("127.0.0.1", where))
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        else:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.connect(where)
        self.pending = b""  # bytes read past the last answer

    def exchange(self, request: bytes) -> tuple[int, dict[bytes, bytes], bytes]:
        """Sends `request`; the answer's status, its header fields (names in lower case) and
        its body."""
        self.sock.sendall(request)
        while (end := self.pending.find(b"\r\n\r\n")) < 0:
            self._read()
        head, self.pending = self.pending[:end], self.pending[end + 4 :]
        status, *lines = head.split(b"\r\n")
        fields = {}
        for line in lines:
            name, _, value = line.partition(b":")
            fields[name.strip().lower()] = value.strip()
        length = int(fields[b"content-length"])  # the servers measured always send it
        while len(self.pending) < length:
            self._read()
        body, self.pending = self.pending[:length], self.pending[length:]
        return int(status.split()[1]), fields, body

    def _read(self) -> None:
        got = self.sock.recv(1 << 16)
        if not got:
            raise ConnectionError("the server closed the connection")
        self.pending += got

    def close(self) -> None:
        self.sock.close()


def binary_request(images: np.ndarray) -> tuple[bytes, bytes]:
    """The LeNet's binary inference request (the binary extension both ways): its JSON header,
    and the whole body."""
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "images",
                    "shape": list(images.shape),
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": images.nbytes},
                }
            ],
            "outputs": [{"name": "result", "parameters": {"binary_data": True}}],
        }
    ).encode()
    return header, header + images.astype("<f4").tobytes()


def answer(where: Where, body: bytes, header: bytes) -> np.ndarray:
    """The result of one binary request (float32, flat)."""
    conn = connection(where)
    conn.request(
        "POST",
        "/v2/models/lenet5/infer",
        body,
        {"Inference-Header-Content-Length": str(len(header))},
    )
    r = conn.getresponse()
    data = r.read()
    conn.close()
    if r.status != 200:
        raise RuntimeError(f"the server answered {r.status}: {data[:300]!r}")
    return np.frombuffer(data[int(r.headers["Inference-Header-Content-Length"]) :], "<f4")


def latency(port: int, body: bytes, header: bytes, n: int) -> tuple[list[float], list[float]]:
    """Seconds of each binary inference request, and of each GET /v2/health/live between them
    (HTTP alone: uvicorn and http.client over loopback, no model), one client on one keep-alive
    connection, as clients connect."""
    import http.client

    conn, infer, live = http.client.HTTPConnection("127.0.0.1", port), [], []
    for _ in range(n):
        start = time.perf_counter()
        conn.request(
            "POST",
            "/v2/models/lenet5/infer",
            body,
            {"Inference-Header-Content-Length": str(len(header))},
        )
        conn.getresponse().read()
        infer.append(time.perf_counter() - start)
        start = time.perf_counter()
        conn.request("GET", "/v2/health/live")
        conn.getresponse().read()
        live.append(time.perf_counter() - start)
    conn.close()
    return infer, live


def handler_mean_s(where: Where) -> float:
    """The server's own mean seconds per inference request, from body read to response built
    (its /metrics histogram hlobundle_request_seconds)."""
    return metric_mean(where, "hlobundle_request_seconds")


def metric_mean(where: Where, histogram: str) -> float:
    """The mean of the server's /metrics histogram `histogram` for the LeNet."""
    total, count = metric_sums(where, histogram)
    return total / count


def metric_sums(where: Where, histogram: str) -> tuple[float, float]:
    """The sum and the count of the server's /metrics histogram `histogram` for the LeNet."""
    conn = connection(where, timeout=10)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    values = {
        line.split("{")[0]: float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith(f"{histogram}_") and 'model="lenet5"' in line
    }
    return values[f"{histogram}_sum"], values[f"{histogram}_count"]


def ceiling(where: Where, clients: int, each: int, processes: bool = False) -> float:
    """Requests per second the same clients get from the server when no model runs at all: what
    HTTP on both sides costs, the most any batching could reach."""

    ask = request_bytes("GET", "/v2/health/live")

    def client() -> int:
        conn = Lean(where)
        for _ in range(each):
            conn.exchange(ask)
        conn.close()
        return 0

    return clients * each / (in_processes if processes else in_threads)(client, clients)[0]


def in_threads(client: Callable[[], int], clients: int) -> tuple[float, int]:
    """Seconds `clients` threads take to run `client` each, all started together, and the sum
    of what they return."""
    import threading

    results: list[int] = []
    threads = [threading.Thread(target=lambda: results.append(client())) for _ in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - start, sum(results)


def in_processes(client: Callable[[], int], clients: int) -> tuple[float, int]:
    """As `in_threads`, in forked processes (timed once all are forked): clients that share no
    interpreter lock, as a server's clients are."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    gate, results = ctx.Barrier(clients + 1), ctx.SimpleQueue()

    def run() -> None:
        gate.wait()
        results.put(client())

    procs = [ctx.Process(target=run) for _ in range(clients)]
    with warnings.catch_warnings():
        # JAX warns at every fork of a process that started it (the suite's workers have):
        # these children only speak HTTP, and never touch JAX.
        warnings.filterwarnings("ignore", "os.fork", RuntimeWarning)
        for p in procs:
            p.start()
    gate.wait()
    start = time.perf_counter()
    total = sum(results.get() for _ in procs)
    seconds = time.perf_counter() - start
    for p in procs:
        p.join()
    return seconds, total

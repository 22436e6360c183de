"""Dynamic batching's gain through system shared memory (section `serve-shm`; on the TPU,
`accelerator.py --only shm`): `hlobundle serve --uds` of the LeNet without batching and
batching up to 16 (`serving.SERVED_OVER_UDS`'s first two servers), 16 forked client processes.
Each client has an input and an output region of its own, registered once per server through
the extension's REST routes over the same socket (/v2/systemsharedmemory, `_shm_http`); each of
its requests is a small JSON body naming them: it writes the images into its input region and
clears its output region before each request, and reads the answer out of that region after.
In rounds taken in turns with it, the same clients send the binary request instead (the tensor
in the body, as `serve_uds_cost` measures). Against the model-only bound `serve_uds_cost`
measures (`serving.uds_bound`), whose process also gives the in-process call's answer, which
every answer must equal.

REST rather than gRPC (`--grpc-uds`): a request naming regions is a few hundred bytes either
way, and grpc.aio's own floor is about 420 us of a server's CPU a request on the CPU machine
where uvicorn's is about 100 (RESULTS.md, the gRPC section's bare servers): the cheaper front
door is the one whose gain can approach the bound."""

from __future__ import annotations

import json
import os
import statistics
from dataclasses import dataclass
from multiprocessing import get_context, shared_memory
from pathlib import Path

import numpy as np

from benchmarks import serve_client as client
from benchmarks.serve_cpu import cpu_s, server_cpu
from benchmarks.serving import SERVED_OVER_UDS, bound_row, uds_bound

INFER = "/v2/models/lenet5/infer"
MODES = ("binary", "shared memory")


@dataclass
class Pair:
    """One client's regions (registered as `NAME-in` and `NAME-out`) and the request that
    names them, its body and its whole bytes as a `Lean` client sends them."""

    name: str
    into: shared_memory.SharedMemory
    out_of: shared_memory.SharedMemory
    body: bytes

    @property
    def request(self) -> bytes:
        return client.request_bytes("POST", INFER, self.body)


def shm_body(name: str, images: np.ndarray, out_bytes: int) -> bytes:
    """The LeNet's request whose input and output are the regions `NAME-in` and `NAME-out`."""

    def region(suffix: str, size: int) -> dict:
        return {"shared_memory_region": f"{name}-{suffix}", "shared_memory_byte_size": size}

    return json.dumps(
        {
            "inputs": [
                {
                    "name": "images",
                    "shape": list(images.shape),
                    "datatype": "FP32",
                    "parameters": region("in", images.nbytes),
                }
            ],
            "outputs": [{"name": "result", "parameters": region("out", out_bytes)}],
        }
    ).encode()


def registered(where: client.Where, images: np.ndarray, out_bytes: int, clients: int) -> list[Pair]:
    """`clients` pairs of regions, made, the images written in, and registered with the server
    at `where`."""
    pairs: list[Pair] = []
    try:
        for k in range(clients):
            into = shared_memory.SharedMemory(create=True, size=images.nbytes)
            out_of = shared_memory.SharedMemory(create=True, size=out_bytes)
            pairs.append(Pair(f"c{k}", into, out_of, shm_body(f"c{k}", images, out_bytes)))
            into.buf[: images.nbytes] = images.astype("<f4").tobytes()
            for suffix, region in (("in", into), ("out", out_of)):
                _post(where, f"/v2/systemsharedmemory/region/c{k}-{suffix}/register", region)
    except BaseException:
        released(where, pairs)
        raise
    return pairs


def _post(where: client.Where, path: str, region: shared_memory.SharedMemory | None) -> None:
    body = b"" if region is None else json.dumps({"key": region.name, "byte_size": region.size})
    conn = client.connection(where, timeout=30)
    try:
        conn.request("POST", path, body)
        r = conn.getresponse()
        answer = r.read()
    finally:
        conn.close()
    if r.status != 200:
        raise RuntimeError(f"POST {path}: the server answered {r.status}: {answer[:300]!r}")


def released(where: client.Where, pairs: list[Pair]) -> None:
    """Every region unregistered (the server may be gone already), closed and unlinked."""
    try:
        _post(where, "/v2/systemsharedmemory/unregister", None)
    except (OSError, RuntimeError):
        pass
    for pair in pairs:
        for region in (pair.into, pair.out_of):
            region.close()
            region.unlink()


def shm_load(
    where: client.Where, pairs: list[Pair], images: np.ndarray, want: np.ndarray, each: int
) -> tuple[float, int]:
    """Requests per second from one forked client process per pair, each on its own keep-alive
    connection sending `each` requests that name its regions; and how many answers were lost or
    not `want`."""
    slots = get_context("fork").SimpleQueue()  # which pair each process takes
    for k in range(len(pairs)):
        slots.put(k)
    given, exact = images.astype("<f4").tobytes(), want.astype("<f4").tobytes()
    cleared = bytes(len(exact))

    def one() -> int:
        pair = pairs[slots.get()]
        request, into, out_of = pair.request, pair.into.buf, pair.out_of.buf
        conn, bad = client.Lean(where), 0
        for k in range(each):
            into[: len(given)] = given
            out_of[: len(exact)] = cleared
            try:
                status, _, _ = conn.exchange(request)
            except OSError:  # the connection lost: this answer and the rest are
                return bad + each - k
            bad += status != 200 or not client.matches(bytes(out_of[: len(exact)]), want, exact)
        conn.close()
        return bad

    seconds, bad = client.in_processes(one, len(pairs))
    return len(pairs) * each / seconds, bad


@dataclass(frozen=True)
class Asks:
    """What the clients send: the images, the binary request (its JSON header and whole body),
    and the in-process call's answer."""

    images: np.ndarray
    header: bytes
    body: bytes
    want: np.ndarray

    def binary(self) -> tuple:
        length = {"Inference-Header-Content-Length": str(len(self.header))}
        return ("POST", INFER, self.body, length)


def serve_shm_cost(tmp: Path, quick: bool) -> list[dict]:
    """The batching gain over `serve --uds`, 16 client processes, binary requests and requests
    naming shared-memory regions, in turns; against the model-only bound; serve's CPU per
    request under the load and on one connection (`serve_cpu.server_cpu`); answers not the
    in-process call's. Nothing here runs a model in this process: the bound's process, then
    each server, hold the accelerator in turn (one program at a time can hold a TPU chip)."""
    times, images, want = uds_bound(tmp, quick)
    header, body = client.binary_request(images)
    asks = Asks(images, header, body, want)
    rounds, each, n = (1, 5, 20) if quick else (3, 125, 1000)
    runs = {}
    for name, max_batch, flags in SERVED_OVER_UDS[:2]:
        path = str(tmp / f"shm-{len(runs)}.sock")
        proc, where = client.start_lenet(max_batch, uds=path, ready_s=600, flags=flags)
        try:
            pairs = registered(where, images, want.nbytes, 16)
            try:
                sizes = (rounds, each, n, max_batch > 1)
                runs[name] = _server_runs(proc.pid, where, pairs, asks, sizes)
            finally:
                released(where, pairs)
        finally:
            proc.terminate()
            proc.communicate(timeout=60)
    return _rows(times, runs, 16 * each * rounds)


def _server_runs(
    pid: int, where: client.Where, pairs: list[Pair], asks: Asks, sizes: tuple[int, int, int, bool]
) -> dict[str, float]:
    """One server's figures, each the median of `rounds` taken in turns, binary then shared
    memory: requests/s, serve's CPU per request under the load (its process, every thread),
    the mean batch it ran (when `batching`); then its CPU per request on one connection (`n`
    requests); and the answers lost or wrong over every round."""
    rounds, each, n, batching = sizes
    loads = {
        "binary": lambda k: client.load(
            where, asks.body, len(asks.header), asks.want, len(pairs), k, processes=True
        ),
        "shared memory": lambda k: shm_load(where, pairs, asks.images, asks.want, k),
    }
    for mode in MODES:  # warm: the first requests' allocations, each client's connection
        loads[mode](max(2, each // 5))
    got: dict[str, list[float]] = {}
    for _ in range(rounds):
        for mode in MODES:
            batches, before = _batches(where, batching), cpu_s(pid)
            rate, wrong = loads[mode](each)
            spent, after = cpu_s(pid) - before, _batches(where, batching)
            got.setdefault(f"rate {mode}", []).append(rate)
            got.setdefault(f"cpu {mode}", []).append(spent / (len(pairs) * each))
            got.setdefault(f"batch {mode}", []).append(
                (after[0] - batches[0]) / (after[1] - batches[1]) if batching else 1.0
            )
            got.setdefault(f"wrong {mode}", []).append(wrong)
    run = {k: statistics.median(v) for k, v in got.items()}
    run.update({f"wrong {mode}": float(sum(got[f"wrong {mode}"])) for mode in MODES})
    shm_ask = ("POST", INFER, pairs[0].body, {"Content-Type": "application/json"})
    for mode, ask in zip(MODES, (asks.binary(), shm_ask), strict=True):
        server_cpu(pid, where, ask, max(2, n // 5))
        run[f"one connection {mode}"] = server_cpu(pid, where, ask, n)
    return run


def _batches(where: client.Where, batching: bool) -> tuple[float, float]:
    """The sum and count of the batches the server ran so far (none counted without
    batching: the histogram has no line then)."""
    return client.metric_sums(where, "hlobundle_batch_size") if batching else (0.0, 0.0)


def _rows(times: dict, runs: dict[str, dict[str, float]], asked: int) -> list[dict]:
    """The section's rows: the bound, then for each kind of request its rates, gain and CPU."""
    bound = times["one"] / times["batched"]
    model = {"one": times["cpu"]["one"] / 16, "batched": times["cpu"]["batched"] / 16}
    rows = [bound_row(times)]
    for mode in MODES:
        one, batched = runs["one"], runs["batched"]
        gain = batched[f"rate {mode}"] / one[f"rate {mode}"]
        rows += [
            _row(f"{mode}: no batching (requests/s; ratio: over binary's)", one, mode, "rate"),
            _row(
                f"{mode}: batching up to 16 (requests/s; ratio: over binary's; mean batch "
                f"{batched[f'batch {mode}']:.1f} of 16)",
                batched,
                mode,
                "rate",
            ),
            {
                "case": f"{mode}: the batching gain (s), and / the model-only bound (goal >= 0.8)",
                "s": gain,
                "ratio": gain / bound,
            },
        ]
        for key, run in runs.items():
            beyond = run[f"cpu {mode}"] - model["one" if key == "one" else "batched"]
            name = "no batching" if key == "one" else "batching"
            rows += [
                _row(
                    f"{mode}, {name}: serve's CPU per request under the load (its process; "
                    "ratio: over binary's)",
                    run,
                    mode,
                    "cpu",
                ),
                {
                    "case": f"{mode}, {name}: in which beyond the model's own call, "
                    f"{'one by one' if key == 'one' else 'its share of a batched call of 16'}"
                    " (the bound's process; ratio: over 80 us)",
                    "s": beyond,
                    "ratio": beyond / 80e-6,
                },
                _row(
                    f"{mode}, {name}: serve's CPU per request, one client on one connection "
                    "(serve_cpu.server_cpu; ratio: over binary's)",
                    run,
                    mode,
                    "one connection",
                ),
            ]
    wrong = sum(run[f"wrong {mode}"] for run in runs.values() for mode in MODES)
    load = os.getloadavg()[0]
    return [
        *rows,
        {"case": "the model's own call, CPU: one by one, and / its share of a batched call of 16 (the bound's process)", "s": model["one"], "ratio": model["one"] / model["batched"]},
        {"case": f"answers lost or not the in-process call's, of {asked * len(runs) * len(MODES)}", "s": wrong, "ratio": 0.0},
        {"case": f"the machine's 1-minute load average at the end ({os.cpu_count()} CPUs)", "s": load, "ratio": load / (os.cpu_count() or 1)},
    ]  # fmt: skip


def _row(case: str, run: dict[str, float], mode: str, what: str) -> dict:
    return {
        "case": case,
        "s": run[f"{what} {mode}"],
        "ratio": run[f"{what} {mode}"] / run[f"{what} binary"],
    }

"""Serving: `hlobundle serve` over loopback against the in-process call (section `serve`),
dynamic batching over a unix socket against the model-only bound (`serve-uds`), decoding the
JSON request (`json`), and many bundles in one server (`serve-many`). The client is
serve_client.py's."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import time
from pathlib import Path

import numpy as np

from benchmarks import serve_client as client
from benchmarks.bundles import many_functions
from benchmarks.harness import PY, ROOT, free_port, interleaved, rss_kib, run_py, user_env
from benchmarks.serve_cpu import server_cpu, tree_cpu_s

MODEL_BOUND = """
import json, sys, time
sys.path.append({root!r})
import numpy as np
import hlobundle
from hlobundle._serve._models import load_models
from benchmarks.harness import interleaved
served = load_models([{bundle!r}], backend="xla", max_batch=16, trust=hlobundle.Trust.BATCHED)["lenet5"]
many = [{{"images": np.asarray(hlobundle.load({bundle!r}).tensor("images"))}}] * 16
fns = {{"one": lambda: [served(g) for g in many], "batched": lambda: served.call_many(many)}}
if {threads!r}:  # 16 calls at once, each in a thread, as serve runs a call over 1 ms unbatched
    from concurrent.futures import ThreadPoolExecutor
    pool = ThreadPoolExecutor(16)
    fns["threads"] = lambda: list(pool.map(served, many))
times = interleaved(fns, {reps})
cpu = {{}}  # CPU seconds (every thread: XLA's too) of one turn of each, one by one and batched
for k in ("one", "batched"):
    start = time.process_time()
    for _ in range({reps}):
        fns[k]()
    cpu[k] = (time.process_time() - start) / {reps}
if {batcher!r}:  # one by one as a server calls: each call after a request's path, {gap_s} s
    start = time.process_time()
    for _ in range({reps}):
        for g in many:
            served(g)
            time.sleep({gap_s})
    cpu["spaced"] = (time.process_time() - start) / {reps}  # the 16 requests through serve's batcher, on an event loop as serve's
    import asyncio
    from hlobundle._serve._batching import Batcher
    batcher = Batcher(served, 16, 0.002, lambda n: None)
    async def turns(k):
        for _ in range(k):
            await asyncio.gather(*[batcher(g) for g in many])
    loop = asyncio.new_event_loop()
    loop.run_until_complete(turns(5))
    start = time.process_time()
    loop.run_until_complete(turns({reps}))
    cpu["batcher"] = (time.process_time() - start) / {reps}
print(json.dumps({{**{{k: v[0] for k, v in times.items()}}, "call_s": served.call_s, "cpu": cpu}}))
"""


# The pause between a served model's calls one by one: about what serve's path of a request
# costs beside it on this machine. XLA's CPU thread pool sleeps between calls so spaced, and a
# call that wakes it cost LeNet 700-770 us of CPU against 500 back to back (2026-12-07).
SPACED_S = 0.0005


def _model_bound(reps: int) -> dict:
    """The most batching can give, with no request overhead at all: 16 requests' inputs in one
    call of the batched module (as the server makes it) against 16 calls, wall seconds of each
    (`one`, `batched`) and CPU seconds (`cpu`: theirs, and the same 16 requests through serve's
    batcher on an event loop, `batcher`). Measured in a fresh process set up as `serve`'s (no
    jax_enable_x64, which this process turns on, and a user's environment): the bound and the
    server's gain then come from the same configuration (issue 38: a bound measured here was
    2.04x, 2.68x in a process of its own)."""
    code = MODEL_BOUND.format(
        root=str(ROOT),
        bundle=str(ROOT / "examples" / "lenet5.hlobundle"),
        reps=reps,
        threads=False,
        batcher=True,
        gap_s=SPACED_S,
    )
    return json.loads(run_py(code)[1].strip().splitlines()[-1])


def infer_scope(body: bytes, header: bytes) -> dict:
    """The ASGI scope of a binary LeNet infer of `body` whose JSON header is `header`."""
    return {
        "type": "http",
        "method": "POST",
        "path": "/v2/models/lenet5/infer",
        "headers": [
            (b"content-length", str(len(body)).encode()),
            (b"inference-header-content-length", str(len(header)).encode()),
        ],
    }


def _in_process_parts(served, body: bytes, header: bytes, reps: int) -> dict[str, float]:
    """Median seconds of each step of a request as the server takes it, warm, in this process:
    the model call, decoding the binary request, encoding the binary response, and the whole
    ASGI application (all three and the rest, no HTTP)."""
    import asyncio

    from hlobundle._serve import _app

    asgi, length = _app.app({"lenet5": served}), str(len(header))
    decoded = _app.decoded_body(served, body, length)
    outputs = served(decoded.given)
    scope = infer_scope(body, header)

    async def receive() -> dict:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict) -> None:
        pass

    loop = asyncio.new_event_loop()
    try:
        times = interleaved(
            {
                "model": lambda: served(decoded.given),
                "decode": lambda: _app.decoded_body(served, body, length),
                "encode": lambda: _app.encoded(served, decoded, outputs),
                "app": lambda: loop.run_until_complete(asgi(scope, receive, send)),
            },
            reps,
        )
    finally:
        loop.close()
    return {k: v[0] for k, v in times.items()}


def serve_cost(tmp: Path, quick: bool) -> list[dict]:
    """`hlobundle serve` over loopback: latency over an in-process call, and where it goes;
    throughput with and without dynamic batching under 16 concurrent clients, against the bound
    the model sets and against what the per-request costs allow (`_gain_rows`); and a bounded
    load test (none lost or wrong, RSS flat). The clients are threads of this process, sharing
    its 2 cores with the server."""
    import jax

    import hlobundle
    from hlobundle._serve._models import load_models

    bundle = hlobundle.load(ROOT / "examples" / "lenet5.hlobundle")
    images = np.asarray(bundle.tensor("images"))
    fn = jax.jit(bundle.function("xla"))
    args = bundle.example_args()
    want = np.asarray(fn(*args)).reshape(-1)
    header, body = client.binary_request(images)
    n = 200 if quick else 1000
    local = []
    for _ in range(n):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        local.append(time.perf_counter() - start)
    served = load_models(
        [str(ROOT / "examples" / "lenet5.hlobundle")],
        backend="xla",
        max_batch=16,
        trust=hlobundle.Trust.BATCHED,
    )["lenet5"]
    bound = _model_bound(n // 10)
    parts = _in_process_parts(served, body, header, n)
    servers = [client.start_lenet(1)]
    try:
        servers.append(client.start_lenet(16))
        one, batched = servers
        port = one[1]
        assert isinstance(port, int)  # a loopback port: start_lenet without uds
        remote, live = client.latency(port, body, header, n)
        handler = client.handler_mean_s(port)
        infer = (
            "POST",
            "/v2/models/lenet5/infer",
            body,
            {"Inference-Header-Content-Length": str(len(header))},
        )
        serve_s = server_cpu(one[0].pid, port, infer, n, tree_cpu_s)
        runs = _load_rounds({"one": one, "batched": batched}, body, len(header), want, quick)
        ceiling = client.ceiling(port, 16, 25 if quick else 125)
        total = 1600 if quick else 10_000
        before = rss_kib(batched[0].pid)
        _, wrong = client.load(batched[1], body, len(header), want, 16, total // 16)
        after = rss_kib(batched[0].pid)
        runs["batch"] = client.metric_mean(batched[1], "hlobundle_batch_size")
    finally:
        for proc, _ in servers:
            proc.terminate()
            proc.communicate(timeout=60)
    rows = [
        {
            "case": "model only, a fresh process set up as serve's: 16 requests one by one / "
            "in one batched call (the bound on any batching gain)",
            "s": bound["batched"],
            "ratio": bound["one"] / bound["batched"],
        }
    ]
    p50, base = float(np.median(remote)), float(np.median(local))
    for q in (50, 99):
        over = float(np.percentile(remote, q) - np.percentile(local, q))
        rows.append(
            {
                "case": f"request p{q}, LeNet batch 4 (binary, keep-alive): s, and s over the in-process call"
                + (" (goal <= 0.0005)" if q == 50 else ""),
                "s": float(np.percentile(remote, q)),
                "ratio": over,
            }
        )
    share = "s, and its share of the request p50"
    rows += [
        {"case": "in-process jitted call p50 (the baseline)", "s": base, "ratio": 0.0},
        {
            "case": f"in which: HTTP alone, GET /v2/health/live p50 between the requests ({share})",
            "s": float(np.median(live)),
            "ratio": float(np.median(live)) / p50,
        },
        {
            "case": f"in which: the server's handler, mean from its /metrics: body read to response built, model included ({share})",
            "s": handler,
            "ratio": handler / p50,
        },
        {
            "case": f"in which, in process and warm: the model call as served ({share})",
            "s": parts["model"],
            "ratio": parts["model"] / p50,
        },
        {
            "case": f"in which, in process and warm: decode the binary request ({share})",
            "s": parts["decode"],
            "ratio": parts["decode"] / p50,
        },
        {
            "case": f"in which, in process and warm: encode the binary response ({share})",
            "s": parts["encode"],
            "ratio": parts["encode"] / p50,
        },
        {
            "case": f"in which, in process and warm: the whole ASGI app, no HTTP ({share})",
            "s": parts["app"],
            "ratio": parts["app"] / p50,
        },
    ]
    rows += _gain_rows(bound, serve_s, runs)
    rows += [
        {
            "case": "ceiling: GET /v2/health/live, no model call, same clients (requests/s)",
            "s": ceiling,
            "ratio": ceiling / runs["rate one"],
        },
        {
            "case": f"load test: {total} requests from 16 clients: wrong or lost",
            "s": float(wrong),
            "ratio": 0.0,
        },
        {
            "case": "load test: server RSS (MiB) at the end / after warm-up (goal within 1.1)",
            "s": after / 1024,
            "ratio": after / before,
        },
    ]
    return rows


def _load_rounds(
    servers: dict[str, tuple[subprocess.Popen, client.Where]],
    body: bytes,
    header: int,
    want: np.ndarray,
    quick: bool,
) -> dict[str, float]:
    """16 clients against each server in turns, rounds of 16 x `each` requests (the machine's
    load drifts: a server measured after the other would meet another load): the medians of
    the rounds' requests/s (`rate NAME`), the server's CPU per request (its process tree) and
    this process's, the clients' (`server NAME`, `client NAME`), and of each round's gain."""
    rounds, each = (2, 25) if quick else (7, 60)
    got: dict[str, list[float]] = {}
    for _ in range(rounds):
        for name, (proc, port) in servers.items():
            server, mine = tree_cpu_s(proc.pid), time.process_time()
            rate, _ = client.load(port, body, header, want, 16, each)
            got.setdefault(f"server {name}", []).append(
                (tree_cpu_s(proc.pid) - server) / (16 * each)
            )
            got.setdefault(f"client {name}", []).append((time.process_time() - mine) / (16 * each))
            got.setdefault(f"rate {name}", []).append(rate)
        got.setdefault("gain", []).append(got["rate batched"][-1] / got["rate one"][-1])
    return {k: statistics.median(v) for k, v in got.items()}


def _gain_rows(bound: dict, serve_s: float, runs: dict[str, float]) -> list[dict]:
    """Throughput with and without batching, and the gain against two bounds: the model's alone
    (16 calls / one batched call, wall time), and what the per-request costs allow. Every
    request's client, HTTP, decode and encode are paid whatever the batch; with the CPU the
    limit (2 CPUs shared, the clients on them), batching can at most replace the model's call
    one by one with its share of a batched call: (clients + server) / (clients + server - the
    model one by one + the model batched), CPU per request under the load itself without
    batching (its calls then come back to back, as the model's bound times them)."""
    cpu = {k: v / 16 for k, v in bound["cpu"].items()}
    gain, us = runs["gain"], "CPU per request"
    one, batched = (runs[f"server {k}"] + runs[f"client {k}"] for k in ("one", "batched"))
    beyond = runs["server one"] - cpu["one"]  # serve's own, under the load, no batching
    beyond_batched = runs["server batched"] - cpu["batched"]
    attainable = one / (one - cpu["one"] + cpu["batched"])
    rows = [
        (
            "throughput, 16 concurrent clients, no batching (requests/s; the median of rounds "
            "taken in turns with the next)",
            runs["rate one"],
            1.0,
        ),
        (
            "throughput, 16 concurrent clients, dynamic batching up to 16 (requests/s; ratio: "
            f"over no batching, the median of each round's; mean batch {runs['batch']:.1f})",
            runs["rate batched"],
            gain,
        ),
        (
            "batching gain / the model-only bound (goal >= 0.9)",
            gain,
            gain / (bound["one"] / bound["batched"]),
        ),
        (
            f"model only, {us}: one by one back to back, and / in one batched call of 16",
            cpu["one"],
            cpu["one"] / cpu["batched"],
        ),
        (
            f"model only, {us}: one by one, {SPACED_S * 1e3:g} ms between calls (XLA's threads "
            "asleep at each), and / in one batched call of 16",
            cpu["spaced"],
            cpu["spaced"] / cpu["batched"],
        ),
        (
            f"the batcher's own {us}: 16 concurrent requests through serve's batcher on an "
            "event loop, less one batched call of them (ratio: / the request's whole, batched)",
            cpu["batcher"] - cpu["batched"],
            (cpu["batcher"] - cpu["batched"]) / batched,
        ),
        (
            f"under load, no batching: the clients' {us} (this process; ratio: / the whole, "
            "server and clients)",
            runs["client one"],
            runs["client one"] / one,
        ),
        (
            f"under load, no batching: serve's {us} beyond the model's call (its process, less "
            "the model's back-to-back call; ratio: / the whole)",
            beyond,
            beyond / one,
        ),
        (
            f"under load, batching: serve's {us} beyond the model's batched call (ratio: / no "
            "batching's: what the batcher adds to the path, or saves)",
            beyond_batched,
            beyond_batched / beyond,
        ),
        (
            f"one connection, no batching: serve's {us} beyond the model's spaced call "
            "(serve_cpu.server_cpu; ratio: / under load)",
            serve_s - cpu["spaced"],
            (serve_s - cpu["spaced"]) / beyond,
        ),
        (
            "attainable given per-request costs: (clients + server) / (the same, the model's "
            "call one by one replaced by its share of one batched call of 16), CPU under load "
            "(s: that batched request's CPU)",
            one - cpu["one"] + cpu["batched"],
            attainable,
        ),
        ("batching gain / the attainable given per-request costs", gain, gain / attainable),
        (
            f"under load: server + clients, {us}, no batching / batching (the gain in CPU; "
            "ratio: / the attainable)",
            one / batched,
            one / batched / attainable,
        ),
    ]
    return [{"case": case, "s": s, "ratio": ratio} for case, s, ratio in rows]


# What the model-only bound's fresh process gets beside a user's environment: where the
# package and jax are (a machine where nothing is installed, as the TPU hosts) and the
# accelerator's settings.
_PASSED = ("PYTHONPATH", "JAX_PLATFORMS")


def _accelerator_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k in _PASSED or k.startswith("TPU_")}


# The servers serve_uds_cost asks in turn: a name, --max-batch-size, other flags.
SERVED_OVER_UDS = (
    ("one", 1, ()),
    ("batched", 16, ()),
    ("batched, waiting 10 ms", 16, ("--batch-timeout-ms", "10")),
)


def serve_uds_cost(tmp: Path, quick: bool) -> list[dict]:
    """The batching gain of `hlobundle serve --uds` (REST over a unix socket, no TCP socket at
    all: it runs on hosts that allow none, the TPU machines), 16 clients, against the
    model-only bound, as `serve` measures it over loopback; the clients are threads of this
    process, as there, and then forked processes, which share no interpreter lock (HTTP on the
    clients' side then costs less than the model's batched call on a TPU). Nothing here runs a model in this
    process: the bound's process, then each server, hold the accelerator in turn (one program
    at a time can hold a TPU chip). A wrong answer is one that differs from the unbatched
    server's."""
    times, images, _ = uds_bound(tmp, quick)
    bound = times["one"] / times["batched"]
    header, body = client.binary_request(images)
    each = 25 if quick else 125
    runs: dict[str, dict[str, float]] = {}
    want = None
    for name, max_batch, flags in SERVED_OVER_UDS:
        path = str(tmp / f"uds-{len(runs)}.sock")
        proc, where = client.start_lenet(max_batch, uds=path, ready_s=600, flags=flags)
        try:
            want = client.answer(where, body, header) if want is None else want
            runs[name] = _uds_run(where, body, len(header), want, each, max_batch > 1)
        finally:
            proc.terminate()
            proc.communicate(timeout=60)
    rows = [bound_row(times), _concurrent_bound(times, runs)]
    for kind in ("threads", "processes"):
        rows += _uds_rows(runs, kind, bound)
    wrong = sum(run["wrong threads"] + run["wrong processes"] for run in runs.values())
    rows.append(
        {
            "case": f"answers lost or not the unbatched server's, of {len(runs) * 32 * each}",
            "s": float(wrong),
            "ratio": 0.0,
        }
    )
    return rows


def uds_bound(tmp: Path, quick: bool) -> tuple[dict, np.ndarray, np.ndarray]:
    """The model-only bound of the unix-socket sections (`serve_uds_cost`, `serve_shm`), in a
    fresh process set up as serve's, which holds the accelerator alone and exits before any
    server starts (`MODEL_BOUND`, its 16 calls in threads too): its times, the LeNet's images,
    and the answer of its call on them, in process (float32, flat)."""
    images_file, answer_file = tmp / "uds-images.npy", tmp / "uds-answer.npy"
    code = MODEL_BOUND.format(
        root=str(ROOT),
        bundle=str(ROOT / "examples" / "lenet5.hlobundle"),
        reps=20 if quick else 100,
        threads=True,
        batcher=False,
        gap_s=SPACED_S,
    )
    code += f"np.save({str(images_file)!r}, many[0]['images'])\n"
    code += f"np.save({str(answer_file)!r}, np.asarray(served(many[0])['result'], '<f4').ravel())\n"
    times = json.loads(run_py(code, _accelerator_env())[1].strip().splitlines()[-1])
    return times, np.load(images_file), np.load(answer_file)


def bound_row(times: dict) -> dict:
    """The row of `uds_bound`'s bound: 16 calls one by one / one batched call of them."""
    return {
        "case": "model only, a fresh process set up as serve's: 16 requests one by one / "
        "in one batched call (the bound on any batching gain)",
        "s": times["batched"],
        "ratio": times["one"] / times["batched"],
    }


def _concurrent_bound(times: dict[str, float], runs: dict[str, dict[str, float]]) -> dict:
    """The bound against what an unbatched server itself does with 16 concurrent requests: it
    runs a model whose call took over `_app.INLINE_CALL_S` in threads, whose calls overlap on an
    accelerator (a TPU's transfers and dispatch); ratio: 16 such calls / one batched call; s:
    the processes' batched gain / this bound."""
    from hlobundle._serve._app import INLINE_CALL_S

    threaded = times["call_s"] is not None and times["call_s"] > INLINE_CALL_S
    gain = runs["batched"]["rate processes"] / runs["one"]["rate processes"]
    bound = times["threads"] / times["batched"]
    return {
        "case": f"model only: 16 requests in 16 threads / in one batched call (the bound "
        f"against an unbatched server that {'runs' if threaded else 'would run'} its calls in "
        f"threads: its warm call took {times['call_s'] * 1e3:.2f} ms); s: the processes' "
        "batched gain / this bound",
        "s": gain / bound,
        "ratio": bound,
    }


def _uds_run(
    where: client.Where, body: bytes, header: int, want: np.ndarray, each: int, batching: bool
) -> dict[str, float]:
    """One server's figures under 16 clients, threads of this process and forked processes:
    requests/s, answers wrong, the no-model ceiling, and the mean batch it ran."""
    run = {}
    for kind in ("threads", "processes"):
        forked = kind == "processes"
        rate, wrong = client.load(where, body, header, want, 16, each, processes=forked)
        run[f"rate {kind}"], run[f"wrong {kind}"] = rate, wrong
        run[f"ceiling {kind}"] = client.ceiling(where, 16, each, processes=forked)
    run["batch"] = client.metric_mean(where, "hlobundle_batch_size") if batching else 1.0
    return run


def _uds_rows(runs: dict[str, dict[str, float]], kind: str, bound: float) -> list[dict]:
    """The rows of one kind of client (threads of the benchmark or processes)."""
    unbatched = runs["one"][f"rate {kind}"]
    ceiling = runs["one"][f"ceiling {kind}"] / unbatched
    rows = [
        {
            "case": f"{kind}: no batching (requests/s)",
            "s": unbatched,
            "ratio": 1.0,
        },
        {
            "case": f"{kind}: ceiling, GET /v2/health/live, no model call (requests/s; ratio: "
            "over no batching)",
            "s": runs["one"][f"ceiling {kind}"],
            "ratio": ceiling,
        },
    ]
    for name in ("batched", "batched, waiting 10 ms"):
        gain = runs[name][f"rate {kind}"] / unbatched
        rows += [
            {
                "case": f"{kind}: {name} (requests/s; ratio: over no batching; mean batch "
                f"{runs[name]['batch']:.1f} of 16, over both kinds of client)",
                "s": runs[name][f"rate {kind}"],
                "ratio": gain,
            },
            {
                "case": f"{kind}: {name}: gain / the model-only bound (goal >= 0.8); s: gain "
                "/ the most this HTTP allows (the smaller of the bound and the ceiling)",
                "s": gain / min(bound, ceiling),
                "ratio": gain / bound,
            },
        ]
    return rows


def json_decode_cost(tmp: Path, quick: bool) -> list[dict]:
    """Decoding the shipped LeNet's JSON request (examples/lenet5.hlobundle's inputs, batch 4,
    3,136 float32 values), warm, in this process: orjson's parse (`_protocol._parsed`) / the
    standard library's (the decoder before it, kept as the fallback), and the whole decode of
    a request (`_app.decoded_body`: parse, checks, arrays) with each."""
    from unittest import mock

    import hlobundle
    from hlobundle._serve import _app, _protocol
    from hlobundle._serve._models import load_models

    path = ROOT / "examples" / "lenet5.hlobundle"
    images = np.asarray(hlobundle.load(path).tensor("images"))
    body = json.dumps(
        {
            "inputs": [
                {
                    "name": "images",
                    "shape": list(images.shape),
                    "datatype": "FP32",
                    "data": images.ravel().tolist(),
                }
            ]
        }
    ).encode()
    served = load_models([str(path)], backend="xla")["lenet5"]

    old_parse = _protocol._parsed_exactly  # nesting checked, then the standard library

    def old_decode() -> object:
        with mock.patch.object(_protocol, "_parsed", old_parse):
            return _app.decoded_body(served, body, None)

    reps = 50 if quick else 500
    times = interleaved(
        {
            "parse": lambda: _protocol._parsed(body),
            "old parse": lambda: old_parse(body),
            "decode": lambda: _app.decoded_body(served, body, None),
            "old decode": old_decode,
        },
        reps,
    )
    t = {k: v[0] for k, v in times.items()}
    return [
        {
            "case": f"parse the JSON ({len(body)} bytes): orjson / the standard library (s: orjson)",
            "s": t["parse"],
            "ratio": t["parse"] / t["old parse"],
        },
        {
            "case": "parse the JSON: the standard library (the decoder before orjson)",
            "s": t["old parse"],
            "ratio": 1.0,
        },
        {
            "case": "decode the request (parse, checks, the array): with orjson / with the "
            "standard library (s: with orjson)",
            "s": t["decode"],
            "ratio": t["decode"] / t["old decode"],
        },
        {
            "case": "decode the request with the standard library's parse (the same checks)",
            "s": t["old decode"],
            "ratio": 1.0,
        },
    ]


def _serve_ready(bundles: list[Path]) -> tuple[float, int]:
    """Seconds from starting `hlobundle serve` on `bundles` (each NAME=PATH) to its readiness
    (every function compiled and warmed up), and its RSS then, in KiB."""
    import urllib.request

    port = free_port()
    named = [f"{b.name}={b}" for b in bundles]
    start = time.perf_counter()
    proc = subprocess.Popen(
        [PY, "-m", "hlobundle", "serve", *named, "--port", str(port), "--backend", "xla"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=user_env(),
    )
    try:
        for _ in range(6000):
            try:
                url = f"http://127.0.0.1:{port}/v2/health/ready"
                with urllib.request.urlopen(url, timeout=1):
                    return time.perf_counter() - start, rss_kib(proc.pid)
            except OSError:  # not listening yet
                time.sleep(0.02)
        raise RuntimeError("the server did not start")
    finally:
        proc.terminate()
        proc.communicate(timeout=60)


def serve_many_cost(tmp: Path, quick: bool) -> list[dict]:
    """`serve` of 8 bundles of 8 functions each, against the sum of serving each alone: time to
    ready (each function compiled at start-up, one after another) and RSS (goal <= 1.2 each)."""
    count = 2 if quick else 8
    bundles = [many_functions(tmp / f"serve-many-{k}", count, 4) for k in range(count)]
    together, alone = [], []
    for _ in range(1 if quick else 3):
        together.append(_serve_ready(bundles))
        alone.append([_serve_ready([b]) for b in bundles])
    med = statistics.median
    t_all, m_all = med(t for t, _ in together), med(m for _, m in together)
    t_sum = med(sum(t for t, _ in run) for run in alone)
    m_sum = med(sum(m for _, m in run) for run in alone)
    what = f"{count} bundles of {count} functions"
    return [
        {
            "case": f"serve {what}: seconds to ready / the sum of each served alone (goal <= 1.2)",
            "s": t_all,
            "ratio": t_all / t_sum,
        },
        {
            "case": f"serve {what}: RSS at ready (MiB) / the sum of each served alone (goal <= 1.2)",
            "s": m_all / 1024,
            "ratio": m_all / m_sum,
        },
    ]

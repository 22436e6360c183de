"""Serve's own CPU per request (section `serve-cpu`): the server process's CPU time (user and
system, every thread, from /proc/PID/stat) before and after N requests from this process on
one keep-alive connection, over N; for GET /v2/health/ready and for a binary LeNet infer,
the latter minus the model's own call, measured alone in a fresh process set up as serve's
(loaded as serve loads it, jitted and warm). CPU time, not wall time: the machine is shared,
and what a request costs the server is what bounds it on an accelerator. Each figure is the
median of rounds, in turns."""

from __future__ import annotations

import os
import statistics
import subprocess
import time
from collections.abc import Callable

import numpy as np

from benchmarks import serve_client as client
from benchmarks.harness import PY, ROOT, free_port, user_env

# The model's own CPU per call, in a fresh process set up as serve's (no jax_enable_x64, a
# user's environment), on the request's inputs as the server decodes them (a view of bytes):
# `n` calls for each line read, their CPU seconds per call written back, so that its rounds
# take turns with the server's. A line "app": the app's own CPU per binary request instead, in
# process (`_app.App` driven alone on a uvloop loop: no HTTP), the model's call stubbed out by
# its answer; "gap": the model's call with GAP_S of sleep after each (a served call follows
# an idle wait for the next request: what that costs the call, over a tight loop's).
MODEL_CPU = """
import asyncio, sys, time
sys.path.append({root!r})
import numpy as np
import uvloop
import hlobundle
from benchmarks import serve_client as client
from hlobundle._serve._app import app
from hlobundle._serve._models import load_models
models = load_models([{bundle!r}], backend="xla")
served = models["lenet5"]
images = np.asarray(hlobundle.load({bundle!r}).tensor("images"), "<f4")
given = {{"images": np.frombuffer(images.tobytes(), "<f4").reshape(images.shape)}}
for _ in range(200):
    served(given)
header, body = client.binary_request(images)
headers = [(b"content-length", str(len(body)).encode()),
           (b"inference-header-content-length", str(len(header)).encode())]
scope = {{"type": "http", "method": "POST", "path": "/v2/models/lenet5/infer", "headers": headers}}
message = {{"type": "http.request", "body": body, "more_body": False}}
async def receive():
    return message
async def send(_):
    pass
asgi, loop, answer = app(models), uvloop.new_event_loop(), served(given)
async def requests(n):
    for _ in range(n):
        await asgi(dict(scope), receive, send)
def app_round():
    call = type(served).__call__
    type(served).__call__ = lambda self, given: dict(answer)
    try:
        loop.run_until_complete(requests({n}))
    finally:
        type(served).__call__ = call
def gap_round():
    for _ in range({n}):
        served(given)
        time.sleep({gap_s})
loop.run_until_complete(requests(200))
print("ready", flush=True)
for line in sys.stdin:
    kind = line.strip()
    start = time.process_time()
    if kind == "app":
        app_round()
    elif kind == "gap":
        gap_round()
    else:
        for _ in range({n}):
            served(given)
    spent = (time.process_time() - start) / {n}
    print(spent, flush=True)
"""
GAP_S = 300e-6


# The floor under any route: a bare ASGI application answering prepared bytes, under uvicorn
# configured as serve's (httptools, uvloop, no access log, no proxy headers). A GET is answered
# as a health check; a POST's body is read whole (as serve reads it: every message until the
# last), then answered with the bytes and headers serve answered the infer with, prepared: what
# any server under this uvicorn pays to take a request of that size and send that answer.
BARE_SERVER = """
import uvicorn
def messages(body, headers):
    headers = [(b"content-length", str(len(body)).encode()), *headers]
    return ({{"type": "http.response.start", "status": 200, "headers": headers}},
            {{"type": "http.response.body", "body": body}})
get = messages(b'{{"ready":true}}', [(b"content-type", b"application/json")])
post = messages({answer!r}, {headers!r})
async def app(scope, receive, send):
    if scope["type"] == "http":
        answer = get
        if scope["method"] == "POST":
            answer, more = post, True
            while more:
                more = (await receive()).get("more_body", False)
        await send(answer[0])
        await send(answer[1])
uvicorn.run(app, host="127.0.0.1", port={port}, log_level="warning", access_log=False,
            proxy_headers=False, lifespan="off")
"""


def cpu_s(pid: int) -> float:
    """The CPU seconds process `pid` has used so far, user and system, all its threads."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid`, from each one's /proc/N/stat (gVisor, the TPU
    hosts' sandbox, may lack /proc/N/task/N/children)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry))
        except (OSError, ValueError, IndexError):  # gone meanwhile
            continue
    return found


def tree_cpu_s(pid: int) -> float:
    """The CPU seconds of process `pid` and of its children so far (a child gone meanwhile
    counts no more)."""
    total = cpu_s(pid)
    for child in children(pid):
        try:
            total += cpu_s(child)
        except OSError:
            continue
    return total


def server_cpu(
    pid: int, where: client.Where, ask: tuple, n: int, cpu: Callable[[int], float] = cpu_s
) -> float:
    """The server's CPU seconds per request (`cpu` of its process), over `n` requests `ask`
    (method, path, body, headers) on one keep-alive connection."""
    conn = client.connection(where)
    try:
        before = cpu(pid)
        for _ in range(n):
            conn.request(*ask)
            r = conn.getresponse()
            r.read()
            if r.status != 200:
                raise RuntimeError(f"{ask[0]} {ask[1]}: the server answered {r.status}")
        return (cpu(pid) - before) / n
    finally:
        conn.close()


def _bare_server(answer: bytes, headers: list[tuple[bytes, bytes]]) -> tuple[subprocess.Popen, int]:
    """`BARE_SERVER` on a free loopback port, answering a POST with `answer` and `headers`
    (besides its length), once it answers."""
    port = free_port()
    code = BARE_SERVER.format(port=port, answer=answer, headers=headers)
    proc = subprocess.Popen([PY, "-c", code], env=user_env())
    for _ in range(600):
        try:
            conn = client.connection(port, timeout=1)
            conn.request("GET", "/")
            conn.getresponse().read()
            return proc, port
        except OSError:  # not listening yet
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("the bare server did not start")


def _model_process(n: int) -> subprocess.Popen:
    """`MODEL_CPU` in a fresh process, once warm."""
    bundle = str(ROOT / "examples" / "lenet5.hlobundle")
    code = MODEL_CPU.format(root=str(ROOT), bundle=bundle, n=n, gap_s=GAP_S)
    proc = subprocess.Popen(
        [PY, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=user_env()
    )
    if proc.stdout is None or proc.stdout.readline().strip() != "ready":
        proc.kill()
        raise RuntimeError("the model's process did not start")
    return proc


def _model_cpu(proc: subprocess.Popen, kind: str = "") -> float:
    """One round of the model's process: its CPU seconds per call (`kind` "app": per request
    of the app in process, the model stubbed; "gap": per call followed by a sleep)."""
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(kind + "\n")
    proc.stdin.flush()
    return float(proc.stdout.readline())


def _answer(where: client.Where, ask: tuple) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    """Serve's answer to `ask`: its body, and its headers but uvicorn's own (date, server) and
    the length."""
    conn = client.connection(where)
    try:
        conn.request(*ask)
        r = conn.getresponse()
        body = r.read()
    finally:
        conn.close()
    own = {"date", "server", "content-length"}
    return body, [(k.encode(), v.encode()) for k, v in r.getheaders() if k.lower() not in own]


def serve_cpu_cost(tmp: object, quick: bool) -> list[dict]:
    """Serve's CPU per request: GET /v2/health/ready, and a binary LeNet infer (batch 4) beyond
    the model's own call; rounds in turns, medians (goals: <= 40 us and <= 80 us); and the
    floors under them, a bare ASGI application under the same uvicorn (`BARE_SERVER`) answering
    a GET, and a POST of the infer's body with serve's answer."""
    import hlobundle

    images = np.asarray(hlobundle.load(ROOT / "examples" / "lenet5.hlobundle").tensor("images"))
    header, body = client.binary_request(images)
    infer = (
        "POST",
        "/v2/models/lenet5/infer",
        body,
        {"Inference-Header-Content-Length": str(len(header))},
    )
    health = ("GET", "/v2/health/ready", None, {})
    rounds, n = (3, 300) if quick else (9, 2000)
    model = _model_process(n)
    proc, where = client.start_lenet(1)
    bare, port = _bare_server(*_answer(where, infer))
    try:
        server_cpu(proc.pid, where, infer, n // 3)  # warm: the first requests' allocations
        server_cpu(proc.pid, where, health, n // 3)
        server_cpu(bare.pid, port, health, n // 3)
        server_cpu(bare.pid, port, infer, n // 3)
        runs = [
            (
                server_cpu(bare.pid, port, health, n),
                server_cpu(proc.pid, where, health, n),
                server_cpu(proc.pid, where, infer, n),
                _model_cpu(model),
                server_cpu(bare.pid, port, infer, n),
                _model_cpu(model, "app"),
                _model_cpu(model, "gap"),
            )
            for _ in range(rounds)
        ]
    finally:
        model.communicate("", timeout=60)  # the end of its input: it exits
        for p in (proc, bare):
            p.terminate()
            p.communicate(timeout=60)
    return _rows(runs)


def _rows(runs: list[tuple[float, ...]]) -> list[dict]:
    """The section's rows from the rounds' (GET floor, health, infer, model, POST floor, the
    app in process, the model's call after a sleep)."""
    floor_s, health_s, infer_s, model_s, post_s, app_s = (
        statistics.median(r[k] for r in runs) for k in range(6)
    )
    after_idle_s = statistics.median(r[6] - r[3] for r in runs)
    beyond_s = statistics.median(r[2] - r[3] for r in runs)  # each round's own difference
    # What is serve's own beyond uvicorn's floor (the machine's load inflates every CPU time,
    # the floor's too): each round's difference again
    health_over_s = statistics.median(r[1] - r[0] for r in runs)
    infer_over_s = statistics.median(r[2] - r[3] - r[4] for r in runs)
    load = os.getloadavg()[0]
    return [
        {
            "case": "the floor: a bare ASGI app answering prepared bytes under uvicorn as serve "
            "runs it, GET, its CPU per request",
            "s": floor_s,
            "ratio": floor_s / 40e-6,
        },
        {
            "case": "the POST floor: the same app reading the infer's body (12.7 KB) and "
            "answering serve's answer (315 B), prepared",
            "s": post_s,
            "ratio": post_s / 80e-6,
        },
        {
            "case": "GET /v2/health/ready: serve's CPU per request (goal <= 40 us)",
            "s": health_s,
            "ratio": health_s / 40e-6,
        },
        {
            "case": "binary LeNet infer (batch 4): serve's CPU per request, model included",
            "s": infer_s,
            "ratio": 1.0,
        },
        {
            "case": "the model's own call alone, CPU, a fresh process set up as serve's",
            "s": model_s,
            "ratio": model_s / infer_s,
        },
        {
            "case": "binary LeNet infer: serve's CPU beyond the model's call (goal <= 80 us)",
            "s": beyond_s,
            "ratio": beyond_s / 80e-6,
        },
        {
            "case": "in which: the app's own path, in process (no HTTP), the model's call "
            "stubbed out",
            "s": app_s,
            "ratio": app_s / 80e-6,
        },
        {
            "case": f"in which: the model's call after {GAP_S * 1e6:.0f} us idle (as between "
            "requests), beyond its call in a tight loop",
            "s": after_idle_s,
            "ratio": after_idle_s / 80e-6,
        },
        {
            "case": "GET /v2/health/ready: serve's CPU beyond the floor's",
            "s": health_over_s,
            "ratio": health_over_s / 40e-6,
        },
        {
            "case": "binary LeNet infer: serve's CPU beyond the model's call and the POST floor's",
            "s": infer_over_s,
            "ratio": infer_over_s / 80e-6,
        },
        {
            "case": f"the machine's 1-minute load average at the end ({os.cpu_count()} CPUs)",
            "s": load,
            "ratio": load / (os.cpu_count() or 1),
        },
    ]

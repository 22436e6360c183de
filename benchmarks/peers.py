"""`hlobundle serve` beside the engines people run, MLServer 1.7.1 and KServe 0.21, side by side
in one run: `python benchmarks/peers.py OUT.json [--quick]` writes the rows of the `peers`
section of benchmarks/RESULTS.md (`run.py --only peers` runs it, `peers_cost`, inside a network
namespace of loopback alone: KServe binds every interface). `ray_cost` runs ray_scaling.py in
Ray's environment for the `ray` section.

The same computation in every server: the shipped LeNet's function and weights, exported with
a symbolic batch so that every engine that batches can (`b, 1, 28, 28`), served by `hlobundle
serve` and, in their own environments (`.venv-mlserver`, `.venv-kserve`, as .ci/run makes them;
their pins clash with ours), by each engine through hlobundle's adapter for it. The same request
bytes (a batch of 4: JSON, and the binary tensor extension where the engine has it over REST)
from the same client: threads of this process with keep-alive connections (http.client), every
answer's status checked and every client's first answer compared with the in-process call.
Rounds interleave the servers, and a row gives the median of the rounds."""

from __future__ import annotations

import http.client
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

# Run by path (here, and by ray_scaling.py in Ray's environment): the package it belongs to.
sys.path.append(str(Path(__file__).resolve().parent.parent))
from benchmarks.harness import PY, ROOT, free_port  # noqa: E402

MODEL = "lenet"
CLIENTS = 8
BATCH_WAIT_S = 0.002  # hlobundle serve's default window; MLServer's max_batch_time is set to it
ENGINES = ("hlobundle", "mlserver", "kserve")


def venv_python(engine: str) -> Path | None:
    """The python of the engine's environment (HLOBUNDLE_BENCH_VENV_<ENGINE>, or .venv-<engine>
    beside the checkout), or None where it is missing."""
    if engine == "hlobundle":
        return Path(PY)
    where = os.environ.get(f"HLOBUNDLE_BENCH_VENV_{engine.upper()}", ROOT / f".venv-{engine}")
    python = Path(where) / "bin" / "python"
    return python if python.exists() else None


def symbolic_lenet(out: Path) -> Path:
    """The shipped LeNet (examples/lenet5.py, its weights) with a symbolic batch, its rows
    declared independent (which the engines' batching needs)."""
    import lenet5

    import hlobundle

    return hlobundle.export(
        lenet5.lenet5,
        lenet5.init_params(),
        lenet5.example_images(),
        out=out,
        roles={"params": "parameter"},
        shapes_specs=(None, "b, 1, 28, 28"),
        independent_rows="b",
    )


def start(engine: str, bundle: Path, batched: bool, tmp: Path) -> tuple[subprocess.Popen, int]:
    """The engine serving `bundle` as model `lenet` on a free loopback port, ready; with
    `batched`, combining up to 8 concurrent requests (the engines that can)."""
    port, grpc = free_port(), free_port()
    python = str(venv_python(engine))
    if engine == "hlobundle":
        command = [python, "-m", "hlobundle", "serve", f"{MODEL}={bundle}", "--port", str(port)]
        command += ["--backend", "xla", "--max-batch-size", "8" if batched else "1"]
        command += ["--trust-batched", "--batch-timeout-ms", str(BATCH_WAIT_S * 1000)]
    elif engine == "mlserver":
        root = Path(tempfile.mkdtemp(dir=tmp))
        settings = {"host": "127.0.0.1", "http_port": port, "grpc_port": grpc}
        settings |= {"parallel_workers": 0, "metrics_endpoint": None}
        (root / "settings.json").write_text(json.dumps(settings))
        model = {
            "name": MODEL,
            "implementation": "hlobundle.integrations.mlserver.HloBundleRuntime",
            "parameters": {"uri": str(bundle), "extra": {"trust_batched": True}},
        }
        if batched:
            model |= {"max_batch_size": 8, "max_batch_time": BATCH_WAIT_S}
        (root / MODEL).mkdir()
        (root / MODEL / "model-settings.json").write_text(json.dumps(model))
        command = [str(Path(python).parent / "mlserver"), "start", str(root)]
    else:
        command = [python, "-m", "hlobundle.integrations.kserve", "--model_name", MODEL]
        command += ["--bundle", str(bundle), "--http_port", str(port), "--grpc_port", str(grpc)]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(1200):
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", f"/v2/models/{MODEL}/ready")
            if conn.getresponse().status == 200:
                return proc, port
        except OSError:  # not listening yet
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"{engine} did not start: {command}")


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def requests_of(images: np.ndarray) -> dict[str, tuple[bytes, dict[str, str]]]:
    """The request bodies and headers every server gets: JSON, and the binary extension."""
    tensor = {"name": "images", "shape": list(images.shape), "datatype": "FP32"}
    body = json.dumps({"inputs": [{**tensor, "data": images.ravel().tolist()}]}).encode()
    header = json.dumps(
        {
            "inputs": [{**tensor, "parameters": {"binary_data_size": images.nbytes}}],
            "outputs": [{"name": "result", "parameters": {"binary_data": True}}],
        }
    ).encode()
    return {
        "json": (body, {"Content-Type": "application/json"}),
        "binary": (
            header + images.astype("<f4").tobytes(),
            {"Inference-Header-Content-Length": str(len(header))},
        ),
    }


def result_of(response: http.client.HTTPResponse) -> np.ndarray:
    data = response.read()
    if response.status != 200:
        raise RuntimeError(f"HTTP {response.status}: {data[:300]!r}")
    length = response.headers.get("Inference-Header-Content-Length")
    if length is not None:
        return np.frombuffer(data[int(length) :], "<f4")
    (output,) = json.loads(data)["outputs"]
    return np.asarray(output["data"], np.float32)


def latencies(port: int, body: bytes, headers: dict[str, str], n: int, want: np.ndarray) -> list:
    """Seconds of each of `n` requests, one after another on one keep-alive connection."""
    conn, times = http.client.HTTPConnection("127.0.0.1", port), []
    for i in range(n):
        start = time.perf_counter()
        conn.request("POST", f"/v2/models/{MODEL}/infer", body, headers)
        got = result_of(conn.getresponse())
        times.append(time.perf_counter() - start)
        if i == 0 and not np.allclose(got, want, rtol=1e-5, atol=1e-6):
            raise RuntimeError("a server's answer is not the in-process call's")
    conn.close()
    return times


def throughput(
    port: int, body: bytes, headers: dict[str, str], each: int, want: np.ndarray
) -> float:
    """Requests per second from CLIENTS threads, each sending `each` requests on its own
    keep-alive connection, all started together."""
    failed: list[BaseException] = []

    def client() -> None:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port)
            for i in range(each):
                conn.request("POST", f"/v2/models/{MODEL}/infer", body, headers)
                got = result_of(conn.getresponse())
                if i == 0 and not np.allclose(got, want, rtol=1e-5, atol=1e-6):
                    raise RuntimeError("a server's answer is not the in-process call's")
            conn.close()
        except BaseException as e:  # reported below, in the main thread
            failed.append(e)

    spent = in_threads(client, CLIENTS)
    if failed:
        raise RuntimeError(f"{len(failed)} clients failed: {failed[0]}")
    return CLIENTS * each / spent


def in_threads(client: Callable[[], None], clients: int) -> float:
    """Seconds `clients` threads take to run `client` each, all started together."""
    threads = [threading.Thread(target=client) for _ in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - start


def in_process(bundle: Path, images: np.ndarray, n: int) -> tuple[np.ndarray, list[float]]:
    """The in-process jitted call (the baseline): its result, and the seconds of `n` calls."""
    import jax

    import hlobundle

    b = hlobundle.load(bundle)
    fn = jax.jit(b.function("xla"))
    params = b.example_args()[0]
    want = np.asarray(fn(params, images)).reshape(-1)
    times = []
    for _ in range(n):
        start = time.perf_counter()
        jax.block_until_ready(fn(params, images))
        times.append(time.perf_counter() - start)
    return want, times


def decode_costs(engine: str, bundle: Path, tmp: Path, requests: dict, reps: int) -> dict:
    """Each engine's own decoding of the same bodies, warm, in a process of its environment
    (peer_decode.py)."""
    (tmp / "body.json").write_bytes(requests["json"][0])
    (tmp / "body.bin").write_bytes(requests["binary"][0])
    length = requests["binary"][1]["Inference-Header-Content-Length"]
    args = [str(venv_python(engine)), str(ROOT / "benchmarks" / "peer_decode.py"), engine]
    args += [str(bundle), str(tmp / "body.json"), str(tmp / "body.bin"), length, str(reps)]
    return json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout)


def measure(quick: bool, tmp: Path) -> list[dict]:
    import lenet5

    engines = [e for e in ENGINES if venv_python(e) is not None]
    missing = [e for e in ENGINES if e not in engines]
    rounds, n, each = (2, 100, 20) if quick else (5, 400, 100)
    bundle = symbolic_lenet(tmp / "lenet-b.hlobundle")
    images = lenet5.example_images()
    requests = requests_of(images)
    want, local = in_process(bundle, images, n)
    kinds = {e: ["json", "binary"] if e != "mlserver" else ["json"] for e in engines}
    lat: dict = {}
    rate: dict = {}
    for batched in (False, True):
        running = {}
        try:
            for engine in engines:
                if batched and engine == "kserve":
                    continue  # KServe's Python server has no batching (its batcher is a pod's sidecar)
                running[engine] = start(engine, bundle, batched, tmp)
            for _ in range(rounds):
                for engine, (_, port) in running.items():
                    for kind in kinds[engine]:
                        body, headers = requests[kind]
                        if not batched:
                            times = latencies(port, body, headers, n, want)
                            lat.setdefault((engine, kind), []).append(times)
                        key = (engine, kind, batched)
                        rate.setdefault(key, []).append(throughput(port, body, headers, each, want))
        finally:
            for proc, _ in running.values():
                stop(proc)
    decode = {e: decode_costs(e, bundle, tmp, requests, 50 if quick else 500) for e in engines}
    return rows(engines, missing, kinds, lat, rate, decode, local)


def rows(engines, missing, kinds, lat, rate, decode, local) -> list[dict]:
    """The table: each figure of an engine, and hlobundle's / its (<= 1 for latency and decode
    times, >= 1 for throughput, where hlobundle is ahead)."""
    base = {q: float(np.percentile(local, q)) for q in (50, 99)}

    def over(engine: str, kind: str, q: int) -> float:
        runs = lat[(engine, kind)]
        return statistics.median(float(np.percentile(t, q)) for t in runs) - base[q]

    out: list[dict] = [
        {
            "case": "in-process jitted call, LeNet batch 4, p50 (the baseline)",
            "s": base[50],
            "ratio": "",
        }
    ]
    for kind, q, engine in itertools.product(("json", "binary"), (50, 99), engines):
        if kind in kinds[engine]:
            s = over(engine, kind, q)
            case = f"{kind}: request p{q} over the in-process call's, {engine} (s; ratio: hlobundle's / this)"
            out.append({"case": case, "s": s, "ratio": over("hlobundle", kind, q) / s})
    for batched, kind, engine in itertools.product((False, True), ("json", "binary"), engines):
        if (engine, kind, batched) in rate:
            r = statistics.median(rate[(engine, kind, batched)])
            ours = statistics.median(rate[("hlobundle", kind, batched)])
            what = "batching up to 8" if batched else "no batching"
            case = f"{kind}: {CLIENTS} clients, {what}, {engine} (requests/s; ratio: hlobundle's / this)"
            out.append({"case": case, "s": r, "ratio": ours / r})
    for kind, engine in itertools.product(("json", "binary"), engines):
        if kind in decode[engine]:
            s = decode[engine][kind]
            case = f"in which, in process and warm: {engine}'s own decode of the {kind} request into its array (s; ratio: hlobundle's / this)"
            out.append({"case": case, "s": s, "ratio": decode["hlobundle"][kind] / s})
    for engine in missing:
        case = f'{engine}: not measured, no .venv-{engine} (pip install -e ".[{engine}-tests]")'
        out.append({"case": case, "s": "", "ratio": ""})
    return out


# --- run by run.py (sections `peers` and `ray`) ---------------------------------------------------


def peers_cost(tmp: Path, quick: bool) -> list[dict]:
    """This script, in a process of its own: hlobundle serve beside MLServer and KServe, each in
    its own environment, in a network namespace of loopback alone (KServe binds every
    interface; `unshare` needs root, as .ci/run has)."""
    out = tmp / "peers.json"
    script = f"ip link set lo up && exec {PY} {ROOT / 'benchmarks' / 'peers.py'} {out}"
    command = [
        "unshare",
        "--net",
        "--fork",
        "--",
        "sh",
        "-c",
        script + (" --quick" if quick else ""),
    ]
    r = subprocess.run(command, capture_output=True, text=True)
    if r.returncode != 0:
        why = (r.stderr.strip().splitlines() or ["?"])[-1][:200]
        return [{"case": f"not measured: {why}", "s": "", "ratio": ""}]
    return json.loads(out.read_text())


def ray_cost(tmp: Path, quick: bool) -> list[dict]:
    """ray_scaling.py, in Ray's environment (.venv-ray): Ray Data on 2 actors / this process
    alone, and Ray Serve with 2 replicas / 1, on the LeNet with a symbolic batch."""
    python = venv_python("ray")
    if python is None:
        return [
            {
                "case": 'not measured: no .venv-ray (pip install -e ".[ray-tests]")',
                "s": "",
                "ratio": "",
            }
        ]
    bundle, out = symbolic_lenet(tmp / "ray-lenet.hlobundle"), tmp / "ray.json"
    command = [str(python), str(ROOT / "benchmarks" / "ray_scaling.py"), str(bundle), str(out)]
    subprocess.run(command + (["--quick"] if quick else []), capture_output=True, check=True)
    got = json.loads(out.read_text())
    scored, cpus = got["rows"], got["cpus"]  # (`rows` is this module's table of the peers)
    return [
        {
            "case": f"Ray Data, {scored} rows of one image, 2 actors on {cpus} CPUs: rows/s, and / one process without Ray",
            "s": got["data_two_workers"],
            "ratio": got["data_two_workers"] / got["data_one_process"],
        },
        {
            "case": "one process, the same predictor over the same batches: rows/s",
            "s": got["data_one_process"],
            "ratio": 1.0,
        },
        {
            "case": "Ray Serve, JSON, 8 clients, 2 replicas: requests/s, and / 1 replica",
            "s": got["serve_2"],
            "ratio": got["serve_2"] / got["serve_1"],
        },
        {"case": "Ray Serve, 1 replica: requests/s", "s": got["serve_1"], "ratio": 1.0},
    ]


def main() -> None:
    out, quick = Path(sys.argv[1]), "--quick" in sys.argv[2:]
    with tempfile.TemporaryDirectory(prefix="hlobundle-peers-") as tmp:
        out.write_text(json.dumps(measure(quick, Path(tmp))))


if __name__ == "__main__":
    main()

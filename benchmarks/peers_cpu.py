"""The servers' own CPU per JSON request, hlobundle serve beside MLServer (run by hand:
`python benchmarks/peers_cpu.py`, with MLServer's environment where peers.py finds it): peers.py's
servers of the LeNet with a symbolic batch, unbatched, each asked the same JSON request (batch 4)
on one keep-alive connection; the CPU time (user and system) of each server's process and its
children over N requests, / N, and the model's own call in this process (its CPU time, every
thread); rounds in turns, medians. CPU time rather than latency: on a shared machine a request's
p50 moves by 2x from run to run, its CPU time far less. Prints one JSON object: microseconds,
hlobundle's / MLServer's, and the same beyond the model's call."""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.append(str(Path(__file__).resolve().parent.parent))
from benchmarks import peers  # noqa: E402
from benchmarks.serve_cpu import server_cpu, tree_cpu_s  # noqa: E402

ENGINES = ("hlobundle", "mlserver")


def main(rounds: int = 5, n: int = 600) -> None:
    import lenet5

    from hlobundle._serve._models import load_models

    if peers.venv_python("mlserver") is None:
        raise SystemExit("no MLServer environment (peers.venv_python)")
    tmp = Path(tempfile.mkdtemp())
    bundle = peers.symbolic_lenet(tmp / "lenet-b.hlobundle")
    body, headers = peers.requests_of(lenet5.example_images())["json"]
    served = next(iter(load_models([str(bundle)], backend="xla").values()))
    given = {"images": np.asarray(lenet5.example_images(), np.float32)}

    def model_s() -> float:
        start = time.process_time()
        for _ in range(n):
            served(given)
        return (time.process_time() - start) / n

    infer = ("POST", f"/v2/models/{peers.MODEL}/infer")
    running = {e: peers.start(e, bundle, False, tmp) for e in ENGINES}
    try:
        for proc, port in running.values():
            server_cpu(proc.pid, port, (*infer, body, headers), n // 3, tree_cpu_s)  # warm
        model_s()
        times: dict[str, list[float]] = {e: [] for e in (*ENGINES, "model")}
        for _ in range(rounds):
            for e, (proc, port) in running.items():
                times[e].append(server_cpu(proc.pid, port, (*infer, body, headers), n, tree_cpu_s))
            times["model"].append(model_s())
    finally:
        for proc, _ in running.values():
            peers.stop(proc)
    rows = list(zip(times["hlobundle"], times["mlserver"], times["model"], strict=True))
    out = {k: round(statistics.median(v) * 1e6) for k, v in times.items()}
    out["ratio"] = round(statistics.median(h / m for h, m, _ in rows), 3)
    out["beyond_model_ratio"] = round(statistics.median((h - c) / (m - c) for h, m, c in rows), 3)
    out["load"] = round(os.getloadavg()[0], 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()

"""Timeline of load(verify=True, device=True) again: per run, per thread, read+hash / put / wait."""

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.append(os.getcwd())
sys.path.append(os.getcwd() + "/benchmarks")
import accelerator
import jax

import hlobundle
from hlobundle._bundle_io import _tensor_streaming as ts

if len(sys.argv) > 1:
    from hlobundle._read import _device_values

    _device_values.STREAM_ON_CPU = True

tmp = Path(tempfile.mkdtemp())
small = len(sys.argv) > 1
args = argparse.Namespace(layers=2 if small else 8, width=1024 if small else 8192, batch=16)
path = accelerator.dense_bundle(tmp, args, functions=2)
os.environ["HLOBUNDLE_CACHE_DIR"] = str(tmp / "cache")
hlobundle.load(path, verify=True)
files = sorted(path.rglob("*.safetensors"))
ev = []
lock = threading.Lock()


def wrap(name, fn):
    def w(*a, **k):
        t0 = time.perf_counter()
        r = fn(*a, **k)
        t1 = time.perf_counter()
        with lock:
            ev.append((name, threading.get_ident(), t0, t1))
        return r

    return w


orig = {n: getattr(ts, n) for n in ("_hash_run", "_put", "_wait", "_join")}


def run_once():
    b = hlobundle.load(path, verify=True, device=True).select("f0")
    jax.block_until_ready(b.example_args()[0])


for mode in ("plain", "traced"):
    for n, f in orig.items():
        setattr(ts, n, wrap(n, f) if mode == "traced" else f)
    walls = []
    for _ in range(5):
        accelerator.parallel_sha256_bound(files)
        ev.clear()
        t0 = time.perf_counter()
        run_once()
        walls.append(time.perf_counter() - t0)
    bt = []
    for _ in range(5):
        t = time.perf_counter()
        accelerator.parallel_sha256_bound(files)
        bt.append(time.perf_counter() - t)
    print(
        mode,
        f"load wall median {statistics.median(walls):.4f}  bound {statistics.median(bt):.4f}  ratio {statistics.median(walls) / statistics.median(bt):.2f}",
    )
# the last traced run's events
start = min(e[2] for e in ev)
end = max(e[3] for e in ev)
print(f"traced span of events {end - start:.4f} s, threads {len({e[1] for e in ev})}")
for name in orig:
    d = [e[3] - e[2] for e in ev if e[0] == name]
    if d:
        first = min(e[2] for e in ev if e[0] == name) - start
        last = max(e[3] for e in ev if e[0] == name) - start
        print(
            f"{name:10s} n={len(d):4d} sum {sum(d):.4f} s  mean {1e3 * statistics.mean(d):.2f} ms"
            f"  max {1e3 * max(d):.2f} ms  first start {first:.4f} last end {last:.4f}"
        )
# concurrency over time in 10 ms bins
bins = int((end - start) / 0.01) + 1
for name in ("_hash_run", "_put", "_wait"):
    occ = [0.0] * bins
    for e in ev:
        if e[0] != name:
            continue
        a, b = e[2] - start, e[3] - start
        for i in range(int(a / 0.01), int(b / 0.01) + 1):
            lo, hi = max(a, i * 0.01), min(b, (i + 1) * 0.01)
            if hi > lo:
                occ[i] += (hi - lo) / 0.01
    print(f"{name:10s} busy threads per 10 ms: {' '.join(f'{o:.1f}' for o in occ)}")
print(os.cpu_count(), "cores", jax.devices()[0].device_kind)

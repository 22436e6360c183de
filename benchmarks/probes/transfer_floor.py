"""Transfer floor on this host: device_put of 1.13 GiB already in memory vs parallel sha256."""

import hashlib
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import numpy as np

sizes = [3 * 128 << 20, 3 * 128 << 20, 3 * 128 << 20]  # ~1.125 GiB in 3 arrays
arrs = [np.full(s, i + 1, np.uint8) for i, s in enumerate(sizes)]
STEP = 8 << 20


def put_whole():
    jax.block_until_ready([jax.device_put(a) for a in arrs])


def put_pieces(step=STEP):
    out = []
    for a in arrs:
        ps = [jax.device_put(a[i : i + step]) for i in range(0, a.size, step)]
        out.append(jnp.concatenate(ps))
    jax.block_until_ready(out)


def put_pieces_nojoin(step=STEP):
    ps = [jax.device_put(a[i : i + step]) for a in arrs for i in range(0, a.size, step)]
    jax.block_until_ready(ps)


def hash_par():
    runs = [(a, i) for a in arrs for i in range(0, a.size, STEP)]
    with ThreadPoolExecutor(os.cpu_count()) as p:
        list(p.map(lambda r: hashlib.sha256(memoryview(r[0])[r[1] : r[1] + STEP]).digest(), runs))


def put_threads(step=STEP, k=4):
    runs = [(a, i) for a in arrs for i in range(0, a.size, step)]
    with ThreadPoolExecutor(k) as p:
        ps = list(p.map(lambda r: jax.device_put(r[0][r[1] : r[1] + step]), runs))
    jax.block_until_ready(ps)


fns = {
    "hash13": hash_par,
    "put_whole": put_whole,
    "put_8M_join": put_pieces,
    "put_8M_nojoin": put_pieces_nojoin,
    "put_32M_nojoin": lambda: put_pieces_nojoin(32 << 20),
    "put_8M_4thr": put_threads,
    "put_32M_4thr": lambda: put_threads(32 << 20),
}
for f in fns.values():
    f()
res = {k: [] for k in fns}
for _ in range(5):
    for k, f in fns.items():
        t = time.perf_counter()
        f()
        res[k].append(time.perf_counter() - t)
gib = sum(sizes) / (1 << 30)
for k, v in res.items():
    m = statistics.median(v)
    print(f"{k:16s} {m:.4f} s  {gib / m:.2f} GiB/s  spread {(max(v) - min(v)) / m:.2f}")
print(jax.devices()[0].device_kind, os.cpu_count(), "cores")

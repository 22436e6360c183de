"""Whether hashing and the transfer to the device share the host's memory bandwidth (issue 66
section 4: the streamed `load(verify=True, device=True)` measured near the sum of the parallel
sha256 bound and the transfer floor, with about half the host's cores busy).

Each case alone and in pairs started together (two pools at once), wall seconds and host
CPU-seconds (every thread of this process, the device runtime's included), medians of turns:
- `copy`: the file's bytes copied from memory into a buffer a thread (what pread from the page
  cache does without the kernel), a thread per core;
- `hash mem`: sha256 of the bytes in memory, a thread per core;
- `pread+hash`: the parallel sha256 bound (read 8 MiB into a buffer, then hash it);
- `pread+hash 1M`: the same, each 1 MiB hashed as soon as it is read (still in the cache);
- `put`: `jax.device_put` of 8 MiB pieces from memory, blocked until ready, a thread per core;
- pairs: `hash mem | put`, `pread+hash | put`, `pread+hash 1M | put`.
Where a pair takes about the sum of its two, they do not overlap; where the host CPUs are
then far from busy, what they share is memory. Run on the device's host:

    python benchmarks/probes/stream_memory.py
"""

import hashlib
import os
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import jax
import numpy as np

STEP = 8 << 20
CORES = os.cpu_count() or 1
PATH = "/tmp/stream_memory.bin"
SIZE = 9 * 128 << 20  # 1.125 GiB, as accelerator.py's verify bundle
if not os.path.exists(PATH) or os.path.getsize(PATH) != SIZE:
    with open(PATH, "wb") as f:
        for _ in range(SIZE // (64 << 20)):
            f.write(np.random.default_rng(0).integers(0, 255, 64 << 20, np.uint8).tobytes())
memory = np.fromfile(PATH, np.uint8)
runs = list(range(0, SIZE, STEP))
local = threading.local()
device = jax.devices()[0]


def buffer() -> np.ndarray:
    if not hasattr(local, "buffer"):
        local.buffer = np.empty(STEP, np.uint8)
    return local.buffer


def pool(fn) -> None:
    with ThreadPoolExecutor(CORES) as p:
        list(p.map(fn, runs))


def copy() -> None:
    pool(lambda b: np.copyto(buffer(), memory[b : b + STEP]))


def hash_mem() -> None:
    pool(lambda b: hashlib.sha256(memory[b : b + STEP]).digest())


def pread_hash(sub: int = STEP):
    fd = os.open(PATH, os.O_RDONLY)

    def one(b: int) -> None:
        view = memoryview(buffer())
        for k in range(0, STEP, sub):
            os.preadv(fd, [view[k : k + sub]], b + k)
            hashlib.sha256(view[k : k + sub]).digest()

    def run() -> None:
        pool(one)

    return run


def put() -> None:
    pool(lambda b: jax.block_until_ready(jax.device_put(memory[b : b + STEP], device)))


def pair(a, b):
    def run() -> None:
        with ThreadPoolExecutor(2) as p:
            list(p.map(lambda f: f(), (a, b)))

    return run


fns = {
    "copy": copy,
    "hash mem": hash_mem,
    "pread+hash": pread_hash(),
    "pread+hash 1M": pread_hash(1 << 20),
    "put": put,
    "hash mem | put": pair(hash_mem, put),
    "pread+hash | put": pair(pread_hash(), put),
    "pread+hash 1M | put": pair(pread_hash(1 << 20), put),
}
for f in fns.values():
    f()
wall: dict[str, list[float]] = {k: [] for k in fns}
cpu: dict[str, list[float]] = {k: [] for k in fns}
for _ in range(7):
    for k, f in fns.items():
        t, c = time.perf_counter(), time.process_time()
        f()
        wall[k].append(time.perf_counter() - t)
        cpu[k].append(time.process_time() - c)
gib = SIZE / (1 << 30)
for k in fns:
    w, c = statistics.median(wall[k]), statistics.median(cpu[k])
    print(f"{k:22s} {w:.4f} s  {gib / w:6.2f} GiB/s  {c:.3f} CPU-s  {c / w:5.1f} cores busy")
print(device.device_kind, CORES, "cores")

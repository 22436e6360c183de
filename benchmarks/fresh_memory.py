"""What 1 GiB of fresh memory costs a verify that keeps the bytes it checked, against the parallel
sha256 bound (reused buffers): `python benchmarks/fresh_memory.py [--size-mib N]`, by hand, on
the machine in question (docs/accelerators.md, "Measured on a TPU"). It writes a file under
the temporary directory, then reads and hashes it in 8 MiB runs by a thread per core into:
reused buffers (the bound, as `accelerator.parallel_sha256_bound`); a fresh anonymous mapping
with and without MADV_HUGEPAGE (as verify's private copy); one made with MAP_POPULATE; and the
mapping alone. It prints the fastest of three of each, and the kernel's transparent huge page
settings."""

from __future__ import annotations

import argparse
import hashlib
import mmap
import os
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

STEP = 8 << 20
POPULATE = getattr(mmap, "MAP_POPULATE", 0x8000)  # Linux's value where Python does not name it


def fresh(size: int, flags: int = 0, huge: bool = True) -> mmap.mmap:
    mapping = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | flags)
    if huge and hasattr(mmap, "MADV_HUGEPAGE"):
        mapping.madvise(mmap.MADV_HUGEPAGE)
    return mapping


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=int, default=1024)
    size = parser.parse_args().size_mib << 20
    for name in ("enabled", "defrag"):
        try:
            setting = Path(f"/sys/kernel/mm/transparent_hugepage/{name}").read_text().strip()
        except OSError as e:
            setting = f"unreadable ({e.strerror})"
        print(f"transparent huge pages, {name}: {setting}")
    print(f"cores: {os.cpu_count()}")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "data.bin"
        block = os.urandom(STEP)
        with open(path, "wb") as w:
            for _ in range(size // STEP):
                w.write(block)
        fd = os.open(path, os.O_RDONLY)
        try:
            measure(fd, size)
        finally:
            os.close(fd)


def measure(fd: int, size: int) -> None:
    pool = ThreadPoolExecutor(os.cpu_count() or 1)
    local = threading.local()
    runs = range(0, size, STEP)

    def into(view: memoryview, hashed: bool = True) -> None:
        def one(begin: int) -> None:
            part = view[begin : begin + STEP]
            os.preadv(fd, [part], begin)
            if hashed:
                hashlib.sha256(part).digest()

        list(pool.map(one, runs))

    def bound() -> None:
        def one(begin: int) -> None:
            if not hasattr(local, "buffer"):
                local.buffer = memoryview(bytearray(STEP))
            os.preadv(fd, [local.buffer], begin)
            hashlib.sha256(local.buffer).digest()

        list(pool.map(one, runs))

    def filled(flags: int = 0, huge: bool = True, hashed: bool = True) -> Callable[[], None]:
        def run() -> None:
            with fresh(size, flags, huge) as mapping:
                into(memoryview(mapping), hashed)

        return run

    def mapped_alone() -> None:
        fresh(size, POPULATE).close()

    cases = {
        "the bound: read and hashed into reused 8 MiB buffers": bound,
        "into fresh memory (MADV_HUGEPAGE), read and hashed": filled(),
        "into fresh memory (no madvise), read and hashed": filled(huge=False),
        "into fresh memory (MAP_POPULATE, its mapping timed too)": filled(POPULATE),
        "fresh memory, MAP_POPULATE, the mapping alone": mapped_alone,
        "into fresh memory (MADV_HUGEPAGE), read only": filled(hashed=False),
    }
    for name, fn in cases.items():
        times = []
        for _ in range(3):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        print(f"{name}: {min(times):.3f} s (of {', '.join(f'{t:.3f}' for t in times)})")


if __name__ == "__main__":
    main()

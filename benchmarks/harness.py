"""What every benchmark measures with: repetitions run in turns (`interleaved`), fresh
processes in a user's environment (`run_py`), a process's resident memory (`rss_kib`, and
`PEAK_RSS` for the code a fresh process runs), a free loopback port, and the tables of
RESULTS.md (`table`).

Every number is a ratio against a baseline measured in the same run (median of interleaved
repetitions), because absolute times on a shared 2-core machine are noise."""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))  # lenet5.py, lm.py: the models measured
PY = sys.executable
GiB = 1024**3


def interleaved(
    fns: dict[str, Callable[[], object]],
    reps: int,
    setup: dict[str, Callable[[], object]] | None = None,
    rotate: bool = False,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, tuple[float, float]]:
    """(median, spread) in seconds per function, running them in turns so drift hits all alike;
    a function's `setup`, where it has one, runs untimed before each call. With `rotate`, each
    turn starts one function later, so that none always runs first. `clock` reads the seconds
    (`time.process_time`: this process's CPU, every thread's)."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    names = list(fns)
    for turn in range(reps):
        shift = turn % len(names) if rotate else 0
        for name in names[shift:] + names[:shift]:
            fn = fns[name]
            if setup and name in setup:
                setup[name]()
            start = clock()
            fn()
            times[name].append(clock() - start)
    medians = {k: statistics.median(v) for k, v in times.items()}
    return {k: (m, (max(times[k]) - min(times[k])) / m if m else 0.0) for k, m in medians.items()}


# What a fresh process gets: a user's shell environment, not this process's (which sections
# change, HLOBUNDLE_CACHE_DIR say, and which JAX may have touched).
# PYTHONPATH and TPU_*: where a TPU machine's jax is found and how it reaches its chip.
_USER_ENV = (
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "TMPDIR",
    "USER",
    "PYTHONDONTWRITEBYTECODE",
    "PYTHONPATH",
)


def user_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a process a user starts from a shell, with `env` added."""
    kept = {k: v for k, v in os.environ.items() if k in _USER_ENV or k.startswith("TPU_")}
    return kept | (env or {})


def run_py(code: str, env: dict[str, str] | None = None) -> tuple[float, str]:
    """Wall time of a fresh Python process running `code` in a user's environment
    (`user_env`), and its stdout."""
    start = time.perf_counter()
    r = subprocess.run([PY, "-c", code], capture_output=True, text=True, env=user_env(env))
    if r.returncode:
        raise RuntimeError(r.stderr[-2000:])
    return time.perf_counter() - start, r.stdout


def rss_kib(pid: int) -> int:
    """The resident memory of process `pid` now, in KiB."""
    with open(f"/proc/{pid}/status") as f:
        return int([line.split()[1] for line in f if line.startswith("VmRSS")][0])


# The peak resident memory of the process so far, in bytes, as an expression for the code a
# fresh process runs (`hwm = {PEAK_RSS}`). VmHWM, not getrusage's ru_maxrss: that one survives
# exec, and is the forking parent's peak.
PEAK_RSS = (
    "[int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM')][0] * 1024"
)


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def table(rows: list[dict]) -> str:
    """`rows` as a markdown table: a column per key, in the order keys first appear; floats to
    3 significant digits, a missing key blank."""
    if not rows:
        return ""
    keys = list(dict.fromkeys(k for r in rows for k in r))
    fmt = lambda v: f"{v:.3g}" if isinstance(v, float) else str(v)  # noqa: E731
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(fmt(r.get(k, "")) for k in keys) + " |" for r in rows]
    return "\n".join(lines)

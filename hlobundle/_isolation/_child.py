"""Running a child script once on untrusted bytes: `python -E -s SCRIPT ARGS`, in a process
and a process group of its own, killed at its deadline or once its output passes a bound.

The bytes reach the child on its stdin from a file in memory, so that handing them over never
waits on the child; its stdout and stderr come back through pipes, read against the deadline.
It holds no descriptor of this process but those three (subprocess closes the rest). When the
call ends, however it ends (the child's exit, the deadline, the bound, an exception here such
as Ctrl-C), the child's process group is killed: the child, unless it ended, and whatever it
left running there. What the child leaves outside its group (a process of a new session) lives
on; the call no longer waits for it.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

# The child scripts: each reads untrusted bytes on stdin (SCRIPT's docstring has its protocol).
PORTABLE_CHILD = Path(__file__).with_name("_portable_child.py")
JAX_EXPORT_CHILD = Path(__file__).with_name("_jax_export_child.py")
_POLL_S = 0.05  # how often a call with no output looks whether its child has ended


@dataclass(frozen=True)
class Done:
    """How a child ended: `status` is its exit status, or minus the signal that killed it."""

    status: int
    stdout: bytes
    stderr: bytes
    timed_out: bool
    overflow: bool


def run(script: Path, args: list[str], data: bytes, *, timeout: float, max_output: int) -> Done:
    """Run `script` once with `args` and `data` on its stdin, killed after `timeout` seconds or
    once its stdout and stderr hold more than `max_output` bytes together (each is then cut to
    `max_output`)."""
    deadline = time.monotonic() + timeout
    # -E -s: no PYTHON* variables, no user site. A session of its own: a terminal's Ctrl-C
    # reaches this process only, which then kills the child's group. One BLAS thread, as in a
    # fork server's children: numpy, which MLIR's bindings import, would start one per core,
    # each taking address space out of the child's allowance.
    command = [sys.executable, "-E", "-s", str(script), *args]
    with _memory_file(data) as stdin:
        child = subprocess.Popen(
            command,
            env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    try:
        out, err, overflow = _collect(child, deadline, max_output)
        ended = not overflow and _ended_by(child.pid, deadline)
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            # Before the child is reaped, so that its id (its group's) is no one else's yet.
            os.killpg(child.pid, signal.SIGKILL)
        status = child.wait()
        for pipe in (child.stdout, child.stderr):
            piped(pipe).close()
    return Done(status, out, err, timed_out=not ended and not overflow, overflow=overflow)


def piped(stream: IO[bytes] | None) -> IO[bytes]:
    """A child's stream that was opened as a pipe (`subprocess.PIPE`: never None)."""
    assert stream is not None, "the child was started with this stream piped"
    return stream


def _collect(
    child: subprocess.Popen[bytes], deadline: float, limit: int
) -> tuple[bytes, bytes, bool]:
    """(stdout, stderr, whether they passed `limit` bytes together), read until both pipes
    close, the deadline passes, or the output passes `limit`; or, once the child has ended and
    something it started still holds its pipes, until they have nothing more to read."""
    pipes = (piped(child.stdout), piped(child.stderr))
    parts: dict[int, list[bytes]] = {pipe.fileno(): [] for pipe in pipes}
    size, ended = 0, False
    with selectors.DefaultSelector() as selector:
        for fd in parts:
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map() and size <= limit:
            left = deadline - time.monotonic()
            ready = selector.select(min(left, _POLL_S)) if left > 0 else []
            if not ready:
                if left <= 0 or ended:
                    break
                ended = _ended(child.pid)
                continue
            for key, _ in ready:
                block = os.read(key.fd, 1 << 20)
                if block:
                    parts[key.fd].append(block)
                    size += len(block)
                else:
                    selector.unregister(key.fd)
    out, err = (b"".join(parts[fd])[:limit] for fd in parts)
    return out, err, size > limit


def _ended(pid: int) -> bool:
    """Whether the child has ended, without reaping it (its id stays its own)."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def _ended_by(pid: int, deadline: float) -> bool:
    """Wait, without reaping, until the child ends or the deadline passes: whether it ended."""
    while not _ended(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.002)
    return True


@contextlib.contextmanager
def _memory_file(data: bytes) -> Iterator[int]:
    """A descriptor of a file in memory holding `data`, at its start (closed on leaving)."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("hlobundle-child-stdin", os.MFD_CLOEXEC)
    else:  # pragma: no cover - not Linux
        fd = os.dup(tempfile.TemporaryFile().fileno())  # noqa: SIM115
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)
        yield fd
    finally:
        os.close(fd)

"""Run as a child process: a fork server for one child script (`_children.py` starts it).

A child script (`_portable_child.py`, `_jax_export_child.py`) reads untrusted bytes that may
crash the process reading them. Started fresh for every artifact, it spends most of its time
importing MLIR's bindings or jax. This server imports the script and calls its `preload()`
once, then forks one process per request, in which the script's `main()` runs exactly as when
the script is run alone: the untrusted bytes on stdin, its arguments in `sys.argv`, its output
on stdout and stderr, its result as the exit status. A crash kills that process only. This
server never reads the bytes it is given, and each fork closes every other descriptor, so a
compromised fork cannot write to this server's replies.

Forking is safe only while this process has one thread: when `preload()` started one, each
fork executes the script afresh instead.

Protocol on stdin and stdout, with lengths as little-endian u64. Request: the length and a JSON
header (`args`, `timeout` in seconds, `max_output` in bytes), then the length and the data.
Reply: the length and a JSON header (`status`: the exit status, or minus the signal that ended
it; `timed_out`; `overflow`), then the length and bytes of stdout, then of stderr. The server
exits when stdin closes, or after `argv[2]` seconds without a request.
"""

import importlib.util
import json
import os
import selectors
import signal
import sys
import time
import traceback
from pathlib import Path

U64 = 8


def main() -> int:
    script, idle_s = Path(sys.argv[1]), float(sys.argv[2])
    sys.path[0] = str(script.parent)  # as when the script is run alone
    spec = importlib.util.spec_from_file_location("__child__", script)
    child = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(child)  # type: ignore[union-attr]
    try:
        getattr(child, "preload", lambda: None)()
    except Exception:  # only an optimisation: main() imports what it needs again
        pass
    forkable = _threads() == 1
    while True:
        request = _read_request(idle_s)
        if request is None:
            return 0
        header, data = request
        reply = _serve(child, script, forkable, header, data)
        _write_reply(*reply)


def _serve(child, script, forkable, header, data):
    """Run one request in a fork: (reply header, stdout, stderr)."""
    stdin = _memory_file(data)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the fork: it never returns
        _run_child(child, script, forkable, header["args"], (stdin, out_w, err_w))
    for fd in (stdin, out_w, err_w):
        os.close(fd)
    deadline = time.monotonic() + header["timeout"]
    out, err, overflow = _collect(out_r, err_r, deadline, header["max_output"])
    status, timed_out = _wait(pid, deadline, kill=overflow)
    return {"status": status, "timed_out": timed_out, "overflow": overflow}, out, err


def _run_child(child, script, forkable, args, fds):
    try:
        for fd, target in zip(fds, (0, 1, 2), strict=True):
            os.dup2(fd, target)
        os.closerange(3, os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 4096)
        _die_with_parent()
        if not forkable:
            os.execv(sys.executable, [sys.executable, "-E", "-s", str(script), *args])
        sys.argv = [str(script), *args]
        sys.stdin = open(0, closefd=False)  # noqa: SIM115
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
        status = child.main()
        sys.stdout.flush()
        sys.stderr.flush()
    except SystemExit as e:
        status = e.code if isinstance(e.code, int) else 1
    except BaseException:
        traceback.print_exc(limit=3)
        sys.stderr.flush()
        status = 1
    os._exit(status)


def _collect(out_r, err_r, deadline, limit):
    """The fork's stdout and stderr until both close, the deadline passes, or they hold more
    than `limit` bytes: (stdout, stderr, whether they overflowed)."""
    chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
    size = 0
    with selectors.DefaultSelector() as selector:
        for fd in chunks:
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map() and size <= limit and time.monotonic() < deadline:
            for key, _ in selector.select(deadline - time.monotonic()):
                block = os.read(key.fd, 1 << 20)
                if not block:
                    selector.unregister(key.fd)
                chunks[key.fd].append(block)
                size += len(block)
    for fd in chunks:
        os.close(fd)
    out, err = (b"".join(chunks[fd])[:limit] for fd in (out_r, err_r))
    return out, err, size > limit


def _wait(pid, deadline, *, kill):
    """(exit status or minus the signal, whether it was killed for the deadline)."""
    timed_out = False
    while not kill:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status), False
        if time.monotonic() >= deadline:
            timed_out = True
            break
        time.sleep(0.002)
    os.kill(pid, signal.SIGKILL)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), timed_out


def _memory_file(data):
    """A descriptor at the start of a file in memory holding `data`: the fork's stdin."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("hlobundle-child-stdin")
    else:  # pragma: no cover - not Linux
        import tempfile

        fd = os.dup(tempfile.TemporaryFile().fileno())
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _die_with_parent():
    """The fork is killed when this server dies (Linux), so no fork outlives a killed server."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass


def _threads():
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:  # pragma: no cover - not Linux: assume the worst
        return 2


def _read_request(idle_s):
    """(header, data), or None when stdin closed or no request came for `idle_s` seconds."""
    with selectors.DefaultSelector() as selector:
        selector.register(0, selectors.EVENT_READ)
        if not selector.select(idle_s):
            return None
    frames = []
    for _ in range(2):
        size = _read_exact(U64)
        frame = None if size is None else _read_exact(int.from_bytes(size, "little"))
        if frame is None:
            return None
        frames.append(frame)
    return json.loads(frames[0]), frames[1]


def _read_exact(n):
    parts, left = [], n
    while left:
        block = os.read(0, min(left, 1 << 24))
        if not block:
            return None
        parts.append(block)
        left -= len(block)
    return b"".join(parts)


def _write_reply(header, out, err):
    for part in (json.dumps(header).encode(), out, err):
        for chunk in (len(part).to_bytes(U64, "little"), part):
            view = memoryview(chunk)
            while view:
                view = view[os.write(1, view) :]


if __name__ == "__main__":
    sys.exit(main())

"""Run as a child process: a fork server for one child script (`_fork_servers.py` starts it).

A child script (`_portable_child.py`, `_jax_export_child.py`) reads untrusted bytes that may
crash the process reading them. Started fresh for every call, it spends most of its time
importing MLIR's bindings (or jax).
This server imports the script and calls its `preload()` once, then forks one process per
request, in which the script's `main()` runs exactly as when the script is run alone: the
untrusted bytes on stdin, its arguments in `sys.argv`, its output on stdout and stderr, its
result as the exit status (as `sys.exit(main())` ends it). A crash kills that process only. Each
fork closes every other descriptor, so that a compromised fork cannot write to this server's
replies, and finds nothing of the calls before it in its memory: a request's data and a fork's
output pass from pipe to a file in memory and back by splice(2) and sendfile(2), never through
this server's memory. As a subreaper, the server kills whatever a fork leaves running (a daemon
holding its pipes open) as soon as the fork exits; when its caller goes (its stdin closes)
mid-call, it kills the fork and exits.

Forking is safe only while this process has one thread: when `preload()` started one, each
fork executes the script afresh instead.

Protocol on stdin and stdout, with lengths as little-endian u64. Request: the length and a JSON
header (`args`, `timeout` in seconds, `max_output` in bytes, `id`), then the length and the
data. Reply: the length and a JSON header (the request's `id`; `status`: the exit status, or
minus the signal that ended it; `timed_out`; `overflow`), then the length and bytes of stdout,
then of stderr. It exits when stdin closes, or after `argv[2]` seconds without a request.
"""

import contextlib
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
PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36


def main() -> int:
    script, idle_s = Path(sys.argv[1]), float(sys.argv[2])
    sys.path[0] = str(script.parent)  # as when the script is run alone
    spec = importlib.util.spec_from_file_location("__child__", script)
    assert spec is not None and spec.loader is not None, "a .py file's spec has a loader"
    child = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(child)
    try:
        getattr(child, "preload", lambda: None)()
    except Exception:  # only an optimisation: main() imports what it needs again
        pass
    forkable = _threads() == 1
    _prctl(PR_SET_CHILD_SUBREAPER, 1)  # what a fork leaves behind becomes ours to kill
    while True:
        request = _read_request(idle_s)
        if request is None:
            return 0
        header, stdin = request
        reply = _serve(child, script, forkable, header, stdin)
        if reply is None:  # the caller has gone
            return 0
        _write_reply(*reply)


def _serve(child, script, forkable, header, stdin):
    """Run one request in a fork: (reply header, stdout, stderr), each output a (file in memory,
    length); None when the caller closed its end meanwhile."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the fork: it never returns
        _run_child(child, script, forkable, header["args"], (stdin, out_w, err_w))
    for fd in (stdin, out_w, err_w):
        os.close(fd)
    deadline = time.monotonic() + header["timeout"]
    out, err, overflow, gone = _collect(pid, out_r, err_r, deadline, header["max_output"])
    status, timed_out = _wait(pid, deadline, kill=overflow or gone)
    _kill_descendants()
    if gone:
        return None
    head = {"id": header.get("id"), "status": status, "timed_out": timed_out}
    return {**head, "overflow": overflow}, out, err


def _run_child(child, script, forkable, args, fds):
    status = 1
    try:
        for fd, target in zip(fds, (0, 1, 2), strict=True):
            os.dup2(fd, target)
        os.closerange(3, os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 4096)
        _prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))  # no fork outlives a killed server
        if not forkable:
            os.execv(sys.executable, [sys.executable, "-E", "-s", str(script), *args])
        sys.argv = [str(script), *args]
        sys.stdin = open(0, closefd=False)  # noqa: SIM115
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
        status = _exit_status(child.main())
    except SystemExit as e:
        status = _exit_status(e.code)
    except BaseException:
        traceback.print_exc(limit=3)
    finally:  # whatever main() did, the fork ends here: it never runs this server's loop
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(status)


def _exit_status(code):
    """The exit status of `sys.exit(code)`: 0 for None, the low byte of an int, else the code
    printed on stderr and 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _collect(pid, out_r, err_r, deadline, limit):
    """The fork's stdout and stderr, each as (a file in memory, its length), until both close,
    the deadline passes, or they hold more than `limit` bytes: (stdout, stderr, whether they
    overflowed, whether the caller closed this server's stdin meanwhile). Once the fork has
    exited, whatever it left running (and holding its pipes) is killed."""
    files = {out_r: _memory_file(), err_r: _memory_file()}
    sizes, pipes, gone = dict.fromkeys(files, 0), set(files), False
    exited = _exit_notice(pid)
    with selectors.DefaultSelector() as selector:
        for fd in (*files, 0, *([] if exited is None else [exited])):
            selector.register(fd, selectors.EVENT_READ)  # stdin: readable once the caller left
        while pipes and not gone and sum(sizes.values()) <= limit:
            left = deadline - time.monotonic()
            ready = selector.select(left) if left > 0 else []
            if not ready:
                break
            for key, _ in ready:
                if key.fd == 0:
                    gone = True
                elif key.fd == exited:
                    selector.unregister(exited)
                    _kill_descendants(spare=pid)
                elif _move(key.fd, files[key.fd], 1 << 20):
                    sizes[key.fd] = os.fstat(files[key.fd]).st_size
                else:
                    selector.unregister(key.fd)
                    pipes.discard(key.fd)
    for fd in (*files, *([] if exited is None else [exited])):
        os.close(fd)
    overflow = sum(sizes.values()) > limit
    out, err = ((files[fd], min(sizes[fd], limit)) for fd in (out_r, err_r))
    return out, err, overflow, gone


def _exit_notice(pid):
    """A descriptor that becomes readable when `pid` exits (Linux 5.3), or None."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # pragma: no cover - older Linux, not Linux
        return None


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


def _kill_descendants(spare=None):
    """Kill and reap every process below this one but `spare`: as a subreaper, this server
    inherits whatever a fork left running (a daemon holding its pipes, a fork bomb)."""
    for _ in range(1000):  # each round kills a generation; their orphans come to us
        pids = [p for p in _child_processes() if p != spare]
        if not pids:
            return
        for p in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
        for p in pids:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(p, 0)


def _child_processes():
    """The ids of this (single-threaded) process's children, from /proc (Linux), or none."""
    try:
        with open(f"/proc/self/task/{os.getpid()}/children", "rb") as f:
            return [int(pid) for pid in f.read().split()]
    except OSError:  # pragma: no cover - not Linux, or a kernel without the file
        return []


def _memory_file():
    """A descriptor of a new file in memory, which no fork inherits by accident."""
    if hasattr(os, "memfd_create"):
        return os.memfd_create("hlobundle-child-io", os.MFD_CLOEXEC)
    import tempfile  # pragma: no cover - not Linux

    return os.dup(tempfile.TemporaryFile().fileno())  # pragma: no cover


def _move(src, dst, most):
    """Up to `most` bytes from the pipe `src` to the end of the file `dst`, through the kernel
    only: a later fork finds no trace of them in this server's memory. How many (0: the end)."""
    if hasattr(os, "splice"):
        return os.splice(src, dst, most)
    block = os.read(src, most)  # pragma: no cover - not Linux
    _write_all(dst, block)
    return len(block)


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _prctl(option, value):
    """Linux's prctl(option, value), where there is one."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass


def _threads():
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:  # pragma: no cover - not Linux: assume the worst
        return 2


def _read_request(idle_s):
    """(header, a file in memory holding the data, at its start), or None when stdin closed or
    no request came for `idle_s` seconds."""
    with selectors.DefaultSelector() as selector:
        selector.register(0, selectors.EVENT_READ)
        if not selector.select(idle_s):
            return None
    size = _read_exact(U64)
    header = None if size is None else _read_exact(int.from_bytes(size, "little"))
    size = None if header is None else _read_exact(U64)
    if size is None:
        return None
    stdin, left = _memory_file(), int.from_bytes(size, "little")
    while left:
        moved = _move(0, stdin, min(left, 1 << 24))
        if not moved:
            os.close(stdin)
            return None
        left -= moved
    os.lseek(stdin, 0, os.SEEK_SET)
    return json.loads(header), stdin


def _read_exact(n):
    parts, left = [], n
    while left:
        block = os.read(0, min(left, 1 << 16))
        if not block:
            return None
        parts.append(block)
        left -= len(block)
    return b"".join(parts)


def _write_reply(header, *outputs):
    """The header, then each output's length and bytes, sent from its file in memory."""
    head = json.dumps(header).encode()
    _write_all(1, len(head).to_bytes(U64, "little") + head)
    for fd, n in outputs:
        _write_all(1, n.to_bytes(U64, "little"))
        sent = 0
        while sent < n:
            sent += os.sendfile(1, fd, sent, n - sent)
        os.close(fd)


if __name__ == "__main__":
    sys.exit(main())

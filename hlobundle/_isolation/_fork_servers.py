"""Child scripts run in forks of one server per script (`_fork_server.py`): the reader's
portable artifacts and the writer's Exporteds.

A load checks one portable artifact per module form, and a bundle another jaxlib wrote has one
to check in each form of each function; a session may import several Exporteds. Started fresh
for every call (`_child.run`), a child spends most of its time starting an interpreter and
importing MLIR's bindings (or jax). The server,
started on first use, imports the script's heavy modules once and forks a fresh process per
call: a call costs a fork instead (benchmarks/RESULTS.md, "Untrusted artifacts" and "Verify
of a bundle another jaxlib wrote"). The server exits when this process does, or after `IDLE_S`
seconds without a call; a call that finds it gone starts another. A call ends as `_child.run`'s
does, with the same `Done`.
"""

from __future__ import annotations

import atexit
import json
import os
import selectors
import subprocess
import sys
import threading
import time
from pathlib import Path

from ._child import Done, piped

_SERVER = Path(__file__).with_name("_fork_server.py")
IDLE_S = 60.0  # a server without calls for this long exits
_SLACK_S = 30.0  # beyond the call's own limit, how long a server may take to reply
U64 = 8


class ServerError(OSError):
    """The fork server itself failed (not the child it ran): it did not start or reply."""


def run(script: Path, args: list[str], data: bytes, *, timeout: float, max_output: int) -> Done:
    """Run `script` in a fork of its server, with `args`, `data` on its stdin, killed after
    `timeout` seconds or once its output passes `max_output` bytes."""
    server = _server_for(script)
    with server.lock:
        try:
            return server.call(args, data, timeout, max_output)
        except (BrokenPipeError, EOFError):  # it had exited (idle, killed), or lost the thread
            # of its replies: once more afresh
            try:
                return server.call(args, data, timeout, max_output)
            except (BrokenPipeError, EOFError) as e:
                raise ServerError(f"the fork server for {script.name} stopped") from e


class _Server:
    def __init__(self, script: Path) -> None:
        self.script, self.lock = script, threading.Lock()
        self.process = self._start()

    def _start(self) -> subprocess.Popen[bytes]:
        # -E -s: no PYTHON* variables, no user site. One BLAS thread, so that it can fork.
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
        command = [sys.executable, "-E", "-s", str(_SERVER), str(self.script), str(IDLE_S)]
        # Unbuffered: a forked copy of this process closes its copies without flushing a thing.
        # A session of its own: a terminal's Ctrl-C reaches this process, whose exit closes the
        # server's stdin, and never the server, which then cleans up after its fork.
        return subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            bufsize=0,
            start_new_session=True,
        )

    def restart(self) -> None:
        self.stop()
        self.process = self._start()

    def stop(self) -> None:
        """Close its pipes: it kills its fork and whatever that left running, and exits (or is
        killed a second later)."""
        for stream in (self.process.stdin, self.process.stdout):
            piped(stream).close()
        try:
            self.process.wait(timeout=1)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def call(self, args: list[str], data: bytes, timeout: float, max_output: int) -> Done:
        """The server's reply to one request. On any failure (an exception in this thread too,
        such as Ctrl-C) the server is restarted: no reply to this call is read by the next."""
        tag = os.urandom(16).hex()  # a reply with another tag answers another request
        header = json.dumps({"args": args, "timeout": timeout, "max_output": max_output, "id": tag})
        try:
            fd = piped(self.process.stdin).fileno()
            for part in (header.encode(), data):
                _write_all(fd, len(part).to_bytes(U64, "little"))
                _write_all(fd, part)
            reply = self._read_reply(time.monotonic() + timeout + _SLACK_S, max_output)
            head = json.loads(reply[0])
            if head["id"] != tag:  # a fork wrote a reply of its own through /proc
                raise EOFError("a reply to another request: once more afresh")
            return Done(
                int(head["status"]),
                reply[1],
                reply[2],
                bool(head["timed_out"]),
                bool(head["overflow"]),
            )
        except BaseException as e:
            self.restart()
            if isinstance(e, (TimeoutError, ValueError, KeyError, TypeError)):  # not its reply
                raise ServerError(f"the fork server for {self.script.name} did not reply") from e
            raise

    def _read_reply(self, deadline: float, max_output: int) -> list[bytes]:
        fd = piped(self.process.stdout).fileno()
        limits = (1 << 16, max_output, max_output)
        return [self._read(fd, self._length(fd, deadline, most), deadline) for most in limits]

    def _length(self, fd: int, deadline: float, most: int) -> int:
        n = int.from_bytes(self._read(fd, U64, deadline), "little")
        if n > most:
            raise ValueError(f"a reply part of {n} bytes, over {most}")
        return n

    @staticmethod
    def _read(fd: int, n: int, deadline: float) -> bytes:
        parts, left = [], n
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while left:
                if not selector.select(max(0.0, deadline - time.monotonic())):
                    raise TimeoutError
                block = os.read(fd, min(left, 1 << 24))
                if not block:
                    raise EOFError
                parts.append(block)
                left -= len(block)
        return b"".join(parts)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


_servers: dict[tuple[int, Path], _Server] = {}
_servers_lock = threading.Lock()


def _in_a_forked_copy() -> None:
    """A forked copy of this process (os.fork, multiprocessing) starts its own servers: a new
    lock, since another thread may have held ours, and none of our servers' pipes, so that a
    server still sees its stdin close when we exit."""
    global _servers_lock
    _servers_lock = threading.Lock()
    for server in _servers.values():
        piped(server.process.stdin).close()
        piped(server.process.stdout).close()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_in_a_forked_copy)


@atexit.register
def _stop_servers() -> None:
    for (pid, _), server in list(_servers.items()):
        if pid == os.getpid():
            server.stop()


def _server_for(script: Path) -> _Server:
    """This process's server for `script` (a forked copy of this process starts its own)."""
    key = (os.getpid(), script)
    with _servers_lock:
        if key not in _servers:
            _servers[key] = _Server(script)
        return _servers[key]

"""Child processes that read untrusted bytes, forked from one server per child script.

A child script (`_portable_child.py`, `_jax_export_child.py`) may crash on the bytes it reads,
so it never runs in this process. Each script gets one fork server (`_fork_server.py`), started
on first use, which imports the script's heavy modules once and forks a fresh process per call:
a call costs a fork instead of an interpreter start and an import of MLIR's bindings or jax.
The server exits when this process does, or after `IDLE_S` seconds without a call; a call that
finds it gone starts another.
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
from dataclasses import dataclass
from pathlib import Path

_SERVER = Path(__file__).with_name("_fork_server.py")
IDLE_S = 60.0  # a server without calls for this long exits
_SLACK_S = 30.0  # beyond the call's own limit, how long a server may take to reply
U64 = 8


@dataclass(frozen=True)
class Done:
    """How a child ended: `status` is its exit status, or minus the signal that killed it."""

    status: int
    stdout: bytes
    stderr: bytes
    timed_out: bool
    overflow: bool


class ServerError(OSError):
    """The fork server itself failed (not the child it ran): it did not start or reply."""


def run(script: Path, args: list[str], data: bytes, *, timeout: float, max_output: int) -> Done:
    """Run `script` in a fork of its server, with `args`, `data` on its stdin, killed after
    `timeout` seconds or once its output passes `max_output` bytes."""
    server = _server_for(script)
    with server.lock:
        try:
            return server.call(args, data, timeout, max_output)
        except (BrokenPipeError, EOFError):  # it had exited (idle, killed): once more afresh
            server.restart()
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
        return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, env=env)  # fmt: skip

    def restart(self) -> None:
        self.stop()
        self.process = self._start()

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            try:
                stream.close()  # type: ignore[union-attr]
            except BrokenPipeError:  # a request it never read: it is gone anyway
                pass

    def call(self, args: list[str], data: bytes, timeout: float, max_output: int) -> Done:
        header = {"args": args, "timeout": timeout, "max_output": max_output}
        stdin = self.process.stdin
        assert stdin is not None
        for part in (json.dumps(header).encode(), data):
            stdin.write(len(part).to_bytes(U64, "little"))
            stdin.write(part)
        stdin.flush()
        try:
            reply = self._read_reply(time.monotonic() + timeout + _SLACK_S, max_output)
        except (TimeoutError, ValueError) as e:  # no reply, or not one it writes
            self.restart()
            raise ServerError(f"the fork server for {self.script.name} did not reply") from e
        head = json.loads(reply[0])
        return Done(head["status"], reply[1], reply[2], head["timed_out"], head["overflow"])

    def _read_reply(self, deadline: float, max_output: int) -> list[bytes]:
        fd = self.process.stdout.fileno()  # type: ignore[union-attr]
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


_servers: dict[tuple[int, Path], _Server] = {}
_servers_lock = threading.Lock()


@atexit.register
def _stop_servers() -> None:
    """Each server exits when its stdin closes; waiting for it keeps exit quiet."""
    for (pid, _), server in list(_servers.items()):
        if pid == os.getpid():
            server.process.stdin.close()  # type: ignore[union-attr]
            try:
                server.process.wait(timeout=1)
            except subprocess.TimeoutExpired:
                server.process.kill()
            server.process.stdout.close()  # type: ignore[union-attr]


def _server_for(script: Path) -> _Server:
    """This process's server for `script` (a forked copy of this process starts its own)."""
    key = (os.getpid(), script)
    with _servers_lock:
        if key not in _servers:
            _servers[key] = _Server(script)
        return _servers[key]

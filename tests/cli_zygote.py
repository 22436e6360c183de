"""A process that has imported jax and the `hlobundle` command once, and runs each command a shell
asks for in a fork of itself (helpers.CliZygote): the docs' sh blocks call `hlobundle` dozens of
times, each a process of its own, without paying for the start of Python and jax each time.

    python tests/cli_zygote.py SOCKET

A request comes on the unix socket SOCKET (SOCK_SEQPACKET, one message) from the `hlobundle`
command on the shell's PATH (helpers.CliZygote writes it), or from helpers.CliZygote.start: the
JSON {"argv": [...], "cwd": PATH, "env": {...}} with the caller's descriptors 0, 1 and 2, and
optionally "start": true (answer the fork's pid at once) and "source": CODE (run `python -c CODE
ARGS` instead). The fork takes them, that directory and that environment, with sys.stdin,
stdout and stderr made over them as a fresh interpreter makes them, and runs `hlobundle ARGS`
as the installed command does (`hlobundle._cli._main.entry`); the answer when it ends, a JSON
message on the same connection, is its exit status as `subprocess` reports it (negative for a
signal). Commands run side by side (a server started, and commands asked of it). The zygote
exits when its stdin closes (the test process ended), and kills the commands still running.
"""

from __future__ import annotations

import atexit
import io
import json
import os
import select
import signal
import socket
import sys
import traceback
from typing import Any, TextIO

import jax  # noqa: F401  (imported once, before any fork: the point of the zygote)
import numpy  # noqa: F401

from hlobundle._cli import _main

# Top-level modules a command runs without, as where their extra is not installed (what
# helpers.without_modules's sitecustomize does at a Python's start): comma-separated, in the
# request's environment (helpers.CliZygote.run's `blocked`).
BLOCKED = "CLI_ZYGOTE_BLOCKED"


def block(names: str) -> None:
    """`import NAME` fails in this fork for each of `names`, as for a module not installed; one
    the zygote imported before the fork cannot be made absent, and fails the command."""
    for name in filter(None, names.split(",")):
        if name in sys.modules:
            raise RuntimeError(f"the CLI zygote imported {name} before the fork: not blocked")
        sys.modules[name] = None  # type: ignore[assignment]


def reopened(fd: int, old: TextIO, unbuffered: bool) -> TextIO:
    """A text stream over `fd` as a fresh interpreter makes sys.stdin/stdout/stderr, for the
    request's environment (PYTHONUNBUFFERED): the zygote's own are over its pipes."""
    raw = io.FileIO(fd, "r" if fd == 0 else "w", closefd=False)
    write_through = unbuffered and fd > 0
    buffer = raw if write_through else (io.BufferedReader if fd == 0 else io.BufferedWriter)(raw)
    return io.TextIOWrapper(
        buffer,
        encoding=old.encoding,
        errors=old.errors,
        line_buffering=fd == 2 or raw.isatty(),
        write_through=write_through,
    )


def child(inherited: list[Any], fds: list[int], request: dict) -> None:
    """Run in the forked child; never returns."""
    code = 1
    try:
        for held in inherited:  # the zygote's: the listener, and other commands' connections
            held.close() if isinstance(held, socket.socket) else os.close(held)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
        sys.stdin, sys.stdout, sys.stderr = (
            reopened(fd, old, unbuffered)
            for fd, old in enumerate((sys.__stdin__, sys.__stdout__, sys.__stderr__))
        )
        block(os.environ.pop(BLOCKED, ""))
        sys.argv = request["argv"]
        if "source" in request:  # `python -c SOURCE ARGS`
            sys.argv[0] = "-c"
            exec(compile(request["source"], "<string>", "exec"), {"__name__": "__main__"})
            code = 0
        else:
            _main.entry(request["argv"][1:])  # exits, as the installed command does
    except SystemExit as exit:  # a usage error, as the interpreter reports it
        code = exit.code if isinstance(exit.code, int) else (exit.code is not None)
        if not isinstance(exit.code, int | None):
            print(exit.code, file=sys.stderr)
    except KeyboardInterrupt:  # as the interpreter ends on one: by SIGINT, after the traceback
        traceback.print_exc()
        code = -signal.SIGINT
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            if "source" in request:  # the exit handlers, as `python -c` runs them
                atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            if code == -signal.SIGINT:
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                os.kill(os.getpid(), signal.SIGINT)
            os._exit(code)


def status(pid: int) -> int:
    """The ended `pid`'s exit status as `subprocess` reports it (negative for a signal)."""
    _, waited = os.waitpid(pid, 0)
    return -os.WTERMSIG(waited) if os.WIFSIGNALED(waited) else os.WEXITSTATUS(waited)


def begin(listener: socket.socket, conn: socket.socket, running: dict[int, Any]) -> None:
    """Fork the command `conn` asks for; `running[pidfd]` = (its pid, `conn`), answered with
    its status when the pidfd is readable (it ended). A request to start (`"start": true`) is
    answered its pid at once."""
    message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    request = json.loads(message)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        inherited = [listener, conn, *running, *(c for _, c in running.values())]
        child(inherited, fds, request)
    for fd in fds:
        os.close(fd)
    if request.get("start"):
        conn.send(json.dumps({"pid": pid}).encode())
    running[os.pidfd_open(pid)] = (pid, conn)


def ended(pidfd: int, running: dict[int, Any]) -> None:
    pid, conn = running.pop(pidfd)
    os.close(pidfd)
    with conn:
        try:
            conn.send(json.dumps({"returncode": status(pid)}).encode())
        except OSError:  # the caller went away
            pass


def serve(path: str) -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen()
    print("ready", flush=True)
    running: dict[int, Any] = {}
    while True:
        ready, _, _ = select.select([listener, sys.stdin, *running], [], [])
        if sys.stdin in ready and not sys.stdin.readline():
            for pid, _ in running.values():  # the test process ended: so do its commands
                os.kill(pid, signal.SIGKILL)
                status(pid)
            return
        for pidfd in set(ready) & set(running):
            ended(pidfd, running)
        if listener in ready:
            conn, _ = listener.accept()
            begin(listener, conn, running)


if __name__ == "__main__":
    serve(sys.argv[1])

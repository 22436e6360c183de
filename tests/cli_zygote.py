"""A process that has imported jax and the `hlobundle` command once, and runs each command a shell
asks for in a fork of itself (helpers.CliZygote): the docs' sh blocks call `hlobundle` dozens of
times, each a process of its own, without paying for the start of Python and jax each time.

    python tests/cli_zygote.py SOCKET

A request comes on the unix socket SOCKET (SOCK_SEQPACKET, one message) from the `hlobundle`
command on the shell's PATH (helpers.CliZygote writes it): the JSON {"argv": [...], "cwd": PATH,
"env": {...}} with the caller's descriptors 0, 1 and 2. The fork takes them, that directory and
that environment, and runs `hlobundle ARGS` as the installed command does
(`hlobundle._cli._main.entry`); the answer, a JSON message on the same connection, is its exit
status as `subprocess` reports it (negative for a signal). One command at a time (a shell block
runs them one after another). The zygote exits when its stdin closes (the test process ended).
"""

from __future__ import annotations

import json
import os
import select
import socket
import sys
import traceback

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


def child(listener: socket.socket, conn: socket.socket, fds: list[int], request: dict) -> None:
    """Run in the forked child; never returns."""
    code = 1
    try:
        listener.close()
        conn.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        block(os.environ.pop(BLOCKED, ""))
        sys.argv = request["argv"]
        _main.entry(request["argv"][1:])  # exits, as the installed command does
    except SystemExit as exit:  # a usage error, as the interpreter reports it
        code = exit.code if isinstance(exit.code, int) else (exit.code is not None)
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def answer(listener: socket.socket, conn: socket.socket) -> None:
    message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    request = json.loads(message)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        child(listener, conn, fds, request)
    for fd in fds:
        os.close(fd)
    _, status = os.waitpid(pid, 0)
    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    conn.send(json.dumps({"returncode": code}).encode())


def serve(path: str) -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen()
    print("ready", flush=True)
    while True:
        ready, _, _ = select.select([listener, sys.stdin], [], [])
        if sys.stdin in ready and not sys.stdin.readline():
            return
        if listener in ready:
            conn, _ = listener.accept()
            with conn:
                answer(listener, conn)


if __name__ == "__main__":
    serve(sys.argv[1])

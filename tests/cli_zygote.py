"""A process that has imported jax and the `hlobundle` command once, and runs each command a shell
asks for in a fork of itself (helpers.CliZygote): the docs' sh blocks call `hlobundle` dozens of
times, each a process of its own, without paying for the start of Python and jax each time.

    python tests/cli_zygote.py SOCKET

A request comes on the unix socket SOCKET (SOCK_SEQPACKET, one message) from the `hlobundle`
command on the shell's PATH (helpers.CliZygote writes it), or from helpers.CliZygote.start: the
JSON {"argv": [...], "cwd": PATH, "env": {...}} with the caller's descriptors 0, 1 and 2, and
optionally "start": true (answer the fork's pid at once), "source": CODE (run `python -c CODE
ARGS` instead) and "warm": [MODULE, ...] (fork it from a zygote of this one that imported those
modules too, a server's: forked at the first such request, and handed the request with the
connection). The fork takes them, that directory and that environment, with sys.stdin,
stdout and stderr made over them as a fresh interpreter makes them, and runs `hlobundle ARGS`
as the installed command does (`hlobundle._cli._main.entry`); the answer when it ends, a JSON
message on the same connection, is its exit status as `subprocess` reports it (negative for a
signal). Commands run side by side (a server started, and commands asked of it). The zygote
exits when its stdin closes (the test process ended), and kills the commands still running.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
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

# What the commands import when they run (each lazily, so that `inspect` and `verify` start
# fast), imported once here for every fork: reading, checking and inspecting a bundle, running
# it on the xla backend, packing one. None of them imports an extra's modules (which a
# request may block, BLOCKED below).
WARM = (
    "hlobundle._remote._load",
    "hlobundle._read._inspect",
    "hlobundle._run._run",
    "hlobundle._run._backends._xla",
    "hlobundle._run._process",
    "hlobundle._run._precision_rewrite",
    "hlobundle._write._pack_files",
    "safetensors.numpy",
)
for _name in WARM:
    importlib.import_module(_name)


def build_validators() -> None:
    """The manifest models' validators, which pydantic builds when one is first used (each
    fork built them again for its first manifest: 20 ms of a 55 ms `inspect`)."""
    from hlobundle._format._bundle_manifest import BundleManifest
    from hlobundle._format._manifest import Manifest

    for model in (Manifest, BundleManifest):
        model.model_rebuild(force=True)


build_validators()

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


class Zygote:
    """A zygote's requests (`inbox`: the listener, or a warm zygote's end of its pair), the
    commands it forked that still run (`running[pidfd]` = (pid, the connection to answer)), and
    the warm zygotes it forked (`warm[names]` = (pid, our end of its pair))."""

    def __init__(self, inbox: socket.socket, listens: bool = False) -> None:
        self.inbox, self.listens = inbox, listens
        self.running: dict[int, tuple[int, socket.socket]] = {}
        self.warm: dict[str, tuple[int, socket.socket]] = {}

    def held(self) -> list[Any]:
        """What a fork of this process must close: it is the zygote's, not the command's."""
        conns = [conn for _, conn in self.running.values()]
        return [self.inbox, *self.running, *conns, *(end for _, end in self.warm.values())]

    def take(self, conn: socket.socket, message: bytes, fds: list[int]) -> None:
        """Fork the command `conn` asks for, here or, where it names modules to import first
        (`"warm"`), in the warm zygote that imported them."""
        request = json.loads(message)
        if not request.get("warm"):
            self.begin(conn, fds, request)
            return
        end = self.warmed(request.pop("warm"), [conn, *fds])
        socket.send_fds(end, [json.dumps(request).encode()], [conn.fileno(), *fds])
        conn.close()
        for fd in fds:
            os.close(fd)

    def begin(self, conn: socket.socket, fds: list[int], request: dict) -> None:
        """Fork the command; answered with its status when its pidfd is readable (it ended),
        and, asked to start it (`"start": true`), with its pid at once."""
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            child([*self.held(), conn], fds, request)
        for fd in fds:
            os.close(fd)
        if request.get("start"):
            conn.send(json.dumps({"pid": pid}).encode())
        self.running[os.pidfd_open(pid)] = (pid, conn)

    def warmed(self, names: list[str], taking: list[Any]) -> socket.socket:
        """Our end of the pair of the zygote that imported `names` too (a server's modules,
        which a command run here without them must not find imported: CLI_ZYGOTE_BLOCKED),
        forked at the first request that names them (`taking`: its connection and descriptors,
        not the warm zygote's to hold)."""
        key = ",".join(names)
        if key not in self.warm:
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                for held in [*self.held(), ours, *taking]:
                    held.close() if isinstance(held, socket.socket) else os.close(held)
                for name in names:
                    with contextlib.suppress(ImportError):  # as the command will say, if it does
                        importlib.import_module(name)
                Zygote(theirs).serve()
                os._exit(0)
            theirs.close()
            self.warm[key] = (pid, ours)
        return self.warm[key][1]

    def ended(self, pidfd: int) -> None:
        pid, conn = self.running.pop(pidfd)
        os.close(pidfd)
        with conn:
            try:
                conn.send(json.dumps({"returncode": status(pid)}).encode())
            except OSError:  # the caller went away
                pass

    def serve(self, control: Any = None) -> None:
        """Until `control` (the zygote's stdin) or, for a warm zygote, its pair closes; then
        the commands still running are killed, and the warm zygotes end theirs."""
        watched = [self.inbox, *([control] if control else [])]
        while True:
            ready, _, _ = select.select([*watched, *self.running], [], [])
            if (control in ready and not control.readline()) or (
                self.inbox in ready and not self.next()
            ):
                break
            for pidfd in set(ready) & set(self.running):
                self.ended(pidfd)
        for pid, _ in self.running.values():
            os.kill(pid, signal.SIGKILL)
            status(pid)
        for pid, end in self.warm.values():
            end.close()
            status(pid)

    def next(self) -> bool:
        """Take the next request; False where a warm zygote's pair closed."""
        if self.listens:
            conn, _ = self.inbox.accept()
            message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
        else:
            message, fds, _, _ = socket.recv_fds(self.inbox, 1 << 20, 4)
            if not message:
                return False
            conn, fds = socket.socket(fileno=fds[0]), fds[1:]
        self.take(conn, message, fds)
        return True


def serve(path: str) -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen()
    print("ready", flush=True)
    Zygote(listener, listens=True).serve(sys.stdin)


if __name__ == "__main__":
    serve(sys.argv[1])

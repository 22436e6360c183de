"""The process that holds the device in `serve --frontends N`: it starts N front doors
(`_frontdoor`, processes that never import jax), answers the model calls they hand it (the
batcher and the model run here, as in a server of one process: `App.call`), replaces a front
door that dies without dropping the model, and on SIGTERM (or SIGINT) tells every front door
to drain, answers what they still ask, and returns once all of them have exited.

A call's tensors lie in a buffer of shared memory the front door leased (`_arena`): its inputs
are read there in place, and its results written after them, in the room the front door made
for the results' shapes; only descriptors travel over the socket pair (`_wire`)."""

from __future__ import annotations

import asyncio
import functools
import mmap
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, cast

import numpy as np

from ._app import App, failure
from ._arena import MAX_BUFFERS, aligned, mapped
from ._frontdoor import Settings, _array
from ._models import Served
from ._protocol import RequestError
from ._wire import Channel, pair

START_S = 120.0  # a front door says it listens within this, or serve gives up
RESPAWN_S = (0.1, 5.0)
GRACE_S = 5.0  # after uvicorn's graceful 30 s, a draining front door is killed  # the wait before a dead front door is replaced: first, and at most
COMMAND = [sys.executable, "-m", "hlobundle._serve._frontdoor"]
FDS_KEPT = 256  # descriptors this process keeps for its own (the runtime, pipes, sockets)
MIN_BUFFERS = 8  # a front door's buffers, however low the limit


@dataclass(eq=False)
class Door:
    """A front door as this process sees it."""

    number: int
    process: subprocess.Popen[bytes]
    channel: Channel
    ready: asyncio.Future[None]
    started: float
    buffers: dict[int, mmap.mmap] = field(default_factory=dict)


class DeviceLoop:
    """The front doors, and the answers to their calls (`run`)."""

    def __init__(self, app: App, settings: Settings, count: int) -> None:
        self.app, self.settings, self.count = app, settings, count
        self.doors: dict[int, Door] = {}
        self.draining = False
        self.deaths = 0  # front doors replaced in a row soon after they started
        self.done: asyncio.Event | None = None
        self.started = False  # every front door listened once

    async def run(self, started: Callable[[list[int]], None]) -> int:
        """Serve until drained: 0, or 1 where a front door did not start (`started` is told
        the front doors' process ids once every one listens)."""
        loop = asyncio.get_running_loop()
        self.done = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.drain)
        for number in range(self.count):
            self.spawn(number)
        try:
            async with asyncio.timeout(START_S):
                await asyncio.gather(*(door.ready for door in self.doors.values()))
        except (TimeoutError, ConnectionError) as e:
            if self.draining:  # told to stop while front doors started: a stop, not a failure
                await self.done.wait()
                return 0
            print(f"serve: a front door did not start ({e or 'timed out'})", file=sys.stderr)
            self.drain()
            await self.done.wait()
            return 1
        self.started = True
        started([door.process.pid for door in self.doors.values()])
        await self.done.wait()
        return 0

    def spawn(self, number: int) -> None:
        mine, theirs = pair()
        each = buffers_each(self.count)
        settings = replace(self.settings, channel_fd=theirs.fileno(), max_buffers=each)
        fds = [theirs.fileno()]
        if settings.listen_fd is not None:
            fds.append(settings.listen_fd)
        process = subprocess.Popen(COMMAND, stdin=subprocess.PIPE, pass_fds=fds)
        theirs.close()
        loop = asyncio.get_running_loop()
        channel = Channel(
            mine, lambda m, fds: self._message(door, m, fds), lambda: self._closed(door)
        )
        door = Door(number, process, channel, loop.create_future(), time.monotonic())
        self.doors[number] = door
        channel.attach(loop)
        if process.stdin is not None:  # a pipe, as asked
            with process.stdin:
                try:
                    process.stdin.write(settings.as_json())
                except BrokenPipeError:
                    pass  # it died at once: its channel says so

    def _message(self, door: Door, message: tuple[Any, ...], fds: list[int]) -> None:
        """A front door's message (`_wire`: a list, its kind first). What is not one of its
        kinds, as it sends them, is dropped with the descriptors it carried: a front door is
        trusted with nothing."""
        kind = message[0]
        if kind == "call":  # on the channel's loop (asyncio.get_running_loop, on Python 3.11,
            # is a getpid system call each time)
            cast("asyncio.AbstractEventLoop", door.channel.loop).create_task(
                self._answer(door, message, fds)
            )
            return
        for fd in fds:  # only a call's first use of a buffer carries one
            os.close(fd)
        if kind == "forget" and len(message) == 2 and type(message[1]) is list:
            for number in message[1]:
                if type(number) is int:
                    door.buffers.pop(number, None)
        elif kind == "ready" and not door.ready.done():
            door.ready.set_result(None)
            self.deaths = 0

    async def _answer(self, door: Door, message: tuple[Any, ...], fds: list[int]) -> None:
        number = message[1] if len(message) > 1 else None  # to answer even a call unread
        try:
            _, number, name, buffer, size, inputs, results_at = message
            if fds:
                door.buffers[buffer] = mapped(fds[0], size)
            view = door.buffers[buffer]
            served: Served = self.app.models[name]
            given = {n: _array(view, dtype, shape, at) for n, dtype, shape, at in inputs}
            if type(results_at) is not int or not 0 <= results_at <= len(view):
                raise ValueError("the results' offset is outside the buffer")
        except (KeyError, ValueError, TypeError, OSError, OverflowError) as e:  # not a call
            body = {"error": f"the front door's call could not be read: {type(e).__name__}"}
            return door.channel.send(("answer", number, 500, body))
        finally:
            for fd in fds:
                os.close(fd)
        try:
            outputs = await self.app.call(served, given)
            placed = _placed(view, results_at, outputs)
        except Exception as e:
            status, body = failure(served, e)
            return door.channel.send(("answer", number, status, body))
        door.channel.send(("answer", number, 200, placed))

    def _closed(self, door: Door) -> None:
        """A front door's channel closed: it exited (or is exiting). Reaped; replaced unless
        the server drains."""
        door.buffers.clear()
        if self.doors.get(door.number) is door:
            del self.doors[door.number]
        if not door.ready.done():
            door.ready.set_exception(ConnectionError(f"front door {door.number} exited"))
            if self.started or self.draining:  # nobody waits for this word any more
                door.ready.exception()
        loop = asyncio.get_running_loop()
        loop.run_in_executor(None, _reaped, door.process)
        if self.draining:
            if not self.doors and self.done is not None:
                self.done.set()
            return
        soon = time.monotonic() - door.started < 1.0
        self.deaths = self.deaths + 1 if soon else 0
        wait = min(RESPAWN_S[0] * 2**self.deaths, RESPAWN_S[1])
        print(f"serve: front door {door.number} exited; replacing it", file=sys.stderr, flush=True)
        loop.call_later(wait, self._respawn, door.number)

    def _respawn(self, number: int) -> None:
        if not self.draining and number not in self.doors:
            self.spawn(number)

    def drain(self) -> None:
        """Tell every front door to stop taking requests and exit once it has answered those
        it has; `run` returns when the last one has."""
        if not self.draining:
            self.draining = True
            asyncio.get_running_loop().create_task(self._until_drained())
        if not self.doors and self.done is not None:
            self.done.set()

    async def _until_drained(self) -> None:
        """SIGTERM to every front door, again each second while any lives (uvicorn takes a
        second one as the first: a front door once missed the only one, seen twice in tests);
        SIGKILL to those still alive after uvicorn's own graceful shutdown and `GRACE_S`."""
        deadline = time.monotonic() + 30 + GRACE_S
        while self.doors:
            late = time.monotonic() > deadline
            for door in list(self.doors.values()):
                if door.process.poll() is None:
                    door.process.send_signal(signal.SIGKILL if late else signal.SIGTERM)
            await asyncio.sleep(1.0)


def _placed(view: mmap.mmap, at: int, outputs: dict[str, np.ndarray]) -> list[tuple[Any, ...]]:
    """Each output written into the buffer from `at` on, as (name, dtype, shape, offset). The
    front door made room for the results' shapes the manifest gives: more is a failure."""
    placed: list[tuple[Any, ...]] = []
    for name, value in outputs.items():
        x = np.ascontiguousarray(value)
        at = aligned(at)
        if at + x.nbytes > len(view):
            raise RequestError(500, f"output {name!r}: {x.nbytes} bytes, more than its shape's")
        dtype = _name(x.dtype)
        _array(view, dtype, x.shape, at)[...] = x
        placed.append((name, dtype, x.shape, at))
        at += x.nbytes
    return placed


@functools.lru_cache(maxsize=64)
def _name(dtype: np.dtype) -> str:
    return str(dtype)  # numpy builds this string anew each time


def buffers_each(count: int) -> int:
    """The buffers each of `count` front doors may have (`_arena.Pool`): this process keeps a
    descriptor open for each it maps, and they share what its soft limit leaves beyond
    `FDS_KEPT`."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_BUFFERS
    return max(MIN_BUFFERS, min(MAX_BUFFERS, (soft - FDS_KEPT) // max(count, 1)))


def _reaped(process: subprocess.Popen[bytes]) -> None:
    """Wait for an exited front door (one whose channel closed while it lives is killed)."""
    try:
        process.wait(timeout=35)  # uvicorn's graceful shutdown takes at most 30 s
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def serve(app: App, settings: Settings, count: int, started: Callable[[list[int]], None]) -> int:
    """Run the device's side until drained, on the event loop uvicorn would choose (uvloop
    where it is installed)."""
    import uvicorn

    factory = uvicorn.Config(app).get_loop_factory()
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(DeviceLoop(app, settings, count).run(started))

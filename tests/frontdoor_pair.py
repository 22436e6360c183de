"""A front door of `serve --frontends` and the device's side it feeds, in this process: the front
door's app (`_frontdoor.FrontApp`, driven by Starlette's test client) and the device's loop
(`_device_loop.DeviceLoop`, on an event loop of its own in a thread), joined by a socket pair as
the processes are. The models cross as a front door gets them (JSON, the manifest parsed again),
so that a test of the one-process server runs through the front door unchanged."""

from __future__ import annotations

import asyncio
import contextlib
import threading

from hlobundle._serve import _app, _device_loop, _frontdoor, _wire
from hlobundle._serve._spec import Described


@contextlib.contextmanager
def _device(device_app):
    """The device's loop for `device_app`, run on an event loop in a thread of this process,
    over a socket pair: the `Door` it answers, and the other end, a front door's, until the
    block ends."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    mine, theirs = _wire.pair()
    device = _device_loop.DeviceLoop(device_app, None, 0)

    def attach():
        channel = _wire.Channel(mine, lambda m, fds: device._message(door, m, fds), _nothing)
        door = _device_loop.Door(0, None, channel, loop.create_future(), 0.0)
        channel.attach(loop)
        return door

    door = asyncio.run_coroutine_threadsafe(_in_loop(attach), loop).result(10)
    try:
        yield door, theirs
    finally:
        loop.call_soon_threadsafe(door.channel.close)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


@contextlib.contextmanager
def front_door(models, **limits):
    """A `FrontApp` for `models` (`_app.app`'s keyword limits), answered by a device's loop,
    until the block ends."""
    device_app = _app.app(models, **limits)
    door_limits = _app.Limits(**{**device_app.limits.__dict__, "max_batch": 1})
    with _device(device_app) as (_, theirs):
        described = {n: Described.from_json(Described(m).as_json()) for n, m in models.items()}
        front = _frontdoor.FrontApp(described, door_limits, theirs)
        try:
            yield front
        finally:
            if front.channel.loop is None:  # never attached: its socket alone
                theirs.close()
            else:
                front.channel.close()


def _nothing():
    pass


async def _in_loop(fn):
    return fn()


@contextlib.contextmanager
def compromised_door(models):
    """The device's loop for `models` (a thread of this process, as `front_door`), and the raw
    end of the socket pair a front door would hold: a test sends there what a compromised or
    broken front door might, and reads what the device answers."""
    with _device(_app.app(models)) as (_, theirs):
        theirs.settimeout(5)
        try:
            yield theirs
        finally:
            theirs.close()

"""A front door of `serve --frontends N`: a process of its own that accepts connections, reads
and parses each request, and checks it against the model's manifest alone (`_spec.Described`:
shapes, dtypes, limits, the symbols' bounds of SPEC.md 8), then hands its tensors to the process
that holds the device through shared memory (`_arena`), a descriptor over their socket pair
(`_wire`), and sends the answer that comes back. It never imports jax: a request refused here
costs the device's process nothing.

Run by that process (`_device_loop`) as `python -m hlobundle._serve._frontdoor`, its settings
(`Settings`) in JSON on its standard input. TCP front doors each listen on a socket of their own
bound to the one port (`SO_REUSEPORT`: the kernel spreads connections over them); over a unix
socket they share the listening descriptor."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import itertools
import math
import signal
import socket
import sys
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import orjson

from . import _app, _server
from ._arena import MAX_BUFFERS, Buffer, Pool, aligned
from ._models import Served
from ._protocol import Relayed, RequestError, _numpy
from ._spec import Described
from ._wire import Channel

GONE = "the process that holds the device is gone; retry"
MAX_DIMS = 64  # numpy's most dimensions


@dataclass(frozen=True)
class Settings:
    """What a front door is told, in JSON on its standard input."""

    models: dict[str, Described]
    limits: _app.Limits
    server_limits: _server.Limits
    channel_fd: int
    host: str
    port: int
    uds: str | None = None
    listen_fd: int | None = None  # over a unix socket: the listening socket, shared
    access_log: bool = False
    grpc_port: int | None = None  # gRPC too, on this port (shared, as the REST one)
    grpc_max_deadline_s: float = 60.0
    max_buffers: int = MAX_BUFFERS  # its share of the device's descriptors (`_arena.Pool`)

    def as_json(self) -> bytes:
        """These settings as JSON (no pickle: `from_json` builds them again)."""
        data = dataclasses.asdict(dataclasses.replace(self, models={}))
        data["models"] = {name: m.as_json() for name, m in self.models.items()}
        return orjson.dumps(data)

    @classmethod
    def from_json(cls, raw: bytes) -> Settings:
        data = orjson.loads(raw)
        models = {name: Described.from_json(m) for name, m in data.pop("models").items()}
        limits = _app.Limits(**data.pop("limits"))
        server_limits = _server.Limits(**data.pop("server_limits"))
        return cls(models, limits, server_limits, **data)


class FrontApp(_app.App):
    """The ASGI application of a front door: every route as `App` answers it, but a model call
    goes to the device's process (`call`), whose refusals and failures come back as it made
    them (`Relayed`)."""

    def __init__(
        self,
        models: dict[str, Described],
        limits: _app.Limits,
        sock: Any,
        max_buffers: int = MAX_BUFFERS,
    ) -> None:
        # Only `call` uses what a Served has beyond its Spec, and it is replaced here.
        super().__init__(cast("dict[str, Served]", models), limits)
        self.pool = Pool(max_buffers)
        self.pending: dict[int, tuple[asyncio.Future[Any], Buffer]] = {}
        self.ids = itertools.count()
        self.channel = Channel(sock, self._answered, self._device_gone)
        self.on_device_gone: Any = None  # the server's stop, once it runs

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self.channel.loop is None:  # the first call (the lifespan's): the server's loop
            self.channel.attach(asyncio.get_running_loop())
        await super().__call__(scope, receive, send)

    async def call(self, served: Served, given: dict[str, np.ndarray]) -> Any:
        if self.channel.closed:
            raise RequestError(503, GONE)
        inputs, end = [], 0
        for name, x in given.items():
            at = aligned(end)
            inputs.append((name, served.inputs[name][0], x.shape, at))
            end = at + x.nbytes
        results_at = aligned(end)
        shapes = served.check_shapes(given)  # checked already (`decoded`): the results' shapes
        room = sum(aligned(math.prod(s) * _itemsize(served.outputs[n])) for n, s in shapes.items())
        buffer = await self.pool.lease(results_at + room)  # may wait for one given back
        if self.channel.closed:  # meanwhile
            self.pool.give_back(buffer)
            raise RequestError(503, GONE)
        for name, dtype, shape, at in inputs:
            np.copyto(_array(buffer.view, dtype, shape, at), given[name])
        forgotten = self.pool.forget()
        if forgotten:
            self.channel.send(("forget", forgotten))
        number = next(self.ids)
        done = (self.channel.loop or asyncio.get_running_loop()).create_future()
        self.pending[number] = (done, buffer)
        message = ("call", number, served.name, buffer.id, buffer.size, inputs, results_at)
        fds = [] if buffer.fd is None else [buffer.fd]
        buffer.fd = None  # the channel's to close once sent
        self.channel.send(message, fds)
        try:
            status, answer = await done
        except asyncio.CancelledError:  # the client left: the buffer goes back with the answer
            if done.done() and not done.cancelled():
                self.pool.give_back(buffer)
            raise
        except RequestError:  # the device's process is gone: nothing will read the buffer
            self.pool.give_back(buffer)
            raise
        try:
            if status != 200:
                raise Relayed(status, answer)
            return {item[0]: _output(buffer, item) for item in answer}
        finally:
            self.pool.give_back(buffer)

    def _answered(self, message: tuple[Any, ...], fds: list[int]) -> None:
        _, number, status, answer = message
        done, buffer = self.pending.pop(number, (None, None))
        if done is None or buffer is None:  # answered already (the device was gone)
            return
        buffer.known = buffer.known or status == 200
        if done.cancelled():
            self.pool.give_back(buffer)
        else:
            done.set_result((status, answer))

    def _device_gone(self) -> None:
        for done, _ in self.pending.values():
            if not done.done():
                done.set_exception(RequestError(503, GONE))
        self.pending.clear()
        if self.on_device_gone is not None:
            self.on_device_gone()


def _itemsize(dtype: str) -> int:
    return int(np.dtype(_numpy(dtype)).itemsize)


def _array(view: Any, dtype: str, shape: tuple[int, ...], at: int) -> np.ndarray:
    """The array of `dtype` and `shape` lying at `at` in the shared buffer `view`. A shape
    sent over the socket pair is checked before its count is made: numpy reads a count of -1
    as the whole buffer (the product of [-1, 4, 4]), and the product of many large sizes is
    an integer that takes seconds to make (50,000 sizes near 2**63, a message's worth: 7.6 s)."""
    if len(shape) > MAX_DIMS or min(shape, default=0) < 0:
        raise ValueError("not a shape")
    kind = _little(dtype)
    return np.frombuffer(view, dtype=kind, count=math.prod(shape), offset=at).reshape(shape)


@functools.lru_cache(maxsize=64)
def _little(dtype: str) -> np.dtype:
    """The little-endian numpy dtype of `dtype` (a dtype's making is a tenth of a call's cost
    in the device's process: made once)."""
    return np.dtype(_numpy(dtype)).newbyteorder("<")


def _output(buffer: Buffer, item: list[Any]) -> np.ndarray:
    """An output the device's process answered, copied out of the buffer (which goes back to
    the pool)."""
    _, dtype, shape, at = item
    return _array(buffer.view, dtype, shape, at).copy()


def listening(settings: Settings) -> socket.socket:
    """This front door's listening socket: the shared unix one, or its own on the port."""
    if settings.listen_fd is not None:  # listening already (`_uds.listening`)
        return socket.socket(fileno=settings.listen_fd)
    return _server.listening(settings.host, settings.port, shared=True, listen=True)


def run(settings: Settings) -> None:
    """Listen, say so to the device's process, and serve until told to stop (SIGTERM: the
    requests in progress are answered first) or until that process is gone."""
    # uvicorn drains on SIGTERM, then raises the signal again for the handler it found: make
    # that one return, so that a drained front door exits 0.
    signal.signal(signal.SIGTERM, lambda *_: None)
    sock = listening(settings)  # from now on connections wait for this process
    channel = socket.socket(fileno=settings.channel_fd)
    app = FrontApp(settings.models, settings.limits, channel, settings.max_buffers)
    limits = settings.server_limits
    loop = None  # uvicorn's own, unless gRPC's server starts on it first
    if settings.grpc_port is None:
        asgi: Any = app
        channel.send(orjson.dumps(["ready"]))  # connections wait in the backlog meanwhile
    else:  # ready once gRPC calls have the loop to run on (`_with_grpc`)
        loop = _server.event_loop()
        asgi = _with_grpc(app, settings, loop)
    uds = settings.uds
    server = _server.server(asgi, settings.host, settings.port, limits, uds, settings.access_log)
    app.on_device_gone = lambda: setattr(server, "should_exit", True)
    _server.run(server, sock, loop)


def _with_grpc(app: FrontApp, settings: Settings, loop: asyncio.AbstractEventLoop) -> Any:
    """The app, with gRPC served beside it on the shared port (as `serve --grpc-port`), on
    `loop`, uvicorn's to be."""
    from . import _grpc

    models = cast("dict[str, Served]", settings.models)
    service = _grpc.Service(models, app, settings.limits.max_body, settings.grpc_max_deadline_s)
    grpc_server = _grpc.GrpcServer(
        service,
        settings.host,
        settings.grpc_port or 0,
        settings.server_limits.max_connections,
        reuse_port=True,
        loop=loop,
    )
    grpc_server.start()
    both = _grpc.with_grpc(app, grpc_server)

    async def asgi(scope: Any, receive: Any, send: Any) -> None:
        if app.channel.loop is None:  # the lifespan's call, which `with_grpc` answers itself
            app.channel.attach(asyncio.get_running_loop())
            service.loop = asyncio.get_running_loop()  # gRPC's calls run here from now on
            app.channel.send(("ready",))
        await both(scope, receive, send)

    return asgi


def main() -> None:
    settings = Settings.from_json(sys.stdin.buffer.read())  # from the process that started it
    sys.stdin.close()
    run(settings)


if __name__ == "__main__":
    main()

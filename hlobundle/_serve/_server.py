"""uvicorn as `hlobundle serve` runs it: a deadline for each request's headers (the app has one
for its body) and a cap on open connections, so that clients that send slowly, or connect and
send nothing, cannot hold the server. uvicorn's own keep-alive timer is re-armed by every byte
that arrives and is not armed at all before a connection's first byte."""

from __future__ import annotations

import asyncio
import errno
import socket
from dataclasses import dataclass
from typing import Any

from .._format._errors import InputError
from .._terminal._display import shown
from ._app import DEFAULT_MAX_BODY, DEFAULT_READ_TIMEOUT_S
from ._models import Served
from ._sweep import Sweep


@dataclass(frozen=True)
class Limits:
    """What one client may take of the server."""

    max_body: int = DEFAULT_MAX_BODY  # bytes of a request body (see also Served.max_request_bytes)
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S  # to send a request's headers; again its body
    max_connections: int = 512  # open at once; a request over it is answered 503


# Connections a listening socket queues before the server takes them (uvicorn's default).
BACKLOG = 2048


def listening(
    host: str, port: int, shared: bool = False, listen: bool | None = None
) -> socket.socket:
    """A socket bound to `host:port`, for `server(...).run(sockets=[...])`: bound before any
    bundle compiles, so that a port in use is a clear error, not uvicorn's exit after start-up.
    `shared`: the port is the front doors' (`serve --frontends`), each of which binds a socket
    of its own to it (`SO_REUSEPORT`); this one, never listening, keeps it meanwhile (a front
    door's own: `listen`). Else it listens at once: a client that reads the start lines may
    connect before uvicorn runs."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn: no TIME_WAIT wait
    if shared:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
        if (not shared) if listen is None else listen:  # connections wait for it from now on
            sock.listen(BACKLOG)
    except OSError as e:
        sock.close()
        where = f"[{host}]:{port}" if family == socket.AF_INET6 else f"{host}:{port}"
        why = "is in use" if e.errno == errno.EADDRINUSE else "cannot be listened on"
        raise InputError(
            f"--port {port}: {where} {why} ({e.strerror}); choose another --port or --host",
            argument="port",
        ) from None
    return sock


def server(
    asgi: Any,
    host: str,
    port: int,
    limits: Limits,
    uds: str | None = None,
    access_log: bool = False,
) -> Any:
    """A `uvicorn.Server` for the ASGI application `asgi` (`_app.app`, given the same limits),
    to run on a socket bound already (`uds`: its path, for the start-up log; uvicorn binds
    nothing, and neither sets the mode of nor removes a socket file it was given). With
    `access_log`, uvicorn's line a request: off by default, since it costs the one event loop
    about 50 µs a request (measured on 2 cores: a health check's 156 µs of server CPU against
    106 without), where the loop is what bounds a batching server on an accelerator; /metrics
    counts every request, and failures are logged either way."""
    import uvicorn

    config = uvicorn.Config(
        asgi,
        host=host,
        port=port,
        uds=uds,
        http=_with_header_deadline(limits.read_timeout_s),
        limit_concurrency=limits.max_connections,
        log_level="info",
        access_log=access_log,
        proxy_headers=access_log,  # X-Forwarded-For: only the access log would show it
        timeout_graceful_shutdown=30,
    )
    return uvicorn.Server(config)


def event_loop() -> asyncio.AbstractEventLoop:
    """A new event loop of the kind uvicorn runs by default (uvloop's where it is installed),
    for `run`: gRPC's server starts on it first (`_grpc.GrpcServer`'s `loop`)."""
    from uvicorn.loops.auto import auto_loop_factory

    return auto_loop_factory()()


def run(running: Any, sock: socket.socket, loop: asyncio.AbstractEventLoop | None = None) -> None:
    """`running.run(sockets=[sock])` (a `server`), on `loop` where given (`event_loop`), which
    is closed at the end."""
    if loop is None:
        return running.run(sockets=[sock])
    with asyncio.Runner(loop_factory=lambda: loop) as runner:
        runner.run(running.serve(sockets=[sock]))


def banner(models: dict[str, Served], host: str, port: int | None, uds: str | None = None) -> str:
    """The start-up line, naming every model served (each function of a 2.0 bundle as
    `NAME.FUNCTION` too); model names come from manifests, so they are shown escaped. Over a
    unix socket: the URL a client asks through it (`curl --unix-socket PATH URL`)."""
    names = sorted({shown(name) for m in models.values() for name in m.names})
    if uds is not None:
        return f"serving {', '.join(names)} at http://localhost/v2 over unix:{shown(uds)}"
    return f"serving {', '.join(names)} at http://{host}:{port}/v2"


def _with_header_deadline(timeout_s: float) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol (httptools, or h11 without it), closing a connection whose next
    request's headers have not all arrived `timeout_s` after it opened or after the last
    response. Both protocols start a request (`cycle`) once its headers are complete. A request
    only notes its deadline; one sweep (`_sweep.Sweep`) closes what is overdue, rather than a
    timer armed and cancelled for every request."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    def expire(conn: Any, waiting_after: Any) -> None:
        if conn.cycle is waiting_after and not conn.transport.is_closing():
            conn.transport.close()  # no new request's headers in time

    deadlines = Sweep(timeout_s, expire)

    class HeaderDeadline(AutoHTTPProtocol):  # type: ignore[misc, valid-type]
        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            deadlines.arm(self.loop, self, self.cycle)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            deadlines.arm(self.loop, self, self.cycle)

        def connection_lost(self, exc: Exception | None) -> None:
            deadlines.drop(self)
            super().connection_lost(exc)

    return HeaderDeadline

"""The HTTP side: an ASGI application with the Open Inference Protocol's REST endpoints
(inference, health and metadata as a bare ASGI dispatch, the rarer others through Starlette), Prometheus metrics at
`/metrics`, and coded JSON errors; uvicorn serves it (`_server`).

A request's body is read within a deadline and a size bound (`Served.max_request_bytes`) before
anything parses it. A large body's decoding, a large result's encoding and a long model call run
in a worker thread, so that one large request never stalls the event loop that answers the
others; small ones run on the loop, where they cost less than the hop to a thread."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .._format._errors import HloBundleError
from .._terminal._display import shown
from .._version import __version__
from ._batching import Batcher
from ._body import BodyDeadlines, read_body
from ._metrics import Metrics
from ._models import Served
from ._protocol import (
    HEADER_LENGTH,
    NO_SHARED_MEMORY,
    RequestError,
    _numpy,
    parse_request,
    producer_layout,
    read_inputs,
)
from ._repeated import Repeated
from ._responses import Decoded, Wanted, _json, _refusal, check_json_values, response, wanted
from ._shm import Regions, Use

if TYPE_CHECKING:
    from starlette.requests import Request

log = logging.getLogger("hlobundle.serve")
DEFAULT_MAX_BODY = 64 << 20
DEFAULT_READ_TIMEOUT_S = 30.0


# Bodies up to this size are decoded on the event loop: parsing them takes less than handing
# them to a thread (well under a millisecond); larger ones go to a thread, so that one large
# request cannot stall the others. Results up to an eighth of it are encoded inline likewise.
INLINE_BYTES = 64 << 10
# A model whose warm call took at most this long at start-up (`Served.call_s`) runs on the event
# loop too: handing it to a thread and back costs about as much as the call (measured: 0.1 to
# 0.3 ms on 2 cores); a longer one runs in a thread, so that it cannot stall the others, and so
# does one whose module holds a loop (`Served.loops`: a request's values may lengthen it).
INLINE_CALL_S = 0.001


def app(
    models: dict[str, Served],
    *,
    max_body: int = DEFAULT_MAX_BODY,
    max_batch: int = 1,
    batch_timeout_s: float = 0.002,
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
    max_shared_memory: int = 0,
) -> App:
    """The ASGI application serving `models` (by name); with `max_batch` > 1, concurrent
    requests for a model whose rows the producer declared independent (a batched module, or
    `independent_rows`) and the user trusts are combined (`_batching`, `Served.batchable`). A request
    body is at most `max_body` bytes and the model's `max_request_bytes`, and must arrive
    within `read_timeout_s` of its headers. With `max_shared_memory` > 0, clients may register
    up to that many bytes of system shared memory (`_shm`; the caller offers it only where
    `_shm.offered` says: on a unix socket, or on a loopback host when asked)."""
    limits = Limits(max_body, read_timeout_s, max_batch, batch_timeout_s, max_shared_memory)
    return App(models, limits)


@dataclass(frozen=True)
class Limits:
    """What `app` is given besides the models (see there)."""

    max_body: int = DEFAULT_MAX_BODY
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S
    max_batch: int = 1
    batch_timeout_s: float = 0.002
    max_shared_memory: int = 0  # bytes of system shared memory registered at once; 0: none
    metrics_dir: str | None = None  # /metrics adds up every process's there (`_metrics`)


class App:
    """The ASGI application `app` makes: its state (the models, the limits, the metrics, a
    batcher for each model requests are combined for) and a method for each route, each of
    which can be called alone. POST .../infer is a bare ASGI handler (`infer`), and the
    answers that never change (health, metadata, readiness) are made once (`prepared`) and
    sent as they are: Starlette's middleware, routing and request and response objects cost
    as much as decoding a request, and a health check's whole cost twice over (measured in
    benchmarks/serve_cpu.py); /metrics, unknown paths and wrong methods go through Starlette."""

    def __init__(self, models: dict[str, Served], limits: Limits) -> None:
        from starlette.applications import Starlette
        from starlette.concurrency import run_in_threadpool

        self.models, self.limits, self.metrics = models, limits, Metrics(limits.metrics_dir)
        self.in_thread = run_in_threadpool
        self.batchers = {
            id(served): Batcher(
                served,
                limits.max_batch,
                limits.batch_timeout_s,
                self.metrics.batched(served.name).observe,
            )
            for served in models.values()
            if limits.max_batch > 1 and served.batchable
        }
        self.regions = Regions(limits.max_shared_memory) if limits.max_shared_memory else None
        self.routed = Starlette(routes=self.routes(), lifespan=self._lifespan)
        self.body_deadlines = BodyDeadlines(limits.read_timeout_s)
        self.repeated = Repeated()  # binary headers checked already

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            method = scope["method"]
            if method == "POST":
                found = _INFER.match(scope["path"])
                if found:
                    return await self.infer(scope, receive, send, found["model"], found["version"])
            elif method in ("GET", "HEAD"):  # uvicorn sends no body for a HEAD
                prepared = self.prepared.get(scope["path"])
                if prepared is not None:
                    await send(prepared[0])
                    return await send(prepared[1])
        await self.routed(scope, receive, send)  # the rest: /metrics, 404s and 405s, lifespan

    @contextlib.asynccontextmanager
    async def _lifespan(self, _: Any) -> AsyncIterator[None]:
        yield
        self.close()  # the requests are drained by now

    def close(self) -> None:
        """The server's stop: every shared-memory region unregistered, its file closed."""
        if self.regions is not None:
            self.regions.close()

    @functools.cached_property
    def prepared(self) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
        """The answers that never change (health, server and model metadata, model
        readiness), by path: their ASGI messages, made once, as Starlette's routes make them."""
        answers: dict[str, dict[str, Any]] = {
            "/v2/health/live": {"live": True},
            "/v2/health/ready": {"ready": True},  # models are compiled before the server starts
            "/v2": self.server_metadata,
        }
        for name, served in self.models.items():
            for path in (f"/v2/models/{name}", f"/v2/models/{name}/versions/{served.version}"):
                answers[path] = served.metadata()
                answers[f"{path}/ready"] = {"name": served.name, "ready": True}
        return {path: _messages(200, content) for path, content in answers.items()}

    def routes(self) -> list[Any]:
        from starlette.routing import Route

        from . import _shm_http

        model = "/v2/models/{model}"
        versioned = "/v2/models/{model}/versions/{version}"
        return [
            Route("/v2/health/live", live),
            Route("/v2/health/ready", ready),
            Route("/v2", server_metadata),
            Route(model, self.model_metadata),
            Route(versioned, self.model_metadata),
            Route(f"{model}/ready", self.model_ready),
            Route(f"{versioned}/ready", self.model_ready),
            Route(f"{model}/infer", _Infer(self), methods=["POST"]),
            Route(f"{versioned}/infer", _Infer(self), methods=["POST"]),
            Route("/metrics", self.metrics_text),
            *_shm_http.routes(self),
        ]

    @property
    def server_metadata(self) -> dict[str, Any]:
        if self.regions is None:
            return SERVER_METADATA
        extensions = [*SERVER_METADATA["extensions"], "system_shared_memory"]
        return {**SERVER_METADATA, "extensions": extensions}

    # ---- what REST and gRPC (`_grpc`) share: the lookup and the model call, batchers included

    def named(self, name: str, version: str | None) -> Served:
        served = self.models.get(name)
        if served is None:
            raise RequestError(404, f"no model {name[:80]!r}; the models are {sorted(self.models)}")
        if version is not None and version != served.version:
            raise RequestError(
                404, f"model {name!r} has version {served.version}, not {version[:40]!r}"
            )
        return served

    async def call(self, served: Served, given: dict[str, Any]) -> Any:
        batcher = self.batchers.get(id(served))
        if batcher is not None:  # in the batcher's thread (a new shape compiles there)
            return await batcher(given)
        new = served.new_shape(given)  # a symbolic function's new shape: it compiles first
        self.metrics.batched(served.name).observe(1)
        short = served.call_s is not None and served.call_s <= INLINE_CALL_S
        if short and not new and not served.loops:  # a loop may run as long as a request asks
            return served(given)
        return await self.in_thread(served, given)

    # ---- the routes

    async def model_metadata(self, request: Request) -> Any:
        try:
            return _json(self._model_of(request).metadata())
        except RequestError as e:
            return _json(_refusal(e), e.status)

    async def model_ready(self, request: Request) -> Any:
        try:
            served = self._model_of(request)
        except RequestError as e:
            return _json(_refusal(e), e.status)
        return _json({"name": served.name, "ready": True})

    async def metrics_text(self, _: Request) -> Any:
        from starlette.responses import Response

        return Response(self.metrics.text(), media_type="text/plain; version=0.0.4")

    async def infer(
        self, scope: Any, receive: Any, send: Any, name: str, version: str | None
    ) -> None:
        """POST .../infer: the request read and decoded, the model called, the answer sent."""
        start = time.perf_counter()
        try:
            served, decoded = await self._decoded(scope, receive, name, version)
        except RequestError as e:
            self.metrics.counted(name if name in self.models else "", e.status).inc()
            return await _send_json(send, e.status, _refusal(e))
        status, answer = await self._answer(served, decoded)
        self.metrics.counted(served.name, status).inc()
        if status != 200:
            return await _send_json(send, status, answer)
        self.metrics.timed(served.name).observe(time.perf_counter() - start)
        content, headers = answer
        await _send(send, 200, content, [(k.encode(), v.encode()) for k, v in headers.items()])

    def _model_of(self, request: Request) -> Served:
        return self.named(request.path_params["model"], request.path_params.get("version"))

    async def _decoded(
        self, scope: Any, receive: Any, name: str, version: str | None
    ) -> tuple[Served, Decoded]:
        """The model asked for, and the request's inputs read within the limits and checked
        against it; a large body is decoded off the event loop, a small one on it (cheaper
        than the hop to a thread)."""
        served = self.named(name, version)
        limit = min(self.limits.max_body, served.max_request_bytes)
        declared = _header(scope, b"content-length")
        timeout_s = self.limits.read_timeout_s
        body = await read_body(receive, declared, limit, timeout_s, self.body_deadlines)
        header_length = _header(scope, HEADER_LENGTH.encode())
        if len(body) > INLINE_BYTES:
            decoding = functools.partial(decoded_body, regions=self.regions)
            return served, await self.in_thread(decoding, served, body, header_length)
        known = self.repeated.decoded(served, body, header_length)
        if known is not None:  # its header passed: only its data is new
            return served, known
        parsed, binary = parse_request(body, header_length)
        # a small body may name a large region's data: copied out in a thread too
        decoding = functools.partial(decoded, regions=self.regions)
        if region_bytes(parsed) > INLINE_BYTES:
            return served, await self.in_thread(decoding, served, parsed, binary)
        found = decoding(served, parsed, binary)
        self.repeated.keep(served, body, header_length, parsed, found)
        return served, found

    async def _answer(self, served: Served, decoded: Decoded) -> tuple[int, Any]:
        """The model called: (200, (the response's body, its headers)), or (a status, the
        JSON of the error)."""
        try:
            outputs = await self.call(served, decoded.given)
        except Exception as e:
            return failure(served, e)
        small = sum(x.nbytes for x in outputs.values()) <= INLINE_BYTES // 8
        try:
            if small:
                return 200, encoded(served, decoded, outputs, self.regions)
            return 200, await self.in_thread(encoded, served, decoded, outputs, self.regions)
        except RequestError as e:  # a response too large for JSON (413)
            return e.status, _refusal(e)


class _Infer:
    """POST .../infer behind Starlette's routing (which answers 405 to a GET): the same bare
    handler, as an ASGI application rather than a request's function."""

    def __init__(self, app: App) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        params = scope["path_params"]
        await self.app.infer(scope, receive, send, params["model"], params.get("version"))


def failure(served: Served, e: Exception) -> tuple[int, dict[str, Any]]:
    """A model call's failure as its answer: (a status, the JSON of the error). Called in the
    `except` clause that caught `e`."""
    if isinstance(e, RequestError):  # no compile slot for a new shape (503), or a failure
        return e.status, _refusal(e)  # relayed from the device's process (`Relayed`)
    if isinstance(e, HloBundleError):  # the inputs, refused by the function (its module's
        # shapes, a backend's limits): the client's to fix
        return 400, {"error": e.message, "code": e.code, **e.context()}
    log.exception("model %s failed", shown(served.name))  # the model failed: keep serving
    return 500, {"error": f"model {served.name!r} failed: {type(e).__name__}: {str(e)[:300]}"}


SERVER_METADATA: dict[str, Any] = {
    "name": "hlobundle",
    "version": __version__,
    "extensions": ["binary_tensor_data"],
}


async def live(_: Request) -> Any:
    return _json({"live": True})


async def ready(_: Request) -> Any:
    return _json({"ready": True})  # models are compiled before the server starts


async def server_metadata(_: Request) -> Any:
    return _json(SERVER_METADATA)


# POST /v2/models/{model}[/versions/{version}]/infer, a segment each, as Starlette matches them.
_INFER = re.compile(r"/v2/models/(?P<model>[^/]+)(?:/versions/(?P<version>[^/]+))?/infer\Z")


def region_bytes(parsed: dict[str, Any]) -> int:
    """The bytes a request's inputs declare in shared-memory regions (unchecked: `decoded`
    refuses what is not a size)."""
    sizes = [
        item["parameters"].get("shared_memory_byte_size")
        for item in parsed["inputs"]
        if type(item) is dict and type(item.get("parameters")) is dict
    ]
    return sum(size for size in sizes if type(size) is int)


def _header(scope: Any, name: bytes) -> str | None:
    """The first value of the request header `name` (lower case, as ASGI servers give them)."""
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None


async def _send(send: Any, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    length = (b"content-length", str(len(body)).encode())
    await send({"type": "http.response.start", "status": status, "headers": [length, *headers]})
    await send({"type": "http.response.body", "body": body})


async def _send_json(send: Any, status: int, content: dict[str, Any]) -> None:
    start, body = _messages(status, content)
    await send(start)
    await send(body)


def _messages(status: int, content: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ASGI messages of a JSON answer, its bytes and headers as Starlette's JSONResponse
    makes them."""
    body = json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()
    headers = [(b"content-length", str(len(body)).encode()), _JSON_TYPE]
    start = {"type": "http.response.start", "status": status, "headers": headers}
    return start, {"type": "http.response.body", "body": body}


_JSON_TYPE = (b"content-type", b"application/json")


def decoded_body(
    served: Served, body: bytes, header_length: str | None, regions: Regions | None = None
) -> Decoded:
    """The request's inputs, checked against the model (`header_length`: the binary
    extension's header; `regions`: the shared-memory regions it may name)."""
    parsed, binary = parse_request(body, header_length)
    return decoded(served, parsed, binary, regions=regions)


def decoded(
    served: Served,
    parsed: dict[str, Any],
    binary: memoryview,
    raw: bool = False,
    regions: Regions | None = None,
) -> Decoded:
    """A parsed request's inputs, checked against the model: REST's JSON and gRPC's messages
    (`_grpc`, which builds the same request object; `raw`: its answer is raw data, never
    JSON) take this one path. What the answer will hold is bounded here, before the model runs,
    and so are the shared-memory regions it is to be written into."""
    producer = producer_layout(parsed)
    given = read_inputs(parsed, binary, served.wire_inputs(producer), regions)
    if producer:  # the same bytes, under the stored (axis-reversed) shape
        given = {
            n: x.reshape(x.shape[::-1]) if n in served.column_major else x for n, x in given.items()
        }
    results = served.check_shapes(given)
    want = wanted(parsed, list(served.outputs))
    if not raw:
        check_json_values(want, results, served.outputs)
    written = _regions_written(want, results, served.outputs, regions)
    return Decoded(parsed.get("id"), given, want, producer, written)


def _regions_written(
    want: Wanted,
    shapes: dict[str, tuple[int, ...]],
    dtypes: dict[str, str],
    regions: Regions | None,
) -> dict[str, Use]:
    """Where each output asked for in a shared-memory region goes, checked (registered, within
    the registration, large enough for the output's shape) before the model runs."""
    if not want.shared:
        return {}
    if regions is None:
        raise RequestError(400, f"output {next(iter(want.shared))!r}: {NO_SHARED_MEMORY}")
    return {
        n: regions.checked(
            f"output {n!r}",
            params,
            math.prod(shapes[n]) * np.dtype(_numpy(dtypes[n])).itemsize,
            exact=False,
        )
        for n, params in want.shared.items()
    }


def encoded(
    served: Served,
    decoded: Decoded,
    outputs: dict[str, np.ndarray],
    regions: Regions | None = None,
) -> tuple[bytes, dict[str, str]]:
    """The response's body and headers, once the outputs asked for in shared-memory regions
    are written there."""
    outputs = oriented(served, decoded, outputs)
    into_regions(decoded, outputs, regions)
    return response(served.name, served.version, decoded.id, outputs, decoded.want, served.outputs)


def oriented(served: Served, decoded: Decoded, outputs: dict[str, Any]) -> dict[str, Any]:
    """The outputs in the orientation the request asked for (the producer's, column-major
    values axis-reversed, or the stored one)."""
    if not decoded.producer:
        return outputs
    return {
        n: x.reshape(x.shape[::-1]) if n in served.column_major else x for n, x in outputs.items()
    }


def into_regions(decoded: Decoded, outputs: dict[str, Any], regions: Regions | None) -> None:
    """The outputs asked for in shared-memory regions written there, where `decoded` checked
    them (REST's and gRPC's answers alike)."""
    for name, use in decoded.written.items():
        value = np.ascontiguousarray(outputs[name])
        if regions is None:  # `decoded` found the region: only a server that has them gets here
            raise RequestError(400, NO_SHARED_MEMORY)
        data = value.astype(value.dtype.newbyteorder("<"), copy=False)
        regions.write(use, data.reshape(-1).view(np.uint8))

"""The gRPC side (`serve --grpc-port`; `--grpc-uds`: a unix socket, made by `_uds`): KServe v2's
predict protocol (`inference.GRPCInferenceService`: ServerLive, ServerReady, ModelReady,
ServerMetadata, ModelMetadata, ModelInfer) beside the REST app, in the same process, over the
same loaded models.

One path for both protocols: a `ModelInferRequest` becomes the request object REST parses from
JSON (typed `contents` as JSON data, `raw_input_contents` as the binary extension's data, each
with its `binary_data_size`), which `_app.decoded` checks against the model; the model is called
by the REST app's own `call` on its event loop (dynamic batching and the trust rules included,
so that REST and gRPC requests batch together). Outputs travel as `raw_output_contents`, as
Triton answers. Triton's system shared-memory extension is served too (`_grpc_shm`: its three
calls; an input or output naming a region in its parameters), over REST's own regions (`_shm`,
`regions_for`), only where gRPC's clients are on this machine. A `RequestError` is the gRPC
status of its HTTP status (`_status`), with the same message, and its SPEC.md code in the
trailing metadata `hlobundle-error-code`.

Hostile clients: a message over `--max-body-bytes` is refused by grpc before it is decoded
(RESOURCE_EXHAUSTED), and one over the model's `max_request_bytes` after; at most
`--max-connections` RPCs run at once (more are refused, RESOURCE_EXHAUSTED); a model call waits
at most the client's deadline and `--grpc-max-deadline`. The server is grpc's asyncio server,
on the event loop uvicorn runs (`serve`: a call awaits the model where REST's do, with no hop
between threads, which cost more CPU than the rest of a small request; benchmarks/RESULTS.md):
a client that sends slowly, or never finishes, holds a coroutine, not a worker."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import numpy as np

from .._format._errors import HloBundleError, InputError
from .._version import __version__
from . import _grpc_shm, _uds
from ._app import DEFAULT_MAX_BODY, INLINE_BYTES, app, decoded, into_regions, oriented, region_bytes
from ._body import over_limit
from ._grpc_messages import SERVICE, messages
from ._models import Served
from ._protocol import BY_DTYPE, RequestError
from ._shm import Regions, offered

DEFAULT_MAX_DEADLINE_S = 60.0
# The typed contents field of each datatype (FP16 and BF16 travel only as raw contents).
CONTENTS = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
}
ERROR_CODE_KEY = "hlobundle-error-code"
log = logging.getLogger("hlobundle.serve")


def _status(http: int) -> Any:
    import grpc

    return {
        400: grpc.StatusCode.INVALID_ARGUMENT,
        404: grpc.StatusCode.NOT_FOUND,
        408: grpc.StatusCode.DEADLINE_EXCEEDED,
        413: grpc.StatusCode.RESOURCE_EXHAUSTED,
        503: grpc.StatusCode.UNAVAILABLE,
    }.get(http, grpc.StatusCode.INTERNAL)


def _value(param: Any) -> Any:
    """An InferParameter's value (bool, int or str; None when none is set)."""
    which = param.WhichOneof("parameter_choice")
    return None if which is None else getattr(param, which)


def _parameters(params: Any) -> dict[str, Any]:
    return {key: _value(value) for key, value in params.items()}


def request_object(request: Any) -> tuple[dict[str, Any], memoryview]:
    """The request object REST's JSON would hold (`_protocol.parse_request`'s first result),
    and the binary data its inputs' `binary_data_size` claim, from a `ModelInferRequest`."""
    raw = request.raw_input_contents
    # as Triton's: raw contents are those of the inputs that name no region, one each, in order
    sizes = iter([len(data) for data in raw]) if raw else None
    inputs = [_input(tensor, sizes) for tensor in request.inputs]
    if sizes is not None and next(sizes, None) is not None:
        raise RequestError(400, _RAW_COUNT.format("more"))
    parsed: dict[str, Any] = {"inputs": inputs, "id": request.id}
    if request.parameters:
        parsed["parameters"] = _parameters(request.parameters)
    if request.outputs:
        parsed["outputs"] = [
            {"name": o.name, "parameters": _parameters(o.parameters)} for o in request.outputs
        ]
    data = raw[0] if len(raw) == 1 else b"".join(raw)
    return parsed, memoryview(data)


_RAW_COUNT = (
    "raw_input_contents holds {} tensors than the inputs that name no shared-memory region "
    "(one each, in order)"
)


def _input(tensor: Any, raw_sizes: Iterator[int] | None) -> dict[str, Any]:
    """An input as REST's JSON would hold it: its data in a shared-memory region (its
    parameters say which), in raw contents (the next of `raw_sizes`, None where the request
    has none) or typed contents."""
    item: dict[str, Any] = {
        "name": tensor.name,
        "datatype": tensor.datatype,
        "shape": list(tensor.shape),
    }
    params = _parameters(tensor.parameters)
    if "shared_memory_region" in params:  # its data is there (`read_inputs` refuses more)
        if tensor.HasField("contents"):
            item["data"] = _typed(tensor)
    elif raw_sizes is not None:
        if tensor.HasField("contents"):
            raise RequestError(
                400,
                f"input {tensor.name[:80]!r}: contents given with raw_input_contents "
                "(the protocol allows one or the other)",
            )
        size = next(raw_sizes, None)
        if size is None:
            raise RequestError(400, _RAW_COUNT.format("fewer"))
        params["binary_data_size"] = size
    else:
        item["data"] = _typed(tensor)
    if params:
        item["parameters"] = params
    return item


def _typed(tensor: Any) -> list[Any]:
    """An input's typed contents, from the field of its datatype; values in any other field
    are refused (an unknown datatype is refused by the model's check, which names it)."""
    field = CONTENTS.get(tensor.datatype)
    others = [f.name for f, values in tensor.contents.ListFields() if f.name != field and values]
    if others:
        where = f"{field} (or raw_input_contents)" if field else "raw_input_contents"
        raise RequestError(
            400,
            f"input {tensor.name[:80]!r}: {tensor.datatype[:20]} values travel in {where}, "
            f"not {others[0]}",
        )
    return list(getattr(tensor.contents, field)) if field else []


def _on_loop(loop: asyncio.AbstractEventLoop, make: Any) -> Future[Any]:
    """`make()`'s coroutine run on `loop` (another thread's), as `run_coroutine_threadsafe`
    runs one, but made there and only if the future was not cancelled first: a call whose
    deadline passed before the loop came to it (or whose loop stopped) leaves no coroutine
    that is never awaited."""
    future: Future[Any] = Future()

    def start() -> None:
        if not future.set_running_or_notify_cancel():
            return
        task = asyncio.ensure_future(make())

        def done(t: asyncio.Task[Any]) -> None:
            if t.cancelled():
                future.cancel()
            elif t.exception() is not None:
                future.set_exception(t.exception())
            else:
                future.set_result(t.result())

        task.add_done_callback(done)

    loop.call_soon_threadsafe(start)
    return future


def _message(kind: Any, raw: bytes) -> Any:
    """The message of `kind` that `raw` holds, or a 400 that says why not (grpc's own parse
    answered UNKNOWN, and logged a traceback, for each one that did not parse)."""
    from google.protobuf.message import DecodeError

    try:
        return kind.FromString(raw)
    except DecodeError as e:
        raise RequestError(
            400, f"the message is not a {kind.DESCRIPTOR.name}: {str(e)[:200]}"
        ) from None


def _late(served: Served, budget: float) -> RequestError:
    return RequestError(
        408,
        f"model {served.name!r} did not answer within the deadline of {budget:.3g} s "
        "(the client's, at most --grpc-max-deadline)",
    )


class Service:
    """The protocol's RPCs over `models`, calling them through the REST app's `call` on the
    REST server's event loop (`loop`, set when that server starts); with `regions`, the system
    shared-memory extension's calls over them too (`_grpc_shm`), and requests may name them."""

    def __init__(
        self,
        models: dict[str, Served],
        asgi: Any,
        max_body: int,
        max_deadline_s: float = DEFAULT_MAX_DEADLINE_S,
        regions: Regions | None = None,
    ) -> None:
        self.models = models
        self.named = asgi.named
        self.call = asgi.call
        self.max_body = max_body
        self.max_deadline_s = max_deadline_s
        self.regions = regions
        self.loop: asyncio.AbstractEventLoop | None = None  # the REST server's
        self.m = messages()

    def handler(self) -> Any:
        import grpc

        rpcs = {
            "ServerLive": (self.server_live, "ServerLiveRequest", "ServerLiveResponse"),
            "ServerReady": (self.server_ready, "ServerReadyRequest", "ServerReadyResponse"),
            "ModelReady": (self.model_ready, "ModelReadyRequest", "ModelReadyResponse"),
            "ServerMetadata": (
                self.server_metadata,
                "ServerMetadataRequest",
                "ServerMetadataResponse",
            ),
            "ModelMetadata": (self.model_metadata, "ModelMetadataRequest", "ModelMetadataResponse"),
            "ModelInfer": (self.model_infer, None, "ModelInferResponse"),  # reads its bytes
        }
        shared = _grpc_shm.Calls(self.regions, self.m)
        for name, (method, request, response) in _grpc_shm.RPCS.items():
            rpcs[name] = (getattr(shared, method), request, response)
        return grpc.method_handlers_generic_handler(
            SERVICE,
            {
                name: grpc.unary_unary_rpc_method_handler(
                    self._refusing(fn, request and getattr(self.m, request)),
                    request_deserializer=None,  # the bytes: `_message` reads them, or says why not
                    response_serializer=getattr(self.m, response).SerializeToString,
                )
                for name, (fn, request, response) in rpcs.items()
            },
        )

    def _refusing(self, fn: Any, kind: Any = None) -> Any:
        """`fn`, its RequestError and HloBundleError answered as coded gRPC errors; given the
        message of `kind` its bytes hold (None: given the bytes)."""

        async def rpc(request: Any, context: Any) -> Any:
            try:
                return await fn(request if kind is None else _message(kind, request), context)
            except RequestError as e:
                if e.code is not None:  # a failure (500) has none
                    context.set_trailing_metadata(((ERROR_CODE_KEY, e.code),))
                await context.abort(_status(e.status), e.message)
            except HloBundleError as e:  # the function refused the inputs: the client's to fix
                context.set_trailing_metadata(((ERROR_CODE_KEY, e.code),))
                await context.abort(_status(400), e.message)
            except Exception as e:  # the model failed: report it, keep serving (as REST's 500)
                log.exception("gRPC %s failed", fn.__name__)
                await context.abort(_status(500), f"{type(e).__name__}: {str(e)[:300]}")

        return rpc

    async def server_live(self, request: Any, context: Any) -> Any:
        return self.m.ServerLiveResponse(live=True)

    async def server_ready(self, request: Any, context: Any) -> Any:
        return self.m.ServerReadyResponse(ready=True)  # compiled before the server starts

    async def server_metadata(self, request: Any, context: Any) -> Any:
        extensions = ["binary_tensor_data"]
        if self.regions is not None:
            extensions.append("system_shared_memory")
        return self.m.ServerMetadataResponse(
            name="hlobundle", version=__version__, extensions=extensions
        )

    async def model_ready(self, request: Any, context: Any) -> Any:
        self.named(request.name, request.version or None)
        return self.m.ModelReadyResponse(ready=True)

    async def model_metadata(self, request: Any, context: Any) -> Any:
        meta = self.named(request.name, request.version or None).metadata()
        tensor = self.m.ModelMetadataResponse.TensorMetadata
        return self.m.ModelMetadataResponse(
            name=meta["name"],
            versions=meta["versions"],
            platform=meta["platform"],
            inputs=[tensor(**t) for t in meta["inputs"]],
            outputs=[tensor(**t) for t in meta["outputs"]],
        )

    async def model_infer(self, raw: bytes, context: Any) -> Any:
        size = len(raw)  # not ByteSize(), which walks every value (0.3 s for 8 million INT64s)
        kind = self.m.ModelInferRequest
        request = await self._off_loop(size > INLINE_BYTES, _message, kind, raw)
        served = self.named(request.model_name, request.model_version or None)
        limit = min(self.max_body, served.max_request_bytes)
        if size > limit:
            raise RequestError(413, over_limit(limit))
        # as REST: a large request is read and decoded off the event loop (`serve`: uvicorn's,
        # which REST shares), a region's bytes included; and so is a large result's encoding
        if size > INLINE_BYTES:
            given = await self._off_loop(True, self._decoded, served, request)
        else:
            parsed, binary = request_object(request)
            off = size + region_bytes(parsed) > INLINE_BYTES
            given = await self._off_loop(off, decoded, served, parsed, binary, True, self.regions)
        outputs = await self._called(served, given.given, context)
        large = sum(x.nbytes for x in outputs.values()) > INLINE_BYTES // 8  # as REST's
        return await self._off_loop(large, self._response, served, given, outputs)

    def _decoded(self, served: Served, request: Any) -> Any:
        """`request`'s inputs, checked against the model (`_app.decoded`, as REST's)."""
        parsed, binary = request_object(request)
        return decoded(served, parsed, binary, True, self.regions)

    async def _off_loop(self, off: bool, fn: Any, *args: Any) -> Any:
        """`fn(*args)`, in a worker thread when `off`, else here."""
        if not off:
            return fn(*args)
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    async def _called(self, served: Served, given: dict[str, np.ndarray], context: Any) -> Any:
        """The outputs of the REST app's `call`, on its loop, within the client's deadline and
        the server's most (`max_deadline_s`): awaited here where gRPC runs on that loop (`serve`:
        no hop between threads), else made there (`_on_loop`)."""
        remaining = context.time_remaining()
        budget = min(self.max_deadline_s, math.inf if remaining is None else remaining)
        if self.loop is None:
            raise RequestError(503, "the server is starting; retry")
        loop = asyncio.get_running_loop()
        if loop is not self.loop:
            return await self._called_there(self.loop, served, given, budget)
        start = loop.time()
        try:
            async with asyncio.timeout(budget):
                outputs = await self.call(served, given)
        except TimeoutError:
            raise _late(served, budget) from None
        if loop.time() - start > budget:  # a call inline (nothing awaited) that ran past it
            raise _late(served, budget)
        return outputs

    async def _called_there(
        self,
        there: asyncio.AbstractEventLoop,
        served: Served,
        given: dict[str, np.ndarray],
        budget: float,
    ) -> Any:
        running = _on_loop(there, lambda: self.call(served, given))
        try:
            async with asyncio.timeout(budget):
                return await asyncio.wrap_future(running)
        except TimeoutError:
            running.cancel()
            raise _late(served, budget) from None

    def _response(self, served: Served, request: Any, outputs: dict[str, np.ndarray]) -> Any:
        """The answer, once the outputs asked for in shared-memory regions are written there:
        each such output is described, with empty raw contents (as Triton answers)."""
        outputs = oriented(served, request, outputs)  # as REST's `encoded`
        into_regions(request, outputs, self.regions)
        tensors, raws = [], []
        for name in request.want.names or list(outputs):
            value = np.ascontiguousarray(outputs[name])
            tensors.append(
                self.m.ModelInferResponse.InferOutputTensor(
                    name=name, datatype=BY_DTYPE[served.outputs[name]], shape=value.shape
                )
            )
            if name in request.written:
                raws.append(b"")
            else:
                raws.append(value.astype(value.dtype.newbyteorder("<"), copy=False).tobytes())
        return self.m.ModelInferResponse(
            model_name=served.name,
            model_version=served.version,
            id=request.id or "",
            outputs=tensors,
            raw_output_contents=raws,
        )


# A connection lives at most this long (grpc's max_connection_age, with its jitter), then is
# drained: its RPCs get the server's longest model call and 5 s more, and the client connects
# again (as grpc clients do on GOAWAY). That bounds what a client that never finishes a message
# holds: an RPC slot for at most about 6 minutes (grpc reads a message before any handler runs).
MAX_CONNECTION_AGE_S = 300.0
AGE_GRACE_S = 5.0  # the "5 s more" of a drained connection's grace


class GrpcServer:
    """grpc's asyncio server: `start` binds and serves (raising InputError when the port cannot
    be bound), `stop` (or, on its loop, `drain`) drains it. With `loop` (`serve`: the loop
    uvicorn then runs, `_server.event_loop`) it serves on that loop, the REST app's, so that a
    call awaits the model where it runs; without, on an event loop of its own, in a thread."""

    def __init__(
        self,
        service: Service,
        host: str,
        port: int,
        max_rpcs: int,
        max_age_s: float = MAX_CONNECTION_AGE_S,
        age_grace_s: float = AGE_GRACE_S,
        uds: str | None = None,
        reuse_port: bool = False,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        """`reuse_port`: the port is shared with the other front doors of `serve --frontends`
        (`SO_REUSEPORT`); without, a port in use is an error, not a second listener."""
        self.service, self.host, self.port, self.max_rpcs = service, host, port, max_rpcs
        self.reuse_port = reuse_port
        self.max_age_s, self.age_grace_s = max_age_s, age_grace_s
        self.uds = uds
        self.loop = asyncio.new_event_loop() if loop is None else loop
        self._server: Any = None
        self._placed: _uds.Placed | None = None
        self._thread: threading.Thread | None = None
        if loop is None:
            self._thread = threading.Thread(
                target=self.loop.run_forever, name="hlobundle-grpc", daemon=True
            )

    def start(self) -> int:
        """Bind and start serving; on the given loop, before it runs (it serves once it does)."""
        try:
            if self._thread is None:
                return self.loop.run_until_complete(self._start())
            self._thread.start()
            return asyncio.run_coroutine_threadsafe(self._start(), self.loop).result()
        except BaseException:
            self.stop(0)
            raise

    async def _start(self) -> int:
        import grpc

        options = [
            ("grpc.max_receive_message_length", self.service.max_body),
            ("grpc.max_send_message_length", -1),
            ("grpc.so_reuseport", int(self.reuse_port)),
            ("grpc.max_connection_age_ms", int(self.max_age_s * 1000)),
            (
                "grpc.max_connection_age_grace_ms",
                int((self.service.max_deadline_s + self.age_grace_s) * 1000),
            ),
        ]
        self._server = grpc.aio.server(
            handlers=[self.service.handler()],
            options=options,
            maximum_concurrent_rpcs=self.max_rpcs,
        )
        bound = self._bind_port() if self.uds is None else self._bind_unix(self.uds)
        await self._server.start()
        return bound

    def _bind_port(self) -> int:
        where = f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"
        try:
            bound = self._server.add_insecure_port(where)
        except RuntimeError:
            bound = 0
        if not bound:
            raise InputError(
                f"--grpc-port {self.port}: {where} cannot be listened on (in use?); choose "
                "another --grpc-port or --host",
                argument="grpc_port",
            )
        return int(bound)

    def _bind_unix(self, path: str) -> int:
        """Bind a unix socket at `path`, as `_uds.place` makes one (0: no port)."""

        def bind(where: str) -> None:
            try:
                bound = self._server.add_insecure_port(f"unix:{where}")
            except RuntimeError:
                bound = 0
            if not bound:
                raise InputError(
                    f"--grpc-uds {path!r}: grpc could not bind it", argument="grpc_uds"
                )

        _, self._placed = _uds.place(path, "--grpc-uds", bind)
        return 0

    def stop(self, grace_s: float) -> None:
        """Drain the RPCs in flight (at most `grace_s`), then end the loop and its thread (from
        another thread; or, on the loop given, while it does not run)."""
        if self._thread is None:
            self.loop.run_until_complete(self.drain(grace_s))
            return
        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(self.drain(grace_s), self.loop).result()
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=grace_s + 5)
        if not self._thread.is_alive():
            self.loop.close()

    async def drain(self, grace_s: float) -> None:
        """On the server's loop: drain the RPCs in flight (at most `grace_s`)."""
        if self._server is not None:
            await self._server.stop(grace_s)
        if self._placed is not None:
            self._placed.remove()
            self._placed = None


def with_grpc(asgi: Any, grpc_server: GrpcServer, grace_s: float = 30.0) -> Any:
    """The ASGI app `asgi`, whose lifespan lets `grpc_server`'s calls reach the models once the
    REST server starts (on its loop: `serve` runs both on one, `GrpcServer`'s `loop`) and drains
    it when the REST server shuts down, while that loop still runs."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "lifespan":
            return await asgi(scope, receive, send)
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                grpc_server.service.loop = asyncio.get_running_loop()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if grpc_server.loop is asyncio.get_running_loop():
                    await grpc_server.drain(grace_s)
                else:
                    await asyncio.to_thread(grpc_server.stop, grace_s)
                _unregister(asgi, grpc_server.service)  # both drained: every region's end
                await send({"type": "lifespan.shutdown.complete"})
                return

    return app


def _unregister(asgi: Any, service: Service) -> None:
    """The server's stop: every shared-memory region unregistered, its file closed (REST's
    and gRPC's, one set or, where only gRPC offers them, its own)."""
    asgi.close()
    if service.regions is not None:
        service.regions.close()


def regions_for(
    asgi: Any, host: str, uds: str | None, max_shared_memory: int, over_loopback: bool = False
) -> Regions | None:
    """The regions gRPC's clients may use: REST's own, one set for both protocols (its own
    where REST does not offer them), only on a unix socket (`uds`), or on a loopback `host`
    when asked (`over_loopback`: `_shm.offered`)."""
    if not max_shared_memory or not offered(host, uds, over_loopback):
        return None
    return asgi.regions if asgi.regions is not None else Regions(max_shared_memory)


def check_port(host: str, port: int) -> None:
    """Refuse a --grpc-port in use before anything compiles (grpc binds it again at start)."""
    from ._server import listening

    try:
        listening(host, port).close()
    except InputError as e:
        raise InputError(
            e.message.replace("--port", "--grpc-port", 1), argument="grpc_port"
        ) from None


@contextlib.contextmanager
def serving(
    models: dict[str, Served],
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    max_body: int = DEFAULT_MAX_BODY,
    max_rpcs: int = 512,
    max_deadline_s: float = DEFAULT_MAX_DEADLINE_S,
    max_age_s: float = MAX_CONNECTION_AGE_S,
    age_grace_s: float = AGE_GRACE_S,
    max_batch: int = 1,
    batch_timeout_s: float = 0.002,
    uds: str | None = None,
    max_shared_memory: int = 0,
    shared_memory_over_loopback: bool = False,
) -> Iterator[int]:
    """The gRPC service of `models` in this process, without a REST server: the REST app's
    model calls (and its batchers, `max_batch`) run on gRPC's own event loop, in a thread.
    Yields the port bound (`port` 0: any free one; with `uds`, the path of a unix socket
    instead, and 0); drains and stops on exit, and unregisters every shared-memory region
    (`max_shared_memory` bytes of them at most; 0: the extension off; offered on `uds`, and on
    a loopback `host` only with `shared_memory_over_loopback`). `serve --grpc-port`
    (`--grpc-uds`) runs the same service on uvicorn's loop, beside the REST app."""
    rest = app(models, max_body=max_body, max_batch=max_batch, batch_timeout_s=batch_timeout_s)
    regions = regions_for(rest, host, uds, max_shared_memory, shared_memory_over_loopback)
    service = Service(models, rest, max_body, max_deadline_s, regions)
    server = GrpcServer(service, host, port, max_rpcs, max_age_s, age_grace_s, uds)
    service.loop = server.loop
    bound = server.start()  # stopped already where it fails
    try:
        yield bound
    finally:
        server.stop(5)
        _unregister(rest, service)

"""What every engine's adapter shares: one function of a bundle opened as `serve` opens it (its
stored arguments kept, compiled and warmed up), a request's tensors decoded by `serve`'s own
decoder, and a request's arrays checked against its inputs before they reach it."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._format._errors import InputError
from .._read._trust import Trust
from .._serve._models import load_models
from .._serve._protocol import RequestError, _fits, _numpy, _shown_shape, read_inputs
from .._serve._responses import Wanted, check_json_values
from .._serve._served import DEFAULT_MAX_RESPONSE_BYTES, Served


def open_function(
    bundle: str | os.PathLike[str],
    function: str | None = None,
    *,
    backend: str = "xla",
    batching: bool = False,
    trust_batched: bool = False,
    public_key: str | os.PathLike[str] | None = None,
    certificate_chain: Sequence[str | os.PathLike[str]] | None = None,
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
) -> Served:
    """Function `function` (default: the bundle's default) of `bundle` (a path, `oci://` or
    `https://`), loaded, checked and warmed up. With `batching` (the engine will concatenate
    requests along the first axis), the function must declare its rows independent along
    axis 0 of every input and result (SPEC.md 2.13), and a key must verify the bundle or
    `trust_batched` be given (docs/serving.md, "Trust: signatures and batching"), as `serve`
    joins requests: otherwise an `InputError` says so. A request is bounded as `serve`
    bounds it (`checked_inputs`): a symbolic function's answer is at most
    `max_response_bytes`."""
    keys: dict[str, Any] = {}
    if public_key is not None:
        keys["public_key"] = public_key
    if certificate_chain:
        keys["certificate_chain"] = certificate_chain
    trust = Trust.BATCHED if trust_batched else Trust.NOTHING
    models = load_models(
        [str(bundle)],
        backend=backend,  # type: ignore[arg-type]
        trust=trust,
        max_response_bytes=max_response_bytes,
        **keys,
    )
    served = _pick(models, function)
    if batching:
        if served.concatenated is None:
            raise InputError(
                f"{served.name}: the engine batches by concatenating requests along their first "
                "axis, and this function does not declare its rows independent along axis 0 "
                "of every input and result (independent_rows, SPEC.md 2.13): joined, one "
                "client's answer could depend on another's data. Turn the engine's batching "
                "off, or export the function with independent_rows",
                argument="batching",
            )
        if not served.batchable:
            raise InputError(
                f"{served.name}: combining requests needs your trust (no key verified the "
                "bundle): give public_key, or trust_batched=True (docs/serving.md, 'Batching')",
                argument="trust_batched",
            )
        _check_merged_shape(served)
    return served


def _check_merged_shape(served: Served) -> None:
    """An engine that concatenates requests gives the joined data the first request's shape
    past axis 0 (MLServer does): where another request's differs (a symbol other than the
    rows'), its values would fill others' rows. So every other dimension must be a number."""
    for name, (_, shape) in served.inputs.items():
        for axis, dim in enumerate(shape[1:], start=1):
            if isinstance(dim, str):
                raise InputError(
                    f"{served.name}: input {name!r} has symbol {dim} in dimension {axis}; the "
                    "engine merges requests under the first one's shape past the batch axis, "
                    "so requests of other sizes there would share rows. Turn the engine's "
                    "batching off, or export the function with that dimension fixed",
                    argument="batching",
                )


def _pick(models: dict[str, Served], function: str | None) -> Served:
    served = {id(s): s for s in models.values()}
    first = next(iter(models.values()))
    function = function or first.bundle.default_function or first.bundle.manifest.function
    for s in served.values():
        if s.bundle.manifest.function == function:
            return s
    names = sorted({s.bundle.manifest.function for s in served.values()})
    raise InputError(f"no function {function!r}; the bundle's are {names}", argument="function")


def checked_inputs(
    served: Served, given: dict[str, np.ndarray], *, as_json: bool = False
) -> dict[str, np.ndarray]:
    """The request's arrays, one per input, each of the input's dtype and shape (a symbolic
    dimension any size, bound consistently and within what the request sends by
    `Served.check_shapes`), or a `RequestError`: before the function is called. `as_json`:
    the engine answers in JSON values, at most `MAX_JSON_VALUES` of them, as `serve`'s REST."""
    missing = sorted(set(served.inputs) - set(given))
    unknown = sorted(set(given) - set(served.inputs))
    if missing or unknown:
        raise RequestError(
            400,
            f"the inputs are {sorted(served.inputs)}; missing {missing}, unknown {unknown[:5]}",
        )
    out = {}
    for name, (dtype, shape) in served.inputs.items():
        array = np.asarray(given[name])
        if array.dtype != np.dtype(_numpy(dtype)):
            raise RequestError(400, f"input {name!r}: dtype {array.dtype}, expected {dtype}")
        if not _fits(list(array.shape), shape):
            raise RequestError(
                400, f"input {name!r}: shape {list(array.shape)}, expected {_shown_shape(shape)}"
            )
        out[name] = array
    results = served.check_shapes(out)
    if as_json:
        check_json_values(Wanted(None, set()), results, served.outputs)
    return out


@dataclass(frozen=True)
class WireTensor:
    """One input of a request as an engine received it, before the engine decoded it: its
    JSON values (`data`, flat or nested, as a JSON body or gRPC's typed contents give them) or
    its binary data (`raw`: the binary extension's bytes, or gRPC's raw_input_contents)."""

    name: Any
    datatype: Any
    shape: Any
    data: Any = None
    raw: bytes | None = None


def decoded_inputs(
    served: Served, tensors: Iterable[WireTensor], *, as_json: bool = True
) -> dict[str, np.ndarray]:
    """The request's arrays, one per input, decoded by `hlobundle serve`'s own decoder
    (`_serve/_protocol.read_inputs`: the datatype and shape the function declares, the value
    count, each value of its datatype and within its range, BOOL bytes 0 or 1), never by the
    engine's (which made 1e300 an FP32 inf), then checked as `checked_inputs` checks them; or
    a `RequestError`. So every server and adapter answers one request alike; an engine that
    answers in JSON values (`as_json`: MLServer always, KServe without binary outputs) every
    output at most `MAX_JSON_VALUES` values, as `serve` does."""
    inputs: list[dict[str, Any]] = []
    binary = bytearray()
    for tensor in tensors:
        item = {"name": tensor.name, "datatype": tensor.datatype, "shape": tensor.shape}
        if tensor.raw is None:
            item["data"] = tensor.data
        else:
            item["parameters"] = {"binary_data_size": len(tensor.raw)}
            binary += tensor.raw
        inputs.append(item)
    given = read_inputs({"inputs": inputs}, memoryview(binary), served.wire_inputs(False))
    return checked_inputs(served, given, as_json=as_json)


class BoundedBody:
    """An ASGI middleware that reads every POST's body as `hlobundle serve` reads it (at most
    `limit(path)` bytes, within `read_timeout_s`: 413 or 408 `LIMIT_EXCEEDED` as soon as it
    is known to be over) before the engine's app parses it."""

    def __init__(self, app: Any, limit: Callable[[str], int], read_timeout_s: float) -> None:
        self.app, self.limit, self.read_timeout_s = app, limit, read_timeout_s

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        from starlette.datastructures import Headers
        from starlette.responses import JSONResponse

        from .._serve._body import read_body

        if scope["type"] != "http" or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        declared = Headers(scope=scope).get("content-length")
        try:
            limit = self.limit(_route_path(scope))
            body = await read_body(receive, declared, limit, self.read_timeout_s)
        except RequestError as e:
            refusal = JSONResponse({"error": e.message, "code": e.code}, status_code=e.status)
            return await refusal(scope, receive, send)
        given = False

        async def replayed() -> Any:
            nonlocal given
            if given:
                return await receive()  # the client's disconnect, when it comes
            given = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replayed, send)


def _route_path(scope: Any) -> str:
    """The request's path as the engine's routes match it: without the `root_path` (a server
    mounted below a URL path) that uvicorn puts in front of it."""
    path, root = scope["path"], scope.get("root_path", "")
    if root and path.startswith(root) and path[len(root) : len(root) + 1] in ("", "/"):
        return path[len(root) :]
    return path

"""The Open Inference Protocol's responses: which outputs a request asks for, and in which form
(JSON values or the binary tensor data extension), and the response's body and headers. They
are strict JSON: a non-finite float is the string "NaN", "Infinity" or "-Infinity"."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from ._protocol import BY_DTYPE, HEADER_LENGTH, Relayed, RequestError, _shown, parameters

if TYPE_CHECKING:
    from ._shm import Use

# The most values a response sends as JSON: orjson (3.13) crashes the process (a segfault,
# measured) serializing a list of about 120 million values; this is 7 times fewer (about 200
# MB of JSON). Larger outputs travel as binary data (`binary_data_output`), which has no limit.
MAX_JSON_VALUES = 1 << 24


@dataclass(frozen=True)
class Wanted:
    """What the client asked of the outputs: which, which in binary, and which into a
    shared-memory region (their parameters, checked once the outputs' shapes are known)."""

    names: list[str] | None
    binary: set[str]
    shared: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class Decoded:
    """A request as checked against its model: its inputs (`given`), the outputs it asks for,
    and where each goes (`want`; `written`: those into shared-memory regions)."""

    id: str | None
    given: dict[str, np.ndarray]
    want: Wanted
    producer: bool  # column-major values travel in the producer's orientation
    written: dict[str, Use] = field(default_factory=dict)  # outputs into regions


def _flag(params: dict[str, Any], key: str, where: str) -> bool:
    value = params.get(key, False)
    if type(value) is not bool:
        raise RequestError(
            400, f"{where}parameters.{key} must be true or false, not {_shown(value)}"
        )
    return value


def wanted(request: dict[str, Any], names: list[str]) -> Wanted:
    """The outputs the request asks for (all when it names none), and which in binary."""
    every = _flag(parameters(request, ""), "binary_data_output", "")
    asked = request.get("outputs")
    if asked is None:
        return Wanted(None, set(names) if every else set())
    if not isinstance(asked, list) or not all(
        isinstance(o, dict) and isinstance(o.get("name"), str) for o in asked
    ):
        raise RequestError(400, "'outputs' must be a list of objects with a 'name'")
    unknown = [o["name"] for o in asked if o["name"] not in names]
    if unknown:
        raise RequestError(400, f"unknown output(s) {unknown[:5]}; the outputs are {names}")
    binary, shared = set(), {}
    for i, o in enumerate(asked):
        where = f"output {o['name']!r}: "
        if o["name"] in (p["name"] for p in asked[:i]):
            raise RequestError(400, f"output {o['name']!r} is asked for twice")
        params = parameters(o, where)
        if "shared_memory_region" in params:
            shared[o["name"]] = params
        elif _flag(params, "binary_data", where) or every:
            binary.add(o["name"])
    return Wanted([o["name"] for o in asked], binary, shared)


def check_json_values(
    want: Wanted, shapes: dict[str, tuple[int, ...]], dtypes: dict[str, str]
) -> None:
    """A 413 when the outputs of `shapes` that `want` asks for as JSON hold more than
    `MAX_JSON_VALUES` values: checked from the results' shapes before the model runs, and on
    the results themselves."""
    as_json = [
        n
        for n in want.names or list(shapes)
        if n not in want.binary and n not in want.shared and dtypes[n] != "bfloat16"
    ]
    values = sum(math.prod(shapes[n]) for n in as_json)
    if values > MAX_JSON_VALUES:
        raise RequestError(
            413,
            f"the response would hold {values} values as JSON, over the limit of "
            f"{MAX_JSON_VALUES}; ask for the outputs as binary data (parameters."
            "binary_data_output: true, the binary tensor data extension)",
        )


def response(
    model: str,
    version: str,
    request_id: Any,
    outputs: dict[str, np.ndarray],
    want: Wanted,
    dtypes: dict[str, str],
) -> tuple[bytes, dict[str, str]]:
    """The response body and headers (the binary extension's when any output is binary); an
    output written into a shared-memory region (`want.shared`) is described, without data."""
    items: list[dict[str, Any]] = []
    blobs: list[Any] = []  # bytes-like: each output's bytes, as they lie
    check_json_values(want, {n: np.shape(x) for n, x in outputs.items()}, dtypes)
    for name in want.names or list(outputs):
        value = np.ascontiguousarray(outputs[name])
        item: dict[str, Any] = {
            "name": name,
            "datatype": BY_DTYPE[dtypes[name]],
            "shape": list(value.shape),
        }
        if name in want.shared:
            pass  # its data is in the region (`_app.encoded` wrote it)
        elif name in want.binary or dtypes[name] == "bfloat16":
            data = value.astype(value.dtype.newbyteorder("<"), copy=False)
            item["parameters"] = {"binary_data_size": data.nbytes}
            blobs.append(data.reshape(-1).view(np.uint8))  # joined below: the one copy
        else:
            item["data"] = _json_values(value)
        items.append(item)
    body: dict[str, Any] = {"model_name": model, "model_version": version, "outputs": items}
    if request_id is not None:
        body["id"] = request_id
    text = orjson.dumps(body)  # every float is finite here: `_json_values` wrote the others
    if not blobs:
        return text, {"content-type": "application/json"}
    return b"".join([text, *blobs]), {  # one copy of the outputs' bytes, not three
        "content-type": "application/octet-stream",
        HEADER_LENGTH: str(len(text)),
    }


def _json_values(value: np.ndarray) -> list[Any]:
    """The values of `value`, flat, as strict JSON has them: non-finite floats as strings."""
    values = value.reshape(-1).tolist()
    if value.dtype.kind == "f":
        for i in np.flatnonzero(~np.isfinite(value.reshape(-1))).tolist():
            values[i] = (
                "NaN" if math.isnan(values[i]) else "Infinity" if values[i] > 0 else "-Infinity"
            )
    return values


def _json(content: Any, status: int = 200) -> Any:
    """A JSON answer through Starlette (imported when a route first answers)."""
    from starlette.responses import JSONResponse

    return JSONResponse(content, status_code=status)


def _refusal(e: RequestError) -> dict[str, Any]:
    """A refusal's body, as every route answers one: `{"error", "code"}` (a relayed one's,
    as its process made it)."""
    if isinstance(e, Relayed):
        return e.body
    if e.code is None:  # a failure (500): no code, as `_app.failure` answers one
        return {"error": e.message}
    return {"error": e.message, "code": e.code}

"""The Open Inference Protocol's tensors: OIP datatypes and request parsing (JSON data and the
binary tensor data extension); `_responses` builds the answers. Every request is hostile until checked: each
problem is a `RequestError` with the HTTP status, a stable code and a message naming the field.
Responses are strict JSON: a non-finite float is the string "NaN", "Infinity" or "-Infinity"
(and requests may send those strings for float inputs).

JSON is parsed by orjson (several times faster than the standard library, measured in
benchmarks/run.py), with the standard library's meaning kept exactly: a text orjson refuses, or
one that may hold an integer beyond 64 bits (which orjson turns into a float of at least 2**63),
is parsed by the standard library, which accepts or refuses it as it always did, with the same
message. One walk over the parsed value checks its nesting and its floats' magnitudes, and
keeps each list of floats alone as an array, which its input then takes as it is (`Parsed`)."""

from __future__ import annotations

import functools
import json
import math
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from .._format import _limits, _prechecks
from .._format._errors import LimitError

if TYPE_CHECKING:
    from ._shm import Regions

# OIP datatype -> the manifest's dtype name (and back). Other dtypes cannot cross the wire.
DATATYPES = {
    "BOOL": "bool",
    "UINT8": "uint8",
    "UINT16": "uint16",
    "UINT32": "uint32",
    "UINT64": "uint64",
    "INT8": "int8",
    "INT16": "int16",
    "INT32": "int32",
    "INT64": "int64",
    "FP16": "float16",
    "BF16": "bfloat16",
    "FP32": "float32",
    "FP64": "float64",
}
BY_DTYPE = {v: k for k, v in DATATYPES.items()}
HEADER_LENGTH = "inference-header-content-length"  # the binary extension's header
NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
# The SPEC.md error code a client gets with each status: a request that does not fit the model
# (or names none) is INPUT_INVALID; one over a size or time limit is LIMIT_EXCEEDED.
# A request of a new shape that finds every compile slot taken (503) is LIMIT_EXCEEDED too.
CODES = {
    400: "INPUT_INVALID",
    404: "INPUT_INVALID",
    408: "LIMIT_EXCEEDED",
    413: "LIMIT_EXCEEDED",
    503: "LIMIT_EXCEEDED",
}


class RequestError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message

    @property
    def code(self) -> str | None:
        """SPEC.md's code for the status; None for a failure (500), which has none."""
        return CODES.get(self.status)


class Relayed(RequestError):
    """A refusal or failure answered by another process (the one holding the device, to a
    front door of `serve --frontends`): its status and its JSON body, as they were made."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(status, str(body.get("error", "")))
        self.body = body

    @property
    def code(self) -> str | None:
        """The code its process gave it (a function's own, such as BACKEND_UNSUPPORTED)."""
        code = self.body.get("code")
        return code if isinstance(code, str) else super().code


class Parsed(dict[str, Any]):
    """A request's JSON object, with the float64 array of each of its lists of floats alone
    (`floats`, by the list's id: the object holds every such list while it lives), made as its
    parse was checked, so that an input's data is converted once."""

    def __init__(self, value: dict[str, Any], floats: dict[int, np.ndarray]) -> None:
        super().__init__(value)
        self.floats = floats


def parse_request(body: bytes, header_length: str | None) -> tuple[dict[str, Any], memoryview]:
    """The request's JSON object, and the binary data after it (the binary extension)."""
    if header_length is not None:
        try:
            n = int(header_length)
        except ValueError:
            raise RequestError(
                400, f"{HEADER_LENGTH} is not a number: {header_length[:40]!r}"
            ) from None
        if not 0 <= n <= len(body):
            raise RequestError(400, f"{HEADER_LENGTH} {n} is outside the body's {len(body)} bytes")
        text, rest = body[:n], memoryview(body)[n:]  # the data: a view, not a copy
    else:
        text, rest = body, memoryview(b"")
    # A binary request's JSON header is the same text from one request to the next (its data
    # follows it): parsed once, then shared, read-only. JSON data differs in every request.
    value, floats = _read_header(bytes(text)) if rest and len(text) <= 4096 else _read(text)
    if not isinstance(value, dict) or not isinstance(value.get("inputs"), list):
        raise RequestError(400, "the request must be a JSON object with an 'inputs' list")
    request = Parsed(value, floats)
    if not isinstance(request.get("id", ""), str):
        raise RequestError(400, f"'id' must be a string, not {_shown(request['id'])}")
    parameters(request, "")
    return request, rest


def _parsed(text: bytes) -> Any:
    """The JSON value of `text`, its nesting and integers bounded (`_read`)."""
    return _read(text)[0]


def _read(text: bytes) -> tuple[Any, dict[int, np.ndarray]]:
    """The JSON value of `text`, its nesting and integers bounded, and the arrays of its lists
    of floats alone (`_walked`). orjson, which bounds its own recursion, parses first; a text it
    refuses, or whose value nests too deep or holds a float of at least 2**63 (perhaps an
    integer beyond 64 bits), is parsed by the standard library, after the nesting check that
    keeps its recursion bounded."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        pass  # the standard library's parse says why, or accepts what it always accepted
    else:
        floats = _walked(value)
        if floats is not None:
            return value, floats
    return _parsed_exactly(text), {}  # and over the nesting limit, its check's message


# orjson parses an integer outside [-2**63, 2**64) as a float, whose magnitude is then at least
# 2**63 (-2**63 - 1 rounds to -2**63), where the standard library gives the exact int, or
# refuses one of more than `_limits.MAX_INT_DIGITS` digits; every integer inside it orjson keeps
# exact. A value without such a float is the standard library's value.
_LARGE = float(2**63)
_ARRAY_FROM = 64  # a list of floats this long is checked, and kept, as an array


def _walked(value: Any) -> dict[int, np.ndarray] | None:
    """Whether `value` (orjson's) is what the standard library parses: nested no deeper than
    `_limits.MAX_JSON_DEPTH` (as `_prechecks.check_json` counts brackets) and without a float of
    at least 2**63 in magnitude. None where not; else the float64 array of each long list of
    floats alone, by its id. Level by level, no recursion: one pass over each container's types."""
    if type(value) is float and abs(value) >= _LARGE:  # the text is this one number
        return None
    floats: dict[int, np.ndarray] = {}
    depth, level = 0, [value] if type(value) in (list, dict) else []
    while level:
        depth, below = depth + 1, []
        if depth > _limits.MAX_JSON_DEPTH:
            return None
        for container in level:
            items = container.values() if type(container) is dict else container
            kinds = set(map(type, items))
            if list in kinds or dict in kinds:
                below += [v for v in items if type(v) in (list, dict)]
            if float not in kinds:
                continue
            if kinds == {float} and type(container) is list and len(container) >= _ARRAY_FROM:
                # floats alone, so each converts as np.array would; fromiter skips its
                # discovery of the shape (a quarter of the conversion, measured)
                array = np.fromiter(container, np.float64, len(container))
                array.flags.writeable = False  # a cached header's is shared
                if np.abs(array).max() >= _LARGE:
                    return None
                floats[id(container)] = array
            elif any(type(v) is float and abs(v) >= _LARGE for v in items):
                return None
        level = below
    return floats


def _parsed_exactly(text: bytes) -> Any:
    """`text` parsed by the standard library, its nesting checked first (`json` recurses):
    exact integers, and the decoder's meaning before orjson. UTF-8 only (RFC 8259 8.1): `json`
    would also read UTF-16 and UTF-32, whose bytes the nesting check cannot count (a character
    such as U+0122 holds a quote's byte)."""
    try:
        decoded = text.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RequestError(400, f"the request is not UTF-8 JSON (byte {e.start})") from None
    try:
        _prechecks.check_json(text, path="the request")
        return json.loads(decoded, parse_int=_prechecks.parse_json_int)
    except LimitError as e:
        raise RequestError(400, e.message) from None
    except (ValueError, RecursionError) as e:
        raise RequestError(400, f"the request is not JSON: {str(e)[:200]}") from None


_read_header = functools.lru_cache(maxsize=64)(_read)  # at most 64 x 4 KiB held


def parameters(holder: dict[str, Any], where: str) -> dict[str, Any]:
    """The `parameters` object of the request, an input or an output (`where` says which)."""
    params = holder.get("parameters")
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise RequestError(400, f"{where}'parameters' must be an object, not {_shown(params)}")
    return params


def _shown(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def read_inputs(
    request: dict[str, Any],
    binary: memoryview,
    expected: dict[str, tuple[str, tuple[int | str, ...]]],
    regions: Regions | None = None,
) -> dict[str, np.ndarray]:
    """One array per expected input (name -> (dtype, shape)), checked against the request. A
    symbolic dimension (a string) takes any size of at least 0 here; whether the sizes bind
    the symbols consistently is the model's check (`Served.check_shapes`). An input naming a
    `shared_memory_region` is read from `regions` (the system shared-memory extension)."""
    given: dict[str, np.ndarray] = {}
    offset = 0
    floats = request.floats if isinstance(request, Parsed) else {}
    for item in request["inputs"]:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise RequestError(400, "each input needs a 'name'")
        name = item["name"]
        if name not in expected:
            raise RequestError(
                400, f"unknown input {name[:80]!r}; the inputs are {sorted(expected)}"
            )
        if name in given:
            raise RequestError(400, f"input {name!r} is given twice")
        dtype, shape = expected[name]
        datatype, got_shape = item.get("datatype"), item.get("shape")
        if datatype != BY_DTYPE[dtype]:
            raise RequestError(
                400,
                f"input {name!r}: datatype {str(datatype)[:20]!r}, expected {BY_DTYPE[dtype]!r}",
            )
        if not (isinstance(got_shape, list) and all(type(d) is int for d in got_shape)):
            raise RequestError(400, f"input {name!r}: shape must be a list of integers")
        if not _fits(got_shape, shape):
            raise RequestError(
                400, f"input {name!r}: shape {got_shape}, expected {_shown_shape(shape)}"
            )
        dims: tuple[int, ...] = tuple(got_shape)  # a symbolic dimension's size is the request's
        wire = _wire(dtype)
        if not _addressable(dims, wire.itemsize):
            raise RequestError(400, f"input {name!r}: shape {got_shape} is too large for an array")
        params = parameters(item, f"input {name!r}: ")
        if "shared_memory_region" in params:
            given[name] = _from_region(name, item, params, dtype, dims, regions)
            continue
        size = params.get("binary_data_size")
        if size is not None:
            want = math.prod(dims) * wire.itemsize
            if type(size) is not int or size != want:
                raise RequestError(
                    400,
                    f"input {name!r}: binary_data_size {size!r}, expected {want} bytes for {BY_DTYPE[dtype]}{list(dims)}",
                )
            if offset + size > len(binary):
                raise RequestError(
                    400,
                    f"input {name!r}: the body holds {len(binary) - offset} more bytes, not {size}",
                )
            raw = np.frombuffer(binary, dtype=wire, count=math.prod(dims), offset=offset)
            if dtype == "bool" and (raw.view(np.uint8) > 1).any():
                raise RequestError(400, f"input {name!r}: BOOL bytes must be 0 or 1")
            given[name] = raw.reshape(dims)
            offset += size
        else:
            data = item.get("data")
            given[name] = _from_json(name, data, dtype, dims, floats.get(id(data)))
    if offset != len(binary):
        raise RequestError(
            400, f"the body has {len(binary) - offset} bytes of binary data no input claims"
        )
    missing = sorted(set(expected) - set(given))
    if missing:
        raise RequestError(400, f"missing input(s) {missing}")
    return given


def _from_region(
    name: str,
    item: dict[str, Any],
    params: dict[str, Any],
    dtype: str,
    dims: tuple[int, ...],
    regions: Regions | None,
) -> np.ndarray:
    """The input's array, its bytes copied out of the region it names: once, and checked on
    the copy (a BOOL's bytes), so that what the client writes there later changes nothing."""
    where = f"input {name!r}"
    if regions is None:
        raise RequestError(400, f"{where}: {NO_SHARED_MEMORY}")
    if "binary_data_size" in params or "data" in item:
        raise RequestError(400, f"{where}: data in a shared-memory region and in the request too")
    itemsize = np.dtype(_numpy(dtype)).itemsize
    use = regions.checked(where, params, math.prod(dims) * itemsize, exact=True)
    array = np.frombuffer(regions.read(use), dtype=np.dtype(_numpy(dtype)).newbyteorder("<"))
    if dtype == "bool" and (array.view(np.uint8) > 1).any():
        raise RequestError(400, f"{where}: BOOL bytes must be 0 or 1")
    return array.reshape(dims)


NO_SHARED_MEMORY = (
    "the system shared-memory extension is offered only on a unix socket, which only the "
    "server's user can open (REST: --uds; gRPC: --grpc-uds), or on a loopback --host with "
    "--shared-memory-over-loopback (off by default: every user of the machine can connect "
    "there), with --max-shared-memory above 0, and by a server of one front door (not "
    "--frontends N: a region registered through one front door would be unknown to the others)"
)


def _fits(got: list[int], shape: tuple[int | str, ...]) -> bool:
    return len(got) == len(shape) and all(
        d == n if isinstance(d, int) else n >= 0 for d, n in zip(shape, got, strict=True)
    )


def _addressable(dims: tuple[int, ...], itemsize: int) -> bool:
    """Whether numpy can make an array of `dims`: the product of its nonzero dimensions, in
    bytes, fits an index (with a 0 dimension the array holds nothing, yet numpy refuses it)."""
    return math.prod(d for d in dims if d) * itemsize <= _MAX_INDEX


_MAX_INDEX = int(np.iinfo(np.intp).max)  # np.iinfo costs more than the rest of the check


def _shown_shape(shape: tuple[int | str, ...]) -> str:
    return "[" + ", ".join(map(str, shape)) + "]"


@functools.cache
def _wire(dtype: str) -> np.dtype[Any]:
    """The little-endian NumPy dtype a manifest's dtype travels as (looked up once)."""
    return np.dtype(_numpy(dtype)).newbyteorder("<")


def _numpy(dtype: str) -> Any:
    if dtype == "bfloat16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return dtype


def _from_json(
    name: str, data: Any, dtype: str, shape: tuple[int, ...], known: np.ndarray | None = None
) -> np.ndarray:
    """The input's array from its JSON `data`; `known`: the float64 array of `data` where it is
    a list of floats alone (`Parsed.floats`), then converted from that, without another pass."""
    if dtype == "bfloat16":
        raise RequestError(
            400, f"input {name!r}: BF16 travels only as binary data (binary_data_size)"
        )
    if not isinstance(data, list):
        raise RequestError(400, f"input {name!r}: 'data' must be a list (or use binary_data_size)")
    # By exact type, one pass (a JSON parse and a gRPC message give exact ints, floats, bools
    # and strs; a bool is not a number here), which also tells a flat list from nested ones.
    kinds = {float} if known is not None else set(map(type, data))
    flat = _flattened(name, data) if list in kinds else data
    if flat is not data:
        kinds = set(map(type, flat))
    if len(flat) != math.prod(shape):
        raise RequestError(400, f"input {name!r}: {len(flat)} values for shape {list(shape)}")
    floats = dtype.startswith("float")
    if floats and str in kinds:
        flat = [NON_FINITE.get(v, v) if isinstance(v, str) else v for v in flat]
        kinds = set(map(type, flat))
    if not kinds <= ({bool} if dtype == "bool" else {int, float} if floats else {int}):
        raise RequestError(
            400,
            f"input {name!r}: values must be {BY_DTYPE[dtype]} numbers"
            + (' (or "NaN", "Infinity", "-Infinity")' if floats else ""),
        )
    try:
        with np.errstate(over="raise", invalid="raise"):
            if known is not None:  # a float64's value, converted as np.array converts it
                array = known.astype(np.dtype(dtype), copy=False)
            else:
                array = np.array(flat, dtype=np.dtype(dtype))
    except (OverflowError, FloatingPointError, ValueError):
        raise RequestError(400, f"input {name!r}: a value does not fit {BY_DTYPE[dtype]}") from None
    return array.reshape(shape)


def _flattened(name: str, data: list[Any]) -> list[Any]:
    """The values of `data`, a flat list or lists nested in row-major order (all of a level of
    the same length, as the OIP's nested form of a tensor)."""
    while list in set(map(type, data)):
        if set(map(type, data)) != {list} or len({len(v) for v in data}) != 1:
            raise RequestError(
                400, f"input {name!r}: 'data' is not a list of values or of equal-length lists"
            )
        data = [x for v in data for x in v]
    return data


def producer_layout(request: dict[str, Any]) -> bool:
    """The request's `parameters.layout`: `"stored"` (the default: shapes as the manifest has
    them) or `"producer"`: column-major values in the producer's (Julia's) orientation, their
    shapes axis-reversed and their data in the producer's memory order, which is the same bytes."""
    layout = parameters(request, "").get("layout", "stored")
    if layout not in ("stored", "producer"):
        raise RequestError(
            400, f"parameters.layout must be 'stored' or 'producer', not {_shown(layout)}"
        )
    return layout == "producer"

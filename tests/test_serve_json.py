"""Request JSON parsed by orjson with the standard library's meaning: every text parses to the
same value, or is refused with the same coded 400, as the standard library's parse (the decoder
before orjson); integers stay exact beyond 64 bits, where orjson alone would give floats. A
value parsed is read as its input's datatype only: a boolean is no number, and BF16 travels as
binary data alone."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("orjson", reason="the serve extra is not installed")

from hlobundle._format import _prechecks  # noqa: E402
from hlobundle._format._errors import LimitError  # noqa: E402
from hlobundle._serve import _protocol  # noqa: E402
from hlobundle._serve._protocol import RequestError, parse_request, read_inputs  # noqa: E402


def _old(text: bytes):
    """The decoder before orjson: the standard library, bounded as `_parsed` bounds it, on
    UTF-8 alone (the nesting check counts UTF-8's bytes)."""
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


def _outcome(parse, text: bytes):
    try:
        value = parse(text)
    except RequestError as e:
        return ("refused", e.status, e.message)
    return ("parsed", _typed(value))


def _typed(value):
    """`value` with every number's type kept (1 and 1.0 and True differ; NaN equals NaN)."""
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed(v) for v in value]
    if isinstance(value, float) and math.isnan(value):
        return ("float", "nan")
    return (type(value).__name__, value)


_INTS = st.integers(min_value=-(10**22), max_value=10**22) | st.integers(-(2**64), 2**64)
_SCALARS = st.none() | st.booleans() | _INTS | st.floats() | st.text(max_size=8)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=20,
)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(_VALUES)
def test_every_value_parses_as_the_standard_library_parses_it(value):
    text = json.dumps(value).encode()  # NaN and Infinity as the bare tokens json writes
    assert _outcome(_protocol._parsed, text) == _outcome(_old, text)


@settings(max_examples=400, deadline=None)
@given(
    st.binary(max_size=40)
    | st.text(alphabet='[]{}",:0123456789.eE+-truefalsnNaIfiy \\u\n', max_size=40).map(str.encode)
)
@pytest.mark.slow
def test_every_text_is_accepted_or_refused_as_before(text):
    assert _outcome(_protocol._parsed, text) == _outcome(_old, text)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([99999999999999999999, 1], "input 'x': a value does not fit INT64"),  # 20 digits, > 2**64
        ([-9223372036854775809, 1], "input 'x': a value does not fit INT64"),  # below -2**63
        ([10**21, 1], "an integer of 22 digits; the limit is 20"),
        ([1.5, 1], "input 'x': values must be INT64 numbers"),
    ],
)
def test_integers_beyond_64_bits_are_the_same_coded_400(data, message):
    body = json.dumps({"inputs": [{"name": "x", "shape": [2], "datatype": "INT64", "data": data}]})
    with pytest.raises(RequestError) as e:
        parsed, binary = parse_request(body.encode(), None)
        read_inputs(parsed, binary, {"x": ("int64", (2,))})
    assert (e.value.status, e.value.code) == (400, "INPUT_INVALID") and message in e.value.message


@pytest.mark.parametrize(
    ("encoding", "decoy"),
    [
        ("utf-16-le", "\u0122"),  # 22 01: a quote's byte inside a character
        ("utf-16-be", "\u2201"),
        ("utf-16-le", "\u5c71"),  # 71 5c: a backslash's byte
        ("utf-32-le", "\u0122"),
        ("utf-16", "\u0122"),  # with its byte-order mark
    ],
)
def test_a_request_in_utf_16_or_32_cannot_pass_the_nesting_limit(encoding, decoy):
    """`json` reads UTF-16 and UTF-32 too, whose bytes the nesting check would miscount (it
    counted 202 brackets deep as 2): such a request is read as UTF-8 alone, and refused (as
    bytes that are not UTF-8, or as UTF-8 text that is not JSON: NULs between the characters)."""
    nested = "[" * 200 + "]" * 200
    body = ('{"inputs": [], "x": ["' + decoy + '", ' + nested + "]}").encode(encoding)
    with pytest.raises(RequestError) as e:
        parse_request(body, None)
    assert e.value.status == 400
    assert re.match("the request is not (UTF-8 )?JSON", e.value.message), e.value.message


def test_the_largest_64_bit_integers_stay_exact():
    body = {
        "inputs": [
            {"name": "x", "shape": [2], "datatype": "UINT64", "data": [2**64 - 1, 2**63 + 1]}
        ]
    }
    parsed, binary = parse_request(json.dumps(body).encode(), None)
    got = read_inputs(parsed, binary, {"x": ("uint64", (2,))})["x"]
    assert got.tolist() == [2**64 - 1, 2**63 + 1] and got.dtype == np.uint64


@pytest.mark.parametrize(
    ("datatype", "dtype", "data"),
    [("INT64", "int64", [True, False]), ("FP32", "float32", [True, 0.5])],
    ids=["INT64", "FP32"],
)
def test_json_booleans_are_not_numbers(datatype, dtype, data):
    """Python's True is an int (1): a `true` among an INT64 or FP32 input's values is refused,
    not read as 1."""
    body = json.dumps({"inputs": [{"name": "x", "shape": [2], "datatype": datatype, "data": data}]})
    with pytest.raises(RequestError) as e:
        read_inputs(*parse_request(body.encode(), None), {"x": (dtype, (2,))})
    assert (e.value.status, e.value.code) == (400, "INPUT_INVALID")
    assert e.value.message.startswith(f"input 'x': values must be {datatype} numbers")


def test_bf16_travels_as_binary_data_only():
    """JSON has no bfloat16: its values as JSON data are a coded 400, as binary data they are
    read."""
    import ml_dtypes

    expected = {"x": ("bfloat16", (2,))}
    item = {"name": "x", "shape": [2], "datatype": "BF16"}
    body = json.dumps({"inputs": [{**item, "data": [1, 2]}]}).encode()
    with pytest.raises(RequestError) as e:
        read_inputs(*parse_request(body, None), expected)
    assert (e.value.status, e.value.code) == (400, "INPUT_INVALID")
    assert e.value.message == "input 'x': BF16 travels only as binary data (binary_data_size)"
    header = json.dumps({"inputs": [{**item, "parameters": {"binary_data_size": 4}}]}).encode()
    data = np.array([1.0, 2.5], ml_dtypes.bfloat16).tobytes()
    got = read_inputs(*parse_request(header + data, str(len(header))), expected)["x"]
    assert got.dtype == ml_dtypes.bfloat16 and got.tolist() == [1.0, 2.5]


@pytest.mark.parametrize("floats", [1, 100])  # a short list walked, a long one as an array
@pytest.mark.parametrize("long", [10**21, -(2**63) - 1, 2**64])
def test_an_integer_beyond_64_bits_among_floats_is_parsed_exactly(floats, long):
    """orjson reads it as a float among floats: the walk finds its magnitude and the standard
    library parses the text (exact, or refused over 20 digits), as before orjson."""
    data = [0.5] * floats + [long]
    text = json.dumps({"inputs": [{"name": "x", "data": data}]}).encode()
    assert _outcome(_protocol._parsed, text) == _outcome(_old, text)
    assert (
        _outcome(_protocol._parsed, text)[0] == "refused"
        or type(_protocol._parsed(text)["inputs"][0]["data"][-1]) is int
    )


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_a_long_list_of_floats_is_read_as_numpy_reads_it(dtype):
    """The array the parse kept for a list of floats alone gives the values, and the refusal of
    a value over the dtype's range, that converting the list gives."""
    values = np.random.default_rng(0).normal(scale=300.0, size=100).tolist()
    body = {"inputs": [{"name": "x", "shape": [100], "datatype": "FP", "data": values}]}
    body["inputs"][0]["datatype"] = {"float16": "FP16", "float32": "FP32", "float64": "FP64"}[dtype]
    parsed, binary = parse_request(json.dumps(body).encode(), None)
    assert parsed.floats  # the array the walk kept
    got = read_inputs(parsed, binary, {"x": (dtype, (100,))})["x"]
    np.testing.assert_array_equal(got, np.array(values, dtype=dtype))
    assert got.dtype == np.dtype(dtype)
    values[7] = 1e300 if dtype == "float64" else 1e39
    body["inputs"][0]["data"] = values
    parsed, binary = parse_request(json.dumps(body).encode(), None)
    if dtype == "float64":
        assert read_inputs(parsed, binary, {"x": (dtype, (100,))})["x"][7] == 1e300
        return
    with pytest.raises(RequestError, match="a value does not fit FP"):
        read_inputs(parsed, binary, {"x": (dtype, (100,))})


def test_a_long_list_of_floats_is_no_int_nor_bool_input():
    body = {"inputs": [{"name": "x", "shape": [100], "datatype": "INT32", "data": [0.5] * 100}]}
    parsed, binary = parse_request(json.dumps(body).encode(), None)
    with pytest.raises(RequestError, match="values must be INT32 numbers"):
        read_inputs(parsed, binary, {"x": ("int32", (100,))})
    body["inputs"][0]["datatype"] = "BOOL"
    parsed, binary = parse_request(json.dumps(body).encode(), None)
    with pytest.raises(RequestError, match="values must be BOOL numbers"):
        read_inputs(parsed, binary, {"x": ("bool", (100,))})

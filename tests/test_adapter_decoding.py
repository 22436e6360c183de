"""The engines' adapters decode a request's tensors with `hlobundle serve`'s own decoder
(`integrations._models.decoded_inputs` over `_serve/_protocol.read_inputs`), never with the
engine's: KServe's and MLServer's numpy conversions made an FP32 of 1e300 an inf and answered
200 where `serve` answers 400 ("does not fit FP32").

The adapters import their engines, whose pins clash with this environment's (`.ci/run` runs
tests/test_kserve.py and tests/test_mlserver.py in environments of their own, where the same
attack is sent to the real servers). Here the shared decoder is tested directly, against
`serve`'s answers, and the adapters' source is read to show that they use it.
"""

from __future__ import annotations

import ast

import numpy as np
import pytest
from helpers import ROOT

import hlobundle

pytest.importorskip("starlette", reason="hlobundle[serve] is not installed")

from hlobundle._serve._protocol import RequestError, read_inputs  # noqa: E402
from hlobundle.integrations._models import WireTensor, decoded_inputs, open_function  # noqa: E402

ADAPTERS = ROOT / "hlobundle" / "integrations"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """`where(m, x, 0)`: an FP32 input and a BOOL one, as `serve` and every adapter open it."""
    import jax.numpy as jnp

    x, m = np.ones((2, 3), np.float32), np.ones((2, 3), bool)
    out = tmp_path_factory.mktemp("adapter") / "b.hlobundle"
    return open_function(hlobundle.export(lambda x, m: jnp.where(m, x, 0.0), x, m, out=out))


def serve_says(served, tensors: list[WireTensor]) -> RequestError | dict[str, np.ndarray]:
    """What `hlobundle serve` makes of the same tensors in a request's JSON and binary data."""
    inputs, binary = [], b""
    for t in tensors:
        item = {"name": t.name, "datatype": t.datatype, "shape": t.shape}
        if t.raw is None:
            item["data"] = t.data
        else:
            item["parameters"] = {"binary_data_size": len(t.raw)}
            binary += t.raw
        inputs.append(item)
    try:
        return read_inputs({"inputs": inputs}, memoryview(binary), served.inputs)
    except RequestError as e:
        return e


def adapter_says(served, tensors: list[WireTensor]) -> RequestError | dict[str, np.ndarray]:
    try:
        return decoded_inputs(served, tensors)
    except RequestError as e:
        return e


MASK = WireTensor("m", "BOOL", [2, 3], [[True, False, True], [False, True, False]])


@pytest.mark.parametrize(
    "x",
    [
        WireTensor("x", "FP32", [2, 3], [1e300, 1, 2, 3, 4, 5]),
        WireTensor("x", "FP32", [2, 3], [[-1e39, 1, 2], [3, 4, 5]]),
    ],
    ids=["1e300", "nested_-1e39"],
)
def test_an_fp32_beyond_its_range_is_a_400_as_serve_answers(served, x):
    got = adapter_says(served, [x, MASK])
    assert isinstance(got, RequestError) and got.status == 400 and got.code == "INPUT_INVALID"
    assert got.message == "input 'x': a value does not fit FP32"
    said = serve_says(served, [x, MASK])
    assert isinstance(said, RequestError) and (said.status, said.message) == (400, got.message)


@pytest.mark.parametrize(
    "tensors, message",
    [
        (
            [
                WireTensor("x", "FP32", [2, 3], list(range(6))),
                WireTensor("m", "BOOL", [2, 3], raw=bytes([1, 2, 0, 0, 0, 0])),
            ],
            "input 'm': BOOL bytes must be 0 or 1",
        ),
        (
            [WireTensor("x", "FP32", [2, 3], [0, 1, 2, 3, 4, True]), MASK],
            'input \'x\': values must be FP32 numbers (or "NaN", "Infinity", "-Infinity")',
        ),
        (
            [WireTensor("x", "FP32", [-1, 3], list(range(6))), MASK],
            "input 'x': shape [-1, 3], expected [2, 3]",
        ),
        (
            [WireTensor("x", "FP32", [2, 3], raw=bytes(20)), MASK],
            "input 'x': binary_data_size 20, expected 24 bytes for FP32[2, 3]",
        ),
        (
            [WireTensor("x", "FP64", [2, 3], list(range(6))), MASK],
            "input 'x': datatype 'FP64', expected 'FP32'",
        ),
    ],
    ids=["bool_byte_2", "a_bool_as_fp32", "minus_one", "binary_short", "datatype"],
)
def test_every_other_rule_of_serve_holds_in_the_adapters(served, tensors, message):
    got = adapter_says(served, tensors)
    assert isinstance(got, RequestError) and (got.status, got.message) == (400, message)
    said = serve_says(served, tensors)
    assert isinstance(said, RequestError) and said.message == message


def test_json_binary_and_non_finite_values_decode_as_serve_decodes_them(served):
    x = np.array([[np.nan, np.inf, -np.inf], [1.5, -2.0, 3.25]], np.float32)
    as_json = WireTensor("x", "FP32", [2, 3], ["NaN", "Infinity", "-Infinity", 1.5, -2.0, 3.25])
    as_bytes = WireTensor("x", "FP32", [2, 3], raw=x.astype("<f4").tobytes())
    mask = WireTensor("m", "BOOL", [2, 3], raw=bytes([1, 0, 1, 0, 1, 0]))
    for tensors in ([as_json, MASK], [as_bytes, mask], [as_json, mask]):
        got, said = adapter_says(served, tensors), serve_says(served, tensors)
        assert isinstance(got, dict) and isinstance(said, dict)
        np.testing.assert_array_equal(got["x"], x)
        np.testing.assert_array_equal(got["m"], said["m"])
        assert got["x"].dtype == np.float32 and got["m"].dtype == np.bool_
    np.testing.assert_array_equal(
        served(decoded_inputs(served, [as_json, MASK]))["result"], np.where(MASK.data, x, 0)
    )


def _names(path) -> set[str]:
    """Every name a module's source uses: `f` and `x.f`, called or passed on."""
    tree = ast.parse(path.read_text())
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    return names | {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}


@pytest.mark.parametrize("adapter", ["kserve.py", "mlserver.py"])
def test_the_adapters_decode_with_serve_s_decoder_not_the_engine_s(adapter):
    names = _names(ADAPTERS / adapter)
    assert "decoded_inputs" in names
    # KServe's InferInput.as_numpy and MLServer's codecs (NumpyCodec.decode_input,
    # decode_request) are the engines' own numpy conversions: 1e300 became inf there.
    assert not names & {"as_numpy", "NumpyCodec", "decode_input", "decode_request"}, names


def test_ray_serve_decodes_the_body_as_serve_does():
    # Ray Serve's application reads the body itself, with serve's own `decoded_body`.
    assert "decoded_body" in _names(ADAPTERS / "ray.py")

"""`hlobundle inspect`: a readable summary from the manifest, the safetensors headers and the
module text, without importing jax, jaxlib or numpy, and checked as it reads."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from collections import Counter

import pytest
from helpers import FIXTURES, ROOT, cli, identity_module, rehash, sample, two_functions

import hlobundle
from hlobundle._read._inspect import op_histogram

EXAMPLE = ROOT / "examples" / "lenet5.hlobundle"


@pytest.mark.subprocess
def test_inspect_does_not_import_jax():
    # It checks the modules as load() does (jaxlib's MLIR bindings, like verify), never jax.
    code = (
        "import sys\n"
        "from hlobundle._cli._main import main\n"
        f"code = main(['inspect', {str(EXAMPLE)!r}])\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'jax', 'enzyme_ad'})\n"
        "print('HEAVY', heavy, code)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.splitlines()[-1] == "HEAVY [] 0"
    assert "ops (57 in 12 kinds, in the module text)" in r.stdout


def _walked(text: str) -> dict[str, int]:
    """The op histogram as MLIR itself counts it, walking the parsed module."""
    from jaxlib.mlir import ir

    from hlobundle._parse import _mlir

    names: list[str] = []

    def visit(op):
        names.append(op.name)
        return ir.WalkResult.ADVANCE

    _mlir.parse(text.encode(), path="m").operation.walk(visit)
    return dict(Counter(n for n in names if n != "builtin.module"))


def _texts():
    yield "lenet", (EXAMPLE / "module.mlir").read_text()
    yield (
        "generic form",
        (
            '"func.func"() <{function_type = (tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>), '
            'sym_name = "main"}> ({\n^bb0(%a: tensor<2xf32>):\n'
            '  %0:2 = "stablehlo.optimization_barrier"(%a, %a) : (tensor<2xf32>, tensor<2xf32>) -> '
            "(tensor<2xf32>, tensor<2xf32>)\n"
            '  "func.return"(%0#0, %0#1) : (tensor<2xf32>, tensor<2xf32>) -> ()\n}) : () -> ()\n'
        ),
    )
    for path in sorted(FIXTURES.glob("*.mlir")) if FIXTURES.is_dir() else []:
        yield path.stem, path  # packed first: what a bundle stores


@pytest.mark.parametrize(("name", "text"), list(_texts()), ids=[n for n, _ in _texts()])
def test_op_histogram_is_what_mlir_parses(tmp_path, name, text):
    if not isinstance(text, str):
        try:
            text = (hlobundle.pack(text, None, tmp_path / "b") / "module.mlir").read_text()
        except hlobundle.errors.NotPortableError:
            pytest.skip("a fixture the allow-list refuses: no bundle holds it")
    assert op_histogram(text) == _walked(text), name


def test_inspect_labels_the_two_stablehlo_versions():
    out = cli("inspect", EXAMPLE).stdout
    m = hlobundle.load(EXAMPLE).manifest
    made = m.provenance.stablehlo_version
    assert f"producer's StableHLO {made}" in out
    assert f"artifact target StableHLO {m.module.portable.target_version}" in out


def test_inspect_shows_the_op_histogram_and_what_it_checked():
    r = cli("inspect", EXAMPLE)
    assert r.returncode == 0, r.stderr
    assert "ops (57 in 12 kinds, in the module text)" in r.stdout
    assert "  16     stablehlo.broadcast_in_dim" in r.stdout
    assert "  4      func.call" in r.stdout
    assert r.stdout.rstrip().endswith("`hlobundle verify` checks everything")
    data = json.loads(cli("inspect", EXAMPLE, "--json").stdout)
    assert data["ops"]["stablehlo.convolution"] == 2 and sum(data["ops"].values()) == 57


# --- inspect checks the headers it reads (without safetensors, which imports numpy) -------


def _safetensors(header: object, data: bytes) -> bytes:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + data


F32 = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
UNKNOWN = "tensor 'x' has no dtype, shape and data_offsets it knows"
BROKEN_HEADERS = {  # case: (header, data, why)
    "not JSON": (b"{not json", b"", "its header is not JSON"),
    "not an object": ([1, 2], b"\0" * 8, "its header is not a JSON object"),
    "no dtype": ({"x": {"shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8, UNKNOWN),
    "a bool dimension": ({"x": {**F32, "shape": [True, 2]}}, b"\0" * 8, UNKNOWN),
    "an unknown dtype": ({"x": {**F32, "dtype": "F4"}}, b"\0" * 8, UNKNOWN),
    "three offsets": ({"x": {**F32, "data_offsets": [0, 4, 8]}}, b"\0" * 8, UNKNOWN),
    "a gap": (
        {"x": {**F32, "data_offsets": [4, 12]}},
        b"\0" * 12,
        "tensor 'x' starts at 4, not at 0",
    ),
    "bytes left over": ({"x": F32}, b"\0" * 12, "its tensors hold 8 bytes of its 12 bytes of data"),
    "a short span": (
        {"x": {**F32, "data_offsets": [0, 4]}},
        b"\0" * 4,
        "tensor 'x''s offsets do not span its shape and dtype",
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN_HEADERS))
def test_inspect_refuses_a_broken_safetensors_header(tmp_path, case):
    x = sample((2,), "float32")
    out = hlobundle.pack(identity_module(x), [x], tmp_path / "b")
    header, data, why = BROKEN_HEADERS[case]
    (out / "inputs.safetensors").write_bytes(_safetensors(header, data))
    rehash(out, "inputs.safetensors")
    r = cli("inspect", out)
    assert r.returncode == 1, r.stdout
    assert "error [SAFETENSORS_INVALID]" in r.stderr
    assert f"inputs.safetensors is not a valid safetensors file: {why}" in r.stderr
    with pytest.raises(hlobundle.errors.TensorFileError):  # load() has safetensors check it too
        hlobundle.load(out)


_T = "tensor<3xf32>"
_REFUSED = {
    "a body-less @main": (
        f"func.func private @main(%x: {_T}) -> {_T}\n",
        "MLIR_INVALID",
        "without a body",
    ),
    "a non-string mhlo.sharding": (
        f"func.func @main(%x: {_T} {{mhlo.sharding = 5 : i32}}) -> {_T} {{\n  return %x : {_T}\n}}\n",
        "MLIR_INVALID",
        "mhlo.sharding must be a string",
    ),
    "a non-integer tf.aliasing_output": (
        f'func.func @main(%x: {_T} {{tf.aliasing_output = "a"}}) -> {_T} {{\n  return %x : {_T}\n}}\n',
        "MLIR_INVALID",
        "malformed",
    ),
    "10,000-deep nesting": (
        f"func.func @main(%x: {_T}) -> {_T} attributes {{deep = {'[' * 10_000}{']' * 10_000}}} "
        f"{{\n  return %x : {_T}\n}}\n",
        "LIMIT_EXCEEDED",
        "nested 10001 deep",
    ),
}


@pytest.mark.parametrize("case", sorted(_REFUSED))
def test_inspect_says_when_the_reader_refuses_the_module(tmp_path, case):
    text, code, message = _REFUSED[case]
    x = sample((3,), "float32")
    bundle = hlobundle.pack(identity_module(x), [x], tmp_path / "b", names=["x"])
    (bundle / "module.mlir").write_text(text)
    rehash(bundle, "module.mlir")
    r = cli("inspect", bundle)
    assert r.returncode == 1
    assert "the reader refuses this bundle" in r.stdout, r.stdout
    assert f"[{code}]" in r.stderr and message in r.stderr, r.stderr
    r = cli("inspect", bundle, "--json")
    assert r.returncode == 1 and json.loads(r.stdout)["code"] == code


# --- format 2.0: several functions ------------------------------------------------------


def test_inspect_lists_every_function_of_a_2_0_bundle(tmp_path):
    r = cli("inspect", two_functions(tmp_path))
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "format 2.0, 2 functions, default predict" in out
    assert "function  predict (default)" in out and "function  loss\n" in out
    # symbolic dimensions print as their expressions, sizes as unknown
    assert "x     (b, 8)  float32" in out and "y     (b, 3)  float32" in out
    assert "predict/module.mlir + predict/module.mlirbc" in out
    assert out.count("ops (") == 2
    assert "shared tensors (1)" in out
    assert "weights.safetensors:w  float32  (8, 3)  96 bytes  loss, predict" in out


def test_inspect_json_of_a_2_0_bundle(tmp_path):
    data = json.loads(cli("inspect", two_functions(tmp_path), "--json").stdout)
    assert data["default_function"] == "predict"
    by_name = {f["name"]: f for f in data["functions"]}
    assert by_name["predict"]["default"] and not by_name["loss"]["default"]
    assert [a["shape"] for a in by_name["loss"]["arguments"]] == [[8, 3], ["b", 8], ["b", 3]]
    assert sum(by_name["loss"]["ops"].values()) > 0
    assert data["shared_tensors"] == [
        {"file": "weights.safetensors", "key": "w", "functions": ["loss", "predict"]}
    ]

"""Reading @main's signature through the jaxlib.mlir bindings."""

from __future__ import annotations

import pytest
from helpers import FIXTURES, needs_fixtures

import hlobundle
from hlobundle._format import _main_signature, _mlir


def sig(text):
    return _main_signature.signature(_mlir.parse(text))


def test_dtypes_and_aliasing():
    s = sig(
        "func.func @main(%a: tensor<2x3xbf16>, %b: tensor<complex<f64>> {tf.aliasing_output = 1 : i32})"
        " -> (tensor<i1>, tensor<complex<f64>>) {\n"
        "  %c = stablehlo.constant dense<true> : tensor<i1>\n"
        "  return %c, %b : tensor<i1>, tensor<complex<f64>>\n}"
    )
    assert [(t.shape, t.dtype.name) for t in s.arguments] == [
        ((2, 3), "bfloat16"),
        ((), "complex128"),
    ]
    assert [t.dtype.name for t in s.results] == ["bool", "complex128"]
    assert s.aliases == {1: 1}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "func.func @main(%a: tensor<?xf32>) -> tensor<?xf32> { return %a : tensor<?xf32> }",
            "argument 0 has a dynamic shape",
        ),
        (
            "func.func @main(%a: tensor<2xf6E2M3FN>) -> tensor<2xf6E2M3FN> { return %a : tensor<2xf6E2M3FN> }",
            "element type 'f6E2M3FN' is not in the dtype table",
        ),
        (
            "func.func @other(%a: tensor<2xf32>) -> tensor<2xf32> { return %a : tensor<2xf32> }",
            r"no func.func @main; functions found: \['other'\]",
        ),
        (
            "func.func @main(%a: i32) -> i32 { return %a : i32 }",
            "only ranked tensors are supported",
        ),
        ("module { %x = }", "the MLIR does not parse"),
    ],
)
def test_refused_modules(text, message):
    with pytest.raises(hlobundle.errors.ModuleError, match=message):
        sig(text)


@needs_fixtures
def test_reactant_aliasing_fixture_is_read():
    s = sig((FIXTURES / "03_reactant_docs_add_n_aliasing_i64.mlir").read_text())
    assert s.aliases == {0: 0}
    assert s.arguments[0].dtype.name == "int64"

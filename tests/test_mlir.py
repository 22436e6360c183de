"""Reading @main's signature through the jaxlib.mlir bindings."""

from __future__ import annotations

import pytest
from helpers import FIXTURES, needs_fixtures

import hlobundle
from hlobundle._parse import _main_signature, _mlir


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


# StableHLO targets (SPEC.md 5, "Versions"): each artifact at the oldest default target that
# expresses it. A float8_e4m3 argument needs StableHLO 1.7.0, a result accuracy 1.9.0.
F8 = (
    "func.func @main(%a: tensor<4xf8E4M3>) -> tensor<4xf8E4M3> {\n  return %a : tensor<4xf8E4M3>\n}"
)
ACCURACY = (
    "func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
    "  %0 = stablehlo.exponential %a {result_accuracy = #stablehlo.result_accuracy<ulps = 1, "
    "mode = #stablehlo.result_accuracy_mode<TOLERANCE>>} : tensor<4xf32>\n"
    "  return %0 : tensor<4xf32>\n}"
)
PLAIN = "func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n  return %a : tensor<4xf32>\n}"


def test_the_default_target_is_the_floor_within_what_this_jaxlib_writes(monkeypatch):
    assert _mlir.default_target() == "1.13.7" == _mlir.TARGET_FLOOR  # jaxlib 0.10.2 and 0.12
    monkeypatch.setattr(_mlir, "TARGET_FLOOR", "0.1.0")
    assert _mlir.default_target() == _mlir.minimum_version()
    monkeypatch.setattr(_mlir, "TARGET_FLOOR", "99.0.0")
    assert _mlir.default_target() == _mlir.current_version()


def test_the_targets_tried_are_each_minor_release_up_to_this_jaxlibs(monkeypatch):
    monkeypatch.setattr(_mlir, "current_version", lambda: "1.17.3")
    assert _mlir.default_targets() == ["1.13.7", "1.14.0", "1.15.0", "1.16.0", "1.17.0", "1.17.3"]
    monkeypatch.setattr(_mlir, "current_version", lambda: "2.2.0")
    assert _mlir.default_targets() == ["1.13.7", "2.0.0", "2.1.0", "2.2.0"]
    monkeypatch.setattr(_mlir, "current_version", lambda: "1.13.7")
    assert _mlir.default_targets() == ["1.13.7"]


@pytest.mark.parametrize("text, oldest", [(PLAIN, "1.0.0"), (F8, "1.7.0"), (ACCURACY, "1.9.0")])
def test_an_artifact_gets_the_oldest_target_that_expresses_it(monkeypatch, capfd, text, oldest):
    monkeypatch.setattr(_mlir, "TARGET_FLOOR", "1.0.0")
    module = _mlir.parse(text)
    artifact, target = _mlir.write_portable(module, None)
    assert target == oldest
    assert artifact == _mlir.to_portable(module, oldest)
    older = f"1.{int(oldest.split('.')[1]) - 1}.0"
    if oldest != "1.0.0":  # truly the oldest: the minor release before refuses it
        with pytest.raises(hlobundle.errors.ModuleError):
            _mlir.to_portable(module, older)
    assert capfd.readouterr().err == ""  # the refused targets' diagnostics are MLIR's, caught


def test_a_target_too_old_for_the_module_says_why_on_no_stderr(capfd):
    with pytest.raises(hlobundle.errors.ModuleError) as e:
        _mlir.to_portable(_mlir.parse(F8), "1.6.0")
    assert str(e.value) == (
        "[MLIR_INVALID] cannot write a StableHLO portable artifact for target 1.6.0: failed to "
        "legalize operation 'vhlo.func_v1' (line 1, column 1), which StableHLO of that version "
        "lacks"
    )
    assert capfd.readouterr().err == ""


def test_an_explicit_target_too_old_for_the_module_names_the_oldest_that_expresses_it(
    monkeypatch,
):
    monkeypatch.setattr(_mlir, "TARGET_FLOOR", "1.0.0")
    with pytest.raises(hlobundle.errors.ModuleError, match=r"1\.8\.0: failed to legalize") as e:
        _mlir.write_portable(_mlir.parse(ACCURACY), "1.8.0")
    assert str(e.value).endswith(
        "; the oldest target that expresses the module is 1.9.0, what a writer picks when given "
        "none"
    )


@pytest.mark.parametrize("target", ["0.1.0", "99.0.0"])
def test_an_explicit_target_this_jaxlib_does_not_write_is_refused_before_any_work(target):
    with pytest.raises(hlobundle.errors.VersionError, match=f"--target-version {target} is"):
        _mlir.write_portable(_mlir.parse(PLAIN), target)

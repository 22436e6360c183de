"""XLA's stored executables of a function with symbolic dimensions (`hlobundle compile
--target xla-cpu --sizes b=2,8`, SPEC.md 2.7): one per combination of the symbols' values, each
run only at the argument shapes read from the executable itself, and a call at any other shape
compiles, saying so once."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from helpers import ROOT, cli, compiled_during, edit_manifest

import hlobundle

W = np.linspace(-1.0, 1.0, 64, dtype=np.float32).reshape(8, 8)
TRUST = hlobundle.Trust.EXECUTABLES


def _predict(w, x):
    return jnp.tanh(x @ w)


@pytest.fixture(scope="module")
def symbolic(tmp_path_factory) -> Path:
    """predict(w, x) = tanh(x @ w), x: f32[b, 8], b = 2 stored."""
    out = tmp_path_factory.mktemp("sizes") / "predict.hlobundle"
    hlobundle.export(
        _predict,
        W,
        np.ones((2, 8), np.float32),
        out=out,
        name="predict",
        roles={"w": "parameter"},
        shapes_specs=(None, "b, 8"),
    )
    return out


@pytest.fixture(scope="module")
def compiled(symbolic, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sizes") / "compiled.hlobundle"
    shutil.copytree(symbolic, out)
    r = cli("compile", out, "--target", "xla-cpu", "--sizes", "b=8,2")
    assert r.returncode == 0, r.stderr
    assert "compiled/xla-cpu.b=2.pjrt (XLA, jaxlib" in r.stdout and ", b=8)" in r.stdout
    return out


@pytest.fixture
def copy(compiled, tmp_path) -> Path:
    return Path(shutil.copytree(compiled, tmp_path / "b.hlobundle"))


def _x(b: int) -> np.ndarray:
    return np.linspace(-1.0, 1.0, b * 8, dtype=np.float32).reshape(b, 8)


def _call(bundle: Path, b: int, **kwargs):
    f = hlobundle.load(bundle).function("xla", **kwargs)
    return f, np.asarray(f(x=_x(b)))


def test_compile_stores_one_executable_per_size_with_its_key(compiled):
    b = hlobundle.load(compiled)
    b.verify()
    entries = b.manifest.executables
    assert [(e.file, e.sizes) for e in entries] == [
        ("predict/compiled/xla-cpu.b=2.pjrt", {"b": 2}),
        ("predict/compiled/xla-cpu.b=8.pjrt", {"b": 8}),
    ]
    assert all(e.target == "xla-cpu" and e.topology == "1" for e in entries)
    manifest = json.loads((compiled / "manifest.json").read_text())
    assert manifest["functions"][0]["executables"][0]["sizes"] == {"b": 2}
    shown = cli("inspect", compiled).stdout
    assert "predict/compiled/xla-cpu.b=8.pjrt: XLA, jaxlib" in shown and "xla-cpu at b=8" in shown


@pytest.mark.parametrize("b", [2, 8])
def test_a_call_at_a_stored_size_runs_its_executable_without_compiling(compiled, b):
    (f, got), compiles = compiled_during(lambda: _call(compiled, b, trust=TRUST))
    assert f.source == f"stored executable predict/compiled/xla-cpu.b={b}.pjrt"
    assert compiles == 0
    np.testing.assert_allclose(got, np.tanh(_x(b) @ W), atol=1e-6)


def test_an_untrusted_bundle_parses_none_of_its_executables(compiled, monkeypatch):
    from hlobundle._run._backends import _xla_executables

    parsed = []
    monkeypatch.setattr(
        _xla_executables._compat, "deserialize_executable", lambda *a: parsed.append(a)
    )
    (f, got), compiles = compiled_during(lambda: _call(compiled, 2))
    assert f.source is None and compiles >= 1 and parsed == []
    np.testing.assert_allclose(got, np.tanh(_x(2) @ W), atol=1e-6)


def test_a_call_at_another_size_compiles_saying_so_once(compiled):
    f = hlobundle.load(compiled).function("xla", trust=TRUST)
    with pytest.warns(hlobundle.HloBundleWarning, match="no stored XLA executable at b=3 "):
        got, compiles = compiled_during(lambda: np.asarray(f(x=_x(3))))
    assert f.source is None and compiles >= 1
    np.testing.assert_allclose(got, np.tanh(_x(3) @ W), atol=1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once: not again, for this size nor another
        np.testing.assert_allclose(np.asarray(f(x=_x(5))), np.tanh(_x(5) @ W), atol=1e-6)
        (_, compiles) = compiled_during(lambda: f(x=_x(8)))
    assert f.source == "stored executable predict/compiled/xla-cpu.b=8.pjrt" and compiles == 0


def test_an_executable_for_b_8_is_never_used_for_b_1(symbolic, tmp_path):
    out = Path(shutil.copytree(symbolic, tmp_path / "b8.hlobundle"))
    hlobundle.compile(out, ["xla-cpu"], sizes={"b": [8]})
    with pytest.warns(hlobundle.HloBundleWarning, match="no stored XLA executable at b=1 "):
        (f, got), compiles = compiled_during(lambda: _call(out, 1, trust=TRUST))
    assert f.source is None and compiles >= 1
    np.testing.assert_allclose(got, np.tanh(_x(1) @ W), atol=1e-6)


def test_an_entry_claiming_sizes_its_executable_was_not_compiled_for_is_not_run(copy):
    """The attack: entries relabelled (b=2's names b=8's file and back), every hash intact.
    The shapes an executable runs at are read from it, never believed from the manifest."""

    def swap(m: dict) -> None:
        a, b = m["functions"][0]["executables"]
        a["file"], b["file"] = b["file"], a["file"]

    edit_manifest(copy, swap)
    with pytest.warns(hlobundle.HloBundleWarning) as said:
        (f, got), compiles = compiled_during(lambda: _call(copy, 2, trust=TRUST))
    messages = [str(w.message) for w in said]
    assert any(
        "xla-cpu.b=8.pjrt takes arguments float32[8, 8], float32[8, 8], not the shapes at b=2" in m
        for m in messages
    ), messages
    assert f.source is None and compiles >= 1
    np.testing.assert_allclose(got, np.tanh(_x(2) @ W), atol=1e-6)


def test_run_at_the_stored_size_reports_the_stored_executable(compiled):
    r = cli("run", compiled, "--trust-executables")
    assert r.returncode == 0, r.stderr
    assert "backend xla (stored executable predict/compiled/xla-cpu.b=2.pjrt)" in r.stdout
    assert "(nothing compiled)" in r.stdout


def test_without_sizes_the_stored_arguments_size_is_compiled(symbolic, tmp_path):
    out = Path(shutil.copytree(symbolic, tmp_path / "own.hlobundle"))
    (entry,) = hlobundle.compile(out, ["xla-cpu"])
    assert (entry.file, entry.sizes) == ("predict/compiled/xla-cpu.b=2.pjrt", {"b": 2})


@pytest.mark.parametrize(
    ("sizes", "message"),
    [
        ({"c": [2]}, r"sizes names symbol\(s\) \['c'\] that no function compiled has"),
        ({"b": list(range(1, 66))}, "65 combinations of \\['b'\\], more than 64"),
    ],
)
def test_sizes_a_function_cannot_take_are_refused_before_compiling(copy, sizes, message):
    with pytest.raises(hlobundle.InputError, match=message):
        hlobundle.compile(copy, ["xla-cpu"], sizes=sizes)


def test_sizes_for_a_function_of_fixed_shapes_say_it_has_no_symbols(tmp_path):
    """A new user's `compile --sizes` of LeNet-5: it was "names symbol(s) ['b'] that no
    function compiled has; theirs are []"."""
    out = shutil.copytree(ROOT / "examples" / "lenet5.hlobundle", tmp_path / "l.hlobundle")
    r = cli("compile", out, "--target", "xla-cpu", "--sizes", "b=1,8")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "error [INPUT_INVALID] sizes (--sizes) are for symbolic dimensions" in r.stderr
    assert "['lenet5'] have fixed shapes" in r.stderr and "compile without sizes" in r.stderr
    assert not (out / "compiled").exists()


def test_the_run_hint_after_compile_of_one_function_names_that_function(copy):
    """`compile --function decode`'s hint ran the bundle's default function (the language
    model's prefill), which then compiled."""
    r = cli("compile", copy, "--function", "predict", "--target", "xla-cpu", "--sizes", "b=3")
    assert r.returncode == 0, r.stderr
    hint = r.stdout.splitlines()[-1]
    assert hint.startswith(f"run it without compiling: hlobundle run {copy} --function predict ")


def test_the_command_refuses_malformed_sizes(copy):
    r = cli("compile", copy, "--target", "xla-cpu", "--sizes", "b=0")
    assert r.returncode == 2 and "SYMBOL=N[,N...]" in r.stderr


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda e: e.pop("sizes"), r"gives sizes for exactly its symbols \['b'\], got \[\]"),
        (lambda e: e.update(sizes={"c": 2}), r"exactly its symbols \['b'\], got \['c'\]"),
        (lambda e: e.update(sizes={"b": 0}), "greater than or equal to 1"),
    ],
)
def test_an_entry_s_sizes_must_name_exactly_the_function_s_symbols(copy, edit, message):
    edit_manifest(copy, lambda m: edit(m["functions"][0]["executables"][0]))
    with pytest.raises(hlobundle.errors.ManifestError, match=message):
        hlobundle.load(copy)


def test_two_entries_of_one_target_and_sizes_are_refused(copy):
    edit_manifest(copy, lambda m: m["functions"][0]["executables"][1].update(sizes={"b": 2}))
    with pytest.raises(hlobundle.errors.ManifestError, match="duplicate executables target"):
        hlobundle.load(copy)


@pytest.mark.slow
def test_a_relabelled_executable_of_the_same_byte_size_is_not_run(tmp_path):
    """The same attack where PJRT's own check (each buffer's byte size) cannot tell: the entry
    of x: f32[2, 4] names the executable compiled for f32[4, 2]. Run, it would answer the sum
    of another column, silently, in a result of the declared shape."""
    out = tmp_path / "column.hlobundle"
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    hlobundle.export(lambda x: jnp.sum(x[:, 0]), x, out=out, name="column", shapes_specs=("b, c",))
    hlobundle.compile(out, ["xla-cpu"], sizes={"b": [2, 4], "c": [2, 4]})

    def swap(m: dict) -> None:
        entries = {tuple(e["sizes"].values()): e for e in m["functions"][0]["executables"]}
        a, b = entries[(2, 4)], entries[(4, 2)]
        a["file"], b["file"] = b["file"], a["file"]

    edit_manifest(out, swap)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        f = hlobundle.load(out).function("xla", trust=TRUST)
        got = float(f(x=x))
    assert got == x[:, 0].sum() == 4.0 and f.source is None  # run, it answered 12.0
    assert any(
        "takes arguments float32[4, 2], not the shapes at b=2, c=4" in str(w.message) for w in said
    )


def _iree_installed() -> bool:
    from hlobundle._run._backends import _installed, _iree

    return _iree.BACKEND.available() and _installed.iree_compiler()


@pytest.mark.slow
@pytest.mark.skipif(not _iree_installed(), reason="the iree extra is absent")
def test_iree_stores_one_dynamic_module_and_takes_no_sizes(symbolic, tmp_path):
    out = Path(shutil.copytree(symbolic, tmp_path / "iree.hlobundle"))
    with pytest.raises(hlobundle.InputError, match="an IREE module of a function with symbolic"):
        hlobundle.compile(out, ["llvm-cpu"], sizes={"b": [8]})
    (entry,) = hlobundle.compile(out, ["llvm-cpu"])
    assert entry.sizes is None and entry.file == "predict/compiled/llvm-cpu.vmfb"
    f = hlobundle.load(out).function("iree", trust=TRUST)
    for b in (1, 5):  # one module, every size
        np.testing.assert_allclose(np.asarray(f(x=_x(b))), np.tanh(_x(b) @ W), atol=1e-6)


def test_compiling_a_target_again_replaces_all_its_sizes(copy):
    (entry,) = hlobundle.compile(copy, ["xla-cpu"], sizes={"b": [1]})
    b = hlobundle.load(copy)
    b.verify()  # no file left unlisted
    assert [e.sizes for e in b.manifest.executables] == [{"b": 1}]
    assert sorted(p.name for p in (copy / "predict" / "compiled").iterdir()) == ["xla-cpu.b=1.pjrt"]


def test_sizes_the_module_refuses_are_refused_before_compiling(tmp_path):
    lm = Path(shutil.copytree(ROOT / "examples" / "lm.hlobundle", tmp_path / "lm.hlobundle"))
    with pytest.raises(hlobundle.InputError, match=r"constraint s <= 128 does not hold: 129"):
        hlobundle.compile(lm, ["xla-cpu"], function="prefill", sizes={"s": [129]})
    assert not (lm / "prefill" / "compiled").exists()


def test_a_symbol_no_stored_argument_binds_needs_its_sizes(symbolic, tmp_path):
    bare = Path(shutil.copytree(symbolic, tmp_path / "bare.hlobundle"))

    def without_examples(m: dict) -> None:
        (f,) = m["functions"]
        f["arguments"][1].pop("value")
        for r in f["results"]:
            r.pop("expected", None)
        for name in [
            n for n in m["files"] if not n.endswith(("mlir", "mlirbc", "weights.safetensors"))
        ]:
            m["files"].pop(name)
            (bare / name).unlink()

    edit_manifest(bare, without_examples)
    with pytest.raises(hlobundle.InputError, match=r"give the values of symbol 'b' .*--sizes b="):
        hlobundle.compile(bare, ["xla-cpu"])
    (entry,) = hlobundle.compile(bare, ["xla-cpu"], sizes={"b": [4]})
    assert entry.sizes == {"b": 4}


def test_serve_with_the_stored_sizes_pinned_compiles_nothing_at_start_up(compiled):
    from hlobundle._serve._models import load_models

    (_, compiles) = compiled_during(
        lambda: load_models([compiled], backend="xla", sizes={"b": [2, 8]}, trust=TRUST)
    )
    assert compiles == 0  # b=2 (the stored arguments', the warm-up's) and b=8, both stored


@pytest.mark.parametrize(
    "values",
    [[True], ["2"], [2.0], 2, [None]],
    ids=["bool", "str", "float", "not-a-list", "none"],
)
def test_sizes_of_another_type_are_a_coded_error_before_compiling(copy, values):
    # before: a TypeError from the shapes' arithmetic, or a pydantic ValidationError after
    # compiling at b=True (1)
    with pytest.raises(hlobundle.InputError, match=r"sizes\['b'\] must be"):
        hlobundle.compile(copy, ["xla-cpu"], sizes={"b": values})


def test_the_cap_on_combinations_is_met_before_they_are_made(tmp_path, monkeypatch):
    # 3000 values of each of two symbols: 9 million combinations, made (30 s, a million dicts
    # a second) before the cap of 64 was checked; the cap now counts them first
    import itertools

    from hlobundle._write import _compile

    out = tmp_path / "bc.hlobundle"
    hlobundle.export(
        lambda x, y: jnp.tanh(x).sum() + y.sum(),
        np.ones((2, 8), np.float32),
        np.ones((2, 4), np.float32),
        out=out,
        shapes_specs=("b, 8", "b, c"),
    )

    def product(*values):
        raise AssertionError("the combinations were made before they were counted")

    monkeypatch.setattr(itertools, "product", product)
    many = list(range(1, 3001))
    with pytest.raises(hlobundle.InputError, match=r"9000000 combinations"):
        _compile.compile(out, ["xla-cpu"], sizes={"b": many, "c": many})

"""Declared independent rows (format 2.1, SPEC.md 2.13): the declaration and its rules, the
writers' `independent_rows=` (checked by `export`), `jax.vmap` folded into one call for a
trusted bundle only, and `serve` joining requests along the declared axis."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import edit_manifest
from pydantic import ValidationError

import hlobundle
from hlobundle._format._bundle_manifest import BundleManifest
from hlobundle.errors import InputError

W = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
XS = np.random.default_rng(1).standard_normal((5, 2, 4)).astype(np.float32)  # 5 blocks of 2
BACKENDS = ["xla", "enzyme"]


def _dense(w, x):
    return jnp.tanh(x @ w)


def _export(out, fn=_dense, rows="b", **kwargs):
    return hlobundle.export(
        fn,
        W,
        np.ones((2, 4), np.float32),
        out=out,
        shapes_specs=(None, "b, 4"),
        roles={"w": "parameter"},
        independent_rows=rows,
        **kwargs,
    )


@pytest.fixture(scope="module")
def declared(tmp_path_factory):
    return _export(tmp_path_factory.mktemp("rows") / "dense", with_vjp=True)


def _function(json_path):
    return json.loads((json_path / "manifest.json").read_text())["functions"][0]


def test_export_records_the_declaration_it_checked(declared):
    assert json.loads((declared / "manifest.json").read_text())["format_version"] == "2.1"
    assert _function(declared)["independent_rows"] == {
        "arguments": {"x": 0},
        "results": {"result": 0},
        "checked": True,
    }


def test_export_refuses_rows_that_are_not_independent(tmp_path):
    def centred(w, x):  # a batch statistic: each row depends on the others
        return x @ w - (x @ w).mean(axis=0)

    with pytest.raises(InputError, match="the rows of 'result' are not independent") as e:
        _export(tmp_path / "c", centred)
    assert e.value.argument == "independent_rows"
    assert not (tmp_path / "c").exists()


def test_export_refuses_a_declaration_without_symbolic_shapes(tmp_path):
    with pytest.raises(InputError, match="needs symbolic shapes"):
        hlobundle.export(
            _dense, W, np.ones((2, 4), np.float32), out=tmp_path / "s", independent_rows="b"
        )


@pytest.mark.slow
def test_from_exported_declares_rows_unchecked(tmp_path):
    from jax import export

    (b,) = export.symbolic_shape("b")
    spec = jax.ShapeDtypeStruct((b, 4), np.float32)
    exported = export.export(jax.jit(_dense))(jax.ShapeDtypeStruct(W.shape, W.dtype), spec)
    out = hlobundle.from_exported(exported, tmp_path / "e", independent_rows="b")
    assert _function(out)["independent_rows"] == {
        "arguments": {"arg1": 0},
        "results": {"result": 0},
        "checked": False,
    }


def test_pack_refuses_independent_rows_without_a_jax_export(tmp_path, declared):
    from helpers import cli

    done = cli("pack", declared / "module.mlir", "-o", tmp_path / "x", "--independent-rows", "b")
    assert done.returncode == 2 and "--independent-rows applies to --from-jax-export" in done.stderr


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda r: r["arguments"].update(nope=0), "names \\['nope'\\], which are not arguments"),
        (lambda r: r["results"].clear(), "results"),
        (lambda r: r["arguments"].update(x=1), "axis 1 of shape \\['b', 4\\] is not a symbol"),
        (lambda r: r["arguments"].update(w=0), "axis 0 of shape \\[4, 3\\] is not a symbol"),
    ],
)
def test_a_declaration_must_name_the_function_s_values_at_its_symbol(declared, change, why):
    data = json.loads((declared / "manifest.json").read_text())
    change(data["functions"][0]["independent_rows"])
    with pytest.raises(ValidationError, match=why):
        BundleManifest.model_validate(data)


def test_a_declaration_leaves_no_result_out_and_no_symbol_elsewhere(declared):
    data = json.loads((declared / "manifest.json").read_text())
    f = data["functions"][0]
    f["results"].append({**f["results"][0], "name": "other"})
    with pytest.raises(ValidationError, match="leaves out \\['other'\\]"):
        BundleManifest.model_validate(data)
    f["results"][1]["shape"] = [3, "b"]
    f["independent_rows"]["results"]["other"] = 0
    with pytest.raises(ValidationError, match="axis 0 of shape \\[3, 'b'\\]"):
        BundleManifest.model_validate(data)
    f["independent_rows"]["results"]["other"] = 1
    f["results"][1]["shape"] = ["b", "b"]
    with pytest.raises(ValidationError, match="'other' has b in dimension 0"):
        BundleManifest.model_validate(data)


def test_a_declaration_over_two_symbols_is_refused(declared):
    """Rows are independent along one symbol: a declaration whose axes hold two is refused with
    that reason (not an error of unpacking them)."""
    data = json.loads((declared / "manifest.json").read_text())
    f = data["functions"][0]
    f["arguments"] = [{**a, "shape": ["b", "c"]} if a["name"] == "x" else a for a in f["arguments"]]
    f["results"].append({**f["results"][0], "name": "other", "shape": ["c", 3]})
    f["independent_rows"]["results"]["other"] = 0
    with pytest.raises(ValidationError, match="uses symbols \\['b', 'c'\\]: one symbol only"):
        BundleManifest.model_validate(data)


def test_a_constraint_on_the_symbol_refuses_the_declaration(declared):
    data = json.loads((declared / "manifest.json").read_text())
    data["functions"][0]["constraints"] = ["b >= 2", "1 <= b"]  # joined rows keep these
    BundleManifest.model_validate(data)
    data["functions"][0]["constraints"] = ["b <= 8"]
    with pytest.raises(ValidationError, match="constraint 'b <= 8' bounds b other than"):
        BundleManifest.model_validate(data)


def test_a_declaration_needs_format_2_1(declared, tmp_path):
    import shutil

    copy = tmp_path / "old"
    shutil.copytree(declared, copy)
    edit_manifest(copy, lambda m: m.update(format_version="2.0"))
    with pytest.raises(
        hlobundle.errors.ManifestError, match="independent_rows needs format_version 2.1"
    ):
        hlobundle.load(copy)


def _loops(fn, xs):
    """Whether `jax.vmap` of `fn` over `xs` runs a loop (a scan or while in its program)."""
    text = str(jax.make_jaxpr(jax.vmap(fn))(xs))
    return "scan" in text or "while" in text


@pytest.mark.parametrize("backend", BACKENDS)
def test_vmap_folds_into_one_call_only_when_the_user_trusts_the_bundle(declared, backend):
    if backend == "enzyme":
        pytest.importorskip("enzyme_ad", reason="enzyme-ad has wheels for Python 3.11 only")
    want = np.stack([np.tanh(x @ W) for x in XS])
    b = hlobundle.load(declared)
    for trust, loops in ((hlobundle.Trust.NOTHING, True), (hlobundle.Trust.BATCHED, False)):
        fn = b.function(backend, trust=trust)
        call = lambda x, fn=fn: fn(x=x)  # noqa: E731
        assert _loops(call, XS) is loops
        np.testing.assert_allclose(jax.vmap(call)(XS), want, rtol=1e-6, atol=1e-6)


@pytest.mark.slow
def test_a_folded_vmap_differentiates_as_the_loop_does(declared):
    fn = hlobundle.load(declared).function("xla", trust=hlobundle.Trust.BATCHED)
    loss = lambda xs: jnp.sum(jax.vmap(lambda x: fn(x=x))(xs) ** 2)  # noqa: E731
    want = jax.grad(lambda xs: jnp.sum(jnp.tanh(xs @ W) ** 2))(XS)
    np.testing.assert_allclose(jax.grad(loss)(XS), want, rtol=1e-5, atol=1e-6)


def test_a_folded_vmap_broadcasts_a_declared_argument_it_does_not_map(tmp_path):
    def both(w, x, y):
        return jnp.tanh(x @ w) * y

    out = hlobundle.export(
        both,
        W,
        np.ones((2, 4), np.float32),
        np.ones((2, 3), np.float32),
        out=tmp_path / "both",
        shapes_specs=(None, "b, 4", "b, 3"),
        roles={"w": "parameter"},
        independent_rows="b",
    )
    fn = hlobundle.load(out).function("xla", trust=hlobundle.Trust.BATCHED)
    y = np.full((2, 3), 2.0, np.float32)
    call = lambda x: fn(x=x, y=y)  # noqa: E731
    assert not _loops(call, XS)
    np.testing.assert_allclose(jax.vmap(call)(XS), np.tanh(XS @ W) * 2, rtol=1e-6, atol=1e-6)


def test_serve_joins_requests_along_the_declared_axis_only(declared, tmp_path):
    pytest.importorskip("starlette", reason="the serve extra is not installed")
    from hlobundle._serve._models import load_models

    served = load_models([declared], backend="xla", max_batch=4, trust=hlobundle.Trust.BATCHED)
    one = served["dense"]
    assert one.concatenated == "b"
    x = XS[:3]
    outs = one.call_many([{"x": block} for block in x])
    np.testing.assert_allclose([o["result"] for o in outs], np.tanh(x @ W), rtol=1e-6)

    def scaled(w, x):  # rows along b (axis 1); s leads every shape, undeclared
        return x * jnp.sum(w)

    other = hlobundle.export(
        scaled,
        W,
        np.ones((3, 2), np.float32),
        out=tmp_path / "t",
        shapes_specs=(None, "s, b"),
        roles={"w": "parameter"},
        independent_rows="b",
    )
    served_t = load_models([other], backend="xla", trust=hlobundle.Trust.BATCHED)["t"]
    assert served_t.concatenated is None  # without the declaration: s, the leading symbol


def test_the_declaration_is_part_of_the_fingerprint_and_diff_shows_it(declared, tmp_path):
    """Without the declaration, a trusted `jax.vmap` loops rather than folds (a function with
    a batch statistic computes other values): two fingerprints. Whether the writer checked the
    claim changes nothing the function computes: one."""
    import shutil

    from hlobundle._read._diff import diff, render

    bare, unchecked = tmp_path / "bare", tmp_path / "unchecked"
    for copy in (bare, unchecked):
        shutil.copytree(declared, copy)
    edit_manifest(bare, lambda m: m["functions"][0].pop("independent_rows"))
    edit_manifest(unchecked, lambda m: m["functions"][0]["independent_rows"].update(checked=False))
    a, b = hlobundle.load(declared), hlobundle.load(bare)
    assert a.fingerprint() != b.fingerprint()
    assert hlobundle.load(unchecked).fingerprint() == a.fingerprint()
    found = diff(a, b)
    [change] = found["functions"]["_dense"]["signature"]
    assert change == ["independent_rows", {"arguments": {"x": 0}, "results": {"result": 0}}, None]
    assert "independent_rows: removed" in render(found, "A", "B")

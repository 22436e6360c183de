"""`jax.export` in and out: a bundle is the archive of an Exported (it keeps the module text,
so it outlives the blob's compatibility window), and gives an Exported back."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import ROOT, cli
from jax import export

import hlobundle

pytest.importorskip("flatbuffers", reason="Exported.serialize needs flatbuffers (the dev extra)")


def model(params, x):
    h = jnp.tanh(x @ params["w"] + params["b"])
    return {"y": h, "total": jnp.sum(h)}


PARAMS = {"w": np.linspace(-1, 1, 6, dtype=np.float32).reshape(3, 2), "b": np.float32([0.5, -0.5])}
X = np.linspace(0, 1, 12, dtype=np.float32).reshape(4, 3)


@pytest.fixture(scope="module")
def exported():
    return export.export(jax.jit(model))(PARAMS, X)


def _same(a, b):
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_a_blob_round_trips_through_a_bundle(exported, tmp_path):
    blob = tmp_path / "model.jax"
    blob.write_bytes(exported.serialize(vjp_order=1))
    r = cli("pack", "--from-jax-export", blob, "-o", tmp_path / "b")
    assert r.returncode == 0, r.stderr
    bundle = hlobundle.load(tmp_path / "b", verify=True)
    assert [a.name for a in bundle.arguments] == ["arg0_b", "arg0_w", "arg1"]
    assert [a.path for a in bundle.arguments] == ["args[0]['b']", "args[0]['w']", "args[1]"]
    assert [r.name for r in bundle.results] == ["total", "y"]
    assert bundle.manifest.vjp is not None  # the Exported's VJP became the backward module
    want = exported.call(PARAMS, X)
    _same(bundle.function("xla")(PARAMS, X), want)
    # ... and back: an Exported that serializes, deserializes and calls the same
    again = export.deserialize(bundle.to_exported().serialize(vjp_order=1))
    _same(again.call(PARAMS, X), want)
    grad = jax.grad(lambda p: again.call(p, X)["total"])(PARAMS)
    _same(grad, jax.grad(lambda p: model(p, X)["total"])(PARAMS))


def test_from_exported_stores_example_inputs_and_results(exported, tmp_path):
    out = hlobundle.from_exported(exported, tmp_path / "b", inputs=(PARAMS, X))
    r = cli("run", out, "--backend", "xla", "--json")
    assert r.returncode == 0, r.stderr
    bundle = hlobundle.load(out)
    _same(bundle.expected_outputs()["y"], exported.call(PARAMS, X)["y"])
    _same(bundle.example_args(), (PARAMS, X))


def test_to_exported_of_the_shipped_example_keeps_its_pytrees():
    bundle = hlobundle.load(ROOT / "examples" / "lenet5.hlobundle")
    exp = bundle.to_exported()
    args = bundle.example_args()
    assert exp.in_tree == jax.tree_util.tree_structure((args, {}))
    again = export.deserialize(exp.serialize())
    want = bundle.function("xla")(*args)  # this jax's result, bit for bit
    np.testing.assert_array_equal(np.asarray(again.call(*args)), np.asarray(want))


def test_what_a_bundle_cannot_hold_is_refused_with_the_reason(tmp_path):
    dropped = export.export(jax.jit(lambda x, unused: x * 2))(X, X)
    with pytest.raises(hlobundle.InputError, match=r"dropped unused arguments.*keep_unused=True"):
        hlobundle.from_exported(dropped, tmp_path / "a")
    poly = export.export(jax.jit(lambda x: x * 2))(
        jax.ShapeDtypeStruct(export.symbolic_shape("n, 3"), np.float32)
    )
    with pytest.raises(hlobundle.InputError, match="symbolic \\(polymorphic\\) shapes"):
        hlobundle.from_exported(poly, tmp_path / "b")
    multi = export.export(jax.jit(lambda x: x * 2), platforms=("cpu", "cuda"))(X)
    with pytest.raises(hlobundle.InputError, match="several platforms"):
        hlobundle.from_exported(multi, tmp_path / "c")
    assert not any(tmp_path.iterdir())  # nothing written


def test_a_file_that_is_not_a_blob_is_a_clean_error(tmp_path):
    (tmp_path / "junk.jax").write_bytes(b"\x00" * 64)
    r = cli("pack", "--from-jax-export", tmp_path / "junk.jax", "-o", tmp_path / "b")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith("error [INPUT_INVALID] ")
    assert "is not a serialized jax.export.Exported" in r.stderr
    r = cli(
        "pack",
        "--from-jax-export",
        tmp_path / "junk.jax",
        "--inputs",
        "x.npy",
        "-o",
        tmp_path / "b",
    )
    assert r.returncode == 2 and "--inputs does not apply" in r.stderr


def test_from_exported_takes_roles_as_export_does(exported, tmp_path):
    """A name covers the leaves under it (`arg0`: every leaf of the first argument), as
    `export(..., roles={"params": ...})` does; an argument's own name wins."""
    roles = {"arg0": "parameter", "arg0_b": "state"}
    out = hlobundle.from_exported(exported, tmp_path / "b", inputs=(PARAMS, X), roles=roles)
    got = {a.name: a.role for a in hlobundle.load(out).arguments}
    assert got == {"arg0_b": "state", "arg0_w": "parameter", "arg1": "input"}
    with pytest.raises(hlobundle.InputError, match="names no argument"):
        hlobundle.from_exported(exported, tmp_path / "c", roles={"params": "parameter"})

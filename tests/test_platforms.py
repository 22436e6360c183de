"""A function lowered for several platforms (format 2.1, SPEC.md 2.14): `@main` takes the
platform's index first; the xla backend passes the one it runs on, the others refuse with a
code. Tested here on CPU (the CUDA and TPU lowerings are stored, never run: no GPU here)."""

from __future__ import annotations

import json
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import cli, edit_manifest
from pydantic import ValidationError

import hlobundle
from hlobundle._format._bundle_manifest import BundleManifest
from hlobundle.errors import BackendUnsupportedError, InputError, MainSignatureError

W = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
X = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)


def _dense(w, x):
    return jnp.tanh(x @ w)


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    out = tmp_path_factory.mktemp("platforms") / "two"
    return hlobundle.export(
        _dense, W, X, out=out, roles={"w": "parameter"}, platforms=("cpu", "cuda"), with_vjp=True
    )


def test_export_stores_one_module_for_each_platform(two):
    manifest = json.loads((two / "manifest.json").read_text())
    (f,) = manifest["functions"]
    assert manifest["format_version"] == "2.1" and f["platforms"] == ["cpu", "cuda"]
    assert [a["name"] for a in f["arguments"]] == ["w", "x"]  # not the platform index
    text = (two / "module.mlir").read_text()
    assert '"_platform_index"' in text and text.count("stablehlo.case") >= 1


@pytest.mark.slow
def test_the_xla_backend_runs_the_cpu_lowering_and_differentiates_it(two):
    f = hlobundle.load(two).function("xla")
    np.testing.assert_allclose(f(W, X), _dense(W, X), rtol=1e-6, atol=1e-6)
    got = jax.grad(lambda w: f(w, X).sum())(W)
    np.testing.assert_allclose(got, jax.grad(lambda w: _dense(w, X).sum())(W), rtol=1e-5)


def test_auto_picks_the_backend_that_passes_the_index(two):
    assert hlobundle.load(two).function().backend == "xla"


@pytest.mark.parametrize("backend", ["enzyme", "iree"])
def test_the_other_backends_refuse_with_a_code(two, backend):
    with pytest.raises(BackendUnsupportedError, match="several platforms \\['cpu', 'cuda'\\]"):
        hlobundle.load(two).function(backend)


def test_emit_refuses_what_its_scripts_cannot_select(two, tmp_path):
    with pytest.raises(InputError, match="lowered for several platforms"):
        hlobundle.emit_script(two, tmp_path / "run.py")


def test_a_bundle_without_this_platform_is_refused_with_a_code(tmp_path):
    out = hlobundle.export(_dense, W, X, out=tmp_path / "gpu", platforms=("cuda", "rocm"))
    with pytest.raises(BackendUnsupportedError, match="cpu"):
        hlobundle.load(out).function("xla")(W, X)


def test_symbolic_shapes_are_proven_with_the_index(tmp_path):
    out = hlobundle.export(
        _dense,
        W,
        X,
        out=tmp_path / "sym",
        roles={"w": "parameter"},
        shapes_specs=(None, "b, 4"),
        platforms=("cpu", "cuda"),
    )
    f = hlobundle.load(out).function("xla")
    x5 = np.ones((5, 4), np.float32)
    np.testing.assert_allclose(f(W, x5), _dense(W, x5), rtol=1e-6, atol=1e-6)
    with pytest.raises(InputError, match="x"):
        f(W, np.ones((5, 3), np.float32))


@pytest.mark.slow  # two platforms' lowerings and a backward module (about 1 s)
def test_from_exported_keeps_the_platforms_and_the_backward_module(tmp_path):
    from jax import export

    specs = [jax.ShapeDtypeStruct(W.shape, W.dtype), jax.ShapeDtypeStruct(X.shape, X.dtype)]
    exported = export.export(jax.jit(_dense), platforms=("cpu", "tpu"))(*specs)
    blob = tmp_path / "f.jax"
    blob.write_bytes(exported.serialize(vjp_order=1))
    done = cli("pack", "--from-jax-export", blob, "-o", tmp_path / "b")
    assert done.returncode == 0, done.stderr
    b = hlobundle.load(tmp_path / "b")
    assert b.manifest.platforms == ["cpu", "tpu"] and b.manifest.vjp is not None
    f = b.function("xla")
    got = jax.grad(lambda w: f(w, X).sum())(W)
    np.testing.assert_allclose(got, jax.grad(lambda w: _dense(w, X).sum())(W), rtol=1e-5)


def test_the_platforms_are_part_of_the_fingerprint(two, tmp_path):
    copy = tmp_path / "swapped"
    shutil.copytree(two, copy)
    edit_manifest(copy, lambda m: m["functions"][0].update(platforms=["cuda", "cpu"]))
    assert hlobundle.load(copy).fingerprint() != hlobundle.load(two).fingerprint()


@pytest.mark.parametrize(
    ("platforms", "why"),
    [
        (["cpu", "cpu"], "duplicate platforms name 'cpu'"),
        (["cpu"], "at least 2 items"),
        (["cpu", "CUDA"], "should match pattern"),
    ],
)
def test_a_platform_list_must_name_distinct_platforms(two, platforms, why):
    data = json.loads((two / "manifest.json").read_text())
    data["functions"][0]["platforms"] = platforms
    with pytest.raises(ValidationError, match=why):
        BundleManifest.model_validate(data)


def test_a_module_without_the_index_is_refused(two, tmp_path):
    """A manifest that says several platforms over a module of one: @main's first argument is
    then w, not a scalar index."""
    plain = hlobundle.export(_dense, W, X, out=tmp_path / "plain", roles={"w": "parameter"})
    copy = tmp_path / "claims"
    shutil.copytree(plain, copy)

    data = json.loads((copy / "manifest.json").read_text())
    assert "functions" not in data  # one static function: 1.x
    own = ("format", "format_version", "files", "provenance")
    functions = {k: data.pop(k) for k in list(data) if k not in own}
    name = functions.pop("function")
    function = {**functions, "name": name, "platforms": ["cpu", "cuda"]}
    data.update(format_version="2.1", functions=[function])
    (copy / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(MainSignatureError, match="is not the platform index"):
        hlobundle.load(copy)

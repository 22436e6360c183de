"""The 1.x compatibility corpus (SPEC.md 5, "Versions"): bundles written by this project's own
writer at each earlier format version, checked out from git history (tests/corpus/README.md).
This reader loads, verifies and runs every one of them, and gets its stored expected outputs."""

from __future__ import annotations

import importlib.util
import json
import platform
import sys
import warnings
from pathlib import Path

import jax
import numpy as np
import pytest
from helpers import INSTALLED_BACKENDS, assert_close, new_key

import hlobundle

CORPUS = Path(__file__).resolve().parent / "corpus"
sys.path.insert(0, str(CORPUS))
import write_corpus  # noqa: E402  (what the corpus was written with, for its reference function)

BUNDLES = sorted(CORPUS.glob("*/*.hlobundle"))
IDS = [f"{p.parent.name}/{p.stem}" for p in BUNDLES]
WITH_BACKWARD = [p for p in BUNDLES if (p / "vjp.mlir").is_file()]


def public_key(path: Path) -> Path | None:
    key = path.with_suffix(".pub.pem")
    return key if key.is_file() else None


def load(path: Path) -> hlobundle.Bundle:
    """The bundle verified, with its key where it is signed; nothing may warn about its version."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return hlobundle.load(path, verify=True, public_key=public_key(path))


def leaves(results, bundle: hlobundle.Bundle) -> dict[str, np.ndarray]:
    flat = jax.tree_util.tree_leaves(results)
    return dict(zip([r.name for r in bundle.manifest.results], flat, strict=True))


def test_the_corpus_holds_every_earlier_version():
    versions = {p.parent.name for p in BUNDLES}
    assert versions == {"1.0", "1.1", "1.2", "1.3", "2.0", "2.1"}
    assert {p.stem for p in BUNDLES if p.parent.name == "1.2"} >= {"signed", "int4"}


@pytest.mark.parametrize("path", BUNDLES, ids=IDS)
def test_written_at_its_version(path):
    on_disk = json.loads((path / "manifest.json").read_bytes())
    assert on_disk["format_version"] == path.parent.name
    bundle = load(path)
    assert bundle.manifest.format_version == path.parent.name
    if path.parent.name.startswith("1."):
        # A 1.x bundle is one function, its default, named as its writer named it.
        assert bundle.functions == [on_disk["function"]] == [bundle.default_function]
    else:
        names = [f["name"] for f in on_disk["functions"]]
        assert bundle.functions == names and bundle.default_function == on_disk["default_function"]


@pytest.mark.parametrize("backend", INSTALLED_BACKENDS)
@pytest.mark.parametrize("path", BUNDLES, ids=IDS)
def test_runs_to_its_expected_outputs(path, backend):
    opened = load(path)
    for function in opened.functions:  # each function of a 2.0 bundle
        bundle = opened.select(function)
        expected = bundle.expected_outputs()
        assert expected and set(expected) == {r.name for r in bundle.manifest.results}
        got = leaves(bundle.function(backend)(*bundle.example_args()), bundle)
        for name, want in expected.items():
            assert np.asarray(got[name]).dtype == want.dtype, name
            assert_close(got[name], want)


def test_the_2_0_functions_run_for_another_batch_size():
    """The symbolic batch `b` of the 2.0 bundle takes a size its stored values do not have."""
    bundle = load(CORPUS / "2.0" / "functions.hlobundle")
    params, x = bundle.select("predict").example_args()
    batch = np.concatenate([x, -x, x * 0.5])
    assert_close(
        bundle.function(name="predict")(params, batch), write_corpus.predict(params, batch)
    )


def test_the_signed_bundle_needs_its_own_key(tmp_path):
    _, other = new_key(tmp_path)
    with pytest.raises(hlobundle.errors.SignatureInvalidError):
        hlobundle.load(CORPUS / "1.2" / "signed.hlobundle", public_key=other)
    with pytest.raises(hlobundle.errors.UnsignedError):
        hlobundle.load(CORPUS / "1.2" / "predict.hlobundle", public_key=other)


@pytest.mark.slow
def test_todays_writer_writes_each_recipe_at_the_corpus_version(tmp_path):
    """A writer writes the oldest version that can express a bundle (SPEC.md 5): the corpus's
    recipes, written again by today's writer, come out at the version their corpus folder has."""
    private, public = new_key(tmp_path)
    written = {
        "1.0/predict": write_corpus.write_predict(tmp_path / "predict"),
        "1.0/column_major": write_corpus.write_column_major(tmp_path / "column_major"),
        "1.1/batched": write_corpus.write_predict(tmp_path / "batched", vmap_in_axes=(None, 0)),
        "1.2/int4": write_corpus.write_int4(tmp_path / "int4"),
        "1.2/signed": write_corpus.write_predict(tmp_path / "signed"),
        "2.0/functions": write_corpus.write_functions(tmp_path / "functions"),
        "2.1/rows": write_corpus.write_rows(tmp_path / "rows"),
    }
    hlobundle.sign(written["1.2/signed"], private)
    if importlib.util.find_spec("iree.compiler") is not None:
        written["1.3/iree"] = write_corpus.write_predict(tmp_path / "iree")
        hlobundle.compile(written["1.3/iree"], ["llvm-cpu"])
    for name, path in written.items():
        version = json.loads((path / "manifest.json").read_bytes())["format_version"]
        assert version == name.split("/")[0], name
        assert (CORPUS / f"{name}.hlobundle").is_dir()
    hlobundle.load(written["1.2/signed"], public_key=public)


@pytest.mark.parametrize("backend", INSTALLED_BACKENDS)
@pytest.mark.parametrize("path", WITH_BACKWARD, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_differentiates_as_its_source_function(path, backend):
    bundle = load(path)
    params, x = bundle.example_args()
    fn = bundle.function(backend)
    assert_close(jax.grad(_total(fn), argnums=(0, 1))(params, x), _native_grad(params, x))


def _total(f):
    return lambda p, x: (f(p, x) ** 2).sum()


# The source function's own gradient, jitted: one compile for every bundle and backend (eagerly,
# JAX compiled each of its operations alone)
_native_grad = jax.jit(jax.grad(_total(write_corpus.predict), argnums=(0, 1)))


@pytest.mark.parametrize("backend", INSTALLED_BACKENDS)
def test_vmap_runs_the_1_1_batched_module(backend):
    bundle = load(CORPUS / "1.1" / "batched.hlobundle")
    params, x = bundle.example_args()
    batch = np.stack([x * (i + 1) for i in range(3)])
    fn = bundle.function(backend)
    assert "scan" not in str(jax.make_jaxpr(jax.vmap(fn, (None, 0)))(params, batch))
    assert_close(
        jax.vmap(fn, (None, 0))(params, batch),
        jax.vmap(write_corpus.predict, (None, 0))(params, batch),
    )


def test_the_1_3_stored_executable_runs_on_iree():
    pytest.importorskip("iree.runtime")
    from hlobundle._run._backends import _iree

    path = CORPUS / "1.3" / "iree.hlobundle"
    bundle = load(path)
    (entry,) = bundle.manifest.executables
    if entry.architecture != platform.machine():
        pytest.skip(f"the executable is for {entry.architecture}, not {platform.machine()}")
    if entry.compiler_version != _iree.runtime_version():
        pytest.skip(f"the executable is IREE {entry.compiler_version}'s, not this runtime's")
    fn = bundle.function("iree", trust=hlobundle.Trust.EXECUTABLES)
    assert fn.source == f"stored executable {entry.file}"
    got = leaves(fn(*bundle.example_args()), bundle)
    for name, want in bundle.expected_outputs().items():
        assert_close(got[name], want)

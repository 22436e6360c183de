"""Bundles written by the newest jax run on every jax the project supports (SPEC.md 5, "Which
target a writer picks"; tests/newer_jaxlib/README.md): each dated folder of tests/newer_jaxlib/,
written once and kept forever, loads, verifies and runs here on every installed backend; on a
jaxlib newer than the oldest supported, today's writer still writes what that folder holds."""

from __future__ import annotations

import json
import shlex
import shutil
import sys
import warnings
from pathlib import Path

import jax
import numpy as np
import pytest
from helpers import INSTALLED_BACKENDS, assert_close, cli

import hlobundle
from hlobundle._parse import _mlir

HERE = Path(__file__).resolve().parent / "newer_jaxlib"
sys.path.insert(0, str(HERE))
import write  # noqa: E402  (what the folders were written with, for its reference functions)

# every folder but Python's bytecode cache (which importing `write` just made, where Python
# writes bytecode)
FOLDERS = sorted(p for p in HERE.iterdir() if p.is_dir() and p.name != "__pycache__")
PREDICT = [folder / "predict.hlobundle" for folder in FOLDERS]
# The oldest jaxlib the project supports (0.10.2, Python 3.11) reads StableHLO up to this one.
OLDEST_READER = "1.17.0"
NEWER_JAXLIB = _mlir.version_key(_mlir.current_version()) > _mlir.version_key(OLDEST_READER)


def load(path: Path) -> hlobundle.Bundle:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing may warn about its version
        return hlobundle.load(path, verify=True)


def targets(path: Path) -> dict[str, str]:
    manifest = json.loads((path / "manifest.json").read_bytes())
    return {
        k: manifest[k]["portable"]["target_version"] for k in ("module", "vjp") if k in manifest
    }


def test_each_folder_was_written_by_a_jaxlib_newer_than_the_oldest_supported():
    assert FOLDERS and [f.name for f in FOLDERS][0] == "2026-12-06"
    for folder in FOLDERS:
        for path in folder.glob("*.hlobundle"):
            provenance = json.loads((path / "manifest.json").read_bytes())["provenance"]
            version = _mlir.version_key(provenance["stablehlo_version"])
            assert version > _mlir.version_key(OLDEST_READER), path


@pytest.mark.parametrize("path", PREDICT, ids=lambda p: p.parent.name)
def test_its_artifacts_target_what_the_oldest_supported_jaxlib_reads(path):
    assert set(targets(path)) == {"module", "vjp"}
    for target in targets(path).values():
        assert _mlir.version_key(target) <= _mlir.version_key(OLDEST_READER)


@pytest.mark.parametrize("backend", INSTALLED_BACKENDS)
@pytest.mark.parametrize("path", PREDICT, ids=lambda p: p.parent.name)
def test_it_runs_here_to_its_expected_outputs(path, backend):
    bundle = load(path)
    (got,) = jax.tree_util.tree_leaves(bundle.function(backend)(*bundle.example_args()))
    (want,) = bundle.expected_outputs().values()
    assert np.asarray(got).dtype == want.dtype
    assert_close(got, want)


@pytest.mark.slow
@pytest.mark.parametrize("backend", INSTALLED_BACKENDS)
@pytest.mark.parametrize("path", PREDICT, ids=lambda p: p.parent.name)
def test_it_differentiates_here_as_its_source_function(path, backend):
    bundle = load(path)
    params, x = bundle.example_args()

    def total(f):
        return lambda p, x: (f(p, x) ** 2).sum()

    assert_close(
        jax.grad(total(bundle.function(backend)), argnums=(0, 1))(params, x),
        jax.grad(total(write.predict), argnums=(0, 1))(params, x),
    )


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_a_module_that_needs_a_newer_stablehlo_runs_or_says_what_to_do(folder, tmp_path):
    path = shutil.copytree(folder / "exp2.hlobundle", tmp_path / "exp2")
    target, newest = targets(path)["module"], _mlir.current_version()
    assert _mlir.version_key(target) > _mlir.version_key(OLDEST_READER)  # 1.23.0: stablehlo.exp2
    if _mlir.version_key(target) <= _mlir.version_key(newest):
        bundle = load(path)
        (got,) = jax.tree_util.tree_leaves(bundle.function()(*bundle.example_args()))
        assert_close(got, write.exp2(*bundle.example_args()))
        return
    r = cli("verify", path)
    assert r.returncode == 1
    assert r.stderr.startswith(
        'error [VERSION_UNSUPPORTED] module.mlir does not parse here ("module.mlir":3:10: '
        "custom op 'stablehlo.exp2' is unknown) and module.mlirbc targets StableHLO "
        f"{target}, newer than this jaxlib reads (StableHLO {newest} at most): the module uses "
        "what this jaxlib lacks."
    ), r.stderr
    command = f"hlobundle refresh {shlex.quote(str(path))} --target-version {newest}"
    assert f"which works only if the module needs nothing newer: {command} (SPEC" in r.stderr


@pytest.mark.skipif(
    not NEWER_JAXLIB, reason=f"this jaxlib's StableHLO is {OLDEST_READER} or older: the oldest"
)
@pytest.mark.parametrize("name", sorted(write.WRITERS))
def test_todays_writer_on_a_newer_jaxlib_writes_the_targets_the_folders_hold(name, tmp_path):
    """The other half of the proof: the folders are what this writer writes on a newer jaxlib."""
    written = targets(write.WRITERS[name](tmp_path / name))
    assert written == targets(FOLDERS[-1] / f"{name}.hlobundle")
    if name == "predict":  # nothing newer needed: what the oldest supported jaxlib reads
        assert set(written.values()) == {_mlir.default_target()} == {"1.13.7"}

"""`hlobundle refresh`: portable artifacts rewritten from the module text for another StableHLO
target, atomically; `verify` names the command when an artifact is too old for this reader."""

from __future__ import annotations

import re
import shlex
import shutil

import numpy as np
import pytest
from helpers import ROOT, cli, edit_manifest

import hlobundle
from hlobundle._parse import _mlir

EXAMPLE = ROOT / "examples" / "lenet5.hlobundle"


@pytest.fixture
def bundle(tmp_path):
    out = tmp_path / "lenet.hlobundle"
    shutil.copytree(EXAMPLE, out)
    return out


def test_refresh_to_the_oldest_target_verifies_and_runs(bundle):
    oldest = _mlir.minimum_version()
    weights = (bundle / "weights.safetensors").read_bytes()
    r = cli("refresh", bundle, "--target-version", oldest)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"refreshed {bundle}: portable artifacts for StableHLO {oldest}"
    b = hlobundle.load(bundle, verify=True)
    assert {m.target_version for m in b.modules.values()} == {oldest}
    assert b.manifest.module.portable.target_version == oldest
    assert b.manifest.batched.portable.target_version == oldest
    assert (bundle / "weights.safetensors").read_bytes() == weights
    assert sorted(p.name for p in bundle.parent.iterdir()) == [bundle.name]  # nothing left over
    r = cli("run", bundle, "--backend", "xla", "--json")
    assert r.returncode == 0, r.stderr
    (out,) = (hlobundle.load(bundle).function("xla")(*b.example_args()),)
    np.testing.assert_allclose(
        np.asarray(out), b.expected_outputs()["result"], rtol=1e-6, atol=1e-6
    )


def the_command(stderr: str) -> list[str]:
    """The `hlobundle refresh ...` command an error prints, as arguments (without `hlobundle`)."""
    match = re.search(r": (hlobundle refresh .*?)(;| \(SPEC)", stderr)
    assert match, stderr
    return shlex.split(match[1])[1:]


def test_an_artifact_too_old_for_this_reader_prints_the_command_that_refreshes_it(bundle):
    edit_manifest(bundle, lambda m: m["module"]["portable"].update(target_version="0.1.0"))
    r = cli("verify", bundle)
    assert r.returncode == 1
    oldest = _mlir.minimum_version()
    assert r.stderr == (
        "error [VERSION_UNSUPPORTED] module.mlirbc targets StableHLO 0.1.0, older than this "
        f"jaxlib reads (StableHLO {oldest} at least). Write its artifacts again from the module "
        f"texts it keeps: hlobundle refresh {bundle} (SPEC.md 5, 'Versions') (path: module.mlirbc)\n"
    )
    assert cli(*the_command(r.stderr)).returncode == 0  # the text is the source of truth
    assert cli("verify", bundle).returncode == 0


def test_an_artifact_too_new_for_this_reader_prints_the_command_that_refreshes_it(bundle):
    # As a bundle written with a newer jaxlib at a target this one lacks would read.
    newest = _mlir.current_version()
    major, minor, _ = _mlir.version_key(newest)
    newer = f"{major}.{minor + 2}.0"
    edit_manifest(bundle, lambda m: m["batched"]["portable"].update(target_version=newer))
    r = cli("run", bundle)
    assert r.returncode == 1
    assert r.stderr == (
        f"error [VERSION_UNSUPPORTED] batched.mlirbc targets StableHLO {newer}, newer than this "
        f"jaxlib reads (StableHLO {newest} at most). Write its artifacts again for this jaxlib "
        "from the module texts it keeps, here or where it was made: hlobundle refresh "
        f"{bundle} --target-version {newest}; or upgrade jaxlib (SPEC.md 5, 'Versions') (path: "
        "batched.mlirbc)\n"
    )
    assert the_command(r.stderr) == ["refresh", str(bundle), "--target-version", newest]
    assert cli(*the_command(r.stderr)).returncode == 0
    b = hlobundle.load(bundle, verify=True)
    assert {m.target_version for m in b.modules.values()} == {newest}


def test_the_printed_command_quotes_a_path_the_shell_would_split(tmp_path):
    bundle = shutil.copytree(EXAMPLE, tmp_path / "my model's bundle")
    edit_manifest(bundle, lambda m: m["module"]["portable"].update(target_version="0.1.0"))
    r = cli("verify", bundle)
    assert r.returncode == 1
    assert f"hlobundle refresh {shlex.quote(str(bundle))} (SPEC" in r.stderr
    assert cli(*the_command(r.stderr)).returncode == 0
    assert cli("verify", bundle).returncode == 0


def test_refresh_writes_the_oldest_default_target_that_expresses_each_artifact(bundle):
    r = cli("refresh", bundle, "--target-version", _mlir.current_version())
    assert r.returncode == 0, r.stderr
    r = cli("refresh", bundle)
    assert r.returncode == 0, r.stderr
    first = _mlir.default_target()  # LeNet's forms need nothing newer
    assert r.stdout.strip() == f"refreshed {bundle}: portable artifacts for StableHLO {first}"
    b = hlobundle.load(bundle, verify=True)
    assert {m.target_version for m in b.modules.values()} == {first}


def test_refresh_rewrites_every_function_of_a_bundle_and_keeps_them(tmp_path):
    # It rewrote the default function's artifacts alone, and wrote a manifest without the others.
    bundle = shutil.copytree(
        ROOT / "tests" / "corpus" / "2.0" / "functions.hlobundle", tmp_path / "f"
    )
    before = hlobundle.load(bundle)
    r = cli("refresh", bundle, "--target-version", "1.14.0")
    assert r.returncode == 0, r.stderr
    after = hlobundle.load(bundle, verify=True)
    assert after.functions == before.functions == ["predict", "loss"]
    assert after.default_function == before.default_function
    for name in after.functions:
        view = after.select(name)
        assert {m.target_version for m in view.modules.values()} == {"1.14.0"}, name
        assert view.manifest.arguments == before.select(name).manifest.arguments


def test_refresh_refuses_targets_out_of_range_and_signed_bundles(bundle, tmp_path):
    before = sorted((p.name, p.stat().st_mtime_ns) for p in bundle.iterdir())
    r = cli("refresh", bundle, "--target-version", "99.0.0")
    newest = _mlir.current_version()
    assert r.returncode == 1
    assert r.stderr == (
        f"error [VERSION_UNSUPPORTED] --target-version 99.0.0 is newer than this jaxlib writes "
        f"(StableHLO {newest} at most): choose {newest} or older, or upgrade jaxlib (argument: "
        "target_version)\n"
    )
    (bundle / "model.sig").write_text("{}")
    r = cli("refresh", bundle)
    assert r.returncode == 1 and "is signed" in r.stderr and "--sign-key" in r.stderr
    (bundle / "model.sig").unlink()
    assert sorted((p.name, p.stat().st_mtime_ns) for p in bundle.iterdir()) == before


def test_refresh_copies_the_other_files_never_hard_links_them(bundle, monkeypatch):
    from hlobundle._output import _target

    links: dict[str, int] = {}
    move = _target.move_into_place

    def count_links_first(tmp, out, force):
        links.update({p.name: p.stat().st_nlink for p in tmp.iterdir()})
        return move(tmp, out, force)

    monkeypatch.setattr(_target, "move_into_place", count_links_first)
    assert cli("refresh", bundle).returncode == 0
    assert "weights.safetensors" in links and set(links.values()) == {1}
    hlobundle.load(bundle, verify=True)


def test_refresh_checks_what_it_carries_over(bundle):
    data = bytearray((bundle / "weights.safetensors").read_bytes())
    data[-1] ^= 1  # same size: loading alone does not see it
    (bundle / "weights.safetensors").write_bytes(bytes(data))
    before = {p.name: p.read_bytes() for p in bundle.iterdir()}
    r = cli("refresh", bundle, "--target-version", _mlir.minimum_version())
    assert r.returncode == 1
    assert r.stderr.startswith("error [HASH_MISMATCH] weights.safetensors: sha256 is ")
    assert {p.name: p.read_bytes() for p in bundle.iterdir()} == before
    assert sorted(p.name for p in bundle.parent.iterdir()) == [bundle.name]

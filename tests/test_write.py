"""The writer is atomic: a complete bundle or nothing, and no overwrite without force."""

from __future__ import annotations

import os
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest
from helpers import cli, identity_module, lowered_text, pack_identity, sample

import hlobundle
from hlobundle._bundle_io import _tensor_writing
from hlobundle._parse import _mlir


def leftovers(parent):
    return sorted(p.name for p in parent.iterdir() if ".partial-" in p.name or ".old-" in p.name)


def test_existing_output_needs_force(tmp_path):
    x = sample((2,), "float32")
    out = pack_identity(tmp_path, x)
    before = (out / "manifest.json").read_bytes()
    with pytest.raises(
        hlobundle.errors.OutputExistsError, match="already exists; pass --force"
    ) as e:
        pack_identity(tmp_path, x)
    assert e.value.code == "OUTPUT_EXISTS"
    assert (out / "manifest.json").read_bytes() == before


def test_force_replaces_a_bundle(tmp_path):
    pack_identity(tmp_path, sample((2,), "float32"))
    y = sample((3,), "int8")
    out = pack_identity(tmp_path, y, force=True)
    np.testing.assert_array_equal(hlobundle.load(out).tensor("arg0"), y)
    assert leftovers(tmp_path) == []


def test_force_never_replaces_something_else(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "thesis.tex").write_text("years of work")
    with pytest.raises(
        hlobundle.errors.OutputExistsError,
        match="exists and is not a bundle; --force only replaces bundles",
    ):
        pack_identity(tmp_path, sample((2,), "float32"), force=True)
    assert (tmp_path / "b" / "thesis.tex").read_text() == "years of work"


def test_failure_while_writing_leaves_nothing(tmp_path, monkeypatch):
    def explode(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(_tensor_writing, "write", explode)
    with pytest.raises(OSError, match="disk full"):
        pack_identity(tmp_path, sample((2,), "float32"))
    assert not (tmp_path / "b").exists()
    assert leftovers(tmp_path) == []


def test_failed_force_keeps_the_old_bundle(tmp_path, monkeypatch):
    out = pack_identity(tmp_path, sample((2,), "float32"))
    monkeypatch.setattr(
        _tensor_writing, "write", lambda *a, **k: (_ for _ in ()).throw(OSError("disk full"))
    )
    with pytest.raises(OSError):
        pack_identity(tmp_path, sample((2,), "float32"), force=True)
    hlobundle.load(out).verify()


@pytest.mark.subprocess
def test_stale_partials_of_dead_processes_are_removed(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead = int(proc.stdout)
    stale = tmp_path / f".b.partial-{dead}-abc"
    stale.mkdir()
    live = tmp_path / f".b.partial-{os.getpid()}-xyz"  # a pack still running in this process
    live.mkdir()
    pack_identity(tmp_path, sample((2,), "float32"))
    assert not stale.exists() and live.exists()


@pytest.mark.subprocess
def test_a_bundle_set_aside_by_a_killed_force_pack_is_put_back(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    old = pack_identity(tmp_path, sample((2,), "float32"), name="keep")
    aside = tmp_path / f".b.old-{int(proc.stdout)}-abc"
    aside.mkdir()
    os.rename(old, aside / "bundle")  # killed between setting it aside and renaming the new one in
    with pytest.raises(hlobundle.errors.OutputExistsError):
        pack_identity(tmp_path, sample((3,), "float32"))  # not --force: the old bundle is back
    hlobundle.load(tmp_path / "b").verify()
    assert not aside.exists()


def test_module_from_path_and_bad_module(tmp_path):
    x = sample((2,), "float32")
    (tmp_path / "m.mlir").write_text(identity_module(x))
    out = hlobundle.pack(tmp_path / "m.mlir", [x], tmp_path / "b")
    assert hlobundle.load(out).module_text == (tmp_path / "m.mlir").read_text()
    with pytest.raises(hlobundle.InputError, match="cannot read the module"):
        hlobundle.pack(tmp_path / "missing.mlir", [x], tmp_path / "c")
    with pytest.raises(hlobundle.errors.ModuleError, match="the MLIR does not parse") as e:
        hlobundle.pack("module { nonsense.op }", [], tmp_path / "c")
    assert e.value.code == "MLIR_INVALID"


def test_provenance_and_portable_artifact(tmp_path):
    out = pack_identity(tmp_path, sample((2,), "float32"), timestamp="2026-12-02T00:00:00Z")
    m = hlobundle.load(out).manifest
    assert m.provenance.producer == "hlobundle" and m.provenance.timestamp == "2026-12-02T00:00:00Z"
    assert m.provenance.jaxlib_version and m.provenance.stablehlo_version
    assert (out / m.module.portable.file).read_bytes()[:4] == b"ML\xefR"
    out2 = pack_identity(tmp_path, sample((2,), "float32"), name="c", target_version="1.0.0")
    assert hlobundle.load(out2).manifest.module.portable.target_version == "1.0.0"


def test_each_form_gets_the_oldest_default_target_that_expresses_it(tmp_path, monkeypatch):
    x = sample((3, 2), "float32")
    out = hlobundle.export(jnp.tanh, x, out=tmp_path / "t", with_vjp=True, vmap_in_axes=(0,))
    b = hlobundle.load(out, verify=True)
    assert {k: m.target_version for k, m in b.modules.items()} == dict.fromkeys(
        ["module", "vjp", "batched"], _mlir.default_target()
    )
    monkeypatch.setattr(_mlir, "TARGET_FLOOR", "1.0.0")  # float8_e4m3 needs StableHLO 1.7.0
    out = pack_identity(tmp_path, sample((2,), "float8_e4m3"), name="f8")
    assert hlobundle.load(out, verify=True).manifest.module.portable.target_version == "1.7.0"


def test_module_of_wrong_type(tmp_path):
    with pytest.raises(hlobundle.InputError, match="module must be MLIR text or a path, got int"):
        hlobundle.pack(42, [], tmp_path / "b")


def test_unknown_portable_target(tmp_path):
    with pytest.raises(
        hlobundle.errors.VersionError,
        match=r"--target-version 99\.0\.0 is newer than this jaxlib writes \(StableHLO ",
    ):
        pack_identity(tmp_path, sample((2,), "float32"), target_version="99.0.0")
    assert leftovers(tmp_path) == [] and not (tmp_path / "b").exists()


def test_option_the_manifest_refuses(tmp_path):
    with pytest.raises(
        hlobundle.InputError,
        match="the manifest would be invalid: timestamp: Input should be a valid string",
    ):
        pack_identity(tmp_path, sample((2,), "float32"), timestamp=5)
    assert leftovers(tmp_path) == [] and not (tmp_path / "b").exists()


# --- the writer only ever deletes what it wrote ------------------------------------------


def test_force_refuses_a_directory_whose_manifest_is_not_a_bundles(tmp_path):
    data = tmp_path / "b"
    data.mkdir()
    (data / "manifest.json").write_text('{"my": "own data"}')
    (data / "precious.txt").write_text("keep me")
    with pytest.raises(hlobundle.errors.OutputExistsError, match="is not a bundle"):
        pack_identity(tmp_path, sample((2,), "float32"), force=True)
    assert (data / "precious.txt").read_text() == "keep me"


def _racing(monkeypatch, act):
    """Run `act()` just before the pack renames its result into place (another writer)."""
    from hlobundle._file_io import _durable

    real = _durable.fsync_tree

    def fsync_then_act(root, **kwargs):
        real(root, **kwargs)
        act()

    monkeypatch.setattr(_durable, "fsync_tree", fsync_then_act)


def test_a_directory_created_while_pack_runs_is_left_alone(tmp_path, monkeypatch):
    out = tmp_path / "b"

    def someone_writes():
        out.mkdir()
        (out / "theirs.txt").write_text("theirs")

    _racing(monkeypatch, someone_writes)
    with pytest.raises(hlobundle.errors.OutputExistsError, match="created by someone else") as e:
        pack_identity(tmp_path, sample((2,), "float32"))
    assert e.value.code == "OUTPUT_EXISTS"
    assert [p.name for p in out.iterdir()] == ["theirs.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["b"]  # and no temporary left behind


def test_an_empty_directory_created_while_pack_runs_is_not_replaced(tmp_path, monkeypatch):
    out = tmp_path / "b"
    _racing(monkeypatch, out.mkdir)  # rename(2) alone would silently replace an empty directory
    with pytest.raises(hlobundle.errors.OutputExistsError):
        pack_identity(tmp_path, sample((2,), "float32"))
    assert out.is_dir() and not any(out.iterdir())


def test_force_rechecks_the_target_when_it_replaces_it(tmp_path, monkeypatch):
    import shutil

    out = pack_identity(tmp_path, sample((2,), "float32"))

    def swap_for_user_data():
        shutil.rmtree(out)
        out.mkdir()
        (out / "precious.txt").write_text("keep me")

    _racing(monkeypatch, swap_for_user_data)
    with pytest.raises(hlobundle.errors.OutputExistsError, match="no longer a bundle"):
        pack_identity(tmp_path, sample((3,), "float32"), force=True)
    assert (out / "precious.txt").read_text() == "keep me"


def test_concurrent_packs_to_one_path_exactly_one_wins(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    xs = [sample((64, 64), "float32", i) for i in range(4)]
    for round_ in range(4):
        out = tmp_path / f"b{round_}"

        def pack(i, out=out):
            try:
                hlobundle.pack(identity_module(xs[i]), [xs[i]], out)
                return i
            except hlobundle.errors.OutputExistsError:
                return None

        with ThreadPoolExecutor(4) as pool:
            winners = [i for i in pool.map(pack, range(4)) if i is not None]
        assert len(winners) == 1
        bundle = hlobundle.load(out)
        np.testing.assert_array_equal(bundle.tensor(bundle.arguments[0].name), xs[winners[0]])


def _machine_paths(tmp_path):
    """Absolute paths of the writing machine that a bundle must not carry."""
    import sysconfig
    from pathlib import Path

    here = [os.getcwd(), os.path.expanduser("~"), sysconfig.get_paths()["purelib"], str(tmp_path)]
    here += [str(Path(hlobundle.__file__).parent.parent), str(Path(__file__).parent)]
    return sorted({p for p in here if len(p) > 1})


def _assert_no_machine_paths(bundle, tmp_path):
    for path in sorted(p for p in bundle.rglob("*") if p.is_file()):
        data = path.read_bytes()
        for leaked in _machine_paths(tmp_path):
            assert leaked.encode() not in data, f"{path.name} carries {leaked!r}"


@pytest.mark.slow
def test_no_absolute_path_of_the_writing_machine_reaches_any_file_of_a_bundle(tmp_path):
    import jax
    import jax.numpy as jnp
    from jax import export as jax_export

    def f(w, x):
        return jnp.tanh(x @ w)

    w, x = sample((3, 2), "float32", 1), sample((4, 3), "float32", 2)
    out = hlobundle.export(f, w, x, out=tmp_path / "e", with_vjp=True, vmap_in_axes=(None, 0))
    assert hlobundle.load(out).manifest.batched is not None
    _assert_no_machine_paths(out, tmp_path)
    # Text with its locations (as jax prints them with debug_info=True) and a batched module.
    text = jax.jit(f).lower(w, x).as_text(debug_info=True)
    assert str(__file__) in text
    batched = jax_export.export(jax.jit(jax.vmap(f, in_axes=(None, 0))))(
        w, jax.ShapeDtypeStruct((jax_export.symbolic_shape("B")[0], 4, 3), np.float32)
    )
    out = hlobundle.pack(
        text, [w, x], tmp_path / "p", batched=batched.mlir_module(), batched_arguments=["arg1"]
    )
    _assert_no_machine_paths(out, tmp_path)
    exported = jax_export.export(jax.jit(f))(w, x)
    _assert_no_machine_paths(hlobundle.from_exported(exported, tmp_path / "x"), tmp_path)


def test_the_shipped_example_carries_no_machine_paths(tmp_path):
    from helpers import ROOT

    example = ROOT / "examples" / "lenet5.hlobundle"
    for path in example.iterdir():
        assert b'loc("/' not in path.read_bytes(), path.name


def _with_info(args: list[str], results: list[str]) -> str:
    """A JAX-lowered module of (x, w) -> (x @ w, x) whose values carry these `jax.arg_info` /
    `jax.result_info` attributes (raw attribute values, quoted or not)."""
    text = lowered_text(
        lambda x, w: (x @ w, x), np.ones((4, 3), np.float32), np.ones((3, 2), np.float32)
    )
    text = text.replace(
        "%arg0: tensor<4x3xf32>", f"%arg0: tensor<4x3xf32> {{jax.arg_info = {args[0]}}}"
    )
    text = text.replace(
        "%arg1: tensor<3x2xf32>", f"%arg1: tensor<3x2xf32> {{jax.arg_info = {args[1]}}}"
    )
    head, sep, rest = text.partition("-> (")
    rest = rest.replace('"result[0]"', results[0], 1).replace('"result[1]"', results[1], 1)
    return head + sep + rest


@pytest.mark.parametrize(
    ("args", "results", "want_args", "want_results"),
    [
        (
            ['"x"', "\"params['w']\""],
            ["\"result['y']\"", '"result[1]"'],
            ["x", "params_w"],
            ["y", "result_1"],
        ),
        (
            ["\"args[0]['w']\"", '"args[1]"'],
            ["\"result['t'][0]\"", '"result"'],
            ["arg0_w", "arg1"],
            ["t_0", "result"],
        ),
        (['"\\FF"', '"x"'], ['"r"', "[1]"], ["arg0", "x"], ["r", "result_1"]),  # not UTF-8
        (
            ['"arg1"', '"args[1]"'],
            ['"r"', '"r"'],
            ["arg0", "arg1"],
            ["result_0", "result_1"],
        ),  # clash: defaults
        # untrusted text that is no key path, a keyword, not a string: that value's default
        # name; names that would clash: every default name
        (
            ['"x; import os"', '"x"'],
            ['"result"', '"result"'],
            ["arg0", "x"],
            ["result_0", "result_1"],
        ),
        (['"class"', '"x"'], ["\"__import__('os')\"", '"r"'], ["arg0", "x"], ["result_0", "r"]),
        (['"x"', '"x"'], ["7 : i32", '"r"'], ["arg0", "arg1"], ["result_0", "r"]),
    ],
)
def test_pack_names_values_as_jax_recorded_them(tmp_path, args, results, want_args, want_results):
    module = tmp_path / "m.mlir"
    module.write_text(_with_info(args, results))
    r = cli("pack", module, "-o", tmp_path / "b")
    assert r.returncode == 0, r.stderr
    bundle = hlobundle.load(tmp_path / "b", verify=True)
    assert [a.name for a in bundle.arguments] == want_args
    assert [x.name for x in bundle.results] == want_results


def test_a_repeated_name_is_numbered_past_every_name_taken():
    from hlobundle._write._pytree_names import unique

    assert unique(["a", "a", "a_2"]) == ["a", "a_3", "a_2"]  # not a_2 twice
    assert unique(["y", "y", "y"]) == ["y", "y_2", "y_3"]


def test_result_names_follow_the_spec_rule_for_every_producer(tmp_path):
    """SPEC.md 2.1, one rule: by pytree path, where a producer that records none (module text
    without JAX's paths, Reactant) returns one bare array (`result`) or a flat tuple
    (`result_0`...)."""
    import jax
    from jax import export as jax_export

    x = np.ones(3, np.float32)

    def f(x):
        return x, {"k": x * 2}

    by_path = ["result_0", "result_1_k"]
    out = hlobundle.export(f, x, out=tmp_path / "e")
    assert [r.name for r in hlobundle.load(out).results] == by_path
    blob = tmp_path / "f.jax"
    blob.write_bytes(jax_export.export(jax.jit(f))(x).serialize())
    assert cli("pack", "--from-jax-export", blob, "-o", tmp_path / "j").returncode == 0
    assert [r.name for r in hlobundle.load(tmp_path / "j").results] == by_path
    (tmp_path / "f.mlir").write_text(lowered_text(f, x))
    assert cli("pack", tmp_path / "f.mlir", "-o", tmp_path / "p").returncode == 0
    assert [r.name for r in hlobundle.load(tmp_path / "p").results] == by_path
    out = hlobundle.export(lambda x: x * 2, x, out=tmp_path / "one")
    assert [r.name for r in hlobundle.load(out).results] == ["result"]
    (tmp_path / "g.mlir").write_text(lowered_text(lambda x: (x, x), x))
    assert cli("pack", tmp_path / "g.mlir", "-o", tmp_path / "q").returncode == 0
    assert [r.name for r in hlobundle.load(tmp_path / "q").results] == ["result_0", "result_1"]
    bare = "func.func @main(%x: tensor<3xf32>) -> tensor<3xf32> {\n  return %x : tensor<3xf32>\n}"
    for k, want in ((1, ["result"]), (2, ["result_0", "result_1"])):  # nothing recorded
        text = bare.replace("-> tensor<3xf32>", f"-> ({', '.join(['tensor<3xf32>'] * k)})")
        text = text.replace("return %x :", f"return {', '.join(['%x'] * k)} :")
        text = text.replace(": tensor<3xf32>\n}", f": {', '.join(['tensor<3xf32>'] * k)}\n}}")
        out = hlobundle.pack(text, None, tmp_path / f"bare{k}")
        assert [r.name for r in hlobundle.load(out).results] == want


def test_roles_by_name_and_by_glob_match_what_fnmatch_matches():
    """A role's key is a name or a glob (`params_*`); a key with no glob character is looked up,
    not matched against every name (export gives one key per leaf: 4,096 keys of a pytree of
    4,096 leaves made 16.8 million fnmatch calls, 11 s), and matches exactly what fnmatch
    would. A later key wins."""
    import fnmatch
    import random

    from hlobundle._write._plan import _expand_roles

    rng = random.Random(0)
    names = ["w0", "w1", "w10", "b0", "x", "params_a", "params_b", "w[0]", "a.b"]
    keys = [*names, "w*", "w?", "params_*", "*", "[wb]0", "w[0]", "a.b", "a?b", "nope*", "W0"]
    roles = ["parameter", "input", "state"]
    for _ in range(2000):
        given = {k: rng.choice(roles) for k in rng.sample(keys, rng.randint(1, 5))}
        want: dict[str, str] = {}
        for key, role in given.items():
            matched = [n for n in names if fnmatch.fnmatchcase(n, key)]
            if not matched:
                with pytest.raises(hlobundle.InputError, match="names no argument"):
                    _expand_roles(given, names)
                break
            want.update(dict.fromkeys(matched, role))
        else:
            assert _expand_roles(given, names) == want

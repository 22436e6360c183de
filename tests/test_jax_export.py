"""`jax.export` in and out: a bundle is the archive of an Exported (it keeps the module text,
so it outlives the blob's compatibility window), and gives an Exported back."""

from __future__ import annotations

import hashlib
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import ROOT, cli
from jax import export

import hlobundle

pytest.importorskip("flatbuffers", reason="Exported.serialize needs flatbuffers (a dependency)")


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


@pytest.mark.slow
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
    # the model's own, jitted (eagerly, JAX compiled each of its operations alone: 0.3 CPU-s)
    _same(grad, jax.jit(jax.grad(lambda p: model(p, X)["total"]))(PARAMS))


@pytest.mark.slow
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
    assert not any(tmp_path.iterdir())  # nothing written


def test_a_file_that_is_not_a_blob_is_a_clean_error(tmp_path):
    (tmp_path / "junk.jax").write_bytes(b"\x00" * 64)
    r = cli("pack", "--from-jax-export", tmp_path / "junk.jax", "-o", tmp_path / "b")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith("error [INPUT_INVALID] ")
    assert "is not a serialized jax.export.Exported" in r.stderr
    r = cli(
        "pack", "--from-jax-export", tmp_path / "junk.jax", "--names", "a", "-o", tmp_path / "b"
    )
    assert r.returncode == 2 and "--names does not apply" in r.stderr


@pytest.mark.slow
def test_the_packer_never_deserializes_the_vjp_itself(exported, tmp_path, monkeypatch):
    """The nested VJP (flatbuffer and MLIR bytecode) is read in a child process, like the
    module's artifact: this process deserializes the outer Exported once, never its VJP."""
    from jax._src.export import serialization

    calls = []
    real = serialization._deserialize_exported
    monkeypatch.setattr(
        serialization, "_deserialize_exported", lambda exp: calls.append(exp) or real(exp)
    )
    blob = tmp_path / "model.jax"
    blob.write_bytes(exported.serialize(vjp_order=1))
    r = cli("pack", "--from-jax-export", blob, "-o", tmp_path / "b")
    assert r.returncode == 0, r.stderr
    assert len(calls) == 1  # the outer Exported, never the VJP inside it
    assert hlobundle.load(tmp_path / "b", verify=True).manifest.vjp is not None


_PACK_AND_PEAK = r"""
import resource, sys
from hlobundle._cli._main import main
code = main(["pack", "--from-jax-export", sys.argv[1], "-o", sys.argv[2]])
from hlobundle._isolation import _fork_servers
_fork_servers._stop_servers()  # reaped: its forks' peak is now among this process's children's
print(code, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)
"""


@pytest.mark.slow
@pytest.mark.subprocess
def test_a_blob_whose_vjp_artifact_maps_gigabytes_is_refused_within_an_allowance(
    exported, tmp_path
):
    # The VJP's artifact is tests/hostile/maps_3_gb.mlirbc, which makes MLIR's bytecode reader
    # map and touch 3.4 GB before refusing it. The child that lowers through the VJP has jax's
    # 16 GiB cap; it first deserializes that artifact within the allowance the portable
    # artifact's child has. (`_get_vjp` is jax's own field for where an Exported's VJP comes
    # from: serialize() writes what it returns.)
    # The pack is a process of its own whose children's peak is theirs alone: a fork of the
    # session's CLI zygote (helpers.CliZygote.start), not a fresh interpreter that imports jax.
    import dataclasses
    import subprocess

    import helpers

    hostile = (ROOT / "tests" / "hostile" / "maps_3_gb.mlirbc").read_bytes()
    vjp = dataclasses.replace(exported.vjp(), mlir_module_serialized=hostile)
    blob = tmp_path / "model.jax"
    blob.write_bytes(dataclasses.replace(exported, _get_vjp=lambda _: vjp).serialize(vjp_order=1))
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    proc = helpers.CLI_ZYGOTE.start(blob, tmp_path / "b", source=_PACK_AND_PEAK, **pipes)
    out, err = proc.communicate(timeout=300)
    code, peak = out.split()
    assert code == "1" and "LIMIT_EXCEEDED" in err and "VJP" in err, err[-2000:]
    assert int(peak) < 1 << 30, f"a child held {int(peak) >> 20} MiB"
    assert not (tmp_path / "b").exists()


@pytest.mark.slow
def test_backward_modules_are_lowered_in_forks_of_one_server_that_imported_jax(
    exported, tmp_path, monkeypatch
):
    """A session that imports several Exporteds starts jax once: each backward module is lowered
    in a fork of one server (docs/security.md, "The isolation boundary"), which imported jax
    before it forks and holds one thread (else it would start a fresh interpreter each call)."""
    import os
    from pathlib import Path

    from hlobundle._isolation import _child, _fork_servers

    started = []
    real = _fork_servers._Server._start
    monkeypatch.setattr(_fork_servers._Server, "_start", lambda s: started.append(s) or real(s))
    for k in range(2):
        hlobundle.from_exported(exported, tmp_path / f"b{k}")
        assert hlobundle.load(tmp_path / f"b{k}").manifest.vjp is not None
    key = (os.getpid(), _child.JAX_EXPORT_CHILD)
    assert key in _fork_servers._servers, "the backward module was not lowered in a fork"
    ours = [s for s in started if s.script == _child.JAX_EXPORT_CHILD]
    assert len(ours) <= 1  # both in forks of one server (started by an earlier test, or now)
    pid = _fork_servers._servers[key].process.pid
    assert len(os.listdir(f"/proc/{pid}/task")) == 1, "a server of several threads cannot fork"
    assert "jaxlib" in Path(f"/proc/{pid}/maps").read_text(), "the server did not import jax"


@pytest.mark.slow
def test_every_mutated_blob_is_a_coded_error(exported, tmp_path):
    """Seeded mutations of a real blob (bytes flipped, or cut short): a coded error each time
    the packer refuses it, never a traceback."""
    blob = bytes(exported.serialize(vjp_order=1))
    rng = np.random.default_rng(20250101)
    mutants = [blob[: int(rng.integers(1, len(blob)))] for _ in range(3)]
    for _ in range(9):
        data = bytearray(blob)
        for k in rng.integers(0, len(blob), size=int(rng.integers(1, 4))):
            data[k] ^= int(rng.integers(1, 256))
        mutants.append(bytes(data))
    for k, data in enumerate(mutants):
        (tmp_path / f"m{k}.jax").write_bytes(data)
        r = cli("pack", "--from-jax-export", tmp_path / f"m{k}.jax", "-o", tmp_path / f"b{k}")
        assert "Traceback" not in r.stderr, (k, r.stderr[-3000:])
        assert r.returncode == 0 or r.stderr.startswith("error ["), (k, r.stderr[-3000:])
        if r.returncode == 0:  # a flip the blob tolerates: the bundle is whole
            hlobundle.load(tmp_path / f"b{k}", verify=True)


def _blob(exported, tmp_path, vjp_order=0):
    blob = tmp_path / "model.jax"
    blob.write_bytes(exported.serialize(vjp_order=vjp_order))
    return blob


def test_a_blob_with_inputs_by_name_and_computed_results(exported, tmp_path):
    blob = _blob(exported, tmp_path)
    np.save(tmp_path / "w.npy", PARAMS["w"])
    np.save(tmp_path / "b.npy", PARAMS["b"])
    np.save(tmp_path / "x.npy", X)
    inputs = [
        f"arg0_w={tmp_path / 'w.npy'}",
        f"arg0_b={tmp_path / 'b.npy'}",
        f"arg1={tmp_path / 'x.npy'}",
    ]
    r = cli(
        "pack",
        "--from-jax-export",
        blob,
        "--inputs",
        *inputs,
        "--compute-expected",
        "-o",
        tmp_path / "m",
    )
    assert r.returncode == 0, r.stderr
    bundle = hlobundle.load(tmp_path / "m", verify=True)
    _same(bundle.example_args(), (PARAMS, X))
    _same(bundle.expected_outputs()["y"], exported.call(PARAMS, X)["y"])
    r = cli("run", tmp_path / "m", "--backend", "xla")  # exits 1 when a result differs
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_blob_with_inputs_by_position_and_given_results(exported, tmp_path):
    blob = _blob(exported, tmp_path)
    np.savez(tmp_path / "in.npz", PARAMS["b"], PARAMS["w"], X)  # arr_0.. in argument order
    want = exported.call(PARAMS, X)
    np.savez(tmp_path / "out.npz", y=np.asarray(want["y"]), total=np.asarray(want["total"]))
    r = cli(
        "pack",
        "--from-jax-export",
        blob,
        "--inputs",
        tmp_path / "in.npz",
        "--expected",
        tmp_path / "out.npz",
        "-o",
        tmp_path / "m",
    )
    assert r.returncode == 0, r.stderr
    bundle = hlobundle.load(tmp_path / "m")
    _same(bundle.example_args(), (PARAMS, X))
    _same(bundle.expected_outputs()["total"], want["total"])
    np.save(tmp_path / "x.npy", X)
    r = cli("pack", "--from-jax-export", blob, "--inputs", tmp_path / "x.npy", "-o", tmp_path / "n")
    assert r.returncode == 1, r.stderr
    assert r.stderr.startswith("error [INPUT_INVALID] expected 3 input array(s)"), r.stderr


def test_no_backward_module_says_how_a_blob_gets_one(exported, tmp_path):
    r = cli("pack", "--from-jax-export", _blob(exported, tmp_path), "-o", tmp_path / "m")
    assert r.returncode == 0, r.stderr
    fn = hlobundle.load(tmp_path / "m").function("xla")
    with pytest.raises(hlobundle.TransformError, match=r"exported\.serialize\(vjp_order=1\)") as e:
        jax.grad(lambda p: fn(p, X)["total"])(PARAMS)
    assert "--with-vjp" not in str(e.value)  # which --from-jax-export refuses


def test_a_blob_given_as_module_text_points_at_from_jax_export(exported, tmp_path):
    r = cli("pack", _blob(exported, tmp_path), "-o", tmp_path / "m")
    assert r.returncode == 1 and r.stderr.startswith("error [INPUT_INVALID]"), r.stderr
    assert "--from-jax-export" in r.stderr


@pytest.mark.slow
def test_a_blob_with_symbolic_shapes_is_a_2_0_bundle_for_every_size(tmp_path):
    """jax.export's symbolic dimensions (format 2.0): kept as expressions, run for any size."""
    fn = jax.jit(lambda w, x: jnp.tanh(x @ w).sum(axis=1))
    w = np.linspace(-1, 1, 24, dtype=np.float32).reshape(8, 3)
    specs = export.symbolic_args_specs((w, np.ones((2, 8), np.float32)), (None, "b, 8"))
    blob = tmp_path / "poly.jax"
    blob.write_bytes(export.export(fn)(*specs).serialize(vjp_order=1))
    r = cli("pack", "--from-jax-export", blob, "-o", tmp_path / "p")
    assert r.returncode == 0, r.stderr
    bundle = hlobundle.load(tmp_path / "p", verify=True)
    assert json.loads((tmp_path / "p" / "manifest.json").read_text())["format_version"] == "2.0"
    assert bundle.manifest.arguments[1].shape == ["b", 8] and bundle.manifest.results[0].shape == [
        "b"
    ]
    f = bundle.function("xla")
    for n in (1, 3, 17):
        x = np.random.default_rng(n).random((n, 8), np.float32)
        np.testing.assert_allclose(np.asarray(f(w, x)), np.asarray(fn(w, x)), rtol=1e-6)
    grad = jax.grad(lambda w: f(w, np.ones((4, 8), np.float32)).sum())(w)
    want = jax.grad(lambda w: fn(w, np.ones((4, 8), np.float32)).sum())(w)
    np.testing.assert_allclose(np.asarray(grad), np.asarray(want), rtol=1e-6)


@pytest.mark.slow
def test_from_exported_takes_roles_as_export_does(exported, tmp_path):
    """A name covers the leaves under it (`arg0`: every leaf of the first argument), as
    `export(..., roles={"params": ...})` does; an argument's own name wins."""
    roles = {"arg0": "parameter", "arg0_b": "state"}
    out = hlobundle.from_exported(exported, tmp_path / "b", inputs=(PARAMS, X), roles=roles)
    got = {a.name: a.role for a in hlobundle.load(out).arguments}
    assert got == {"arg0_b": "state", "arg0_w": "parameter", "arg1": "input"}
    with pytest.raises(hlobundle.InputError, match="names no argument"):
        hlobundle.from_exported(exported, tmp_path / "c", roles={"params": "parameter"})


@pytest.mark.slow
def test_several_named_blobs_make_one_bundle_of_functions(exported, tmp_path):
    (tmp_path / "m.jax").write_bytes(exported.serialize())
    other = export.export(jax.jit(lambda params, x: x @ params["w"] + params["b"]))(PARAMS, X)
    (tmp_path / "p.jax").write_bytes(other.serialize())
    out = tmp_path / "b"
    r = cli(
        "pack",
        "--from-jax-export",
        f"model={tmp_path / 'm.jax'}",
        "--from-jax-export",
        f"project={tmp_path / 'p.jax'}",
        "-o",
        out,
    )
    assert r.returncode == 0, r.stderr
    assert "functions model, project" in r.stdout
    bundle = hlobundle.load(out, verify=True)
    assert bundle.functions == ["model", "project"] and bundle.default_function == "model"
    _same(bundle.function("xla", name="project")(PARAMS, X), other.call(PARAMS, X))
    _same(bundle.function("xla", name="model")(PARAMS, X), exported.call(PARAMS, X))
    r = cli(
        "pack",
        "--from-jax-export",
        tmp_path / "m.jax",
        "--from-jax-export",
        tmp_path / "p.jax",
        "-o",
        tmp_path / "c",
    )
    assert r.returncode == 2 and "NAME=PATH" in r.stderr
    r = cli(
        "pack",
        "--from-jax-export",
        f"model={tmp_path / 'm.jax'}",
        "--from-jax-export",
        f"bad={tmp_path / 'nothing.jax'}",
        "-o",
        tmp_path / "d",
    )
    assert r.returncode == 1 and not (tmp_path / "d").exists()  # no bundle of one of them
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def _digests(root):
    return {
        p.relative_to(root): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.mark.slow
def test_a_refused_function_leaves_the_earlier_bundle_intact(exported, tmp_path):
    """`pack` of several functions with --force over an earlier bundle, or --add of several:
    the bundle is built beside it and renamed over it only when every function packed, so a
    refused one leaves the earlier bundle as it was (before: --force deleted it)."""
    (tmp_path / "m.jax").write_bytes(exported.serialize())
    (tmp_path / "bad.jax").write_bytes(b"not a blob")
    out = tmp_path / "b"
    first = ["--from-jax-export", f"model={tmp_path / 'm.jax'}"]
    assert (
        cli(
            "pack", *first, "--from-jax-export", f"again={tmp_path / 'm.jax'}", "-o", out
        ).returncode
        == 0
    )
    before = _digests(out)
    bad = ["--from-jax-export", f"bad={tmp_path / 'bad.jax'}"]
    r = cli("pack", *first, *bad, "-o", out, "--force")
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert _digests(out) == before
    r = cli("pack", "--from-jax-export", f"third={tmp_path / 'm.jax'}", *bad, "-o", out, "--add")
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert _digests(out) == before  # not even the first of the two functions added
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    r = cli("pack", "--from-jax-export", f"third={tmp_path / 'm.jax'}", "-o", out, "--add")
    assert r.returncode == 0, r.stderr
    assert hlobundle.load(out, verify=True).functions == ["model", "again", "third"]


def test_a_symbolic_blob_packed_alone_has_its_function_as_the_default(tmp_path):
    """A 2.0 bundle of one function: a caller that names none gets it (SPEC.md 2.8)."""
    w = np.ones((8, 3), np.float32)
    specs = export.symbolic_args_specs((w, np.ones((2, 8), np.float32)), (None, "b, 8"))
    blob = tmp_path / "poly.jax"
    blob.write_bytes(export.export(jax.jit(lambda w, x: x @ w))(*specs).serialize())
    r = cli("pack", "--from-jax-export", f"predict={blob}", "-o", tmp_path / "p")
    assert r.returncode == 0, r.stderr
    manifest = json.loads((tmp_path / "p" / "manifest.json").read_text())
    assert (manifest["format_version"], manifest["default_function"]) == ("2.0", "predict")
    assert hlobundle.load(tmp_path / "p").default_function == "predict"


def _with_an_integer(params, x, n):
    return {"y": model(params, x)["y"] * n, "n": n}  # an integer argument and result: float0


@pytest.mark.parametrize("symbolic", [False, True])
def test_the_child_lowers_an_exporteds_vjp_as_the_writer_lowers_a_backward_module(symbolic):
    # The child that lowers an untrusted blob's VJP (_isolation/_jax_export_child.py) imports
    # nothing of the package, so it lowers by itself: it must give the text the writer's
    # `lower_backward_of` gives for the same Exported's call.
    from jax import dtypes

    from hlobundle._isolation import _jax_export_child
    from hlobundle._mlir_context import canonical
    from hlobundle._parse import _mlir
    from hlobundle._write import _lowering

    args = (PARAMS, X, np.int32(3))
    specs = export.symbolic_args_specs(args, (None, "b, 3", None)) if symbolic else args
    exported = export.export(jax.jit(_with_an_integer))(*specs)

    def primal(*flat):
        args, kwargs = jax.tree_util.tree_unflatten(exported.in_tree, flat)
        return jax.tree_util.tree_leaves(exported.call(*args, **kwargs))

    def cotangent(aval):
        inexact = jnp.issubdtype(aval.dtype, jnp.inexact)
        return jax.ShapeDtypeStruct(aval.shape, aval.dtype if inexact else dtypes.float0)

    primals = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in exported.in_avals]
    cotangents = [cotangent(a) for a in exported.out_avals]
    writer = _lowering.lower_backward_of(primals, cotangents, primal)
    child = _jax_export_child.backward_of_exported(exported)
    # Locations left out: jax numbers them differently from one symbolic lowering to the next.
    assert canonical(_mlir.parse(child)) == canonical(_mlir.parse(writer))
    assert ("?x" in writer) == symbolic

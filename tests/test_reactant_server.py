"""`pack --from-reactant-server`: ReactantServer.jl model bundles (manifest.yaml, model.mlir or
model.b{N}.mlir, weights.safetensors with argument_order), written here as that server's own
test helper writes them: the module as a portable artifact, the weights as SafeTensors.jl stores
a Julia array (Python reads the same shape)."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import jax
import numpy as np
import pytest
from helpers import ROOT, cli, lowered_text
from safetensors.numpy import save_file

import hlobundle

RNG = np.random.default_rng(7)
W_JULIA = RNG.standard_normal((2, 3)).astype(np.float32)  # Dense(3 => 2): Julia's weight
B_JULIA = RNG.standard_normal(2).astype(np.float32)
MANIFEST = """\
format_version: "2.0"
name: dense
kind: model
description: a Lux Dense layer, y = W x .+ b
executable_inputs:
  - name: x
    dtype: f32
    shape: "in"
    dims: {i: 3}
executable_outputs:
  - name: y
    dtype: f32
    shape: "on"
    dims: {o: 2}
batching:
  compiled_batch_sizes: [4, 8]
"""


def _portable(text: str) -> bytes:
    from hlobundle._parse import _mlir

    return _mlir.to_portable(_mlir.parse(text), _mlir.default_target())


def server_bundle(tmp_path: Path, manifest: str = MANIFEST, order=("weight", "bias")) -> Path:
    """What Reactant compiles for a Dense layer per batch size: @main(x, W, b) in the module's
    (row-major) orientation, x: n x 3, W: 3 x 2 (Julia's 2 x 3 reversed), b: 2."""
    root = tmp_path / "dense"
    root.mkdir()
    (root / "manifest.yaml").write_text(manifest)
    for n in (4, 8):
        (root / f"model.b{n}.mlir").write_bytes(dense_module(n))
    tensors = {"weight": W_JULIA, "bias": B_JULIA}
    save_file(
        {k: tensors[k] for k in order},
        root / "weights.safetensors",
        metadata={"argument_order": json.dumps(list(order))},
    )
    return root


def dense_module(n: int, fn=lambda x, w, b: x @ w + b, outputs: int = 2) -> bytes:
    """The module Reactant compiles for batch size `n` (a portable artifact): `fn(x, W, b)`."""
    x = np.zeros((n, 3), np.float32)
    w, b = np.zeros((3, outputs), np.float32), np.zeros(outputs, np.float32)
    return _portable(lowered_text(fn, x, w, b))


def julia_dense(x_julia: np.ndarray) -> np.ndarray:
    return W_JULIA @ x_julia + B_JULIA[:, None]


@pytest.mark.slow
def test_a_server_bundle_packs_and_runs_in_julias_orientation(tmp_path):
    out = hlobundle.from_reactant_server(server_bundle(tmp_path), tmp_path / "b")
    b = hlobundle.load(out, verify=True)
    assert [(a.name, a.role, a.layout, a.shape) for a in b.arguments] == [
        ("x", "input", "column_major", [4, 3]),
        ("weight", "parameter", "column_major", [3, 2]),
        ("bias", "parameter", "column_major", [2]),
    ]
    assert [r.name for r in b.results] == ["y"] and b.manifest.function == "b4"
    # every compiled batch size is a function, the smallest the default, the weights stored once
    assert b.functions == ["b4", "b8"] and b.default_function == "b4"
    assert b.select("b8").arguments[0].shape == [8, 3]
    assert [f for f in b.bundle_manifest.files if f.endswith(".safetensors")] == [
        "weights.safetensors"
    ]
    assert b.arguments[0].value is None  # a server's inputs come with requests
    np.testing.assert_array_equal(b.tensor("weight", layout="producer"), W_JULIA)
    x_julia = RNG.standard_normal((3, 4)).astype(np.float32)
    (y,) = b.function("xla").call_flat(x_julia.T, b.tensor("weight"), b.tensor("bias"))
    np.testing.assert_allclose(np.asarray(y).T, julia_dense(x_julia), rtol=1e-6)


@pytest.mark.slow
def test_cli_pack_and_run_with_julia_inputs(tmp_path):
    src = server_bundle(tmp_path)
    r = cli("pack", "--from-reactant-server", src, "--batch-size", "8", "-o", tmp_path / "b")
    assert r.returncode == 0, r.stderr
    assert "the inputs have no stored values" in r.stdout
    assert hlobundle.load(tmp_path / "b").functions == ["dense"]  # that batch size alone
    x_julia = RNG.standard_normal((3, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x_julia)
    r = cli(
        "run",
        tmp_path / "b",
        "--inputs",
        f"x={tmp_path / 'x.npy'}",
        "--layout",
        "producer",
        "--save-outputs",
        tmp_path / "y.npz",
        "--backend",
        "xla",
    )
    assert r.returncode == 0, r.stderr
    np.testing.assert_allclose(np.load(tmp_path / "y.npz")["y"], julia_dense(x_julia), rtol=1e-6)
    r = cli("run", tmp_path / "b", "--backend", "xla")  # invented x, the stored weights
    assert r.returncode == 0 and "generated and stored inputs" in r.stdout


def test_the_weights_follow_argument_order_not_the_files_order(tmp_path):
    src = server_bundle(tmp_path, order=("weight", "bias"))
    (src / "weights.safetensors").unlink()
    save_file(
        {"bias": B_JULIA, "weight": W_JULIA},
        src / "weights.safetensors",
        metadata={"argument_order": json.dumps(["weight", "bias"])},
    )
    b = hlobundle.load(hlobundle.from_reactant_server(src, tmp_path / "b"))
    assert [a.name for a in b.arguments] == ["x", "weight", "bias"]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m.replace("kind: model", "kind: meta"), "a meta bundle is Julia code"),
        (lambda m: m.replace("name: dense", "name: other"), "is not the directory's name"),
        (lambda m: m.replace('"2.0"', '"3.0"'), "format_version '3.0'"),
        (
            lambda m: m.replace("dims: {i: 3}", "dims: {i: 5}"),
            "'x' is float32[4, 5] in the module's orientation",
        ),
        (lambda m: m.replace("dims: {i: 3}", "dims: {i: -1}"), "a variable (-1)"),
        (
            lambda m: m.replace('dtype: f32\n    shape: "in"', 'dtype: f64\n    shape: "in"'),
            "'x' is float64",
        ),
        (lambda m: m.replace("dtype: f32", "dtype: f128", 1), "dtype 'f128' is not one of"),
        (lambda m: m.replace('shape: "in"', 'shape: "nn"'), "repeats a letter"),
        (lambda m: m + "extra: &a [1, 2]\nmore: *a\n", "aliases (*name) are not accepted"),
        (lambda m: m + "broken: [\n", "manifest.yaml is not valid YAML"),
        (lambda m: "- just a list\n", "manifest.yaml is not a mapping"),
        (
            lambda m: m.replace("compiled_batch_sizes: [4, 8]", "compiled_batch_sizes: [0]"),
            "positive integers",
        ),
        (
            lambda m: m.replace("compiled_batch_sizes: [4, 8]", "compiled_batch_sizes: [4, 8, 4]"),
            "lists batch size 4 twice",
        ),
        (  # its first output matches @main's one result: the count alone is wrong
            lambda m: m.replace(
                "batching:", '  - {name: z, dtype: f32, shape: "", dims: {}}\nbatching:'
            ),
            "manifest.yaml lists 2 executable_outputs; @main has 1",
        ),
    ],
)
def test_hostile_or_inconsistent_manifests_are_refused(tmp_path, edit, message):
    src = server_bundle(tmp_path, manifest=edit(MANIFEST))
    r = cli("pack", "--from-reactant-server", src, "-o", tmp_path / "b")
    assert r.returncode == 1 and "error [INPUT_INVALID]" in r.stderr
    assert message in r.stderr
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m.replace("dims: {i: 3}", "dims: {i: " + "9" * 5000 + "}"), "not valid YAML"),
        (lambda m: m + "created: 2023-02-30\n", "not valid YAML"),
        (lambda m: m + "created: 2023-02-01 10:00:00 +99:00\n", "not valid YAML"),
        (lambda m: m + "? [a, b]\n: 1\n", "not valid YAML"),
        (lambda m: m + "code: !!python/name:os.system\n", "not valid YAML"),
        (lambda m: m.replace("dtype: f32", "dtype: [f32]", 1), "dtype ['f32'] is not one of"),
        (lambda m: m.replace('shape: "in"', "shape: {i: 1}"), "is not a string of letters"),
    ],
    ids=[
        "huge-int",
        "feb-30",
        "tz-offset",
        "unhashable-key",
        "python-tag",
        "list-dtype",
        "map-shape",
    ],
)
def test_every_yaml_value_error_is_a_coded_error(tmp_path, edit, message):
    src = server_bundle(tmp_path, manifest=edit(MANIFEST))
    with pytest.raises(hlobundle.InputError, match=re.escape(message)) as e:
        hlobundle.from_reactant_server(src, tmp_path / "b")
    assert e.value.code == "INPUT_INVALID" and not (tmp_path / "b").exists()


def _fifo(path: Path) -> None:
    os.mkfifo(path)


@pytest.mark.parametrize("name", ["weights.safetensors", "model.b4.mlir", "manifest.yaml"])
@pytest.mark.parametrize(
    "make",
    [_fifo, Path.mkdir, lambda p: p.symlink_to("/dev/zero")],
    ids=["fifo", "directory", "dev-zero"],
)
def test_a_named_file_that_is_not_a_regular_file_is_refused(tmp_path, name, make):
    src = server_bundle(tmp_path)
    (src / name).unlink()
    make(src / name)
    r = cli("pack", "--from-reactant-server", src, "-o", tmp_path / "b")
    assert r.returncode == 1 and "error [INPUT_INVALID]" in r.stderr, r.stderr
    assert name in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "b").exists()


def test_weights_without_argument_order_and_a_missing_batch_size(tmp_path):
    src = server_bundle(tmp_path)
    r = cli("pack", "--from-reactant-server", src, "--batch-size", "16", "-o", tmp_path / "b")
    assert r.returncode == 1 and "no model.b16.mlir (compiled batch sizes: [4, 8])" in r.stderr
    save_file({"weight": W_JULIA}, src / "weights.safetensors")
    r = cli("pack", "--from-reactant-server", src, "-o", tmp_path / "b")
    assert r.returncode == 1 and "no argument_order metadata" in r.stderr


def test_model_jl_is_left_behind_with_a_warning(tmp_path):
    src = server_bundle(tmp_path)
    (src / "model.jl").write_text("register_model(...)  # never run\n")
    with pytest.warns(hlobundle.HloBundleWarning, match="model.jl .* is not carried"):
        hlobundle.from_reactant_server(src, tmp_path / "b")
    assert not (tmp_path / "b" / "model.jl").exists()


def test_a_text_module_is_read_too(tmp_path):
    src = server_bundle(tmp_path)
    for n in (4, 8):
        (src / f"model.b{n}.mlir").unlink()
    x = np.zeros((4, 3), np.float32)
    (src / "model.mlir").write_text(lowered_text(lambda x, w, b: x @ w + b, x, W_JULIA.T, B_JULIA))
    (src / "manifest.yaml").write_text(MANIFEST.replace("[4, 8]", "[4]"))
    b = hlobundle.load(hlobundle.from_reactant_server(src, tmp_path / "b"))
    assert b.arguments[0].shape == [4, 3]
    assert jax.numpy.asarray(b.tensor("bias")).shape == (2,)


# One module file per batch size, by the names the format defines (issue "Trust, round 4",
# class 6): `model.b{N}.mlir`, N in ASCII digits without a leading zero, for each N the manifest
# lists, or the one `model.mlir`. Any other name a reader could take for a size's module is refused,
# whatever order the directory lists its files in.

ALIASES = {
    "leading-zero": "model.b04.mlir",
    "arabic-indic-digit": "model.b\u0664.mlir",  # Python's \d and int() take it as 4
    "fullwidth-digit": "model.b\uff14.mlir",
    "trailing-newline": "model.b4.mlir\n",  # `$` matches before a final newline
    "upper-case": "MODEL.B4.MLIR",  # the same file where names are case-insensitive
    "sign": "model.b+4.mlir",
    "not-a-number": "model.backup.mlir",
    "two-aliases": ("model.b04.mlir", "model.b\u0664.mlir"),
}


def _other_program(x, w, b):
    return x @ w - b


def _listed_in(monkeypatch, order: str, root: Path) -> list:
    """`os.listdir` answering for `root` in `order` (`sorted`, `reversed`); the calls for `root`,
    to check that the listing turned is the one the importer reads."""
    real, calls = os.listdir, []

    def listdir(path="."):
        names = real(path)
        if isinstance(path, (str, os.PathLike)) and Path(path) == root:
            calls.append(path)
            return sorted(names, reverse=order == "reversed")
        return names

    monkeypatch.setattr(os, "listdir", listdir)
    return calls


@pytest.mark.parametrize("alias", list(ALIASES.values()), ids=list(ALIASES))
def test_an_alias_beside_a_batch_sizes_module_is_refused_in_either_order(
    tmp_path, monkeypatch, alias
):
    """Another program beside `model.b4.mlir` under a name read as batch size 4 (before: whichever
    the directory listed last was packed as b4) or like one: refused in both orders alike, naming
    the alias, nothing written."""
    src = server_bundle(tmp_path)
    aliases = alias if isinstance(alias, tuple) else (alias,)
    for name in aliases:
        (src / name).write_bytes(dense_module(4, _other_program))
    refusals = set()
    for order in ("sorted", "reversed"):
        calls = _listed_in(monkeypatch, order, src)
        with pytest.raises(hlobundle.InputError) as e:
            hlobundle.from_reactant_server(src, tmp_path / order)
        assert calls, "the importer lists the directory with os.listdir"
        assert e.value.code == "INPUT_INVALID"
        assert all(repr(name) in str(e.value) for name in aliases)
        assert (
            "is not a module file name" if len(aliases) == 1 else "are not module file names"
        ) in str(e.value)
        assert not (tmp_path / order).exists()
        refusals.add(str(e.value))
    assert len(refusals) == 1, refusals


def test_cli_refuses_an_alias_whichever_file_was_written_first(tmp_path):
    errors = []
    for first in ("alias", "canonical"):
        (tmp_path / first).mkdir()
        src = server_bundle(tmp_path / first)
        files = {
            "model.b04.mlir": dense_module(4, _other_program),
            "model.b4.mlir": (src / "model.b4.mlir").read_bytes(),
        }
        (src / "model.b4.mlir").unlink()
        for name in files if first == "alias" else reversed(files):
            (src / name).write_bytes(files[name])
        r = cli("pack", "--from-reactant-server", src, "-o", tmp_path / first / "b")
        assert r.returncode == 1 and "error [INPUT_INVALID]" in r.stderr, r.stderr
        assert not (tmp_path / first / "b").exists()
        errors.append(r.stderr.replace(str(src), "DIR"))
    assert errors[0] == errors[1] and "'model.b04.mlir'" in errors[0]
    assert "reads as batch size 4" in errors[0]


@pytest.mark.parametrize(
    ("sizes", "extra", "message"),
    [
        (
            "[4, 8]",
            16,
            "'model.b16.mlir' is the module of batch size 16, which "
            "manifest.yaml's batching.compiled_batch_sizes [4, 8] does not list",
        ),
        (
            "[4]",
            None,
            "'model.b8.mlir' is the module of batch size 8, which "
            "manifest.yaml's batching.compiled_batch_sizes [4] does not list",
        ),
        ("[]", None, "'model.b4.mlir', 'model.b8.mlir' are the modules of batch sizes 4, 8"),
    ],
    ids=["another-size", "an-unlisted-file", "none-listed"],
)
def test_a_module_for_a_size_the_manifest_does_not_list_is_refused(tmp_path, sizes, extra, message):
    src = server_bundle(tmp_path, manifest=MANIFEST.replace("[4, 8]", sizes))
    if extra:
        (src / f"model.b{extra}.mlir").write_bytes(dense_module(extra))
    r = cli("pack", "--from-reactant-server", src, "-o", tmp_path / "b")
    assert r.returncode == 1 and "error [INPUT_INVALID]" in r.stderr, r.stderr
    assert message in r.stderr
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("batch_size", [None, 4])
def test_a_listed_size_without_its_module_is_refused(tmp_path, batch_size):
    src = server_bundle(tmp_path, manifest=MANIFEST.replace("[4, 8]", "[4, 8, 16]"))
    flags = [] if batch_size is None else ["--batch-size", batch_size]
    r = cli("pack", "--from-reactant-server", src, *flags, "-o", tmp_path / "b")
    assert r.returncode == 1 and "error [INPUT_INVALID]" in r.stderr, r.stderr
    assert "batching.compiled_batch_sizes lists 16, but there is no 'model.b16.mlir'" in r.stderr
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("beside", ["model.b4.mlir", "model.b04.mlir"])
def test_model_mlir_is_the_module_only_without_per_size_files(tmp_path, beside):
    """`model.mlir` is read when no file names a batch size; beside `model.b4.mlir` (which the
    server would read instead) or an alias of one, the directory is refused."""
    src = server_bundle(tmp_path, manifest=MANIFEST.replace("[4, 8]", "[4]"))
    (src / "model.b8.mlir").unlink()
    (src / "model.mlir").write_bytes(dense_module(4, _other_program))
    if beside != "model.b4.mlir":
        (src / "model.b4.mlir").rename(src / beside)
    r = cli("pack", "--from-reactant-server", src, "-o", tmp_path / "b")
    assert r.returncode == 1 and "error [INPUT_INVALID]" in r.stderr, r.stderr
    assert repr(beside) in r.stderr and not (tmp_path / "b").exists()
    if beside == "model.b4.mlir":
        assert "both model.mlir and" in r.stderr


def test_a_directory_without_a_module_is_refused(tmp_path):
    src = server_bundle(tmp_path)
    for n in (4, 8):
        (src / f"model.b{n}.mlir").unlink()
    r = cli("pack", "--from-reactant-server", src, "-o", tmp_path / "b")
    assert r.returncode == 1 and "error [INPUT_INVALID]" in r.stderr, r.stderr
    assert "dense has no model.mlir and no model.b{N}.mlir" in r.stderr


def _tree(root: Path) -> dict[str, object]:
    """Every path under `root`: a file's sha256 and mode, a directory's mode; and `root`'s inode."""
    tree: dict[str, object] = {".": (root.stat().st_ino, root.stat().st_mode)}
    for p in sorted(root.rglob("*")):
        data = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "directory"
        tree[str(p.relative_to(root))] = (data, p.stat().st_mode)
    return tree


@pytest.mark.parametrize("existing", [True, False], ids=["over-a-bundle", "new"])
def test_a_refused_second_batch_size_leaves_the_output_as_it_was(tmp_path, existing):
    """`--force` over a good bundle, with a directory whose second size is refused (its @main
    returns float32[8, 5], the manifest says [8, 2]): before, b4 was written over OUT and then OUT
    deleted. Now the bundle is built beside OUT and renamed into place only when whole."""
    src = server_bundle(tmp_path)
    out = tmp_path / "out.hlobundle"
    if existing:
        hlobundle.from_reactant_server(src, out)
    before = _tree(out) if existing else None
    (src / "model.b8.mlir").write_bytes(dense_module(8, outputs=5))
    r = cli("pack", "--from-reactant-server", src, "-o", out, "--force")
    assert r.returncode == 1 and "error [INPUT_INVALID]" in r.stderr, r.stderr
    assert "(Julia's axes reversed, batch 8), but @main has float32[8, 5]" in r.stderr
    assert (_tree(out) if existing else out.exists()) == (before if existing else False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dense"] + ["out.hlobundle"] * existing


def test_force_replaces_a_bundle_whole_and_nothing_else(tmp_path):
    src = server_bundle(tmp_path)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("not a bundle")
    r = cli("pack", "--from-reactant-server", src, "-o", mine, "--force")
    assert r.returncode == 1 and "error [OUTPUT_EXISTS]" in r.stderr, r.stderr
    assert "exists and is not a bundle; --force only replaces bundles" in r.stderr  # checked first
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]
    assert (mine / "notes.txt").read_text() == "not a bundle"
    out = tmp_path / "out.hlobundle"
    r = cli("pack", "--from-reactant-server", src, "--batch-size", "8", "-o", out)
    assert r.returncode == 0, r.stderr
    r = cli("pack", "--from-reactant-server", src, "-o", out)
    assert r.returncode == 1 and "error [OUTPUT_EXISTS]" in r.stderr
    assert hlobundle.load(out).functions == ["dense"]
    r = cli("pack", "--from-reactant-server", src, "-o", out, "--force")
    assert r.returncode == 0, r.stderr
    assert hlobundle.load(out, verify=True).functions == ["b4", "b8"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dense", "mine", "out.hlobundle"]


def test_emit_reactant_server_round_trips_with_inputs_first(tmp_path):
    """The example's @main takes its parameters first; ReactantServer.jl passes the inputs
    first: the emitted module's new @main reorders, and reading it back gives the same results."""
    example = hlobundle.load(ROOT / "examples" / "lenet5.hlobundle")
    out = hlobundle.emit_reactant_server(example, tmp_path / "lenet")
    assert sorted(p.name for p in out.iterdir()) == [
        "manifest.yaml",
        "model.mlir",
        "weights.safetensors",
    ]
    assert (out / "model.mlir").read_bytes().startswith(b"ML\xefR")  # a portable artifact
    assert out.stat().st_mode & 0o005 == 0o005  # readable by the server's user, as umask allows
    back = hlobundle.load(hlobundle.from_reactant_server(out, tmp_path / "back"))
    assert [a.name for a in back.arguments] == ["images"] + [
        a.name for a in example.arguments if a.role == "parameter"
    ]
    for a in back.arguments[1:]:  # the weights, bit for bit, in the module's orientation
        np.testing.assert_array_equal(back.tensor(a.name), example.tensor(a.name))
    images = example.tensor("images")
    want = example.function("xla").call_flat(*[example.tensor(a.name) for a in example.arguments])
    got = back.function("xla").call_flat(images, *[back.tensor(a.name) for a in back.arguments[1:]])
    np.testing.assert_array_equal(np.asarray(got[0]), np.asarray(want[0]))
    r = cli(
        "emit", ROOT / "examples" / "lenet5.hlobundle", "--format", "reactant-server", "-o", out
    )
    assert r.returncode == 1 and "already exists" in r.stderr  # nothing is replaced


def test_emit_reactant_server_refuses_what_the_server_cannot_hold(tmp_path):
    x = np.zeros(4, np.complex64)
    b = hlobundle.pack(lowered_text(lambda x: x, x), [x], tmp_path / "c")
    r = cli("emit", b, "--format", "reactant-server", "-o", tmp_path / "out")
    assert r.returncode == 1 and "no dtype token for ['complex64']" in r.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_emit_a_bundle_of_batch_sizes_writes_one_module_per_size(tmp_path):
    """Import a multi-size server bundle, emit it, import it again: every size comes back as a
    function, the weights' bytes and the results are the same."""
    first = hlobundle.load(hlobundle.from_reactant_server(server_bundle(tmp_path), tmp_path / "b"))
    (tmp_path / "again").mkdir()
    out = hlobundle.emit_reactant_server(first, tmp_path / "again" / "dense")
    assert sorted(p.name for p in out.iterdir()) == [
        "manifest.yaml",
        "model.b4.mlir",
        "model.b8.mlir",
        "weights.safetensors",
    ]
    yaml_text = (out / "manifest.yaml").read_text()
    assert "compiled_batch_sizes:\n  - 4\n  - 8" in yaml_text
    back = hlobundle.load(hlobundle.from_reactant_server(out, tmp_path / "back"))
    assert back.functions == first.functions == ["b4", "b8"]
    assert back.default_function == "b4"
    for name in ("weight", "bias"):
        assert back.tensor(name).tobytes() == first.tensor(name).tobytes()
    for size in (4, 8):
        f, g = first.select(f"b{size}"), back.select(f"b{size}")
        assert [(a.name, a.role, a.shape) for a in g.arguments] == [
            (a.name, a.role, a.shape) for a in f.arguments
        ]
        x = RNG.standard_normal((size, 3)).astype(np.float32)
        args = [x, first.tensor("weight"), first.tensor("bias")]
        (want,) = f.function("xla").call_flat(*args)
        (got,) = g.function("xla").call_flat(*args)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_emit_one_function_of_several_with_function(tmp_path):
    b = hlobundle.from_reactant_server(server_bundle(tmp_path), tmp_path / "b")
    r = cli("emit", b, "--format", "reactant-server", "--function", "b8", "-o", tmp_path / "d8")
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (tmp_path / "d8").iterdir()) == [
        "manifest.yaml",
        "model.mlir",
        "weights.safetensors",
    ]
    back = hlobundle.load(hlobundle.from_reactant_server(tmp_path / "d8", tmp_path / "back"))
    assert back.functions == ["d8"] and back.arguments[0].shape == [8, 3]


def _two_functions(tmp_path: Path, second, x, name="b8") -> Path:
    w = np.ones((3, 2), np.float32)
    out = hlobundle.export(
        lambda w, x: x @ w,
        w,
        np.ones((4, 3), np.float32),
        out=tmp_path / "b",
        name="b4",
        roles={"w": "parameter"},
    )
    weight = second.__code__.co_varnames[0]
    hlobundle.export(second, w, x, out=out, name=name, roles={weight: "parameter"}, add=True)
    return out


X8 = np.ones((8, 3), np.float32)


@pytest.mark.parametrize(
    ("second", "x", "kw", "message"),
    [
        (lambda w, x: x @ w, X8, {}, None),
        (
            lambda w, x: (x @ w)[:, :1],
            X8,
            {},
            "result 'result' is float32[8, 1] in b8 but float32[4, 2] in b4",
        ),
        (
            lambda w, x: x[:, :2] @ w[:2],
            np.ones((8, 4), np.float32),
            {},
            "argument 'x' is float32[8, 4] in b8 but float32[4, 3] in b4",
        ),
        (
            lambda w, x: x @ w,
            np.ones((4, 3), np.float32),
            {},
            "no input has an axis whose size is each function's batch size",
        ),
        (lambda w, x: x @ w, X8, {"name": "large"}, "'large' is not named bN"),
        (lambda v, x: x @ v, X8, {}, "b8 takes ['v', 'x'] but b4 takes ['w', 'x']"),
    ],
    ids=["same-model", "result-shape", "input-shape", "no-batch-axis", "name", "weight-name"],
)
def test_emit_refuses_functions_that_are_not_batch_sizes_of_one_model(
    tmp_path, second, x, kw, message
):
    b = _two_functions(tmp_path, second, x, **kw)
    if message is None:  # the control: the same model at two batch sizes is emitted
        out = hlobundle.emit_reactant_server(b, tmp_path / "ok")
        assert (out / "model.b8.mlir").is_file()
        return
    r = cli("emit", b, "--format", "reactant-server", "-o", tmp_path / "out")
    assert r.returncode == 1 and "error [INPUT_INVALID]" in r.stderr, r.stderr
    assert "not batch sizes of one model" in r.stderr and message in r.stderr
    assert "--function NAME" in r.stderr and not (tmp_path / "out").exists()


def test_emit_refuses_a_symbolic_shape_and_a_missing_directory(tmp_path):
    w = np.ones((3, 2), np.float32)
    b = hlobundle.export(
        lambda w, x: x @ w,
        w,
        np.ones((4, 3), np.float32),
        out=tmp_path / "b",
        roles={"w": "parameter"},
        shapes_specs=(None, "b, 3"),
    )
    with pytest.raises(hlobundle.InputError, match="x has a symbolic dimension") as e:
        hlobundle.emit_reactant_server(b, tmp_path / "out")
    assert e.value.code == "INPUT_INVALID" and not (tmp_path / "out").exists()
    fixed = hlobundle.from_reactant_server(server_bundle(tmp_path), tmp_path / "fixed")
    with pytest.raises(hlobundle.InputError, match="'.*missing' does not exist; create it"):
        hlobundle.emit_reactant_server(fixed, tmp_path / "missing" / "out")

"""Attacks on the reader (issue: what `verify` accepts is exactly what runs).

Each test is an attack a stranger's bundle can make; each must end in a coded error or the
documented safe behaviour, never a crash, a hang or a silently different computation.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import INSTALLED_BACKENDS, ROOT, cli, edit_manifest, rehash, sample

import hlobundle
from hlobundle._parse import _mlir

T = "tensor<3xf32>"


def module(op: str, extra: str = "") -> str:
    return (
        f"func.func @main(%x: {T}, %w: {T}) -> {T} {{\n  %y = {op}\n  return %y : {T}\n}}\n{extra}"
    )


ADD = module(f"stablehlo.add %x, %w : {T}")
MUL = module(f"stablehlo.multiply %x, %w : {T}")


@pytest.fixture
def add_bundle(tmp_path):
    x, w = sample((3,), "float32", 1), sample((3,), "float32", 2)
    return hlobundle.pack(ADD, [x, w], tmp_path / "add", names=["x", "w"])


def swap_artifact(bundle, tmp_path, text, name="module.mlirbc"):
    """Replace a form's artifact by that of another program, with honest hashes."""
    other = hlobundle.pack(text, None, tmp_path / "other", names=["x", "w"])
    (bundle / name).write_bytes((other / "module.mlirbc").read_bytes())
    rehash(bundle, name)


# --- one program per bundle -------------------------------------------------------------


def test_artifact_computing_something_else_is_refused(add_bundle, tmp_path):
    swap_artifact(add_bundle, tmp_path, MUL)
    with pytest.raises(hlobundle.errors.ModuleMismatchError, match="not the same program") as e:
        hlobundle.load(add_bundle)  # every backend runs one of the two: load refuses
    assert e.value.code == "MODULE_MISMATCH" and e.value.path == "module.mlirbc"


@pytest.mark.parametrize("backend", INSTALLED_BACKENDS)
def test_every_backend_refuses_text_and_artifact_that_differ(add_bundle, tmp_path, backend):
    # The enzyme backend runs the text, xla the artifact: neither runs a two-program bundle.
    swap_artifact(add_bundle, tmp_path, MUL)
    r = cli("run", add_bundle, "--backend", backend)
    assert r.returncode == 1 and "MODULE_MISMATCH" in r.stderr, r.stderr


def test_what_verify_checked_is_what_runs_after_an_in_place_overwrite(add_bundle):
    # verify(), then another process rewrites weights in place (same size, same inode): the
    # function still computes with the bytes whose sha256 verify() checked.
    bundle = hlobundle.load(add_bundle)
    bundle.verify()
    fn = bundle.function("xla")
    want = np.asarray(fn(*bundle.example_args())[0])
    stored = bundle.tensor("w").copy()
    with open(add_bundle / "inputs.safetensors", "r+b") as f:
        data = f.read()
        f.seek(0)
        f.write(data.replace(stored.tobytes(), (stored + 100).tobytes()))
    assert (add_bundle / "inputs.safetensors").read_bytes() != data
    np.testing.assert_array_equal(bundle.tensor("w"), stored)
    np.testing.assert_array_equal(np.asarray(fn(*bundle.example_args())[0]), want)


def test_artifact_written_by_another_jaxlib_is_compared_by_meaning(add_bundle, tmp_path):
    # Not byte-equal to what this jaxlib writes (another target), yet the same program.
    text = (add_bundle / "module.mlir").read_text()
    older = _mlir.to_portable(_mlir.parse(text), "1.0.0")
    assert older != (add_bundle / "module.mlirbc").read_bytes()
    (add_bundle / "module.mlirbc").write_bytes(older)
    rehash(add_bundle, "module.mlirbc")
    hlobundle.load(add_bundle).verify()
    fn = hlobundle.load(add_bundle).function("xla")
    assert np.allclose(fn(np.ones(3, np.float32), np.ones(3, np.float32))[0], 2.0)


@pytest.mark.parametrize("seed", range(6))
def test_mutated_artifact_never_crashes_the_reader(add_bundle, tmp_path, seed):
    # MLIR's bytecode reader segfaults or aborts on some 1-4 byte mutations; the artifact
    # is deserialized in a child process, so this process sees a coded error.
    rng = np.random.default_rng(seed)
    data = bytearray((add_bundle / "module.mlirbc").read_bytes())
    for _ in range(rng.integers(1, 5)):
        data[rng.integers(4, len(data))] = rng.integers(0, 256)
    (add_bundle / "module.mlirbc").write_bytes(bytes(data))
    rehash(add_bundle, "module.mlirbc")
    try:
        hlobundle.load(add_bundle).verify()
    except hlobundle.HloBundleError as e:
        # LIMIT_EXCEEDED: counts that claim more memory than the child may take (seed 5)
        assert e.code in {"MLIR_INVALID", "MODULE_MISMATCH", "LIMIT_EXCEEDED"}, e
        assert e.path == "module.mlirbc"


def deep_artifact(depth: int) -> bytes:
    """MLIR bytecode of `depth` nested modules: a few KiB that print as depth**2 characters."""
    import io

    from jaxlib.mlir import ir

    with _mlir.context(), ir.Location.unknown():
        top = ir.Module.create()
        block = top.body
        for _ in range(depth):
            with ir.InsertionPoint(block):
                op = ir.Operation.create("builtin.module", regions=1)
            block = op.regions[0].blocks.append()
        buffer = io.BytesIO()
        top.operation.write_bytecode(buffer)
        return buffer.getvalue()


@pytest.mark.slow
@pytest.mark.parametrize("depth", [300, 5000])
def test_a_deep_artifact_is_refused_without_printing_it(add_bundle, depth):
    # 5000 deep: 57 KiB that printed as 50 MB of indentation before the child checked nesting.
    (add_bundle / "module.mlirbc").write_bytes(deep_artifact(depth))
    rehash(add_bundle, "module.mlirbc")
    with pytest.raises(hlobundle.errors.LimitError, match="nest more than 256 deep") as e:
        hlobundle.load(add_bundle).verify()
    assert e.value.path == "module.mlirbc"


def test_the_child_prints_no_more_than_the_text_it_is_compared_with(add_bundle, tmp_path):
    # Another program whose print is longer: the child stops at the text's length.
    from hlobundle._parse import _artifacts

    pads = "".join(f"func.func private @pad{i}() {{\n  return\n}}\n" for i in range(50))
    longer = module(f"stablehlo.add %x, %w : {T}", pads)
    other = hlobundle.pack(longer, None, tmp_path / "other", names=["x", "w"])
    artifact = (other / "module.mlirbc").read_bytes()
    text, whole = _artifacts._canonical_prefix(artifact, "module.mlirbc", 100)
    assert len(text) == 100 and not whole
    (add_bundle / "module.mlirbc").write_bytes(artifact)
    rehash(add_bundle, "module.mlirbc")
    with pytest.raises(hlobundle.errors.ModuleMismatchError, match="not the same program"):
        hlobundle.load(add_bundle).verify()


def _stand_in_child(monkeypatch, tmp_path, name, imports, main):
    """Replace the artifact child (`_artifacts.CHILD`) with a script of `main`'s one-line body."""
    from hlobundle._parse import _artifacts

    script = tmp_path / name
    script.write_text(f"import {imports}\n\ndef main():\n    {main}\n")
    monkeypatch.setattr(_artifacts, "CHILD", script)
    return _artifacts


@pytest.mark.subprocess
def test_a_crash_of_the_bytecode_reader_is_a_coded_error(monkeypatch, tmp_path):
    # Stand in for a crashing MLIR: the child kills itself the way a segfault would. Its fork
    # server survives and forks the next child, the real one.
    from hlobundle._parse import _artifacts

    real = _artifacts.CHILD
    _stand_in_child(
        monkeypatch, tmp_path, "crash.py", "os, signal", "os.kill(os.getpid(), signal.SIGSEGV)"
    )
    for _ in range(2):
        with pytest.raises(
            hlobundle.errors.ModuleError, match=r"crashed MLIR's bytecode reader \(SIGSEGV"
        ):
            _artifacts.canonical_in_child(b"ML\xefR", path="module.mlirbc")
    monkeypatch.setattr(_artifacts, "CHILD", real)
    with pytest.raises(hlobundle.errors.ModuleError, match="does not load"):
        _artifacts.canonical_in_child(b"ML\xefR", path="module.mlirbc")


@pytest.mark.subprocess
def test_a_child_killed_by_a_signal_python_has_no_name_for_is_a_coded_error(monkeypatch, tmp_path):
    # A real-time signal (40): its number has no member of signal.Signals.
    _artifacts = _stand_in_child(monkeypatch, tmp_path, "rt.py", "os", "os.kill(os.getpid(), 40)")
    with pytest.raises(
        hlobundle.errors.ModuleError, match=r"crashed MLIR's bytecode reader \(signal 40"
    ):
        _artifacts.canonical_in_child(b"ML\xefR", path="module.mlirbc")


@pytest.mark.slow
@pytest.mark.subprocess
def test_a_child_past_its_time_limit_is_a_coded_error(monkeypatch, tmp_path):
    # Stand in for a bytecode reader that never ends: the time limit (1 s here) ends it.
    from hlobundle._format import _limits

    _artifacts = _stand_in_child(monkeypatch, tmp_path, "slow.py", "time", "time.sleep(30)")
    monkeypatch.setattr(_limits, "child_timeout_s", lambda size: 1.0)
    with pytest.raises(hlobundle.errors.ModuleError, match="took over 1 s, the limit for 4 bytes"):
        _artifacts.canonical_in_child(b"ML\xefR", path="module.mlirbc")


@pytest.mark.subprocess
def test_a_child_printing_past_its_bound_is_a_limit_error(monkeypatch, tmp_path):
    # Stand in for a bytecode reader that prints without end: cut off at four times the text
    # asked for (256 characters here).
    _artifacts = _stand_in_child(
        monkeypatch, tmp_path, "loud.py", "sys", "sys.stdout.write('x' * 4096)"
    )
    with pytest.raises(hlobundle.errors.LimitError, match="printed more than 1024 bytes"):
        _artifacts._canonical_prefix(b"ML\xefR", "module.mlirbc", 256)


@pytest.mark.subprocess
def test_an_artifact_nested_past_the_limit_is_a_limit_error(add_bundle, monkeypatch):
    # The child checks the nesting of the program it deserialized (the limit is passed to it):
    # with the limit at 1, the ops inside a function inside the module nest deeper.
    from hlobundle._format import _limits
    from hlobundle._parse import _artifacts

    artifact = (add_bundle / "module.mlirbc").read_bytes()
    assert _artifacts.canonical_in_child(artifact, path="module.mlirbc")
    monkeypatch.setattr(_limits, "MAX_MLIR_NESTING", 1)
    with pytest.raises(hlobundle.errors.LimitError, match="the limit is 1 ") as e:
        _artifacts.canonical_in_child(artifact, path="module.mlirbc")
    assert e.value.path == "module.mlirbc"


@pytest.mark.subprocess
def test_an_artifact_printing_longer_than_a_module_may_be_is_a_limit_error(add_bundle, monkeypatch):
    # The writer and the Reactant interop print an artifact whose text they do not have: that
    # text is a module too, within the module limit (100 characters here).
    from hlobundle._format import _limits
    from hlobundle._parse import _artifacts

    artifact = (add_bundle / "module.mlirbc").read_bytes()
    monkeypatch.setattr(_limits, "MAX_MODULE_BYTES", 100)
    with pytest.raises(hlobundle.errors.LimitError, match="prints as more than 100 characters"):
        _artifacts.canonical_in_child(artifact, path="module.mlirbc")


# --- the allow-list, on every form -----------------------------------------------------


@pytest.mark.parametrize(
    ("op", "allow", "what"),
    [
        (
            f"stablehlo.custom_call @xla_ffi_python_cpu_callback(%x) : ({T}) -> {T}",
            ["xla_ffi_python_cpu_callback"],
            "custom_call @xla_ffi_python_cpu_callback",
        ),
        (
            f"stablehlo.custom_call @jaxzyme.primal(%x) : ({T}) -> {T}",
            [],
            "custom_call @jaxzyme.primal",
        ),
        (f"stablehlo.custom_call @some_kernel(%x) : ({T}) -> {T}", [], "custom_call @some_kernel"),
        (f'"mhlo.add"(%x, %w) : ({T}, {T}) -> {T}', [], "mhlo.add"),
    ],
)
def test_writer_refuses_what_the_allow_list_does_not_hold(tmp_path, op, allow, what):
    with pytest.raises(hlobundle.errors.NotPortableError, match=f"not portable: {what}") as e:
        hlobundle.pack(module(op), None, tmp_path / "b", names=["x", "w"], allow_custom_calls=allow)
    assert e.value.code == "MODULE_NOT_PORTABLE"


def test_infeed_is_refused(tmp_path):
    text = (
        f"func.func @main(%x: {T}, %w: {T}) -> {T} {{\n"
        "  %t = stablehlo.create_token : !stablehlo.token\n"
        f'  %v, %t2 = "stablehlo.infeed"(%t) : (!stablehlo.token) -> ({T}, !stablehlo.token)\n'
        f"  return %v : {T}\n}}\n"
    )
    with pytest.raises(hlobundle.errors.NotPortableError, match="stablehlo.infeed at line 3"):
        hlobundle.pack(text, None, tmp_path / "b", names=["x", "w"])


def test_a_stable_jax_target_needs_no_opt_in(tmp_path):
    op = f"stablehlo.custom_call @annotate_device_placement(%x) {{has_side_effect = true}} : ({T}) -> {T}"
    hlobundle.load(hlobundle.pack(module(op), None, tmp_path / "b", names=["x", "w"]))


@pytest.mark.parametrize(("name", "t"), [("module.mlir", T), ("batched.mlir", "tensor<?x3xf32>")])
def test_a_forged_form_with_a_host_callback_is_refused_on_load(tmp_path, name, t):
    from helpers import generate

    bundle = generate.scale(tmp_path, ["x"])
    text = (bundle / name).read_text()
    callback = f"%cb = stablehlo.custom_call @xla_ffi_python_cpu_callback(%y) : ({t}) -> {t}"
    forged = text.replace("  return %y", f"  {callback}\n  return %cb")
    assert forged != text
    (bundle / name).write_text(forged)
    rehash(bundle, name)
    with pytest.raises(hlobundle.errors.NotPortableError, match="xla_ffi_python_cpu_callback") as e:
        hlobundle.load(bundle)
    assert e.value.path == name


# --- parsers that cannot take the process down ----------------------------------------


def test_deep_nesting_is_refused_before_mlir_parses(tmp_path):
    deep = "[" * 10_000 + "]" * 10_000
    text = f"module attributes {{a = {deep}}} {{\n{ADD}}}\n"
    with pytest.raises(
        hlobundle.errors.LimitError, match="brackets nested 10001 deep; the limit is 256"
    ):
        hlobundle.pack(text, None, tmp_path / "b", names=["x", "w"])


def test_deep_nesting_in_a_stored_module_is_refused_on_load(add_bundle):
    text = (add_bundle / "module.mlir").read_text()
    (add_bundle / "module.mlir").write_text(text + "// ((((\n" + "#a = " + "<" * 5000 + ">" * 5000)
    rehash(add_bundle, "module.mlir")
    with pytest.raises(hlobundle.errors.LimitError, match="angle brackets nested 5000 deep") as e:
        hlobundle.load(add_bundle)
    assert e.value.code == "LIMIT_EXCEEDED" and e.value.path == "module.mlir"


def test_high_rank_is_refused(tmp_path):
    t = "tensor<" + "1x" * 65 + "f32>"
    text = f"func.func @main(%x: {t}) -> {t} {{\n  return %x : {t}\n}}\n"
    with pytest.raises(hlobundle.errors.LimitError, match="more than 64 dimensions"):
        hlobundle.pack(text, None, tmp_path / "b")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            f"module {{\n  func.func private @main(%x: {T}) -> {T}\n}}\n",
            "@main is a declaration without a body",
        ),
        (
            f"func.func @main(%x: {T} {{mhlo.sharding = 3 : i32}}) -> {T} {{\n  return %x : {T}\n}}\n",
            "@main's mhlo.sharding must be a string",
        ),
    ],
)
def test_malformed_main_is_a_module_error(tmp_path, text, message):
    with pytest.raises(hlobundle.errors.ModuleError, match=message):
        hlobundle.pack(text, None, tmp_path / "b")


# --- exactly the checked bytes --------------------------------------------------------


def test_module_hashes_are_checked_on_every_load(add_bundle):
    # A forged module keeps the manifest's (claimed) digest: the runner's registries are
    # keyed by digests, so they must be the digests of the bytes read.
    (add_bundle / "module.mlir").write_text(MUL)
    edit_manifest(add_bundle, lambda m: m["files"]["module.mlir"].update(size=len(MUL)))
    with pytest.raises(hlobundle.errors.IntegrityError, match="module.mlir: sha256 is") as e:
        hlobundle.load(add_bundle)
    assert e.value.code == "HASH_MISMATCH"


def test_symbol_prefix_comes_from_the_bytes_read(add_bundle):
    import hashlib

    bundle = hlobundle.load(add_bundle)
    digest = hashlib.sha256((add_bundle / "module.mlir").read_bytes()).hexdigest()
    assert bundle.modules["module"].text_sha256 == digest


def test_a_file_replaced_after_load_is_not_used(add_bundle, tmp_path):
    bundle = hlobundle.load(add_bundle)
    before = bundle.tensor("x").copy()
    forged = hlobundle.pack(ADD, [before + 100, before], tmp_path / "forged", names=["x", "w"])
    os.replace(forged / "inputs.safetensors", add_bundle / "inputs.safetensors")
    bundle.verify()  # hashes the file that was opened and checked, which is the one used
    np.testing.assert_array_equal(bundle.tensor("x"), before)


@pytest.mark.slow
@pytest.mark.subprocess
def test_verified_in_memory_tensors_survive_truncation(add_bundle):
    # With verify=True tensors come from private memory whose sha256 was checked: a file
    # truncated afterwards cannot fault a mapped page (SIGBUS) or change a value.
    code = (
        "import os, sys, numpy as np, hlobundle\n"
        "b = hlobundle.load(sys.argv[1], verify=True)\n"
        "want = np.array(b.tensor('x'))\n"
        "os.truncate(os.path.join(sys.argv[1], 'inputs.safetensors'), 8)\n"
        "print(np.array_equal(np.asarray(b.tensor('x')), want))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(add_bundle)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert (done.returncode, done.stdout.strip()) == (0, "True"), done.stderr[-2000:]


def test_bool_tensors_hold_only_zero_and_one(tmp_path):
    mask = np.array([True, False, True])
    out = hlobundle.pack(
        "func.func @main(%m: tensor<3xi1>) -> tensor<3xi1> {\n  return %m : tensor<3xi1>\n}\n",
        [mask],
        tmp_path / "b",
        names=["m"],
    )
    path = out / "inputs.safetensors"
    data = bytearray(path.read_bytes())
    data[-2] = 7  # the middle element: a bool that is neither 0 nor 1
    path.write_bytes(bytes(data))
    rehash(out, "inputs.safetensors")
    with pytest.raises(hlobundle.errors.TensorFileError, match="bytes other than 0 and 1") as e:
        hlobundle.load(out).verify()
    assert e.value.code == "TENSOR_MISMATCH"


# --- hostile manifests: coded errors, never tracebacks ----------------------------------


def _raw_manifest(bundle, text):
    (bundle / "manifest.json").write_text(text)


@pytest.mark.parametrize(
    ("edit", "error", "message"),
    [
        (
            lambda t: t.replace('"size": ', '"size": ' + "9" * 4400, 1),
            hlobundle.errors.LimitError,
            r"an integer of 44\d\d digits; the limit is 20",
        ),
        (
            lambda t: re.sub(
                r'"format_version": "[0-9.]+"', '"format_version": "1.' + "0" * 5000 + '"', t
            ),
            hlobundle.errors.VersionError,
            "is not readable by this reader",
        ),
        (
            lambda t: t[:-2] + ', "output_tree": ' + "[" * 200_000 + "]" * 200_000 + "}\n",
            hlobundle.errors.LimitError,
            "JSON nested 200001 deep; the limit is 64",
        ),
    ],
)
def test_hostile_manifest_json(add_bundle, edit, error, message):
    _raw_manifest(add_bundle, edit((add_bundle / "manifest.json").read_text()))
    with pytest.raises(error, match=message) as e:
        hlobundle.load(add_bundle)
    assert e.value.path == "manifest.json"


@pytest.mark.parametrize(
    ("tree", "message"),
    [
        ({"output_tree": ["nope"]}, r"output_tree names \['nope'\], which are not its values"),
        ({"input_tree": [["x"], 3]}, "input_tree holds int 3"),
        ({"input_tree": ["x", "x", "w"]}, "input_tree names a value twice"),
    ],
)
def test_pytrees_must_name_the_values(add_bundle, tree, message):
    edit_manifest(add_bundle, lambda m: m.update(tree))
    with pytest.raises(hlobundle.errors.ManifestError, match=message):
        hlobundle.load(add_bundle)


def test_inspect_escapes_terminal_control_characters(add_bundle):
    from helpers import cli

    edit_manifest(add_bundle, lambda m: m["provenance"].update(producer="\x1b[2J\rok\u202e"))
    r = cli("inspect", add_bundle)
    assert r.returncode == 0, r.stderr
    assert "\x1b" not in r.stdout and "\r" not in r.stdout and "\u202e" not in r.stdout
    assert "producer  \\x1b[2J\\rok\\u202e" in r.stdout


def test_a_tree_deeper_than_path_max_is_a_coded_error(add_bundle):
    fd = os.open(add_bundle, os.O_RDONLY)
    for _ in range(40):  # 40 x 120 characters: past PATH_MAX (4096), made relative to a fd
        os.mkdir("d" * 120, dir_fd=fd)
        fd, old = os.open("d" * 120, os.O_RDONLY, dir_fd=fd), fd
        os.close(old)
    os.close(os.open("f", os.O_CREAT | os.O_WRONLY, dir_fd=fd))
    os.close(fd)
    with pytest.raises(hlobundle.errors.UnsafePathError, match="cannot be read") as e:
        hlobundle.load(add_bundle)
    assert e.value.code == "PATH_UNSAFE"


# --- bounded resources -----------------------------------------------------------------


def test_inventing_huge_inputs_is_refused_before_allocation(tmp_path, capsys):
    from hlobundle._cli._main import main

    t = "tensor<100000x100000xf32>"  # 40 GB of generated input for a 200-byte bundle
    text = f"func.func @main(%x: {t}) -> {t} {{\n  return %x : {t}\n}}\n"
    out = hlobundle.pack(text, None, tmp_path / "b")
    assert main(["run", str(out), "--backend", "xla", "--no-cache"]) == 1
    err = capsys.readouterr().err
    assert "error [LIMIT_EXCEEDED]" in err and "40,000,000,000 bytes" in err


def _npz_bomb(path, key, nbytes):
    """An .npz whose member `key` inflates to `nbytes` of zeros, written without allocating them."""
    import zipfile

    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf, zf.open(f"{key}.npy", "w") as f:
        np.lib.format.write_array_header_1_0(
            f, {"descr": "|u1", "fortran_order": False, "shape": (nbytes,)}
        )
        chunk = bytes(1 << 20)
        for _ in range(nbytes >> 20):
            f.write(chunk)


@pytest.mark.slow
def test_npz_members_are_checked_before_they_are_inflated(add_bundle, tmp_path):
    import tracemalloc

    from hlobundle._read import _inputs
    from hlobundle._run import _run

    bomb = tmp_path / "bomb.npz"
    _npz_bomb(bomb, "x", 64 << 20)  # inflated, it would be 4x the bound on memory below
    assert bomb.stat().st_size < 1 << 20
    bundle = hlobundle.load(add_bundle)
    tracemalloc.start()
    try:
        with pytest.raises(hlobundle.InputError, match=r"expected dtype float32, got uint8"):
            _run.example_arguments(
                bundle,
                _inputs.read_files([bomb]) + [_inputs.Keyed("w", np.zeros(3, np.float32), "w")],
            )
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, peak


def test_run_verify_checks_tensor_hashes(add_bundle, capsys):
    from hlobundle._cli._main import main

    assert main(["run", str(add_bundle), "--verify", "--backend", "xla", "--no-cache"]) == 0
    capsys.readouterr()
    path = add_bundle / "inputs.safetensors"
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    assert main(["run", str(add_bundle), "--backend", "xla", "--no-cache"]) == 0  # not checked
    capsys.readouterr()
    assert main(["run", str(add_bundle), "--verify", "--backend", "xla", "--no-cache"]) == 1
    assert "error [HASH_MISMATCH] inputs.safetensors: sha256 is" in capsys.readouterr().err


def test_inspect_shows_the_custom_calls_the_producer_opted_in_to(tmp_path):
    from helpers import cli

    op = f"stablehlo.custom_call @my_kernel(%x) : ({T}) -> {T}"
    out = hlobundle.pack(
        module(op), None, tmp_path / "b", names=["x", "w"], allow_custom_calls=["my_kernel"]
    )
    r = cli("inspect", out)
    assert r.returncode == 0 and "custom calls the producer opted in to: my_kernel" in r.stdout
    assert (
        "custom calls"
        not in cli("inspect", hlobundle.pack(ADD, None, tmp_path / "c", names=["x", "w"])).stdout
    )


@pytest.mark.parametrize(
    ("dtype", "byte"), [("int4", 0x18), ("uint2", 0x04), ("float4_e2m1fn", 0x80)]
)
def test_a_sub_byte_value_with_a_high_bit_set_is_refused(tmp_path, dtype, byte):
    # One value per byte in its low bits: any higher bit would make the byte mean two things.
    from helpers import identity_module, rehash, sample

    x = sample((3,), dtype)
    out = hlobundle.pack(identity_module(x), [x], tmp_path / "b")
    hlobundle.load(out).verify()
    data = bytearray((out / "inputs.safetensors").read_bytes())
    data[-1] = byte
    (out / "inputs.safetensors").write_bytes(bytes(data))
    rehash(out, "inputs.safetensors")
    with pytest.raises(
        hlobundle.errors.TensorMismatchError,
        match=f"bytes other than values below .* in a {dtype} tensor",
    ):
        hlobundle.load(out).verify()


# --- cached check verdicts (SPEC.md section 8, "Caches") -------------------------------


def _verdicts(root):
    return sorted((root / "checks").glob("*/*.json")) if (root / "checks").is_dir() else []


@pytest.mark.slow
def test_a_verdict_is_recorded_once_a_bundle_passed_and_recalled_without_parsing(
    add_bundle, tmp_path
):
    root = tmp_path / "cache"
    env = {**os.environ, "HLOBUNDLE_CACHE_DIR": str(root)}
    code = f"import sys, hlobundle; hlobundle.load({str(add_bundle)!r}); print('jaxlib.mlir.ir' in sys.modules)"
    first = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert first.stdout.strip() == "True", first.stderr[-2000:]  # parsed and checked
    assert len(_verdicts(root)) == 1
    again = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert again.stdout.strip() == "False", again.stderr[-2000:]  # recalled: no MLIR at all
    bundle = hlobundle.load(add_bundle)  # in process, recalled, it still runs and tells the same
    assert [str(t.dtype.name) for t in bundle.signature.arguments] == ["float32", "float32"]


def test_a_verdict_covers_only_the_bytes_it_was_given_for(tmp_path, monkeypatch, add_bundle):
    """Another program under the same names (text and artifact replaced, rehashed) is checked
    afresh: the verdict is keyed by the bytes read, not by names or the manifest's word."""
    monkeypatch.setenv("HLOBUNDLE_CACHE_DIR", str(tmp_path / "cache"))
    hlobundle.load(add_bundle)
    assert _verdicts(tmp_path / "cache")
    (add_bundle / "module.mlir").write_text(MUL)  # the artifact stays ADD's
    rehash(add_bundle, "module.mlir")
    with pytest.raises(hlobundle.errors.ModuleMismatchError, match="not the same program"):
        hlobundle.load(add_bundle)


def test_a_verdict_covers_only_the_manifest_it_was_given_for(tmp_path, monkeypatch):
    """A manifest edited to declare other types for the same module is checked afresh."""
    monkeypatch.setenv("HLOBUNDLE_CACHE_DIR", str(tmp_path / "cache"))
    bundle = hlobundle.pack(ADD, None, tmp_path / "b", names=["x", "w"])
    hlobundle.load(bundle)
    edit_manifest(bundle, lambda m: m["arguments"][0].update(shape=[4]))
    with pytest.raises(hlobundle.errors.MainSignatureError, match=r"arguments\[0\]"):
        hlobundle.load(bundle)


def test_an_entry_that_is_not_a_verdict_is_a_miss(tmp_path, monkeypatch, add_bundle):
    """An entry whose bytes give its name but hold no verdict is ignored: the bundle is checked
    in full, nothing crashes."""
    from hlobundle._read import _cache

    root = tmp_path / "cache"
    monkeypatch.setenv("HLOBUNDLE_CACHE_DIR", str(root))
    hlobundle.load(add_bundle)
    (entry,) = _verdicts(root)
    key = entry.name.split(".")[0]
    entry.unlink()
    for junk in (b"[]", b'{"signature": {"arguments": 1}}', b"\xff"):
        _cache.entry_path(root / "checks", key, junk, ".json").write_bytes(junk)
        assert hlobundle.load(add_bundle).signature.arguments[0].shape == (3,)


def test_a_well_named_entry_that_is_not_what_we_write_is_a_miss(tmp_path, monkeypatch, add_bundle):
    """Garbage under a verdict's right name (deep nesting, an infinite number, a string for the
    custom calls, no signature for the module form, a shape of strings) is a miss, checked in
    full: never a traceback, nor a verdict the checks would not give."""
    from hlobundle._read import _cache

    root = tmp_path / "cache"
    monkeypatch.setenv("HLOBUNDLE_CACHE_DIR", str(root))
    hlobundle.load(add_bundle)
    (entry,) = _verdicts(root)
    key, good = entry.name.split(".")[0], json.loads(entry.read_bytes())
    entry.unlink()
    signature = good["signature"]
    junk = [
        b"[" * 100_000,
        {**good, "signature": {**signature, "aliases": [[float("inf"), 0]]}},
        {**good, "custom_calls": "lapack_sgetrf_ffi"},
        {**good, "signature": None},
        {**good, "signature": {**signature, "arguments": [[["3"], "float32"]] * 2}},
        {**good, "signature": {**signature, "unused": [True]}},
        {**good, "custom_calls": [1]},
    ]
    for data in junk:
        data = data if isinstance(data, bytes) else json.dumps(data).encode()
        for other in _verdicts(root):  # the junk alone under the key: nothing else to read
            other.unlink()
        planted = _cache.entry_path(root / "checks", key, data, ".json")
        planted.write_bytes(data)
        bundle = hlobundle.load(add_bundle)
        assert bundle.signature.arguments[0].shape == (3,), data[:80]
        assert bundle.modules["module"].custom_calls == ()
        assert bundle.signature.unused == frozenset()
        # a miss: the checks ran in full and wrote their own verdict beside the junk
        assert [json.loads(v.read_bytes()) for v in _verdicts(root) if v != planted] == [good]


def test_no_cache_records_no_verdict(tmp_path, monkeypatch, add_bundle):
    monkeypatch.setenv("HLOBUNDLE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HLOBUNDLE_NO_CACHE", "1")
    hlobundle.load(add_bundle)
    assert not _verdicts(tmp_path / "cache")


# --- the cache's layout: 256 shards (SPEC.md section 8, "Caches") ------------------------


def _private(path):
    path.mkdir(mode=0o700)
    os.chmod(path, 0o700)
    return path


def _key(i):
    return hashlib.sha256(b"%d" % i).hexdigest()  # every key is a sha256 in hex


def test_an_entry_is_kept_in_its_keys_shard_and_read_back(tmp_path):
    from hlobundle._read import _cache

    where = _private(tmp_path / "checks")
    _cache.write(where, _key(1), b"verdict", ".json")
    assert _cache.entry_path(where, _key(1), b"verdict", ".json").read_bytes() == b"verdict"
    assert _cache.read(where, _key(1), ".json") == b"verdict"
    assert _cache.read(where, _key(2), ".json") is None


def test_a_lookup_lists_its_shard_alone(tmp_path, monkeypatch):
    """However many entries the cache holds, a lookup lists one shard: a cache of thousands of
    verdicts made every load list them all (21 ms for the LeNet's, 1.3 ms with one shard)."""
    from hlobundle._read import _cache

    where = _private(tmp_path / "checks")
    for i in range(64):
        _cache.write(where, _key(i), b"v", ".json")
    listed = []
    listdir = os.listdir
    monkeypatch.setattr(os, "listdir", lambda p: listed.append(Path(p)) or listdir(p))
    assert _cache.read(where, _key(7), ".json") == b"v"
    assert listed == [_cache.shard(where, _key(7))]


@pytest.mark.parametrize("kind", ["symlink", "group_writable"])
def test_an_entry_in_a_shard_that_is_not_private_is_not_read(tmp_path, kind):
    from hlobundle._read import _cache

    key = _key(0)
    where = _private(tmp_path / "checks")
    elsewhere = _private(tmp_path / "elsewhere")
    (elsewhere / _cache.entry_name(key, b"planted", ".json")).write_bytes(b"planted")
    if kind == "symlink":
        _cache.shard(where, key).symlink_to(elsewhere)
    else:
        shard = _private(_cache.shard(where, key))
        (shard / _cache.entry_name(key, b"planted", ".json")).write_bytes(b"planted")
        os.chmod(shard, 0o770)
    assert _cache.read(where, key, ".json") is None
    _cache.write(where, key, b"ours", ".json")  # nor written into
    planted = [_cache.entry_name(key, b"planted", ".json")]
    assert sorted(os.listdir(_cache.shard(where, key))) == planted


def test_a_cache_directory_removed_meanwhile_is_not_made_again_by_a_write(tmp_path):
    """Only `directory()` makes the cache's directories, 0700: a write into one that vanished
    since makes nothing (it made it again with the umask's mode)."""
    from hlobundle._read import _cache

    where = tmp_path / "root" / "checks"
    _cache.write(where, _key(0), b"v", ".json")
    assert not (tmp_path / "root").exists()


@pytest.mark.parametrize("key", ["../../escape", "a\0b", "\udcff", "k1", _key(0).upper()])
def test_a_key_that_is_no_sha256_names_no_entry(tmp_path, key):
    from hlobundle._read import _cache

    where = _private(tmp_path / "cache")
    _cache.write(where, key, b"v", ".json")
    assert _cache.read(where, key, ".json") is None
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["cache"]

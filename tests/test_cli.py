"""The command line: exit codes, JSON output, and errors without tracebacks."""

from __future__ import annotations

import json
import subprocess
import sys

import jax
import numpy as np
import pytest
from helpers import (
    cli,
    cli_process,
    edit_manifest,
    identity_module,
    lowered_text,
    sample,
    small_bundle,
    two_functions,
)

import hlobundle


@pytest.fixture
def module(tmp_path):
    x = sample((2, 3), "float32")
    path = tmp_path / "m.mlir"
    path.write_text(identity_module(x, sample((), "int64")))
    np.savez(tmp_path / "in.npz", x=x, n=np.int64(3))
    return path


def test_pack_inspect_verify(tmp_path, module):
    r = cli(
        "pack",
        module,
        "--inputs",
        tmp_path / "in.npz",
        "-o",
        tmp_path / "b",
        "--names",
        "x,n",
        "--role",
        "n=state",
    )
    assert r.returncode == 0, r.stderr
    r = cli("inspect", tmp_path / "b")
    assert r.returncode == 0
    assert "x     (2, 3)  float32  24 bytes  row_major  input  %arg0" in r.stdout
    assert "n     ()      int64    8 bytes   row_major  state  %arg1" in r.stdout
    r = cli("verify", tmp_path / "b")
    assert r.returncode == 0 and r.stdout.startswith("ok: ")


def test_inspect_json_is_one_object(tmp_path):
    b = small_bundle(tmp_path)
    r = cli("inspect", b, "--json")
    data = json.loads(r.stdout)
    assert [a["name"] for a in data["arguments"]] == ["x", "w"]
    for item in data["arguments"] + data["results"]:
        assert {"name", "shape", "dtype", "layout"} <= set(item)


def test_verify_failure_prints_code_and_file(tmp_path):
    b = small_bundle(tmp_path)
    (b / "module.mlirbc").write_bytes(
        b"ML\xefR" + b"\0" * ((b / "module.mlirbc").stat().st_size - 4)
    )
    r = cli("verify", b)
    assert r.returncode == 1
    assert r.stderr.startswith("error [HASH_MISMATCH] module.mlirbc: sha256 is")
    assert "(path: module.mlirbc" in r.stderr and "Traceback" not in r.stderr
    r = cli("verify", b, "--json")
    assert r.returncode == 1
    data = json.loads(r.stdout)
    assert (
        data["ok"] is False and data["code"] == "HASH_MISMATCH" and data["path"] == "module.mlirbc"
    )


def test_verify_json_ok(tmp_path):
    r = cli("verify", small_bundle(tmp_path), "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["ok"] is True


def test_pack_error_exit_1_no_traceback(tmp_path, module):
    np.savez(tmp_path / "bad.npz", x=np.zeros((3, 3), np.float32), n=np.int64(1))
    r = cli(
        "pack", module, "--inputs", tmp_path / "bad.npz", "-o", tmp_path / "b", "--names", "x,n"
    )
    assert r.returncode == 1
    assert (
        "error [INPUT_INVALID] argument 'x' (path %arg0, from bad.npz[x]): expected shape (2, 3), got (3, 3)"
        in r.stderr
    )
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "b").exists()


def test_traceback_on_request(tmp_path):
    r = cli("verify", tmp_path / "nothing", env={"HLOBUNDLE_TRACEBACK": "1"})
    assert r.returncode == 1 and "Traceback" in r.stderr


def test_existing_output_and_force(tmp_path, module):
    args = ("pack", module, "--inputs", tmp_path / "in.npz", "-o", tmp_path / "b", "--names", "x,n")
    assert cli(*args).returncode == 0
    r = cli(*args)
    assert r.returncode == 1 and "error [OUTPUT_EXISTS]" in r.stderr
    assert cli(*args, "--force").returncode == 0


@pytest.mark.parametrize(
    "args",
    [
        (),
        ("frobnicate",),
        ("pack",),
        ("pack", "m.mlir"),
        ("verify",),
        ("pack", "m.mlir", "-o", "b", "--layout", "diagonal"),
        ("pack", "m.mlir", "-o", "b", "--role", "x=boss"),
    ],
)
def test_usage_errors_exit_2(args):
    r = cli(*args)
    assert r.returncode == 2, r
    assert "Traceback" not in r.stderr


def test_newer_minor_version_warns_on_stderr(tmp_path):
    b = small_bundle(tmp_path)
    edit_manifest(b, lambda m: m.update(format_version="1.99"))
    r = cli("verify", b)
    assert r.returncode == 0
    assert "warning: manifest.json: format_version 1.99 is newer than this reader's 1.3" in r.stderr


# --- the first hour: command lines that used to end in a traceback -----------------------


def _add_module(tmp_path):
    (tmp_path / "m.mlir").write_text(
        "func.func @main(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {\n"
        "  %y = stablehlo.add %x, %x : tensor<2x3xf32>\n  return %y : tensor<2x3xf32>\n}\n"
    )
    return tmp_path / "m.mlir"


def test_pack_without_inputs(tmp_path):
    r = cli("pack", _add_module(tmp_path), "-o", tmp_path / "x.hlobundle")
    assert (r.returncode, r.stderr) == (0, ""), r.stderr
    assert cli("run", tmp_path / "x.hlobundle", "--no-cache").returncode == 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["run", "{b}", "--save-outputs", "{tmp}/nodir/out.npz"],
            "error [INPUT_INVALID] --save-outputs: the directory",
        ),
        (
            ["run", "{b}", "--save-outputs", "{tmp}/nodir/out.safetensors"],
            "error [INPUT_INVALID] --save-outputs: the directory",
        ),
        (["emit", "{b}", "-o", "{tmp}/nodir/run.py"], "error [INPUT_INVALID] -o: the directory"),
        (["schema", "-o", "{tmp}/nodir/s.json"], "error [INPUT_INVALID] -o: the directory"),
    ],
)
def test_output_paths_are_checked_before_any_work(tmp_path, argv, message):
    bundle = hlobundle.pack(_add_module(tmp_path), None, tmp_path / "b")
    r = cli(*[a.format(b=bundle, tmp=tmp_path) for a in argv])
    assert r.returncode == 1 and r.stderr.startswith(message), r.stderr
    assert "Traceback" not in r.stderr and "x: float32[2, 3]" not in r.stdout  # nothing ran


def test_negative_tolerance_is_a_usage_error(tmp_path):
    bundle = hlobundle.pack(_add_module(tmp_path), None, tmp_path / "b")
    r = cli("run", bundle, "--rtol", "-1")
    assert r.returncode == 2 and "--rtol: expected a number >= 0, got '-1'" in r.stderr


def test_tensor_of_an_unknown_argument_is_a_project_error(tmp_path):
    bundle = hlobundle.load(hlobundle.pack(_add_module(tmp_path), None, tmp_path / "b"))
    with pytest.raises(
        hlobundle.InputError, match=r"no argument named 'nope'; the arguments are \['arg0'\]"
    ):
        bundle.tensor("nope")
    with pytest.raises(hlobundle.InputError, match="argument 'arg0' has no stored example value"):
        bundle.tensor("arg0")


@pytest.mark.slow
@pytest.mark.subprocess  # x64 is on in this process (conftest.py), which would hide the bug
def test_compute_expected_of_a_64_bit_module(tmp_path):
    (tmp_path / "m.mlir").write_text(
        "func.func @main(%x: tensor<3xf64>) -> tensor<3xf64> {\n"
        "  %y = stablehlo.add %x, %x : tensor<3xf64>\n  return %y : tensor<3xf64>\n}\n"
    )
    np.save(tmp_path / "x.npy", np.arange(3.0))
    import helpers

    r = helpers.CLI_ZYGOTE.run(  # a fork of the CLI zygote, whose x64 is jax's default (off)
        "pack",
        tmp_path / "m.mlir",
        "--inputs",
        tmp_path / "x.npy",
        "-o",
        tmp_path / "b",
        "--compute-expected",
    )
    assert r.returncode == 0, r.stderr
    np.testing.assert_array_equal(
        hlobundle.load(tmp_path / "b").expected_outputs()["result"], [0, 2, 4]
    )


def test_ctrl_c_prints_one_line(tmp_path, monkeypatch, capsys):
    from hlobundle._cli import _commands, _main

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(_commands, "inspect", interrupted)
    assert _main.main(["inspect", str(tmp_path)]) == 130
    assert capsys.readouterr().err == "interrupted\n"


def test_the_parser_is_built_once_per_process(tmp_path, monkeypatch):
    from hlobundle._cli import _main, _parser

    built = []
    build = _parser.build
    monkeypatch.setattr(_parser, "build", lambda: built.append(1) or build())
    _parser.parser.cache_clear()
    try:
        for _ in range(3):
            assert _main.main(["inspect", str(tmp_path / "none")]) == 1
    finally:
        _parser.parser.cache_clear()  # the next one built by the real build
    assert built == [1]


def test_a_handler_rebound_after_the_parser_was_built_is_the_one_that_runs(tmp_path, monkeypatch):
    """The parser is built once per process (above), holding each command's handler; the
    handler that runs is the name's at the call, as with a parser built per call."""
    from hlobundle._cli import _commands, _main, _parser

    calls = []
    assert _main.main(["inspect", str(tmp_path / "none")]) == 1  # the parser built, and used
    monkeypatch.setattr(_commands, "inspect", lambda args: calls.append(args.bundle) or 0)
    assert _parser.parser() is _parser.parser()
    assert _main.main(["inspect", str(tmp_path / "b")]) == 0
    assert calls == [str(tmp_path / "b")]


def test_a_parse_hands_out_no_list_that_a_later_parse_gets(tmp_path):
    """A default list (`--sizes`'s []) is the one parser's: each parse gets a copy, so what a
    handler adds to its own is not the next command's default."""
    from hlobundle._cli import _parser

    first = _parser.parser().parse_args(["serve", str(tmp_path)])
    assert first.sizes == []
    first.sizes.append(("b", (1, 2)))
    assert _parser.parser().parse_args(["serve", str(tmp_path)]).sizes == []


def test_with_vjp_without_enzyme_says_what_to_do(tmp_path, monkeypatch):
    from hlobundle._run._backends import _installed

    monkeypatch.setattr(_installed, "enzyme_ad", lambda: False)
    r = cli("pack", _add_module(tmp_path), "-o", tmp_path / "b", "--with-vjp")
    assert r.returncode == 1
    assert r.stderr.startswith("error [BACKEND_UNAVAILABLE] --with-vjp (with_vjp=True) lowers")
    fn = hlobundle.load(hlobundle.pack(_add_module(tmp_path), None, tmp_path / "c")).function("xla")
    with pytest.raises(hlobundle.TransformError, match=r"export it from JAX with hlobundle.export"):
        jax.grad(lambda x: fn(x)[0].sum())(np.ones((2, 3), np.float32))


@pytest.mark.slow
@pytest.mark.subprocess
def test_run_prints_no_xla_info_lines(tmp_path):
    from helpers import ROOT

    r = cli_process("run", ROOT / "examples" / "lenet5.hlobundle", "--no-cache", "--backend", "xla")
    assert r.returncode == 0 and r.stderr == "", r.stderr


def test_new_data_through_the_stored_weights(tmp_path):
    from helpers import ROOT

    lenet = ROOT / "examples" / "lenet5.hlobundle"
    images = np.random.default_rng(0).standard_normal((4, 1, 28, 28)).astype(np.float32)
    np.save(tmp_path / "x.npy", images)
    np.savez(tmp_path / "batch.npz", images=images)
    for given in (f"images={tmp_path / 'x.npy'}", tmp_path / "batch.npz"):
        r = cli("run", lenet, "--inputs", given, "--json", "--no-cache", "--backend", "xla")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["inputs"] == "given and stored"
    np.savez(tmp_path / "two.npz", a=images, b=images)
    r = cli("run", lenet, "--inputs", f"images={tmp_path / 'two.npz'}")
    assert r.returncode == 1
    assert "error [INPUT_INVALID] images=" in r.stderr and "the file holds 2 arrays" in r.stderr


def test_arguments_without_stored_values_must_be_given(tmp_path):
    (tmp_path / "m.mlir").write_text(
        "func.func @main(%x: tensor<2xf32>, %w: tensor<2xf32>) -> tensor<2xf32> {\n"
        "  %y = stablehlo.add %x, %w : tensor<2xf32>\n  return %y : tensor<2xf32>\n}\n"
    )
    out = hlobundle.pack(tmp_path / "m.mlir", None, tmp_path / "b", names=["x", "w"])
    np.save(tmp_path / "x.npy", np.ones(2, np.float32))
    r = cli("run", out, "--inputs", tmp_path / "x.npy")
    assert r.returncode == 1
    assert "error [INPUT_INVALID] no input given for argument(s) ['w']" in r.stderr


def test_inspect_gives_sizes_in_human_units_and_counts_per_role():
    from helpers import ROOT

    r = cli("inspect", ROOT / "examples" / "lenet5.hlobundle")
    assert r.returncode == 0
    assert "files     7, 222 KiB (227,830 bytes)" in r.stdout
    assert "params    47,154 values in 10 tensors, 184 KiB" in r.stdout
    assert "inputs    3,136 values in 1 tensor, 12.2 KiB" in r.stdout
    assert "128 KiB" in r.stdout  # dense1's weight, per tensor


def test_messages_a_new_user_meets(tmp_path):
    module = _add_module(tmp_path)
    np.save(tmp_path / "x.npy", np.ones((2, 3), np.float32))
    # --inputs takes every file after it, the module too: it is found there
    r = cli("pack", "--inputs", tmp_path / "x.npy", module, "-o", tmp_path / "b")
    assert r.returncode == 0, r.stderr
    r = cli("inspect", tmp_path / "nothing")
    assert r.returncode == 1 and "does not exist" in r.stderr and "not a directory" not in r.stderr
    (tmp_path / "bin.mlir").write_bytes(b"ML\xefR\xff\xfe binary")
    r = cli("pack", tmp_path / "bin.mlir", "-o", tmp_path / "c")
    assert r.returncode == 1 and "is not UTF-8 text; give MLIR text" in r.stderr
    (tmp_path / "bad.mlir").write_text("func.func @main( this is not MLIR\n")
    r = cli("pack", tmp_path / "bad.mlir", "-o", tmp_path / "c")
    assert (
        r.returncode == 1 and f'"{tmp_path / "bad.mlir"}":1:' in r.stderr and '"-":' not in r.stderr
    )
    (tmp_path / "f.mlir").write_text(module.read_text().replace("@main", "@forward"))
    r = cli("pack", tmp_path / "f.mlir", "-o", tmp_path / "c")
    assert r.returncode == 1 and "rename the entry function to @main" in r.stderr
    np.save(tmp_path / "wrong.npy", np.ones((3, 2), np.float32))
    r = cli(
        "pack",
        module,
        "--inputs",
        tmp_path / "x.npy",
        "-o",
        tmp_path / "d",
        "--expected",
        tmp_path / "wrong.npy",
    )
    assert r.returncode == 1 and "expected result 'result' (from wrong.npy)" in r.stderr, r.stderr


def test_roles_by_glob(tmp_path):
    from helpers import ROOT

    lenet = hlobundle.load(ROOT / "examples" / "lenet5.hlobundle")
    module = tmp_path / "m.mlir"
    module.write_text(lenet.module_text)
    np.savez(tmp_path / "in.npz", **lenet.example_inputs())
    names = ",".join(a.name for a in lenet.arguments)
    argv = ["pack", module, "--inputs", tmp_path / "in.npz", "-o", tmp_path / "b"]
    r = cli(*argv, "--names", names, "--role", "params_*=parameter")
    assert r.returncode == 0, r.stderr
    roles = {a.name: a.role for a in hlobundle.load(tmp_path / "b").arguments}
    assert roles["images"] == "input"
    assert {roles[n] for n in roles if n.startswith("params_")} == {"parameter"}


def test_no_writer_puts_its_output_inside_a_bundle(tmp_path):
    """pack -o, emit -o and emit --format reactant-server -o inside a bundle would leave it
    with an unlisted file (FILE_UNLISTED): each is refused, naming the path."""
    from helpers import small_bundle

    b = small_bundle(tmp_path)
    module = tmp_path / "m.mlir"
    module.write_text((b / "module.mlir").read_text())
    for args in (
        ("pack", module, "-o", b / "inner"),
        ("emit", b, "-o", b / "run.py"),
        ("emit", b, "-o", b / "sub" / "run.py"),
        ("emit", b, "--format", "reactant-server", "-o", b / "server"),
    ):
        if args[-1].parent.name == "sub":
            args[-1].parent.mkdir()
        r = cli(*args)
        assert r.returncode == 1 and "[INPUT_INVALID]" in r.stderr, (args, r.stderr)
        assert f"is inside the bundle {str(b)!r}" in r.stderr
        (b / "sub").exists() and (b / "sub").rmdir()
        hlobundle.load(b).verify()


def _private_key(tmp_path):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    (tmp_path / "key.pem").write_bytes(pem)
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    (tmp_path / "key.pub").write_bytes(public)


# A command that says it is up, then waits to be signalled.
_WAITS = "import time\nprint('up', flush=True)\ntime.sleep(60)\n"


@pytest.mark.subprocess
@pytest.mark.slow  # over half a second alone (the edit loop's --durations, 2026-12-07)
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_a_start_in_a_fork_ends_by_a_signal_as_a_fresh_interpreter_does(sig):
    """helpers.CliZygote.start (the serve tests' servers) answers as subprocess.Popen of a fresh
    interpreter: its pid is the command's own process, which the signal reaches, and its status
    and the last line of its stderr are the fresh one's (a KeyboardInterrupt's traceback, then
    an end by SIGINT)."""
    import signal

    import helpers

    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    ended = []
    for start in (
        lambda: subprocess.Popen([sys.executable, "-c", _WAITS], **pipes),
        lambda: helpers.CLI_ZYGOTE.start(source=_WAITS, **pipes),
    ):
        proc = start()
        assert proc.stdout.readline() == "up\n"
        assert proc.poll() is None
        proc.send_signal(getattr(signal, sig))
        out, err = proc.communicate(timeout=30)
        ended.append((proc.returncode, out, err.strip().splitlines()[-1:]))
    assert ended[1] == ended[0]
    assert ended[0][0] == -getattr(signal, sig)


@pytest.mark.slow
@pytest.mark.subprocess
@pytest.mark.parametrize(
    ("blocked", "argv", "pip"),
    [
        ("iree", ["run", "{b}", "--backend", "iree"], "iree"),
        ("iree", ["compile", "{b}"], "iree"),
        ("iree", ["serve", "{b}", "--backend", "iree", "--port", "0"], "iree"),
        ("enzyme_ad", ["run", "{b}", "--backend", "enzyme"], "enzyme-ad"),
        ("starlette", ["serve", "{b}", "--port", "0"], "serve"),
        ("uvicorn", ["serve", "{b}", "--port", "0"], "serve"),
        ("orjson", ["serve", "{b}", "--port", "0"], "serve"),
        ("prometheus_client", ["serve", "{b}", "--port", "0"], "serve"),
        ("requests", ["push", "{b}", "oci://localhost:9/x"], "oci"),
        ("requests", ["pull", "oci://localhost:9/x", "-o", "{t}/pulled"], "oci"),
        ("requests", ["run", "https://127.0.0.1:9/b.hlobundle/"], "oci"),
        ("requests", ["inspect", "oci://localhost:9/x"], "oci"),
        ("oras", ["push", "{b}", "oci://localhost:9/x"], "oci"),
        ("model_signing", ["sign", "{b}", "--private-key", "{t}/key.pem"], "sign"),
        ("model_signing", ["verify", "{b}", "--public-key", "{t}/key.pub"], "sign"),
        ("model_signing", ["pack", "{m}", "-o", "{t}/c", "--sign-key", "{t}/key.pem"], "sign"),
    ],
    ids=lambda v: "-".join(v) if isinstance(v, list) else v,
)
def test_a_missing_extra_is_a_coded_error_with_the_pip_line(tmp_path, blocked, argv, pip):
    import helpers

    b = small_bundle(tmp_path)
    _private_key(tmp_path)
    m = tmp_path / "m.mlir"
    m.write_text(identity_module(np.ones(3, np.float32)))
    if argv[0] == "verify":  # a signed bundle, whose signature needs model-signing to check
        assert cli("sign", b, "--private-key", tmp_path / "key.pem").returncode == 0
    args = [a.format(b=b, t=tmp_path, m=m) for a in argv]
    r = helpers.CLI_ZYGOTE.run(*args, blocked=(blocked,))  # a fork, without the module
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == 1, r.stderr
    assert r.stderr.startswith("error [BACKEND_UNAVAILABLE]"), r.stderr
    # One form everywhere (README.md, "Extras"): the published package's, and a clone's.
    extra = f'pip install "hlobundle[{pip}]" (in a clone of hlobundle: pip install ".[{pip}]")'
    wanted = f'pip install "{pip}' if "-" in pip else extra
    assert wanted in r.stderr, r.stderr


def test_run_with_one_loose_npy_for_several_arguments_says_name_equals_file(tmp_path):
    b = small_bundle(tmp_path)
    np.save(tmp_path / "x_new.npy", sample((4, 3), "float32", 7))
    r = cli("run", b, "--inputs", tmp_path / "x_new.npy")
    assert r.returncode == 1
    assert "x_new.npy" in r.stderr and "--inputs x=" in r.stderr and "NAME=FILE" in r.stderr
    r = cli("run", b, "--inputs", f"x={tmp_path / 'x_new.npy'}")  # what the message suggests
    assert r.returncode == 0, r.stderr


# --- format 2.0: a bundle of several functions ------------------------------------------


@pytest.mark.slow
def test_run_and_emit_name_a_function(tmp_path):
    b = two_functions(tmp_path)
    r = cli("run", b, "--backend", "xla", "--json")  # the default function: predict
    assert r.returncode == 0, r.stderr
    assert [o["name"] for o in json.loads(r.stdout)["outputs"]] == ["result"]
    r = cli("run", b, "--function", "loss", "--backend", "xla", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["ok"]
    r = cli("run", b, "--function", "nope", "--backend", "xla")
    assert r.returncode == 1 and "no function named 'nope'" in r.stderr
    assert "['predict', 'loss']" in r.stderr and "Traceback" not in r.stderr
    script = tmp_path / "loss_run.py"
    r = cli("emit", b, "--function", "loss", "--backend", "xla", "-o", script)
    assert r.returncode == 0, r.stderr
    assert "loss" in script.read_text()
    r = cli("emit", b, "--function", "nope", "-o", tmp_path / "x.py")
    assert r.returncode == 1 and "no function named 'nope'" in r.stderr


def test_without_a_default_function_run_and_emit_say_which_exist(tmp_path):
    b = two_functions(tmp_path)
    edit_manifest(b, lambda m: m.pop("default_function"))
    for argv in (("run", b, "--backend", "xla"), ("emit", b, "-o", tmp_path / "s.py")):
        r = cli(*argv)
        assert r.returncode == 1, r.stdout
        assert r.stderr.startswith("error [INPUT_INVALID]")
        assert "functions ['predict', 'loss'] and no default function" in r.stderr
        assert "--function NAME" in r.stderr and "Traceback" not in r.stderr
    r = cli("run", b, "--function", "predict", "--backend", "xla")
    assert r.returncode == 0, r.stderr


def _double_module(tmp_path):
    """MLIR text of @main(x: f32[8]) -> 2x, which shares no argument name with `two_functions`."""
    path = tmp_path / "double.mlir"
    path.write_text(lowered_text(lambda z: z * 2, np.ones(8, np.float32)))
    np.savez(tmp_path / "z.npz", z=np.arange(8, dtype=np.float32))
    return path


@pytest.mark.slow
def test_pack_add_puts_a_function_from_mlir_text_into_a_bundle(tmp_path):
    b = two_functions(tmp_path)
    module = _double_module(tmp_path)
    argv = ["pack", module, "--inputs", tmp_path / "z.npz", "--names", "z", "-o", b]
    r = cli(*argv, "--function", "double", "--add", "--compute-expected")
    assert r.returncode == 0, r.stderr
    assert f"added function double to {b}" in r.stdout
    bundle = hlobundle.load(b, verify=True)
    assert bundle.functions == ["predict", "loss", "double"]
    assert bundle.default_function == "predict"
    assert cli("run", b, "--function", "double", "--backend", "xla").returncode == 0
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no scratch left
    r = cli(*argv, "--function", "triple", "--add", "--default")
    assert r.returncode == 0, r.stderr
    assert hlobundle.load(b).default_function == "triple"
    r = cli(*argv, "--function", "double", "--add")  # a name the bundle has
    assert r.returncode == 1 and "already has a function named 'double'" in r.stderr
    assert hlobundle.load(b).functions == ["predict", "loss", "double", "triple"]


def test_pack_add_needs_a_bundle_and_default_needs_add(tmp_path):
    module = _double_module(tmp_path)
    r = cli("pack", module, "-o", tmp_path / "none", "--add")
    assert r.returncode == 1 and "[NOT_A_BUNDLE]" in r.stderr, r.stderr
    assert not (tmp_path / "none").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    for extra in (["--default"], ["--replace-signature"], ["--public-key", tmp_path / "k"]):
        r = cli("pack", module, "-o", tmp_path / "b", *extra)
        assert r.returncode == 2, (extra, r.stderr)


@pytest.mark.slow
def test_pack_add_signs_a_signed_bundle_again_under_refreshs_rules(tmp_path):
    pytest.importorskip("model_signing")
    b = two_functions(tmp_path)
    _private_key(tmp_path)
    assert cli("sign", b, "--private-key", tmp_path / "key.pem").returncode == 0
    module = _double_module(tmp_path)
    argv = ["pack", module, "--inputs", tmp_path / "z.npz", "--names", "z", "-o", b, "--add"]
    r = cli(*argv, "--function", "double")  # unsigned, it would drop the signature
    assert r.returncode == 1 and "sign" in r.stderr, r.stderr
    assert hlobundle.load(b).functions == ["predict", "loss"]
    r = cli(*argv, "--function", "double", "--sign-key", tmp_path / "key.pem")
    assert r.returncode == 0, r.stderr
    bundle = hlobundle.load(b, public_key=tmp_path / "key.pub")
    assert bundle.functions == ["predict", "loss", "double"] and bundle.signed


@pytest.mark.slow
@pytest.mark.subprocess
def test_the_command_exits_promptly_with_its_status_its_output_and_the_exit_handlers(tmp_path):
    from helpers import ROOT

    example = ROOT / "examples" / "lenet5.hlobundle"
    """`hlobundle` skips the interpreter's teardown, but not what a process owes at exit: the
    exit status, every byte of output (a pipe), and the exit handlers (jax.distributed's)."""
    code = (
        "import atexit, sys\n"
        "from hlobundle._cli._main import entry\n"
        "atexit.register(lambda: print('exit handler ran', file=sys.stderr))\n"
        f"entry(['inspect', {str(example)!r}, '--json'])\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["arguments"]  # the whole JSON document arrived
    assert r.stderr.strip() == "exit handler ran"
    missing = tmp_path / "missing"
    r = subprocess.run(
        [sys.executable, "-c", code.replace(str(example), str(missing))],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 1 and "NOT_A_BUNDLE" in r.stdout + r.stderr

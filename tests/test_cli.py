"""The command line: exit codes, JSON output, and errors without tracebacks."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import cli, edit_manifest, identity_module, sample, small_bundle


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
    assert "x     (2, 3)  float32  row_major  input  %arg0" in r.stdout
    assert "n     ()      int64    row_major  state  %arg1" in r.stdout
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
    edit_manifest(b, lambda m: m.update(format_version="1.3"))
    r = cli("verify", b)
    assert r.returncode == 0
    assert "warning: manifest.json: format_version 1.3 is newer than this reader's 1.1" in r.stderr

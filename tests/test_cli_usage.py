"""The command line's exit statuses: a usage error (what the command line alone shows wrong)
exits 2 with the command's usage and a message naming the option, before any file is read; an
error found in a bundle, a file or a run exits 1 with `error [CODE]`."""

from __future__ import annotations

import re

import pytest
from helpers import cli, two_functions

B = "{missing}"  # a bundle that does not exist: a usage error is found before it is read

USAGE_ERRORS = [
    ((), "COMMAND"),
    (("frobnicate",), "frobnicate"),
    (("run",), "bundle"),
    (("run", B, "--bogus"), "--bogus"),
    (("run", B, "--backend", "cuda"), "--backend"),
    (("run", B, "--backend", "enzyme", "--trust-executables"), "--trust-executables"),
    (("run", B, "--backend", "xla", "--max-memory", "1G"), "--max-memory"),
    (("run", B, "--backend", "iree", "--max-memory", "lots"), "--max-memory"),
    (("run", B, "--backend", "iree", "--devices", "2"), "--devices"),
    (("run", B, "--backend", "iree", "--distributed"), "--distributed"),
    (("run", B, "--devices", "0"), "--devices"),
    (("run", B, "--save-outputs", "out.npy"), "--save-outputs"),
    (("run", B, "--rtol", "nan"), "--rtol"),
    (("run", B, "--atol", "-1"), "--atol"),
    (("run", B, "--public-key", "k.pem", "--certificate-chain", "c.pem"), "--certificate-chain"),
    (("emit", B, "--format", "reactant-server"), "-o"),
    (("emit", B, "--format", "reactant-server", "-o", "{tmp}", "--force"), "--force"),
    (("emit", B, "--backend", "xla", "--trust-executables"), "--trust-executables"),
    (("verify", B, "--quick", "--public-key", "k.pem"), "--quick"),
    (("inspect", B, "--quick"), "--quick"),
    (("serve", B, "--port", "99999"), "--port"),
    (("serve", B, "--port", "http"), "--port"),
    (("serve", B, "--max-batch-size", "0"), "--max-batch-size"),
    (("serve", B, "--max-connections", "0"), "--max-connections"),
    (("serve", B, "--grpc-port", "99999"), "--grpc-port"),
    (("serve", B, "--host", "0.0.0.0", "--shared-memory-over-loopback"), "--shared-memory-over"),
    (("serve", B, "--grpc-max-deadline", "0"), "--grpc-max-deadline"),
    (("serve", B, "--max-body-bytes", "-5"), "--max-body-bytes"),
    (("serve", B, "--max-response-bytes", "0"), "--max-response-bytes"),
    (("serve", B, "--read-timeout", "0"), "--read-timeout"),
    (("serve", B, "--batch-timeout-ms", "nan"), "--batch-timeout-ms"),
    (("serve", B, "--backend", "enzyme", "--trust-executables"), "--trust-executables"),
    (("serve", "=" + B), "NAME="),
    (("serve", "m="), "NAME="),
    (("refresh", B, "--target-version", "1.0"), "--target-version"),
    (("refresh", B, "--public-key", "k.pem"), "--public-key"),
    (("refresh", B, "--signing-certificate", "c.pem"), "--signing-certificate"),
    (("compile", B, "--target", "cuda"), "--target"),
    (("compile", B, "--cpu", ""), "--cpu"),
    (("compile", B, "--replace-signature"), "--replace-signature"),
    (("sign", B), "--private-key"),
    (("conformance", "--implementation", "impl", "--backend", "xla"), "--implementation"),
    (("pack", "-o", B), "MODULE"),
    (("pack", "m.mlir"), "-o"),
    (("pack", "m.mlir", "-o", B, "--layout", "diagonal"), "--layout"),
    (("pack", "m.mlir", "-o", B, "--role", "x=boss"), "--role"),
    (("pack", "m.mlir", "-o", B, "--target-version", "abc"), "--target-version"),
    (("pack", "m.mlir", "-o", B, "--batch-size", "2"), "--batch-size"),
    (("pack", "m.mlir", "-o", B, "--default"), "--default"),
    (("pack", "m.mlir", "-o", B, "--replace-signature"), "--replace-signature"),
    (("pack", "m.mlir", "-o", B, "--add", "--force"), "--force"),
    (("pack", "m.mlir", "-o", B, "--signing-certificate", "c.pem"), "--signing-certificate"),
    (("pack", "m.mlir", "-o", B, "--compute-expected", "--expected", "e.npz"), "--expected"),
    (("pack", "m.mlir", "--from-jax-export", "e.bin", "-o", B), "--from-jax-export"),
    (("pack", "--from-jax-export", "a", "--from-jax-export", "b", "-o", B), "--from-jax-export"),
    (("pack", "--from-jax-export", "=x", "--from-jax-export", "b=y", "-o", B), "NAME="),
    (
        (
            "pack",
            "--from-jax-export",
            "a=x",
            "--from-jax-export",
            "b=y",
            "--function",
            "f",
            "-o",
            B,
        ),
        "--function",
    ),
    (("pack", "--from-jax-export", "e.bin", "--names", "x", "-o", B), "--names"),
    (("pack", "--from-reactant", "dir", "--inputs", "x.npz", "-o", B), "--from-reactant"),
    (("pack", "--from-reactant-server", "dir", "--function", "f", "-o", B), "--function"),
    (("pack", "--from-reactant-server", "dir", "--batch-size", "0", "-o", B), "--batch-size"),
]


def _id(value: tuple[str, ...] | str) -> str:
    return (" ".join(value) or "no command") if isinstance(value, tuple) else f"names {value}"


@pytest.mark.parametrize(("argv", "option"), USAGE_ERRORS, ids=_id)
def test_a_usage_error_exits_2_naming_the_option(tmp_path, argv, option):
    missing = tmp_path / "missing"
    r = cli(*[a.format(missing=missing, tmp=tmp_path / "out") for a in argv])
    assert r.returncode == 2, r.stderr
    first, *rest = r.stderr.strip().splitlines()
    assert re.match(r"hlobundle( \w+)?: error: ", first) and option in first, r.stderr
    assert len(rest) == 1 and rest[0].startswith("usage: hlobundle"), r.stderr  # short
    assert "Traceback" not in r.stderr and r.stdout == ""
    assert not missing.exists() and not (tmp_path / "out").exists()  # nothing read or written


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (("run", B, "--backend", "xla"), "NOT_A_BUNDLE"),  # what the bundle is: a file question
        (("verify", B, "--quick"), "NOT_A_BUNDLE"),
        (("run", "{two}", "--backend", "xla", "--function", "nope"), "INPUT_INVALID"),
        (("emit", "{two}", "--function", "nope", "-o", "{tmp}"), "INPUT_INVALID"),
        (("conformance", "-k", "no case is named so"), "INPUT_INVALID"),
    ],
    ids=["missing bundle", "verify missing", "function it lacks", "emit function", "-k"],
)
def test_a_bundle_error_still_exits_1_with_its_code(tmp_path, argv, code):
    two = two_functions(tmp_path) if "{two}" in argv else None
    r = cli(*[a.format(missing=tmp_path / "missing", two=two, tmp=tmp_path / "s.py") for a in argv])
    assert r.returncode == 1, r.stderr
    assert r.stderr.startswith(f"error [{code}] ") and "usage:" not in r.stderr, r.stderr


def test_conformance_that_selects_no_case_fails_rather_than_passes():
    r = cli("conformance", "-k", "no case is named so", "--backend", "xla")
    assert r.returncode == 1 and "-k 'no case is named so' matches none of the" in r.stderr


def test_a_usage_error_says_what_is_wrong_first_then_a_one_line_usage():
    """argparse printed 10 lines of run's usage before the line that says what is wrong."""
    r = cli("run")
    assert r.returncode == 2
    assert r.stderr.splitlines() == [
        "hlobundle run: error: the following arguments are required: bundle",
        "usage: hlobundle run [OPTIONS] bundle  (hlobundle run --help lists the options)",
    ]
    r = cli("sign", "b")  # a required option is part of the usage
    assert "usage: hlobundle sign [OPTIONS] --private-key KEY.pem bundle  (hlobundle" in r.stderr, (
        r.stderr
    )


def test_a_mistyped_command_suggests_the_closest():
    r = cli("serv", "model.hlobundle")
    assert r.returncode == 2 and r.stdout == ""
    first = r.stderr.splitlines()[0]
    assert first.startswith("hlobundle: error: no command 'serv'; did you mean serve? "), first
    assert "(the commands are pack, run, emit," in first, first
    r = cli("frobnicate")
    assert "did you mean" not in r.stderr and "no command 'frobnicate'" in r.stderr


def test_help_lists_the_exit_statuses():
    r = cli("--help")
    assert r.returncode == 0
    statuses = r.stdout[r.stdout.index("exit status:") :]
    for line in ("0    done", "1    an error", "2    a usage error", "130  interrupted"):
        assert f"\n  {line}" in statuses


def test_the_backend_choices_are_the_runner_s_backends():
    from hlobundle._cli._parser_read import BACKENDS
    from hlobundle._run import _backends

    assert _backends.NAMES == BACKENDS


@pytest.mark.parametrize(
    ("command", "capability"),
    [
        ("run", "runs_executables"),
        ("serve", "runs_executables"),
        ("emit", "scripts_executables"),
    ],
)
def test_trust_executables_help_names_the_backends_that_take_it(command, capability):
    """The help's "xla and iree:" is the list the usage check accepts (`applies`; auto is xla)."""
    from hlobundle._cli import _common
    from hlobundle._run import _backends

    has = getattr(_common, capability)  # the predicate the command hands `applies`
    able = [n for n in _backends.NAMES[1:] if has(_backends.kind(n))]
    r = cli(command, "--help")
    text = " ".join(r.stdout.split())
    named = re.search(r"--trust-executables (\w+(?: and \w+)*):", text)
    assert named and named[1].split(" and ") == able, (named and named[0], able)


def test_value_forms_are_the_manifest_s():
    """A --target-version or --cpu the CLI accepts is one the manifest accepts, and no other."""
    from hlobundle._cli import _values
    from hlobundle._format._manifest import Executable, PortableArtifact

    pattern = PortableArtifact.model_json_schema()["properties"]["target_version"]["pattern"]
    assert pattern == f"^{_values.TARGET_VERSION.pattern}$"
    assert (
        Executable.model_json_schema()["properties"]["cpu"]["pattern"] == f"^{_values.CPU.pattern}$"
    )


def test_a_full_disk_is_a_message_and_exit_1_not_a_traceback(tmp_path, monkeypatch):
    import errno
    import os

    import numpy as np
    from helpers import relu_module_text

    (tmp_path / "relu.mlir").write_text(relu_module_text())
    np.save(tmp_path / "x.npy", np.ones((4,), np.float32))

    def full(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "out"))

    monkeypatch.setattr(os, "writev", full)  # the tensor writer's system call
    r = cli("pack", tmp_path / "relu.mlir", "--inputs", tmp_path / "x.npy", "-o", tmp_path / "out")
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert re.fullmatch(
        r"error \[OS_ERROR\] No space left on device \(path: .*out\)\n", r.stderr
    ), r.stderr
    assert not (tmp_path / "out").exists()

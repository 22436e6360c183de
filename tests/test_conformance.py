"""The conformance suite: current, complete, and passed by this implementation (in process and
through the command protocol)."""

from __future__ import annotations

import filecmp
import importlib.util
import json
import os
import shutil
import sys

import pytest
from helpers import ROOT, cli

import hlobundle
from hlobundle._cli import _conformance

CASES = ROOT / "hlobundle" / "conformance_cases"


def load_generator():
    spec = importlib.util.spec_from_file_location("generate", ROOT / "conformance" / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_cases_are_current(tmp_path):
    load_generator().generate(tmp_path / "cases")
    index = json.loads((CASES / "index.json").read_text())
    same_jaxlib = (
        index["jaxlib"] == json.loads((tmp_path / "cases" / "index.json").read_text())["jaxlib"]
    )
    stale = []
    for new in sorted((tmp_path / "cases").rglob("*")):
        rel = new.relative_to(tmp_path / "cases")
        old = CASES / rel
        assert not new.is_symlink(), f"{rel}: a wheel cannot carry it (case.json `symlinks`)"
        if new.is_dir() or rel.name == "index.json":
            continue
        elif rel.suffix == ".mlirbc" and not same_jaxlib:
            continue  # bytecode is jaxlib's to write; compared only under the generating jaxlib
        elif rel.name == "model.sig" and "public_key" in json.loads(
            (CASES / rel.parts[0] / "case.json").read_text()
        ):  # ECDSA is randomized: the committed signature must verify instead
            ok = old.is_file() and _signature_verifies(CASES / rel.parts[0])
        else:
            ok = old.is_file() and filecmp.cmp(old, new, shallow=False)
        if not ok:
            stale.append(str(rel))
    extra = {p.relative_to(CASES) for p in CASES.rglob("*")} - {
        p.relative_to(tmp_path / "cases") for p in (tmp_path / "cases").rglob("*")
    }
    assert not stale and not extra, (
        f"stale: {stale[:5]}, extra: {sorted(map(str, extra))[:5]}; run `python conformance/generate.py`"
    )


def _signature_verifies(case) -> bool:
    spec = json.loads((case / "case.json").read_text())
    bundle = hlobundle.load(case / "bundle")
    try:
        bundle.verify(public_key=case / spec["public_key"])
    except hlobundle.errors.SignatureInvalidError:
        return spec["expect"] == "SIGNATURE_INVALID"
    return spec["expect"] == "ok"


def test_suite_size():
    specs = [json.loads(p.read_text()) for p in CASES.glob("*/case.json")]
    invalid = [s for s in specs if s["expect"] != "ok"]
    assert len(specs) >= 40 and len(invalid) * 3 >= len(specs)
    assert all(s["description"] for s in specs)


@pytest.mark.parametrize("case", sorted(p.parent.name for p in CASES.glob("*/case.json")))
def test_case_passes_in_process(case):
    outcome = _conformance.run_case(CASES / case)
    assert outcome.passed, outcome


PROTOCOL_SAMPLE = [
    "valid_dtype_complex128",
    "valid_no_example_inputs",
    "valid_column_major",
    "invalid_symlink",
    "invalid_hash_mismatch",
    "invalid_mlir_dtype",
]


@pytest.mark.slow
@pytest.mark.subprocess
def test_protocol_with_the_cli_as_another_implementation():
    # The implementation is the `hlobundle` command, each call a process of its own: a fork of
    # the session's CLI zygote (helpers.CliZygote), not a fresh interpreter that imports jax.
    import helpers

    command = str(helpers.CLI_ZYGOTE.bin_dir() / "hlobundle")
    r = cli(
        "conformance",
        CASES,
        "--implementation",
        command,
        "--json",
        *sum((["-k", name] for name in PROTOCOL_SAMPLE[:1]), []),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads(r.stdout)
    assert [(c["case"], c["passed"]) for c in report["cases"]] == [(PROTOCOL_SAMPLE[0], True)]
    for name in PROTOCOL_SAMPLE[1:]:  # the first passed through the command just now
        outcome = _conformance.run_case(CASES / name, [command])
        assert outcome.passed, outcome


def test_a_wrong_implementation_fails():
    accept_all = [sys.executable, "-c", "import json; print(json.dumps({'ok': True}))"]
    outcome = _conformance.run_case(CASES / "invalid_hash_mismatch", accept_all)
    assert not outcome.passed and outcome.got != "HASH_MISMATCH"


@pytest.mark.parametrize("printed", ["1", "[]", '"ok"', "null"])
def test_an_implementation_printing_json_that_is_no_object_is_a_protocol_error(printed):
    prints = [sys.executable, "-c", f"print({printed!r})"]
    outcome = _conformance.run_case(CASES / "invalid_hash_mismatch", prints)
    assert not outcome.passed and outcome.got == "PROTOCOL_ERROR"


@pytest.mark.parametrize("case", sorted(p.parent.name for p in CASES.glob("invalid_*/case.json")))
def test_invalid_cases_give_clean_cli_errors(case):
    spec = json.loads((CASES / case / "case.json").read_text())
    key = ["--public-key", CASES / case / spec["public_key"]] if "public_key" in spec else []
    expect = spec["expect"]
    inputs = CASES / case / "inputs.npz"  # refused when called on these inputs (SPEC.md 2.8)
    command = ("run", "--inputs", inputs) if inputs.exists() else ("verify",)
    with _conformance.prepared(CASES / case) as here:  # its `symlinks` made
        r = cli(command[0], here / "bundle", *command[1:], *key)
    assert r.returncode == 1
    assert r.stderr.startswith(f"error [{expect}] ") and "Traceback" not in r.stderr


def test_conformance_cli_reports(tmp_path):
    r = cli("conformance", CASES, "-k", "zero_d")
    assert r.returncode == 0 and "1 passed, 0 failed, 1 cases" in r.stdout
    r = cli("conformance", tmp_path)
    assert r.returncode == 1 and "no conformance cases" in r.stderr


def test_conformance_runs_the_installed_cases_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no conformance/ here
    r = cli("conformance", "-k", "zero_d")
    assert r.returncode == 0, r.stderr
    assert "1 passed, 0 failed, 1 cases" in r.stdout


def test_the_cases_are_package_data():
    import tomllib

    from hlobundle._cli._conformance import INSTALLED

    assert INSTALLED == CASES.resolve()
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert config["tool"]["setuptools"]["package-data"]["hlobundle"] == ["conformance_cases/**/*"]


# --- the cases as a wheel installs them: no symlinks, and no optional part installed ----------


def test_the_linked_cases_pass_from_a_copy_without_symlinks_as_a_wheel_installs_it(tmp_path):
    # A wheel cannot hold a symlink: pip writes the file it points at, or nothing. A case's
    # link is made by the runner, in a copy, from its case.json (SPEC.md 9, `symlinks`). The
    # cases that name none are the same bytes in such a copy (the cases hold no symlink,
    # test_package.py checks): test_case_passes_in_process runs each of them, and
    # test_package.py's wheel runs some from a wheel. (Running all of them again here took
    # 2.3 CPU-s.)
    copy = tmp_path / "cases"
    linked = [p.parent.name for p in CASES.glob("*/case.json") if "symlinks" in p.read_text()]
    for name in linked:
        shutil.copytree(CASES / name, copy / name, symlinks=False)
    r = cli("conformance", copy, "--json")
    report = json.loads(r.stdout)
    failed = [(c["case"], c["got"]) for c in report["cases"] if c["result"] == "FAIL"]
    assert r.returncode == 0 and failed == [], failed
    assert [c["case"] for c in report["cases"]] == sorted(linked)
    assert [c["got"] for c in report["cases"] if c["case"] == "invalid_symlink"] == ["PATH_UNSAFE"]
    assert not any(p.is_symlink() for p in copy.rglob("*"))  # made in a private copy only


@pytest.mark.parametrize(
    "link",
    ["../escaped", "{tmp}/escaped", "bundle/../../escaped", "bundle", "bundle/manifest.json"],
)
def test_a_case_link_outside_its_copy_or_over_a_file_is_refused(tmp_path, monkeypatch, link):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the copy is made
    case = tmp_path / "cases" / "invalid_symlink"
    shutil.copytree(CASES / "invalid_symlink", case)
    spec = json.loads((case / "case.json").read_text())
    links = {link.format(tmp=tmp_path): "x"}
    (case / "case.json").write_text(json.dumps({**spec, "symlinks": links}))
    with pytest.raises(hlobundle.errors.InputError, match=r"`symlinks`: .* not a new name"):
        _conformance.run_case(case)
    assert not os.path.lexists(tmp_path / "escaped")


def test_a_case_link_under_a_symlinked_folder_is_refused(tmp_path):
    case = tmp_path / "cases" / "invalid_symlink"
    shutil.copytree(CASES / "invalid_symlink", case)
    (tmp_path / "outside").mkdir()
    os.symlink(tmp_path / "outside", case / "away")
    spec = json.loads((case / "case.json").read_text())
    (case / "case.json").write_text(json.dumps({**spec, "symlinks": {"away/link": "x"}}))
    with pytest.raises(hlobundle.errors.InputError, match="not a new name"):
        _conformance.run_case(case)
    assert list((tmp_path / "outside").iterdir()) == []


@pytest.mark.parametrize("links", [["bundle/x"], {"bundle/x": 1}, "bundle/x"])
def test_case_links_that_are_no_map_of_strings_are_refused(tmp_path, links):
    case = tmp_path / "invalid_symlink"
    shutil.copytree(CASES / "invalid_symlink", case)
    spec = json.loads((case / "case.json").read_text())
    (case / "case.json").write_text(json.dumps({**spec, "symlinks": links}))
    with pytest.raises(hlobundle.errors.InputError, match="must map link paths"):
        _conformance.run_case(case)


@pytest.mark.slow
@pytest.mark.subprocess
def test_signed_cases_are_skipped_not_failed_without_model_signing():
    # A process without model_signing, as where the extra is not installed: a fork of the
    # session's CLI zygote that cannot import it (helpers.CliZygote.run's `blocked`), not a
    # fresh interpreter whose sitecustomize blocks it.
    import helpers

    r = helpers.CLI_ZYGOTE.run("conformance", CASES, "-k", "sign", blocked=("model_signing",))
    assert r.returncode == 0, r.stdout + r.stderr
    rows = {line.split()[0]: line.split()[3] for line in r.stdout.splitlines()[1:] if "_" in line}
    assert rows["valid_signed"] == rows["invalid_signature_rewritten_manifest"] == "skipped"
    assert rows["invalid_signature_listed"] == "pass"  # refused before any signature is read
    assert "skipped valid_signed: " in r.stdout and 'pip install "hlobundle[sign]"' in r.stdout
    assert "2 skipped (an optional part is absent), 0 failed, 4 cases" in r.stdout


def test_a_case_without_needs_is_failed_not_skipped_when_a_part_is_absent(tmp_path):
    # `needs` is what lets BACKEND_UNAVAILABLE be a skip: without it, it is a failure.
    case = tmp_path / "valid_signed"
    shutil.copytree(CASES / "valid_signed", case)
    spec = json.loads((case / "case.json").read_text())
    spec.pop("needs")
    (case / "case.json").write_text(json.dumps(spec))
    absent = [sys.executable, "-c", 'print(\'{"ok": false, "code": "BACKEND_UNAVAILABLE"}\')']
    outcome = _conformance.run_case(case, absent)
    assert (outcome.result, outcome.skipped) == ("FAIL", False)
    outcome = _conformance.run_case(CASES / "valid_signed", absent)
    assert (outcome.result, outcome.skipped) == ("skipped", True)

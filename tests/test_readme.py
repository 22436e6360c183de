"""Every Python code block of the README runs as written (from the repository root's view of
`examples/`, in a scratch directory for what the blocks write)."""

from __future__ import annotations

import os
import re

import pytest
from helpers import ROOT

BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)


def _missing_extra(block: str) -> str | None:
    """Why `block` cannot run here: an extra it uses is not installed."""
    from helpers import ENZYME

    if '"enzyme"' in block and not ENZYME:
        return "the block uses enzyme-ad, which is not installed"
    return None


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_python_block_runs(tmp_path, monkeypatch, index):
    if _missing_extra(BLOCKS[index]):
        pytest.skip(_missing_extra(BLOCKS[index]))
    if 'function("iree"' in BLOCKS[index]:
        from hlobundle._run._backends import _iree, _iree_compile

        if not (_iree.available() and _iree_compile.available()):
            pytest.skip("the block uses the iree extra, which is not installed")
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(tmp_path)
    code = compile(BLOCKS[index], f"README.md python block {index}", "exec")
    exec(code, {"__name__": "__readme__"})
    assert os.getcwd() == str(tmp_path)


SIGNING = re.search(r"## Signed bundles.*?```sh\n(.*?)```", (ROOT / "README.md").read_text(), re.S)


@pytest.mark.subprocess
def test_readme_signing_block_runs(tmp_path):
    pytest.importorskip("model_signing", reason="the sign extra is not installed")
    import shutil
    import subprocess
    import sys

    if shutil.which("openssl") is None:
        pytest.skip("the block makes its key with the openssl command, which is not installed")
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    bin_dir = os.path.dirname(sys.executable)  # hlobundle and model_signing
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", SIGNING[1]], cwd=tmp_path, env=env,
                       capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "Verification succeeded" in r.stdout + r.stderr
    assert r.stdout.rstrip().endswith("ok")  # hlobundle run's last line


IREE = re.search(r"## Without JAX: IREE.*?```sh\n(.*?)```", (ROOT / "README.md").read_text(), re.S)


@pytest.mark.subprocess
def test_readme_iree_block_runs(tmp_path):
    from hlobundle._run._backends import _iree

    if not _iree.available():
        pytest.skip("the iree extra is not installed")
    import subprocess
    import sys

    (tmp_path / "examples").symlink_to(ROOT / "examples")
    bin_dir = os.path.dirname(sys.executable)  # hlobundle and this python
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "HLOBUNDLE_CACHE_DIR": str(tmp_path / "cache")}  # fmt: skip
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", IREE[1]], cwd=tmp_path, env=env,
                       capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "backend iree (stored executable compiled/llvm-cpu.vmfb)" in r.stdout
    assert r.stdout.rstrip().endswith("ok")  # the emitted script's last line


LM = re.search(r"## A language model.*?```sh\n(.*?)```", (ROOT / "README.md").read_text(), re.S)


@pytest.mark.subprocess
def test_readme_lm_emit_block_generates_text(tmp_path):
    import subprocess
    import sys

    (tmp_path / "examples").symlink_to(ROOT / "examples")
    bin_dir = os.path.dirname(sys.executable)  # hlobundle and this python
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", LM[1]], cwd=tmp_path, env=env,
                       capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "(backend xla;" in r.stdout  # chosen for the symbolic shapes
    assert r.stdout.rstrip("\n").splitlines()[-1].startswith("A bundle artifact the manifest")


README = (ROOT / "README.md").read_text()

# Every fenced block's language, and what the tests do with it. A new language must be added
# here with its reason, so that no block is left untested by accident.
FENCES = {
    "python": "run in-process, each block alone and all of them in order (above)",
    "sh": "the signing, IREE and language-model blocks run (above); the others need a fresh "
    "venv or Julia's output",
    "": "not code: the bundle's file tree (checked below)",
    "julia": "skipped: it needs Julia with Reactant.jl and NPZ.jl, which this test suite has not",
}


def test_every_readme_block_is_run_or_skipped_with_a_reason():
    languages = set(re.findall(r"^```(\w*)\n.*?^```$", README, re.S | re.M))
    assert languages <= set(FENCES), (
        f"README blocks in {languages - set(FENCES)}: add them to FENCES"
    )


JULIA_BLOCKS = re.findall(r"```julia\n(.*?)```", README, re.S)


@pytest.mark.parametrize("index", range(len(JULIA_BLOCKS)))
def test_readme_julia_block(index):
    pytest.skip(FENCES["julia"])


def test_readme_python_blocks_run_one_after_another(tmp_path, monkeypatch):
    # A reader runs them in one directory: no block may write where an earlier one wrote.
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(tmp_path)
    for index, block in enumerate(BLOCKS):
        if 'function("iree"' in block or _missing_extra(block):
            continue  # an extra: run alone above, when it is installed
        exec(compile(block, f"README.md python block {index}", "exec"), {"__name__": "__readme__"})


def _tree() -> str:
    return re.search(r"## What it is.*?```\n(.*?)```", README, re.S)[1]


def test_the_readme_tree_lists_every_file_a_bundle_can_hold():
    from hlobundle._format._signature import SIGNATURE_NAME
    from hlobundle._format._stored import FORMS
    from hlobundle._write._plan import EXPECTED_FILE, TENSOR_FILES

    listed = set(re.findall(r"^\s+(\S+)", _tree(), re.M))
    listed |= {name.replace("(bc)", "") for name in listed} | {
        name.replace("(bc)", "bc") for name in listed
    }
    names = {"manifest.json", SIGNATURE_NAME, EXPECTED_FILE, *TENSOR_FILES.values()}
    names |= {f for form in FORMS for f in (form.text_file, form.portable_file)}
    assert sorted(names - listed) == []
    # the writer's executables (hlobundle/_write/_compile.py): compiled/<target>.vmfb
    assert any(re.fullmatch(r"compiled/[\w*-]+\.vmfb", name) for name in listed)


def test_the_first_commands_install_for_users_before_contributors():
    first = README[: README.index("## What it is")]
    user = re.search(r"pip install \.(\s|$|\")", first)
    assert user, "a plain `pip install .` (no dev tools) among the first commands"
    assert user.start() < first.index('.[dev]"'), "the user's install before the contributor's"

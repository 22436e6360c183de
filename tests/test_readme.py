"""Every Python code block of the README runs as written (from the repository root's view of
`examples/`, in a scratch directory for what the blocks write)."""

from __future__ import annotations

import os
import re

import pytest
from helpers import ROOT

BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_python_block_runs(tmp_path, monkeypatch, index):
    if 'function("iree"' in BLOCKS[index]:
        from hlobundle._run._backends import _iree
        from hlobundle._write import _iree_compile

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

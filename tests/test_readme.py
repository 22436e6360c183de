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
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(tmp_path)
    code = compile(BLOCKS[index], f"README.md python block {index}", "exec")
    exec(code, {"__name__": "__readme__"})
    assert os.getcwd() == str(tmp_path)

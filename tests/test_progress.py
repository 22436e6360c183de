"""Progress bars: on a terminal for steps of many bytes (pack, verify, loads into memory);
never on a pipe, nor beside --json."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios

import numpy as np
import pytest
from helpers import cli, identity_module

import hlobundle
from hlobundle import _progress

BIG = (_progress.MIN_BYTES // 4 + 1024,)  # float32: just over the size that gets a bar


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    x = np.zeros(BIG, np.float32)
    tmp = tmp_path_factory.mktemp("progress")
    np.save(tmp / "x.npy", x)
    return hlobundle.pack(identity_module(x), [x], tmp / "big")


def _on_a_terminal(*args: object) -> tuple[int, str]:
    """Run `hlobundle ARGS` with stderr on a pseudo-terminal; return its status and stderr."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # 100 columns
    proc = subprocess.Popen(
        [sys.executable, "-m", "hlobundle", *map(str, args)],
        stdout=subprocess.DEVNULL,
        stderr=follower,
    )
    os.close(follower)
    seen = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # EIO: the process closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    os.close(leader)
    return proc.wait(), seen.decode(errors="replace")


@pytest.mark.subprocess
def test_verify_shows_progress_on_a_terminal(big):
    status, stderr = _on_a_terminal("verify", big)
    assert status == 0
    assert "checking inputs.safetensors" in stderr and "64.0M" in stderr


@pytest.mark.subprocess
def test_pack_shows_progress_on_a_terminal(big, tmp_path):
    module = tmp_path / "m.mlir"
    module.write_text(identity_module(np.zeros(BIG, np.float32)))
    status, stderr = _on_a_terminal(
        "pack", module, "--inputs", big.parent / "x.npy", "-o", tmp_path / "b"
    )
    assert status == 0, stderr
    assert "writing inputs.safetensors" in stderr
    assert "checking" not in stderr  # pack hashes from memory while it writes
    assert (tmp_path / "b" / "inputs.safetensors").exists()


@pytest.mark.subprocess
def test_no_progress_beside_json_even_on_a_terminal(big):
    status, stderr = _on_a_terminal("verify", big, "--json")
    assert status == 0 and stderr == ""


def test_no_progress_on_a_pipe(big):
    r = cli("verify", big)
    assert r.returncode == 0 and r.stderr == ""


def test_load_into_memory_reports_every_byte(big, monkeypatch):
    seen: list[tuple[str, int]] = []

    class Recorder:
        def __init__(self, total, desc, **_):
            seen.append((desc, total))

        def update(self, n):
            seen.append(("+", n))

        def close(self):
            pass

    import tqdm

    monkeypatch.setattr(tqdm, "tqdm", Recorder)
    monkeypatch.setattr(_progress, "_enabled", True)
    hlobundle.load(big, verify=True)
    size = (big / "inputs.safetensors").stat().st_size
    reading = seen.index(("reading inputs.safetensors", size))
    checking = seen.index(("checking inputs.safetensors", size))
    assert sum(n for what, n in seen[reading + 1 : checking] if what == "+") == size
    assert sum(n for what, n in seen[checking + 1 :] if what == "+") == size

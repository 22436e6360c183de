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
from hlobundle._terminal import _progress

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


@pytest.mark.slow
@pytest.mark.subprocess
def test_verify_shows_progress_on_a_terminal(big):
    status, stderr = _on_a_terminal("verify", big)
    assert status == 0
    assert "checking inputs.safetensors" in stderr and "64.0M" in stderr


@pytest.mark.slow
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


@pytest.mark.slow  # a child process on a terminal
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
    reading = seen.index(("reading inputs.safetensors", size))  # hashed as it is read: one pass
    assert ("checking inputs.safetensors", size) not in seen
    assert sum(n for what, n in seen[reading + 1 :] if what == "+") == size


def test_pack_reports_bytes_as_they_reach_the_file(tmp_path, monkeypatch):
    """The bar moves while the file grows (not 0% until the end) and leaves a final line."""
    x = np.zeros(BIG, np.float32)
    seen: list[tuple[int, int]] = []  # (bytes reported so far, bytes on disk then)
    kept: list[bool] = []

    class Recorder:
        def __init__(self, total, desc, leave=True, **_):
            self.path = tmp_path / "b" if desc.startswith("writing") else None
            self.done = 0
            kept.append(leave)

        def update(self, n):
            self.done += n
            partial = [p for p in tmp_path.glob(".b.partial-*/inputs.safetensors")]
            seen.append((self.done, partial[0].stat().st_size if partial else -1))

        def close(self):
            pass

    import tqdm

    monkeypatch.setattr(tqdm, "tqdm", Recorder)
    monkeypatch.setattr(_progress, "_enabled", True)
    b = hlobundle.pack(identity_module(x), [x], tmp_path / "b")
    size = (b / "inputs.safetensors").stat().st_size
    assert len(seen) > 2 and seen[-1][0] == size
    assert all(0 < done <= on_disk for done, on_disk in seen)  # reported as written, not guessed
    assert kept and all(kept)  # the last line stays on the terminal


def _partial_size(parent) -> int:
    for p in parent.glob(".out.partial-*/inputs.safetensors"):
        try:
            return p.stat().st_size
        except FileNotFoundError:
            pass
    return 0


_SLOW_WRITES = """
import os, signal, sys, time
# a terminal's foreground process: Ctrl-C is heard, even where the suite was started in the
# background (a shell's `&` gives its children SIGINT ignored, and an ignored signal is inherited)
signal.signal(signal.SIGINT, signal.default_int_handler)
real = os.writev
def slow(fd, buffers):
    time.sleep(0.1)
    return real(fd, buffers)
os.writev = slow
# Steps of 1 MiB: the whole file takes many slow steps (about 6 s), so that a Ctrl-C heard
# only at the end of the write, not between its steps, is plainly late (with 8 MiB steps the
# whole write took about 1 s, under the bound below).
from hlobundle._file_io import _hashing_writer
_hashing_writer.STEP_BYTES = 1 << 20
from hlobundle._cli._main import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
@pytest.mark.subprocess
def test_ctrl_c_during_pack_stops_it_promptly_and_leaves_nothing(big, tmp_path):
    import signal
    import time

    module = tmp_path / "m.mlir"
    module.write_text(identity_module(np.zeros(BIG, np.float32)))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _SLOW_WRITES,
            "pack",
            str(module),
            "--inputs",
            str(big.parent / "x.npy"),
            "-o",
            str(tmp_path / "out"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        full = (big / "inputs.safetensors").stat().st_size
        deadline = time.monotonic() + 60
        while not 0 < _partial_size(tmp_path) < full:  # caught mid-write
            assert proc.poll() is None, "pack finished before its tensors were written in steps"
            assert time.monotonic() < deadline
            time.sleep(0.01)
        proc.send_signal(signal.SIGINT)
        sent = time.monotonic()
        _, stderr = proc.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        proc.kill()
    assert proc.returncode == 130 and b"interrupted" in stderr, stderr
    assert took < 2, f"Ctrl-C took {took:.1f} s to act"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.mlir"]  # no half bundle

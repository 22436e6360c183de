"""Tensor files are written in steps while a second thread hashes them (`_hashing_writer`):
the digest is hashlib's of the file, the file is what safetensors reads, arrays are converted
one at a time, a failure on either side stops both, and each file of a bundle is fsynced once."""

from __future__ import annotations

import hashlib
import os
import threading
import weakref

import numpy as np
import pytest
from helpers import identity_module, sample
from safetensors.numpy import load_file

import hlobundle
from hlobundle._bundle_io import _tensor_writing
from hlobundle._file_io import _durable, _hashing_writer
from hlobundle._format import _dtypes


def _hash_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "hlobundle-sha256"]


@pytest.fixture
def small_steps(monkeypatch):
    """Steps of 4 KiB and at most 3 buffers, so that small arrays make many steps."""
    monkeypatch.setattr(_hashing_writer, "STEP_BYTES", 4096)
    monkeypatch.setattr(_hashing_writer, "_MAX_BUFFERS", 3)


def _mixed() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    arrays = {
        f"t{i}": rng.standard_normal(rng.integers(0, 700), dtype=np.float32) for i in range(300)
    }
    arrays["big"] = rng.standard_normal(10_000)  # float64, over two steps
    arrays["empty"] = np.zeros((0, 3), np.int32)
    arrays["transposed"] = rng.standard_normal((50, 30), dtype=np.float32).T  # not contiguous
    arrays["complex"] = (rng.standard_normal(5) + 1j * rng.standard_normal(5)).astype(np.complex128)
    return arrays


def test_digest_is_hashlibs_and_safetensors_reads_the_file(tmp_path, small_steps):
    arrays = _mixed()
    rows = {k: _dtypes.BY_NAME[a.dtype.name] for k, a in arrays.items()}
    path = tmp_path / "t.safetensors"
    digest = _tensor_writing.write(path, {k: (a, rows[k]) for k, a in arrays.items()})
    assert digest == hashlib.sha256(path.read_bytes()).hexdigest()
    back = load_file(str(path))
    for key, a in arrays.items():
        if key == "complex":  # stored as float64 pairs (SPEC.md, "Dtypes")
            np.testing.assert_array_equal(back[key], np.stack([a.real, a.imag], axis=-1))
        else:
            np.testing.assert_array_equal(back[key], a)
    assert _hash_threads() == []


def test_short_writes_are_resumed(tmp_path, small_steps, monkeypatch):
    real = os.writev

    def at_most_1000_bytes(fd, buffers):
        return real(fd, [bytes(b"".join(bytes(b) for b in buffers)[:1000])])

    monkeypatch.setattr(os, "writev", at_most_1000_bytes)
    arrays = {k: v for k, v in _mixed().items() if k != "complex"}
    path = tmp_path / "t.safetensors"
    digest = _tensor_writing.write(
        path, {k: (a, _dtypes.BY_NAME[a.dtype.name]) for k, a in arrays.items()}
    )
    assert digest == hashlib.sha256(path.read_bytes()).hexdigest()
    for key, a in load_file(str(path)).items():
        np.testing.assert_array_equal(a, arrays[key])


def test_only_a_few_converted_copies_exist_at_once(tmp_path, small_steps, monkeypatch):
    """Transposed (column-major) arrays are copied one at a time as they are written, not all
    before the first byte: the peak memory of a pack stays near one tensor, not the weights."""
    alive, most = [0], [0]
    real = _dtypes.to_storage

    def counted(array, row):
        stored = real(array, row)
        alive[0] += 1
        most[0] = max(most[0], alive[0])
        weakref.finalize(stored, lambda: alive.__setitem__(0, alive[0] - 1))
        return stored

    monkeypatch.setattr(_dtypes, "to_storage", counted)
    rng = np.random.default_rng(1)
    arrays = {f"w{i}": rng.standard_normal((40, 50), dtype=np.float32).T for i in range(60)}
    row = _dtypes.BY_NAME["float32"]
    _tensor_writing.write(tmp_path / "t.safetensors", {k: (a, row) for k, a in arrays.items()})
    assert (
        0 < most[0] <= _hashing_writer._AHEAD + 3
    )  # a step per array: the queue, and one each side


def test_a_failing_hash_stops_the_pack_and_leaves_nothing(tmp_path, small_steps, monkeypatch):
    class Failing:
        def __init__(self):
            self.calls = 0

        def update(self, data):
            self.calls += 1
            if self.calls == 5:
                raise hlobundle.errors.LimitError("the hash gave up", path="inputs.safetensors")

    monkeypatch.setattr(_hashing_writer, "_new_hash", Failing)
    x = sample((100_000,), "float32")  # 100 steps: far more than the queue holds
    with pytest.raises(hlobundle.errors.LimitError, match="the hash gave up") as e:
        hlobundle.pack(identity_module(x), [x], tmp_path / "b")
    assert e.value.code == "LIMIT_EXCEEDED" and e.value.path == "inputs.safetensors"
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    assert _hash_threads() == []


def test_a_failing_write_stops_the_hash_and_leaves_nothing(tmp_path, small_steps, monkeypatch):
    real, calls = os.writev, [0]

    def disk_full_soon(fd, buffers):
        calls[0] += 1
        if calls[0] == 20:
            raise OSError(28, "No space left on device")
        return real(fd, buffers)

    monkeypatch.setattr(os, "writev", disk_full_soon)
    x = sample((100_000,), "float32")
    with pytest.raises(OSError, match="No space left"):
        hlobundle.pack(identity_module(x), [x], tmp_path / "b")
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    assert _hash_threads() == []


def test_an_array_whose_bytes_disagree_with_its_shape_is_refused(tmp_path):
    class Liar:  # says one shape, gives another array's data
        shape = (10,)
        dtype = np.dtype(np.float32)

        def __array__(self, dtype=None, copy=None):
            return np.zeros(7, np.float32)

    with pytest.raises(
        hlobundle.errors.TensorFileError, match="'x' has 28 bytes, its header 40"
    ) as e:
        _tensor_writing.write(
            tmp_path / "t.safetensors", {"x": (Liar(), _dtypes.BY_NAME["float32"])}
        )
    assert e.value.code == "SAFETENSORS_INVALID"
    assert _hash_threads() == []


def test_each_file_of_a_bundle_is_fsynced_once(tmp_path, monkeypatch):
    synced: list[str] = []
    real = os.fsync

    def recording(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", recording)
    x, w = sample((3,), "float32"), sample((4,), "float32")
    out = hlobundle.pack(
        identity_module(x, w),
        [x, w],
        tmp_path / "b",
        roles={"arg1": "parameter"},
        expected="compute",
    )
    root = synced[-1]  # the bundle's directory, last
    names = sorted(os.path.relpath(p, root) for p in synced)
    files = sorted(p.name for p in out.iterdir())
    assert {"inputs.safetensors", "weights.safetensors", "expected.safetensors"} <= set(files)
    assert names == sorted([*files, "."])


def test_fsync_tree_reaches_files_in_subdirectories(tmp_path, monkeypatch):
    (tmp_path / "compiled").mkdir()
    for name in ("compiled/a.vmfb", "m.mlir", "done.safetensors"):
        (tmp_path / name).write_bytes(b"x")
    synced: list[str] = []
    real = os.fsync
    monkeypatch.setattr(
        os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real(fd))
    )
    _durable.fsync_tree(tmp_path, synced={tmp_path / "done.safetensors"})
    assert sorted(os.path.relpath(p, tmp_path) for p in synced) == [
        ".",
        "compiled",
        "compiled/a.vmfb",
        "m.mlir",
    ]

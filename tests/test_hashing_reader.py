"""`_file_io._hashing_reader.read_hashed`: the bytes read are the bytes hashed, in order, into
the caller's memory or through two buffers in turn, and a file that ends early is refused."""

from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest

from hlobundle._file_io import _hashing_reader


@pytest.fixture
def data_file(tmp_path, monkeypatch):
    monkeypatch.setattr(_hashing_reader, "STEP_BYTES", 4096)  # many steps, both buffers reused
    data = np.random.default_rng(0).integers(0, 256, 10 * 4096 + 123, np.uint8).tobytes()
    path = tmp_path / "f"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    yield fd, data
    os.close(fd)


def test_through_two_buffers_the_hash_is_the_file_s(data_file):
    fd, data = data_file
    h, steps = hashlib.sha256(), []
    _hashing_reader.read_hashed(fd, len(data), h, advance=steps.append)
    assert h.hexdigest() == hashlib.sha256(data).hexdigest()
    assert sum(steps) == len(data) and len(steps) == 11


def test_into_memory_the_copy_is_the_file_and_is_what_was_hashed(data_file):
    fd, data = data_file
    memory, h = bytearray(len(data)), hashlib.sha256()
    _hashing_reader.read_hashed(fd, len(data), h, into=memoryview(memory))
    assert bytes(memory) == data and h.hexdigest() == hashlib.sha256(data).hexdigest()


def test_a_file_shorter_than_its_size_is_refused(data_file):
    fd, data = data_file
    with pytest.raises(_hashing_reader.ShrankError, match=f"ended at {len(data)}"):
        _hashing_reader.read_hashed(fd, len(data) + 1, hashlib.sha256())


def test_an_error_in_the_hash_thread_reaches_the_caller(data_file):
    fd, data = data_file

    class Broken:
        def update(self, chunk):
            raise MemoryError("no room")

    with pytest.raises(MemoryError, match="no room"):
        _hashing_reader.read_hashed(fd, len(data), Broken())


def test_a_file_of_one_step_is_read_and_hashed_in_this_thread(tmp_path):
    data = bytes(range(256)) * 40
    path = tmp_path / "small"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        memory, h, steps = bytearray(len(data)), hashlib.sha256(), []
        _hashing_reader.read_hashed(fd, len(data), h, memoryview(memory), steps.append)
        assert bytes(memory) == data and h.hexdigest() == hashlib.sha256(data).hexdigest()
        assert steps == [len(data)]
        with pytest.raises(_hashing_reader.ShrankError, match=f"ended at {len(data)}"):
            _hashing_reader.read_hashed(fd, len(data) + 5, hashlib.sha256())
    finally:
        os.close(fd)


@pytest.mark.parametrize("into", [True, False])
def test_chunk_digests_in_threads_are_each_chunk_s_in_order(data_file, into):
    from concurrent.futures import ThreadPoolExecutor

    from hlobundle._format import _chunks

    fd, data = data_file
    memory = memoryview(bytearray(len(data))) if into else None
    whole = hashlib.sha256() if into else None
    steps: list[int] = []
    with ThreadPoolExecutor(3) as pool:
        digests = _hashing_reader.read_chunks_hashed(
            fd, len(data), 2048, pool, memory, whole, steps.append
        )
    assert digests == _chunks.digests_of([data], 2048) and len(digests) == 21
    assert sum(steps) == len(data) and len(steps) == 11  # runs of one step, two chunks each
    if into:
        assert bytes(memory) == data and whole.hexdigest() == hashlib.sha256(data).hexdigest()


def test_a_file_shorter_than_its_size_is_refused_by_the_threads(data_file):
    from concurrent.futures import ThreadPoolExecutor

    fd, data = data_file
    with ThreadPoolExecutor(2) as pool, pytest.raises(_hashing_reader.ShrankError):
        _hashing_reader.read_chunks_hashed(fd, len(data) + 1, 4096, pool)


def test_a_run_s_chunk_digests_are_of_its_bytes_and_a_short_file_is_refused(data_file):
    """`read_run` (the streamed load's): the run's bytes land in the target and each chunk's
    digest is of those bytes; a file that ends inside the run is refused."""
    fd, data = data_file
    target = bytearray(3 * 1024 + 100)
    digests = _hashing_reader.read_run(fd, 4096, memoryview(target), 1024)
    assert bytes(target) == data[4096 : 4096 + len(target)]
    assert digests == [
        hashlib.sha256(target[k : k + 1024]).hexdigest() for k in range(0, len(target), 1024)
    ]
    with pytest.raises(_hashing_reader.ShrankError):
        _hashing_reader.read_run(fd, len(data) - 1000, memoryview(bytearray(2048)), 1024)

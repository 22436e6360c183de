"""A chunked tensor file is verified on every core (`_file_digests`, SPEC.md 8, "Caches"):
its chunk digests are read and hashed by a pool of threads, its sha256 in a thread of its own
the first time, and recalled from the chunk digests after. A changed byte is refused either way,
and a verdict vouches only for the sha256, size and chunk digests it was recorded with."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import edit_manifest
from test_chunks import tensor_file, wide_functions

import hlobundle
from hlobundle._file_io import _hashing_reader
from hlobundle._read import _reader
from hlobundle.errors import HashMismatchError


@pytest.fixture
def parallel(monkeypatch, tmp_path):
    """Every bundle takes the parallel path, in runs of 64 KiB, with a cache of its own; each
    call's `whole` (None: the sha256 recalled) is recorded."""
    monkeypatch.setattr(_reader, "_PARALLEL_BYTES", 0)
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    monkeypatch.setattr(_hashing_reader, "STEP_BYTES", 1 << 16)
    monkeypatch.setenv("HLOBUNDLE_CACHE_DIR", str(tmp_path / "cache"))
    calls: list[object] = []
    spied = _hashing_reader.read_chunks_hashed

    def spy(*args, **kwargs):
        calls.append(args[5] if len(args) > 5 else kwargs.get("whole"))
        return spied(*args, **kwargs)

    monkeypatch.setattr(_hashing_reader, "read_chunks_hashed", spy)
    return calls


def flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 1
    path.write_bytes(bytes(data))


def test_the_first_verify_hashes_whole_and_a_second_recalls_the_sha256(parallel, tmp_path):
    bundle = wide_functions(tmp_path)
    hlobundle.load(bundle, verify=True)
    hlobundle.load(bundle, verify=True)
    hlobundle.load(bundle).verify(in_memory=False)
    assert [w is not None for w in parallel] == [True, False, False]


@pytest.mark.parametrize("in_memory", [True, False])
def test_a_changed_chunk_is_refused_when_the_sha256_is_recalled(parallel, tmp_path, in_memory):
    """Only the chunk check stands between the changed byte and its use."""
    bundle = wide_functions(tmp_path)
    hlobundle.load(bundle, verify=True)  # the verdict: recorded
    name = tensor_file(bundle)
    flip(bundle / name, (1 << 20) + 5)
    with pytest.raises(HashMismatchError) as e:
        hlobundle.load(bundle).verify(in_memory=in_memory)
    assert e.value.field == f"files[{name!r}].chunks.sha256[1]"
    assert parallel[-1] is None  # the sha256 was not computed: the chunks alone refused it


def test_a_changed_file_is_refused_on_the_parallel_path_first_time(parallel, tmp_path):
    bundle = wide_functions(tmp_path)
    name = tensor_file(bundle)
    flip(bundle / name, 1 << 19)
    with pytest.raises(HashMismatchError) as e:
        hlobundle.load(bundle, verify=True)
    assert e.value.field == f"files[{name!r}].sha256"
    assert parallel[-1] is not None
    with pytest.raises(HashMismatchError):  # and nothing was recorded for it
        hlobundle.load(bundle, verify=True)
    assert parallel[-1] is not None


def test_a_verdict_does_not_vouch_for_another_sha256(parallel, tmp_path):
    """Chunk digests recorded with one sha256 say nothing of a manifest listing another."""
    bundle = wide_functions(tmp_path)
    hlobundle.load(bundle, verify=True)
    name = tensor_file(bundle)
    edit_manifest(bundle, lambda m: m["files"][name].update(sha256="0" * 64))
    with pytest.raises(HashMismatchError) as e:
        hlobundle.load(bundle, verify=True)
    assert e.value.field == f"files[{name!r}].sha256"


def test_the_verified_copy_is_what_runs(parallel, tmp_path):
    bundle = wide_functions(tmp_path)
    for _ in range(2):  # hashed whole, then recalled
        b = hlobundle.load(bundle, verify=True)
        w_before = b.select("predict").example_args()[0].copy()
        name = tensor_file(bundle)
        flip(bundle / name, (1 << 20) + 5)  # after verify: the copy is what tensors come from
        assert (b.select("predict").example_args()[0] == w_before).all()
        flip(bundle / name, (1 << 20) + 5)
    assert [w is not None for w in parallel] == [True, False]


def test_without_a_cache_the_sha256_is_always_computed(parallel, tmp_path, monkeypatch):
    monkeypatch.setenv("HLOBUNDLE_NO_CACHE", "1")
    bundle = wide_functions(tmp_path)
    hlobundle.load(bundle, verify=True)
    hlobundle.load(bundle, verify=True)
    assert [w is not None for w in parallel] == [True, True]

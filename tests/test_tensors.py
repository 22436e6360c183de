"""Tensor files (`_bundle_io/_tensors`; written by `_bundle_io/_tensor_writing`, read back by
`_bundle_io/_tensor_reading`): written in safetensors' layout, and opened as checked
`TensorFile`s: the header's length and limit, its entries (dtype, shape, offsets that tile the
data exactly), safetensors' own validation, and a copy into memory of a file that shrinks.

Hostile files are written byte by byte here; most are opened with `with_safetensors=False`
(as `inspect` opens them), so that this module's own header checks are the ones tested."""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct

import numpy as np
import pytest

from hlobundle._bundle_io import _tensor_reading, _tensor_writing, _tensors
from hlobundle._format import _dtypes
from hlobundle.errors import LimitError, TensorFileError

F32 = _dtypes.BY_NAME["float32"]


def raw(path, header, data=b"", *, length=None):
    """A file of an 8-byte little-endian header length, the header (JSON of a dict, or bytes
    as given), and the data."""
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text) if length is None else length) + text + data)
    return path


def entry(dtype="F32", shape=(1,), offsets=(0, 4)):
    return {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}


def opened(path, **kwargs):
    return _tensors.TensorFile(path, name=path.name, with_safetensors=False, **kwargs)


def refused(path, fragment, error=TensorFileError, **kwargs):
    with pytest.raises(error, match=re.escape(fragment)) as e:
        opened(path, **kwargs)
    assert e.value.path == path.name
    return e.value


def test_a_written_file_reads_back_with_its_digest(tmp_path):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    path = tmp_path / "t.safetensors"
    digest = _tensor_writing.write(path, {"x": (x, F32)}, {"note": "hi"})
    assert digest == hashlib.sha256(path.read_bytes()).hexdigest()
    tf = _tensors.TensorFile(path, name="t.safetensors")
    assert tf.metadata["note"] == "hi" and tf.entries["x"].shape == (2, 3)
    np.testing.assert_array_equal(tf.array("x", F32, (2, 3)), x)
    assert _tensor_reading.sha256(tf) == digest
    assert _tensor_reading.read_into_memory(tf) == digest
    np.testing.assert_array_equal(tf.array("x", F32, (2, 3)), x)


def test_writing_an_array_whose_bytes_disagree_with_its_shape_is_refused(tmp_path):
    class Liar:  # says one shape, gives another array's data
        shape = (10,)
        dtype = np.dtype(np.float32)

        def __array__(self, dtype=None, copy=None):
            return np.zeros(7, np.float32)

    with pytest.raises(TensorFileError, match="'x' has 28 bytes, its header 40") as e:
        _tensor_writing.write(tmp_path / "t.safetensors", {"x": (Liar(), F32)})
    assert e.value.code == "SAFETENSORS_INVALID"


def test_a_file_shorter_than_the_header_length_is_refused(tmp_path):
    path = tmp_path / "t.safetensors"
    path.write_bytes(b"\x01\x00\x00")
    refused(path, "t.safetensors is shorter than a safetensors header")


def test_a_header_length_past_the_end_of_the_file_is_refused(tmp_path):
    path = raw(tmp_path / "t.safetensors", {}, length=1000)
    refused(path, "its header length 1000 exceeds the file")


def test_a_header_over_the_manifests_budget_is_refused(tmp_path):
    path = raw(tmp_path / "t.safetensors", {"x": entry()}, b"\0" * 4)
    n = path.stat().st_size - 12
    e = refused(path, f"a safetensors header of {n} bytes", LimitError, header_limit=n - 1)
    assert e.code == "LIMIT_EXCEEDED" and f"the limit is {n - 1}" in str(e)
    assert opened(path, header_limit=n).entries["x"].shape == (1,)


@pytest.mark.parametrize(
    ("header", "data", "fragment"),
    [
        (b"{not json", b"", "its header is not JSON"),
        (b"[" * 100_000 + b"]" * 100_000, b"", "its header is not JSON"),
        (b"[1, 2]", b"", "its header is not a JSON object"),
        ({"x": "F32"}, b"", "tensor 'x' has no dtype, shape and data_offsets it knows"),
        ({"x": entry(dtype="F128")}, b"\0" * 4, "tensor 'x' has no dtype, shape and data_offsets"),
        ({"x": entry(dtype=["F32"])}, b"\0" * 4, "tensor 'x' has no dtype, shape and data_offsets"),
        ({"x": entry(dtype={"F32": 1})}, b"\0" * 4, "tensor 'x' has no dtype, shape and data"),
        ({"x": entry(shape=(True,))}, b"\0" * 4, "tensor 'x' has no dtype, shape and data_offsets"),
        ({"x": entry(shape=(-1,))}, b"\0" * 4, "tensor 'x' has no dtype, shape and data_offsets"),
        ({"x": {"dtype": "F32", "shape": [1]}}, b"\0" * 4, "tensor 'x' has no dtype, shape"),
        ({"x": entry(offsets=(0, 4, 8))}, b"\0" * 4, "tensor 'x' has no dtype, shape"),
        (
            {"x": entry(shape=(2,))},
            b"\0" * 4,
            "tensor 'x''s offsets do not span its shape and dtype",
        ),
        ({"x": entry(offsets=(4, 0))}, b"\0" * 4, "tensor 'x''s offsets do not span"),
        ({"x": entry(offsets=(4, 8))}, b"\0" * 8, "tensor 'x' starts at 4, not at 0"),
        ({"x": entry(), "y": entry(offsets=(2, 6))}, b"\0" * 6, "tensor 'y' starts at 2, not at 4"),
        ({"x": entry()}, b"\0" * 8, "its tensors hold 4 bytes of its 8 bytes of data"),
    ],
    ids=[
        "not_json",
        "json_nested_past_recursion",
        "not_an_object",
        "entry_not_an_object",
        "unknown_dtype",
        "dtype_a_list",
        "dtype_an_object",
        "bool_dimension",
        "negative_dimension",
        "no_offsets",
        "three_offsets",
        "offsets_short_of_the_shape",
        "offsets_reversed",
        "gap_before_the_first_tensor",
        "overlapping_tensors",
        "data_past_the_last_tensor",
    ],
)
def test_a_hostile_header_is_refused(tmp_path, header, data, fragment):
    path = raw(tmp_path / "t.safetensors", header, data)
    e = refused(path, fragment)
    assert e.code == "SAFETENSORS_INVALID" and "is not a valid safetensors file" in str(e)


def test_metadata_that_is_not_strings_is_dropped_by_the_header_check(tmp_path):
    path = raw(
        tmp_path / "t.safetensors", {"__metadata__": {"a": 1, "b": "s"}, "x": entry()}, b"\0" * 4
    )
    assert opened(path).metadata == {"b": "s"}


def test_safetensors_own_validation_refuses_what_the_header_check_lets_through(tmp_path):
    # Metadata must be a map of strings to safetensors; this module's check drops the rest.
    path = raw(tmp_path / "t.safetensors", {"__metadata__": {"a": 1}, "x": entry()}, b"\0" * 4)
    with pytest.raises(TensorFileError, match=r"t.safetensors is not a valid safetensors file: "):
        _tensors.TensorFile(path, name="t.safetensors")


def test_a_file_that_shrinks_while_it_is_copied_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "t.safetensors"
    _tensor_writing.write(path, {"x": (np.ones(4, np.float32), F32)})
    tf = _tensors.TensorFile(path, name="t.safetensors")
    calls = []

    def truncated(fd, buffers, offset):  # as if another process truncated the file meanwhile
        calls.append(offset)
        assert len(calls) < 3, "reading went on past the end of a shrunken file"
        return 0

    monkeypatch.setattr(os, "preadv", truncated)
    with pytest.raises(TensorFileError, match="t.safetensors shrank while it was read"):
        _tensor_reading.read_into_memory(tf)


def test_a_copy_with_no_memory_for_it_is_a_limit_error(tmp_path, monkeypatch):
    path = tmp_path / "t.safetensors"
    _tensor_writing.write(path, {"x": (np.ones(4, np.float32), F32)})
    tf = _tensors.TensorFile(path, name="t.safetensors")

    def no_memory(size):  # as mmap says when the private copy cannot be reserved
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(_tensor_reading, "_copy_memory", no_memory)
    with pytest.raises(LimitError, match="no private copy of its .* bytes can be made") as e:
        _tensor_reading.read_into_memory(tf)
    assert e.value.path == "t.safetensors"


def test_a_kernel_without_huge_pages_still_copies(tmp_path, monkeypatch):
    """`madvise(MADV_HUGEPAGE)` fails with EINVAL on a kernel built without transparent huge
    pages (Python's constant says only that its headers had one): the copy is made anyway."""
    import errno
    import mmap
    import types

    monkeypatch.setattr(_tensor_reading, "HUGE_PAGES", True)

    class NoHugePages(mmap.mmap):
        def madvise(self, *args):
            raise OSError(errno.EINVAL, "Invalid argument")

    path = tmp_path / "t.safetensors"
    digest = _tensor_writing.write(path, {"x": (np.ones(4, np.float32), F32)})
    tf = _tensors.TensorFile(path, name="t.safetensors")
    fake = types.SimpleNamespace(**{k: getattr(mmap, k) for k in dir(mmap) if k.isupper()})
    fake.mmap = NoHugePages
    monkeypatch.setattr(_tensor_reading, "mmap", fake)
    assert _tensor_reading.read_into_memory(tf) == digest
    np.testing.assert_array_equal(tf.array("x", F32, (4,)), np.ones(4, np.float32))


def test_the_private_copy_is_page_aligned_read_only_and_what_was_hashed(tmp_path):
    x = np.arange(3 << 20, dtype=np.float32)  # 12 MiB: read in steps, hashed in a thread
    path = tmp_path / "t.safetensors"
    digest = _tensor_writing.write(path, {"x": (x, F32)})
    tf = _tensors.TensorFile(path, name="t.safetensors")
    assert _tensor_reading.read_into_memory(tf) == digest
    assert tf._memory is not None and tf._memory.ctypes.data % 4096 == 0
    assert not tf._memory.flags.writeable
    np.testing.assert_array_equal(tf.array("x", F32, x.shape), x)
    path.write_bytes(b"")  # the copy, not the file, is what tensors come from now
    np.testing.assert_array_equal(tf.array("x", F32, x.shape), x)


def test_hashing_a_file_not_mapped_reads_it_without_mapping_it(tmp_path, monkeypatch):
    path = tmp_path / "t.safetensors"
    digest = _tensor_writing.write(path, {"x": (np.ones(4, np.float32), F32)})
    tf = _tensors.TensorFile(path, name="t.safetensors")
    assert _tensor_reading.sha256(tf) == digest and "_mapped" not in vars(
        tf
    )  # a pull's check maps nothing
    monkeypatch.setattr(os, "preadv", lambda fd, buffers, offset: 0)  # truncated meanwhile
    with pytest.raises(TensorFileError, match="t.safetensors shrank while it was read"):
        _tensor_reading.sha256(tf)

"""safetensors' layout (`_format/_safetensors_layout`): the tensor order and header safetensors
itself writes, with the data aligned to DATA_ALIGNMENT. The module has no checks of its own (no
raise); these tests hold it to safetensors' bytes."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
from safetensors.numpy import save

from hlobundle._format import _dtypes
from hlobundle._format._safetensors_layout import DATA_ALIGNMENT, RANK, layout, planned


def _arrays():
    return {
        "w": np.ones((3, 2), np.float32),
        "a": np.zeros(5, np.int8),
        "b": np.arange(4, dtype=np.float64),
        "flag": np.array([True, False]),
        "empty": np.zeros((0, 7), np.int32),
    }


def _plan(arrays):
    return {k: planned(a, _dtypes.BY_NAME[str(a.dtype)]) for k, a in arrays.items()}


def test_the_bytes_are_safetensors_own():
    arrays = _arrays()
    order, header = layout(_plan(arrays), {})
    ours = header.raw + b"".join(np.ascontiguousarray(arrays[k]).tobytes() for k in order)
    assert ours == save(arrays, metadata={"pad": header.pad})


@pytest.mark.parametrize("metadata", [{}, {"producer": "test"}, {"x": "y" * 61, "a": "b"}])
def test_the_header_is_safetensors_own_and_the_data_is_aligned(metadata):
    # safetensors orders metadata keys as its hash map does (not stably): compared as JSON.
    arrays = _arrays()
    order, header = layout(_plan(arrays), metadata)
    theirs = save(arrays, metadata={"pad": header.pad, **metadata})
    assert len(theirs) == len(header.raw) + sum(a.nbytes for a in arrays.values())
    assert json.loads(header.raw[8:]) == json.loads(theirs[8 : len(header.raw)])
    data = b"".join(np.ascontiguousarray(arrays[k]).tobytes() for k in order)
    assert theirs[len(header.raw) :] == data
    assert len(header.raw) % DATA_ALIGNMENT == 0
    (n,) = struct.unpack("<Q", header.raw[:8])
    assert (
        n == len(header.raw) - 8 and json.loads(header.raw[8:])["__metadata__"]["pad"] == header.pad
    )


def test_tensors_are_ordered_by_dtype_rank_then_name():
    order, _ = layout(_plan(_arrays()), {})
    codes = [_plan(_arrays())[k].code for k in order]
    assert [RANK[c] for c in codes] == sorted((RANK[c] for c in codes), reverse=True)
    assert order == ["b", "w", "empty", "a", "flag"]


def test_a_pair_dtype_is_planned_with_its_trailing_axis():
    # complex128 is stored as F64 with a trailing axis of 2 (safetensors has no C128).
    p = planned(np.zeros((3, 4), np.complex128), _dtypes.BY_NAME["complex128"])
    assert p == ("F64", (3, 4, 2), 3 * 4 * 2 * 8)

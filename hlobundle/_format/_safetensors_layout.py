"""safetensors' layout, as safetensors itself lays a file out: the order of the tensors and the
header, with the data aligned for use in place. `_bundle_io/_tensor_writing.write` writes the bytes.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from . import _dtypes

if TYPE_CHECKING:
    import numpy as np

# Tensor data starts at a multiple of this, so that a memory-mapped tensor whose offset is a
# multiple of it too is aligned enough for XLA to use in place (jax.device_put without a copy).
DATA_ALIGNMENT = 64


class Planned(NamedTuple):
    code: str
    shape: tuple[int, ...]
    nbytes: int


def planned(a: np.ndarray, row: _dtypes.DType) -> Planned:
    """How an array is stored (`to_storage`), known from its shape without converting it."""
    import numpy as np

    shape = row.storage_shape(tuple(np.shape(a)))
    return Planned(row.safetensors, shape, math.prod(shape) * CODE_BYTES[row.safetensors])


@dataclass(frozen=True)
class Header:
    raw: bytes  # the 8-byte length and the JSON header, as safetensors writes them
    pad: str


def layout(tensors: dict[str, Planned], metadata: dict[str, str]) -> tuple[list[str], Header]:
    """safetensors' tensor order and header for tensors of these codes, shapes and sizes, with
    metadata padding that puts the data at a multiple of DATA_ALIGNMENT.

    As safetensors writes it: a compact JSON header, tensors ordered by dtype (its enum, largest
    first) then name; safetensors' reader checks the result whenever a bundle is opened.
    """
    order = sorted(tensors, key=lambda k: (-RANK[tensors[k].code], k))
    entries, offset = {}, 0
    for key in order:
        p = tensors[key]
        entries[key] = {
            "dtype": p.code,
            "shape": list(p.shape),
            "data_offsets": [offset, offset + p.nbytes],
        }
        offset += p.nbytes

    def dump(pad: str) -> bytes:
        meta = {"pad": pad, **metadata}
        return json.dumps({"__metadata__": meta, **entries}, separators=(",", ":")).encode()

    length = len(dump(""))
    target = (length + 8 + DATA_ALIGNMENT - 1) // DATA_ALIGNMENT * DATA_ALIGNMENT - 8
    pad = " " * (target - length)
    text = dump(pad)
    return order, Header(struct.pack("<Q", len(text)) + text, pad)


# safetensors' dtype order (its Dtype enum); the header lists tensors from the last to the first.
RANK = {
    code: i
    for i, code in enumerate(
        [
            "BOOL",
            "U8",
            "I8",
            "F8_E5M2",
            "F8_E4M3",
            "F8_E8M0",
            "F8_E4M3FNUZ",
            "F8_E5M2FNUZ",
            "I16",
            "U16",
            "F16",
            "BF16",
            "I32",
            "U32",
            "F32",
            "C64",
            "F64",
            "I64",
            "U64",
        ]
    )
}


# Bytes per element of each safetensors dtype code a bundle may hold.
CODE_BYTES = {code: row.itemsize for code, row in _dtypes.NATIVE.items()}

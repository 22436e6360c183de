"""The dtype table of SPEC.md: manifest name, MLIR element type and safetensors storage.

Most dtypes are stored under their own safetensors code. Three kinds have none:
`complex128` is stored as `F64` with one extra trailing axis of length 2 (real, imaginary),
the float8 types safetensors lacks are stored bit for bit as `U8` of the same shape, and the
sub-byte types (int4, uint4, int2, uint2, float4_e2m1fn) as `U8` of the same shape, one value
in the low bits of each byte.
The manifest's dtype is authoritative; the safetensors code only says how bytes are laid out.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

from ._errors import DtypeUnsupportedError

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class DType:
    """One row of the dtype table."""

    name: str
    mlir: str
    safetensors: str
    itemsize: int  # bytes per element
    pair_axis: bool = False  # complex128: stored with a trailing axis of 2

    @property
    def numpy(self) -> np.dtype:
        return _numpy_dtype(self.name)

    def storage_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return (*shape, 2) if self.pair_axis else shape

    def logical_shape(self, stored: tuple[int, ...]) -> tuple[int, ...]:
        """A stored tensor's shape without the trailing pair axis (`storage_shape` undone)."""
        return stored[:-1] if self.pair_axis else stored


TABLE: tuple[DType, ...] = (
    DType("bool", "i1", "BOOL", 1),
    DType("int8", "i8", "I8", 1),
    DType("int16", "i16", "I16", 2),
    DType("int32", "i32", "I32", 4),
    DType("int64", "i64", "I64", 8),
    DType("uint8", "ui8", "U8", 1),
    DType("uint16", "ui16", "U16", 2),
    DType("uint32", "ui32", "U32", 4),
    DType("uint64", "ui64", "U64", 8),
    DType("float16", "f16", "F16", 2),
    DType("bfloat16", "bf16", "BF16", 2),
    DType("float32", "f32", "F32", 4),
    DType("float64", "f64", "F64", 8),
    DType("complex64", "complex<f32>", "C64", 8),
    DType("complex128", "complex<f64>", "F64", 16, pair_axis=True),
    DType("float8_e4m3fn", "f8E4M3FN", "F8_E4M3", 1),
    DType("float8_e5m2", "f8E5M2", "F8_E5M2", 1),
    DType("float8_e4m3fnuz", "f8E4M3FNUZ", "F8_E4M3FNUZ", 1),
    DType("float8_e5m2fnuz", "f8E5M2FNUZ", "F8_E5M2FNUZ", 1),
    DType("float8_e8m0fnu", "f8E8M0FNU", "F8_E8M0", 1),
    DType("float8_e4m3b11fnuz", "f8E4M3B11FNUZ", "U8", 1),
    DType("float8_e3m4", "f8E3M4", "U8", 1),
    DType("float8_e4m3", "f8E4M3", "U8", 1),
    # Sub-byte types (format 1.2): stored one value per byte, in its low bits (see SUB_BYTE_BITS).
    DType("int4", "i4", "U8", 1),
    DType("uint4", "ui4", "U8", 1),
    DType("int2", "i2", "U8", 1),
    DType("uint2", "ui2", "U8", 1),
    DType("float4_e2m1fn", "f4E2M1FN", "U8", 1),
)

# Sub-byte dtypes: how many low bits of each stored byte hold the value (two's complement for the
# signed ints, as ml_dtypes lays them out); the other bits MUST be zero (SPEC.md, "Dtypes").
SUB_BYTE_BITS = {"int4": 4, "uint4": 4, "int2": 2, "uint2": 2, "float4_e2m1fn": 4}

BY_NAME = {d.name: d for d in TABLE}
# Dtypes stored under their own safetensors code (not as F64 pairs or U8 bit patterns), by code.
NATIVE: dict[str, DType] = {
    d.safetensors: d
    for d in TABLE
    if not d.pair_axis and (d.safetensors != "U8" or d.name == "uint8")
}
BY_MLIR = {d.mlir: d for d in TABLE}
NAMES = tuple(BY_NAME)


@cache
def _numpy_dtype(name: str) -> np.dtype:
    import numpy as np

    if name in np.sctypeDict and name != "bfloat16":
        return np.dtype(name)
    import ml_dtypes  # half a second to import: only when a bundle has such a dtype

    return np.dtype(getattr(ml_dtypes, name))


def from_mlir(element_type: str, *, where: str) -> DType:
    """The table row for an MLIR element type such as `f32` or `complex<f64>`."""
    row = BY_MLIR.get(element_type)
    if row is None:
        raise DtypeUnsupportedError(
            f"{where}: element type {element_type!r} is not in the dtype table "
            f"(SPEC.md, 'Dtypes'); supported: {', '.join(BY_MLIR)}",
        )
    return row


def to_storage(array: np.ndarray, row: DType) -> np.ndarray:
    """The contiguous little-endian array whose bytes are written to safetensors."""
    import numpy as np

    array = np.asarray(array, dtype=row.numpy.newbyteorder("<"), order="C")
    if row.pair_axis:
        return array.reshape(-1).view("<f8").reshape(row.storage_shape(array.shape))
    if row.safetensors == "U8" and row.name != "uint8":
        return array.view(np.uint8)
    return array

"""Tensor files: written by safetensors, validated by safetensors, read back memory-mapped.

safetensors' own reader (`safe_open`) checks the header, dtypes and offsets (no overlap,
no holes, no overflow). Only then does this module map each tensor's validated byte range
with `numpy.memmap`, which also covers dtypes safetensors' numpy layer cannot return.
"""

from __future__ import annotations

import hashlib
import json
import struct
import threading
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from . import _dtypes
from ._errors import TensorFileError

# safetensors' own limit on the JSON header.
MAX_HEADER_BYTES = 100 * 1024 * 1024
# Tensor data starts at a multiple of this, so that a memory-mapped tensor whose offset is a
# multiple of it too is aligned enough for XLA to use in place (jax.device_put without a copy).
DATA_ALIGNMENT = 64


def write(path: Path, arrays: dict[str, tuple[np.ndarray, _dtypes.DType]]) -> str | None:
    """Write `{key: (array, dtype row)}` with safetensors; deterministic (safetensors orders keys).

    **Returns:** the file's sha256, computed from memory while safetensors writes, or None when
    the written header is not the predicted one (the caller then hashes the file).
    """
    from safetensors import TensorSpec, serialize_file

    stored = {key: _dtypes.to_storage(a, row) for key, (a, row) in arrays.items()}
    specs = {
        key: TensorSpec(
            dtype=a.dtype.name, shape=list(a.shape), data_ptr=a.ctypes.data, data_len=a.nbytes
        )
        for key, a in stored.items()
    }
    order, header = _layout(stored)
    hasher = _HashThread(header, [stored[k] for k in order])
    hasher.start()
    serialize_file(specs, str(path), metadata={"pad": header.pad})
    hasher.join()
    with open(path, "rb") as f:
        written = f.read(len(header.raw))
    return hasher.hexdigest if written == header.raw else None


@dataclass(frozen=True)
class _Header:
    raw: bytes  # the 8-byte length and the JSON header, as safetensors writes them
    pad: str


def _layout(stored: dict[str, np.ndarray]) -> tuple[list[str], _Header]:
    """safetensors' tensor order and header, with metadata padding that puts the data at a
    multiple of DATA_ALIGNMENT.

    safetensors writes a compact JSON header, tensors ordered by dtype (its enum, largest
    first) then name. If this prediction is ever off, the file is just as valid: only the
    alignment and the in-memory hash are lost.
    """
    order = sorted(stored, key=lambda k: (-_RANK[_code(stored[k])], k))
    entries, offset = {}, 0
    for key in order:
        a = stored[key]
        entries[key] = {
            "dtype": _code(a),
            "shape": list(a.shape),
            "data_offsets": [offset, offset + a.nbytes],
        }
        offset += a.nbytes

    def dump(pad: str) -> bytes:
        return json.dumps({"__metadata__": {"pad": pad}, **entries}, separators=(",", ":")).encode()

    length = len(dump(""))
    target = (length + 8 + DATA_ALIGNMENT - 1) // DATA_ALIGNMENT * DATA_ALIGNMENT - 8
    pad = " " * (target - length)
    text = dump(pad)
    return order, _Header(struct.pack("<Q", len(text)) + text, pad)


def _code(stored: np.ndarray) -> str:
    """The safetensors code of an array as `to_storage` returns it (its dtype is native)."""
    return _dtypes.BY_NAME[stored.dtype.name].safetensors


class _HashThread(threading.Thread):
    """sha256 of header + tensor bytes in file order; hashlib releases the GIL on large updates."""

    def __init__(self, header: _Header, tensors: list[np.ndarray]) -> None:
        super().__init__(daemon=True)
        self.header = header
        self.tensors = tensors
        self.hexdigest = ""

    def run(self) -> None:
        h = hashlib.sha256(self.header.raw)
        for a in self.tensors:
            if a.nbytes:
                h.update(memoryview(a.reshape(-1).view(np.uint8)))
        self.hexdigest = h.hexdigest()


# safetensors' dtype order (its Dtype enum); the header lists tensors from the last to the first.
_RANK = {code: i for i, code in enumerate(
    ["BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16",
     "U16", "F16", "BF16", "I32", "U32", "F32", "C64", "F64", "I64", "U64"])}  # fmt: skip


@dataclass(frozen=True)
class Entry:
    code: str
    shape: tuple[int, ...]
    begin: int
    end: int


class TensorFile:
    """A validated safetensors file whose tensors are mapped lazily, without copies."""

    def __init__(self, path: Path, *, name: str) -> None:
        self.path = path
        self.name = name
        self._validate_with_safetensors()
        self.entries, self._data_start = self._read_header()

    def _validate_with_safetensors(self) -> None:
        from safetensors import safe_open

        try:
            with safe_open(str(self.path), framework="numpy"):
                pass
        except Exception as e:  # SafetensorError, OSError
            raise TensorFileError(
                f"{self.name} is not a valid safetensors file: {e}", path=self.name
            ) from None

    def _read_header(self) -> tuple[dict[str, Entry], int]:
        with open(self.path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            if n > MAX_HEADER_BYTES:  # unreachable after safe_open, kept as a hard cap
                raise TensorFileError(f"{self.name}: header of {n} bytes", path=self.name)
            header = json.loads(f.read(n))
        header.pop("__metadata__", None)
        entries = {
            key: Entry(v["dtype"], tuple(v["shape"]), *v["data_offsets"])
            for key, v in header.items()
        }
        return entries, 8 + n

    def array(self, key: str, row: _dtypes.DType, shape: tuple[int, ...]) -> np.ndarray:
        """The logical array for `key`, read-only and memory-mapped (a copy only when empty)."""
        entry = self.entries[key]
        dtype = row.numpy.newbyteorder("<")
        if entry.end == entry.begin:
            return np.zeros(shape, dtype)
        start = self._data_start + entry.begin
        return self._mapped[start : start + entry.end - entry.begin].view(dtype).reshape(shape)

    @cached_property
    def _mapped(self) -> np.ndarray:
        """The whole file, mapped once, read-only; tensors are views into it."""
        return np.memmap(self.path, dtype=np.uint8, mode="r").view(np.ndarray)

"""Tensor files: a bundle's safetensors files opened as checked, held and read back
memory-mapped. Written by `_tensor_writing.py` in safetensors' layout
(`_format/_safetensors_layout.py`), and read and hashed by `_tensor_reading.py`.

safetensors' own reader (`safe_open`) checks the header, dtypes and offsets (no overlap,
no holes, no overflow). Only then does this module map each tensor's validated byte range
with `numpy.memmap`, which also covers dtypes safetensors' numpy layer cannot return.
"""

from __future__ import annotations

import json
import math
import mmap
import os
import struct
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

from .._format import _chunks, _dtypes, _paths
from .._format._errors import LimitError, TensorFileError
from .._format._safetensors_layout import CODE_BYTES
from . import _opening

if TYPE_CHECKING:
    import numpy as np

# safetensors' own limit on the JSON header.
MAX_HEADER_BYTES = 100 * 1024 * 1024


@dataclass(frozen=True)
class Entry:
    code: str
    shape: tuple[int, ...]
    begin: int
    end: int


def _naturals(x: Any) -> TypeGuard[list[int]]:
    """A JSON list of integers >= 0 (bool is not a dimension)."""
    return type(x) is list and all(type(d) is int and d >= 0 for d in x)


class TensorFile:
    """A validated safetensors file of a bundle, held open: whatever happens to the name on
    disk later, its tensors come from the file that was checked.

    Tensors are views into a read-only mapping of that file, or, once it holds one (`hold`:
    `_bundle_io/_tensor_reading.read_into_memory`), into a private copy whose sha256 was computed from the very bytes the views use (a file
    truncated by another process can then no longer fault a mapped page: no SIGBUS).
    """

    def __init__(
        self,
        path: Path,
        *,
        name: str,
        header_limit: int = MAX_HEADER_BYTES,
        with_safetensors: bool = True,
    ) -> None:
        """Open and check `path`: its header here (structure, offsets, sizes), then, with
        `with_safetensors`, by safetensors itself too (which imports numpy: `inspect` skips it)."""
        self.path = path
        self.name = name
        self._fd = _opening.open_no_follow(path, name)
        closer = weakref.finalize(self, os.close, self._fd)  # held for the Bundle's lifetime
        try:
            st = os.fstat(self._fd)
            _paths.check_single_link(st, name)
            size = st.st_size
            n = self._header_length(size, header_limit)
            if with_safetensors:
                self._validate_with_safetensors()
            self.entries = self._read_header(n, size - 8 - n)
            self._data_start = 8 + n
        except BaseException:
            closer()
            raise
        self._memory: np.ndarray | None = None

    def _header_length(self, size: int, limit: int) -> int:
        head = os.pread(self._fd, 8, 0)
        if len(head) < 8:
            raise TensorFileError(
                f"{self.name} is shorter than a safetensors header", path=self.name
            )
        (n,) = struct.unpack("<Q", head)
        if n > size - 8:
            raise TensorFileError(
                f"{self.name} is not a valid safetensors file: its header length {n} exceeds the file",
                path=self.name,
            )
        if n > min(limit, MAX_HEADER_BYTES):
            raise LimitError(
                f"{self.name}: a safetensors header of {n} bytes for the tensors the manifest "
                f"lists; the limit is {min(limit, MAX_HEADER_BYTES)} (SPEC.md, 'Reader safety "
                "and security')",
                path=self.name,
            )
        return n

    def header_bytes(self) -> bytes:
        """The file's first bytes up to its data: the 8-byte length and the JSON header."""
        return os.pread(self._fd, self._data_start, 0)

    def validate_with_safetensors(self) -> None:
        """safetensors' own parse of the open file's header (it imports numpy)."""
        self._validate_with_safetensors()

    def _validate_with_safetensors(self) -> None:
        from safetensors import safe_open

        # The open file itself, not its name (which may by now be another file).
        fd_path = f"/proc/self/fd/{self._fd}"
        path = fd_path if os.path.exists(fd_path) else str(self.path)
        try:
            with safe_open(path, framework="numpy"):
                pass
        except Exception as e:  # SafetensorError, OSError
            raise TensorFileError(
                f"{self.name} is not a valid safetensors file: {e}", path=self.name
            ) from None

    def _read_header(self, n: int, data_size: int) -> dict[str, Entry]:
        """The header's entries, checked as safetensors checks them: a JSON object of entries
        with a known dtype, a shape and offsets that tile the data exactly."""
        try:
            header = json.loads(os.pread(self._fd, n, 8))
        except (ValueError, RecursionError) as e:
            raise self._invalid(f"its header is not JSON ({e})") from None
        if not isinstance(header, dict):
            raise self._invalid("its header is not a JSON object")
        metadata = header.pop("__metadata__", None)
        # Free-form strings (safetensors' own rule); anything else is not metadata.
        self.metadata: dict[str, str] = (
            {k: v for k, v in metadata.items() if isinstance(v, str)}
            if isinstance(metadata, dict)
            else {}
        )
        entries = {key: self._entry(key, value) for key, value in header.items()}
        end = 0
        for key, entry in sorted(entries.items(), key=lambda item: item[1].begin):
            if entry.begin != end:
                raise self._invalid(f"tensor {key!r} starts at {entry.begin}, not at {end}")
            end = entry.end
        if end != data_size:
            raise self._invalid(f"its tensors hold {end} bytes of its {data_size} bytes of data")
        return entries

    def _entry(self, key: str, value: object) -> Entry:
        dtype = shape = offsets = None
        if type(value) is dict:
            dtype, shape, offsets = (
                value.get("dtype"),
                value.get("shape"),
                value.get("data_offsets"),
            )
        if not (
            type(dtype) is str  # a list or an object is no key of CODE_BYTES (nor hashable)
            and dtype in CODE_BYTES
            and _naturals(shape)
            and _naturals(offsets)
            and len(offsets) == 2
        ):
            raise self._invalid(f"tensor {key!r} has no dtype, shape and data_offsets it knows")
        begin, end = offsets
        dims = tuple(shape)
        if end - begin != math.prod(dims) * CODE_BYTES[dtype]:
            raise self._invalid(f"tensor {key!r}'s offsets do not span its shape and dtype")
        return Entry(dtype, dims, begin, end)

    def _invalid(self, why: str) -> TensorFileError:
        return TensorFileError(
            f"{self.name} is not a valid safetensors file: {why}", path=self.name
        )

    def array(self, key: str, row: _dtypes.DType, shape: tuple[int, ...]) -> np.ndarray:
        """The logical array for `key`, read-only, a view without a copy (a copy only when empty)."""
        import numpy as np

        entry = self.entries[key]
        dtype = row.numpy.newbyteorder("<")
        if entry.end == entry.begin:
            return np.zeros(shape, dtype)
        start = self._data_start + entry.begin
        return self._bytes[start : start + entry.end - entry.begin].view(dtype).reshape(shape)

    @property
    def _bytes(self) -> np.ndarray:
        return self._memory if self._memory is not None else self._mapped

    @cached_property
    def _mapped(self) -> np.ndarray:
        """The whole held file, mapped once, read-only; tensors are views into it."""
        import numpy as np

        size = os.fstat(self._fd).st_size
        mapping = mmap.mmap(self._fd, size, access=mmap.ACCESS_READ)
        return np.frombuffer(mapping, np.uint8)

    def hold_chunks(
        self, chunk: int, indices: Iterable[int], check: Callable[[int, bytes], None]
    ) -> None:
        """Copy chunks `indices` (of `chunk` bytes) of the held file into private memory, each
        passed to `check` (its index and bytes) before it is kept; tensors come from that copy
        from now on. The rest of the copy is never written: an anonymous mapping, whose pages
        take no memory until written, so a file held this way costs only its chunks."""
        import numpy as np

        size = os.fstat(self._fd).st_size
        try:  # no swap reserved: only the pages written count, so a file larger than memory
            mapping = _anonymous(max(size, 1))
        except OSError as e:
            raise LimitError(
                f"{self.name}: no private mapping of its {size} bytes can be made for the "
                f"chunks used ({e.strerror})",
                path=self.name,
            ) from None
        memory = np.frombuffer(mapping, np.uint8)[:size]
        for i in sorted(set(indices)):
            begin, end = _chunks.span(size, chunk, i)
            data = os.pread(self._fd, end - begin, begin)
            check(i, data)
            memory[begin : begin + len(data)] = np.frombuffer(data, np.uint8)
        self.hold(memory)

    @property
    def fd(self) -> int:
        """The held file's descriptor."""
        return self._fd

    @property
    def bytes_in_use(self) -> np.ndarray:
        """The bytes tensors are read from: the private copy, or the mapping of the file."""
        return self._bytes

    def hold(self, memory: np.ndarray) -> None:
        """Read tensors from `memory`, a private copy of the whole file (made read-only here),
        from now on."""
        memory.flags.writeable = False
        self._memory = memory

    @property
    def untouched(self) -> bool:
        """Tensors would be read from the file itself: no private copy, not mapped yet."""
        return self._memory is None and "_mapped" not in self.__dict__

    @property
    def size(self) -> int:
        return os.fstat(self._fd).st_size

    def header_span(self) -> int:
        """How many bytes the header takes (the 8-byte length and the JSON)."""
        return self._data_start

    def stored_bytes(self, key: str) -> np.ndarray:
        """The bytes that hold tensor `key`, as the file holds them (a read-only view)."""
        begin, end = self.span_of(key)
        return self._bytes[begin:end]

    def span_of(self, key: str) -> tuple[int, int]:
        """Bytes `[begin, end)` of the file that hold tensor `key`."""
        entry = self.entries[key]
        return self._data_start + entry.begin, self._data_start + entry.end


# A private anonymous mapping that reserves no swap (MAP_NORESERVE, which Python's mmap names
# only from 3.13; 0x4000 on Linux but mips, ppc and sparc): its untouched pages cost nothing,
# and the kernel's overcommit check does not refuse one larger than memory.
_GENERIC_MMAN = {"x86_64", "i686", "aarch64", "arm64", "riscv64", "s390x"}
_UNAME = os.uname() if hasattr(os, "uname") else None
_NORESERVE = getattr(
    mmap,
    "MAP_NORESERVE",
    0x4000 if _UNAME and _UNAME.sysname == "Linux" and _UNAME.machine in _GENERIC_MMAN else 0,
)


def _anonymous(size: int) -> mmap.mmap:
    if not hasattr(mmap, "MAP_PRIVATE"):  # Windows
        return mmap.mmap(-1, size)
    return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _NORESERVE)

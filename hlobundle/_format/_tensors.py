"""Tensor files: written in safetensors' layout, validated by safetensors, read back memory-mapped.

Written here, in steps, rather than by safetensors' `serialize_file` (which writes elsewhere and
renames at the end, in Rust): so a progress bar follows the bytes and Ctrl-C acts at once.

safetensors' own reader (`safe_open`) checks the header, dtypes and offsets (no overlap,
no holes, no overflow). Only then does this module map each tensor's validated byte range
with `numpy.memmap`, which also covers dtypes safetensors' numpy layer cannot return.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import mmap
import os
import struct
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

from .._file_io import _hashing_reader, _hashing_writer
from .._terminal import _progress
from . import _chunks, _dtypes, _paths, _safetensors_layout
from ._errors import LimitError, TensorFileError
from ._safetensors_layout import CODE_BYTES

if TYPE_CHECKING:
    from concurrent.futures import Executor

    import numpy as np

# safetensors' own limit on the JSON header.
MAX_HEADER_BYTES = 100 * 1024 * 1024


def write(
    path: Path,
    arrays: dict[str, tuple[np.ndarray, _dtypes.DType]],
    metadata: dict[str, str] | None = None,
    *,
    fsync: bool = False,
    chunks: _chunks.ChunkHasher | None = None,
) -> str:
    """Write `{key: (array, dtype row)}` as a new safetensors file, laid out as safetensors
    lays it out (deterministic); `metadata` adds `__metadata__` entries; `fsync` syncs the file;
    `chunks` is given every byte written too (its chunk digests, format 2.1).

    Each array is converted to its stored form (`_dtypes.to_storage`: a copy only for a
    transposed or converted array) just before its bytes are written, so that only a few such
    copies exist at once, and hashed in a second thread as it is written (`_hashing_writer`).

    **Returns:** the file's sha256, computed from the bytes as they are written.
    """
    planned = {key: _safetensors_layout.planned(a, row) for key, (a, row) in arrays.items()}
    order, header = _safetensors_layout.layout(planned, metadata or {})
    size = len(header.raw) + sum(p.nbytes for p in planned.values())

    def buffers() -> Iterator[memoryview]:
        yield memoryview(header.raw)
        for key in order:
            a, row = arrays[key]
            data = _bytes_of(_dtypes.to_storage(a, row))
            if len(data) != planned[key].nbytes:  # an array-like whose shape said otherwise
                raise TensorFileError(
                    f"{path.name}: tensor {key!r} has {len(data)} bytes, its header "
                    f"{planned[key].nbytes} (shape {planned[key].shape})",
                    path=path.name,
                )
            yield data

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    try:
        with (
            _progress.task(f"writing {path.name}", size) as advance,
            _hashing_writer.HashingWriter(fd, None if chunks is None else chunks.update) as writer,
        ):
            for step in _hashing_writer.steps(buffers()):
                advance(writer.write(step))
            return writer.finish(fsync=fsync)
    finally:
        os.close(fd)


def _bytes_of(a: np.ndarray) -> memoryview:
    import numpy as np

    return np.ascontiguousarray(a).reshape(-1).view(np.uint8).data


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

    Tensors are views into a read-only mapping of that file, or, after `read_into_memory()`,
    into a private copy whose sha256 was computed from the very bytes the views use (a file
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
        self._fd = _paths.open_no_follow(path, name)
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

    def sha256(self, chunks: _chunks.ChunkHasher | None = None) -> str:
        """The sha256 of the bytes tensors are read from (the mapping, or the private copy);
        `chunks` gets the same bytes (for their chunk digests, format 2.1).
        Not mapped yet, the file is read through its descriptor, a chunk at a time: the same
        bytes, without every page of it counted in the process's memory (a pull's check)."""
        h: Any = hashlib.sha256() if chunks is None else _Both(hashlib.sha256(), chunks)
        if self.untouched:
            return self._sha256_read(h)
        data = self._bytes
        with _progress.task(f"checking {self.name}", len(data)) as advance:
            for begin in range(0, len(data), _CHUNK):
                chunk = data[begin : begin + _CHUNK].data
                h.update(chunk)
                advance(len(chunk))
        return h.hexdigest()

    def _sha256_read(self, h: Any) -> str:
        size = os.fstat(self._fd).st_size
        with _progress.task(f"checking {self.name}", size) as advance:
            self._read_hashed(size, h, None, advance)
        return h.hexdigest()

    def _read_hashed(
        self, size: int, h: Any, into: memoryview | None, advance: Callable[[int], object]
    ) -> None:
        try:
            _hashing_reader.read_hashed(self._fd, size, h, into, advance)
        except _hashing_reader.ShrankError:
            raise TensorFileError(f"{self.name} shrank while it was read", path=self.name) from None

    def read_into_memory(self, chunks: _chunks.ChunkHasher | None = None) -> str:
        """Copy the held file into private memory, hashed as it is read (in a second thread:
        the read of each step overlaps the hash of the one before); tensors come from the copy
        from now on.

        **Returns:** the copy's sha256 (`chunks` gets its bytes too).
        """
        import numpy as np

        size = os.fstat(self._fd).st_size
        # Page-aligned (so DATA_ALIGNMENT-aligned), like a mapping: XLA can use tensors in place.
        memory = np.frombuffer(self._private_copy(size), np.uint8)[:size]
        h: Any = hashlib.sha256() if chunks is None else _Both(hashlib.sha256(), chunks)
        with _progress.task(f"reading {self.name}", size) as advance:
            self._read_hashed(size, h, memory.data, advance)
        memory.flags.writeable = False
        self._memory = memory
        return str(h.hexdigest())

    def chunk_digests(
        self, chunk: int, pool: Executor, *, in_memory: bool, whole: bool
    ) -> tuple[str | None, list[str]]:
        """The held file's chunk digests (of `chunk` bytes), read and hashed by `pool`'s
        threads, and, with `whole`, its sha256 too (overlapping them, in this thread; it
        needs `in_memory`). `in_memory`: read into a private copy, which tensors come from
        from now on, as `read_into_memory`; else read through buffers of the threads' own.

        **Returns:** (the sha256 or None, the chunk digests), of the bytes read.
        """
        if not (in_memory or self.untouched):  # tensors come from a copy or the mapping
            raise ValueError(f"{self.name}: its bytes in use are no longer read from the file")
        size = os.fstat(self._fd).st_size
        memory = None
        if in_memory:  # numpy for the copy alone: `hlobundle verify` makes none
            import numpy as np

            memory = np.frombuffer(self._private_copy(size), np.uint8)[:size]
        h = hashlib.sha256() if whole else None
        with _progress.task(f"reading {self.name}", size) as advance:
            try:
                digests = _hashing_reader.read_chunks_hashed(
                    self._fd, size, chunk, pool, None if memory is None else memory.data, h, advance
                )
            except _hashing_reader.ShrankError:
                raise TensorFileError(
                    f"{self.name} shrank while it was read", path=self.name
                ) from None
        if memory is not None:
            memory.flags.writeable = False
            self._memory = memory
        return (None if h is None else h.hexdigest()), digests

    def _private_copy(self, size: int) -> mmap.mmap:
        try:
            return _copy_memory(size)
        except OSError as e:
            raise LimitError(
                f"{self.name}: no private copy of its {size} bytes can be made ({e.strerror})",
                path=self.name,
            ) from None

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


_CHUNK = 16 * 1024 * 1024
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


def _copy_memory(size: int) -> mmap.mmap:
    """Private memory for a whole file's copy: an anonymous mapping, swap reserved (too large,
    it fails here, not at a page fault), in huge pages where the kernel offers them on request
    (Linux's transparent huge pages, `madvise` mode). A 1 GiB copy then takes 512 faults per
    GiB instead of 262,144: 0.3 s against 0.3-2.7 s into `np.empty`'s memory on this project's
    machine (benchmarks/RESULTS.md, "Signing", full verify)."""
    if not hasattr(mmap, "MAP_PRIVATE"):  # Windows
        return mmap.mmap(-1, max(size, 1))
    mapping = mmap.mmap(-1, max(size, 1), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        with contextlib.suppress(OSError):  # EINVAL from a kernel built without huge pages
            mapping.madvise(mmap.MADV_HUGEPAGE)
    return mapping


def _anonymous(size: int) -> mmap.mmap:
    if not hasattr(mmap, "MAP_PRIVATE"):  # Windows
        return mmap.mmap(-1, size)
    return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _NORESERVE)


class _Both:
    """A file's sha256 and its chunk digests, from one pass over its bytes."""

    def __init__(self, h: Any, chunks: _chunks.ChunkHasher) -> None:
        self._h, self._chunks = h, chunks

    def update(self, data: Any) -> None:
        self._h.update(data)
        self._chunks.update(data)

    def hexdigest(self) -> str:
        return str(self._h.hexdigest())

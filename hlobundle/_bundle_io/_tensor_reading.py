"""A held tensor file (`_tensors.TensorFile`) read and hashed: its sha256, its chunk
digests, and its copy into private memory, which its tensors then come from. Read in steps and
hashed in a second thread (`_file_io/_hashing_reader.py`), followed by a progress bar."""

from __future__ import annotations

import contextlib
import hashlib
import mmap
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._file_io import _hashing_reader
from .._format import _chunks
from .._format._errors import LimitError, TensorFileError
from .._terminal import _progress

if TYPE_CHECKING:
    from concurrent.futures import Executor

    from ._tensors import TensorFile

_CHUNK = 16 * 1024 * 1024
# The private copy in transparent huge pages (`MADV_HUGEPAGE`): off, as `_copy_memory` says why
# (benchmarks/accelerator.py, section verify, measures the copy both ways).
HUGE_PAGES = False


def sha256(tf: TensorFile, chunks: _chunks.ChunkHasher | None = None) -> str:
    """The sha256 of the bytes `tf`'s tensors are read from (the mapping, or the private copy);
    `chunks` gets the same bytes (for their chunk digests, format 2.1).
    Not mapped yet, the file is read through its descriptor, a chunk at a time: the same
    bytes, without every page of it counted in the process's memory (a pull's check)."""
    h: Any = hashlib.sha256() if chunks is None else _Both(hashlib.sha256(), chunks)
    if tf.untouched:
        return _sha256_read(tf, h)
    data = tf.bytes_in_use
    with _progress.task(f"checking {tf.name}", len(data)) as advance:
        for begin in range(0, len(data), _CHUNK):
            chunk = data[begin : begin + _CHUNK].data
            h.update(chunk)
            advance(len(chunk))
    return str(h.hexdigest())


def _sha256_read(tf: TensorFile, h: Any) -> str:
    size = tf.size
    with _progress.task(f"checking {tf.name}", size) as advance:
        _read_hashed(tf, size, h, None, advance)
    return str(h.hexdigest())


def _read_hashed(
    tf: TensorFile, size: int, h: Any, into: memoryview | None, advance: Callable[[int], object]
) -> None:
    try:
        _hashing_reader.read_hashed(tf.fd, size, h, into, advance)
    except _hashing_reader.ShrankError:
        raise TensorFileError(f"{tf.name} shrank while it was read", path=tf.name) from None


def read_into_memory(tf: TensorFile, chunks: _chunks.ChunkHasher | None = None) -> str:
    """Copy the held file into private memory, hashed as it is read (in a second thread: the
    read of each step overlaps the hash of the one before); `tf`'s tensors come from the copy
    from now on.

    **Returns:** the copy's sha256 (`chunks` gets its bytes too).
    """
    import numpy as np

    size = tf.size
    # Page-aligned (so DATA_ALIGNMENT-aligned), like a mapping: XLA can use tensors in place.
    memory = np.frombuffer(_private_copy(tf, size), np.uint8)[:size]
    h: Any = hashlib.sha256() if chunks is None else _Both(hashlib.sha256(), chunks)
    with _progress.task(f"reading {tf.name}", size) as advance:
        _read_hashed(tf, size, h, memory.data, advance)
    tf.hold(memory)
    return str(h.hexdigest())


def chunk_digests(
    tf: TensorFile, chunk: int, pool: Executor, *, in_memory: bool, whole: bool
) -> tuple[str | None, list[str]]:
    """The held file's chunk digests (of `chunk` bytes), read and hashed by `pool`'s threads,
    and, with `whole`, its sha256 too (overlapping them, in this thread; it needs
    `in_memory`). `in_memory`: read into a private copy, which tensors come from from now on,
    as `read_into_memory`; else read through buffers of the threads' own.

    **Returns:** (the sha256 or None, the chunk digests), of the bytes read.
    """
    if not (in_memory or tf.untouched):  # tensors come from a copy or the mapping
        raise ValueError(f"{tf.name}: its bytes in use are no longer read from the file")
    size = tf.size
    memory = None
    if in_memory:  # numpy for the copy alone: `hlobundle verify` makes none
        import numpy as np

        memory = np.frombuffer(_private_copy(tf, size), np.uint8)[:size]
    h = hashlib.sha256() if whole else None
    with _progress.task(f"reading {tf.name}", size) as advance:
        try:
            digests = _hashing_reader.read_chunks_hashed(
                tf.fd, size, chunk, pool, None if memory is None else memory.data, h, advance
            )
        except _hashing_reader.ShrankError:
            raise TensorFileError(f"{tf.name} shrank while it was read", path=tf.name) from None
    if memory is not None:
        tf.hold(memory)
    return (None if h is None else h.hexdigest()), digests


def _private_copy(tf: TensorFile, size: int) -> mmap.mmap:
    try:
        return _copy_memory(size)
    except OSError as e:
        raise LimitError(
            f"{tf.name}: no private copy of its {size} bytes can be made ({e.strerror})",
            path=tf.name,
        ) from None


def _copy_memory(size: int) -> mmap.mmap:
    """Private memory for a whole file's copy: an anonymous mapping, swap reserved (too large,
    it fails here, not at a page fault), in 4 KiB pages unless `HUGE_PAGES`. Huge pages take
    512 faults a GiB instead of 262,144, and once measured 0.3 s a GiB on this project's 2-CPU
    VM; but that VM's balloon reports free 2 MiB blocks to its host, which takes them back, so
    a huge page is mostly memory the host must fault in again: on 2026-12-07 a 1 GiB copy
    there cost 2.4-3.1 s of system time in huge pages against 0.6-0.8 s in 4 KiB ones, and
    `load(verify=True)` took 2.3x longer (benchmarks/RESULTS.md, "Verify onto the device").
    The TPU host has no transparent huge pages at all (docs/accelerators.md)."""
    if not hasattr(mmap, "MAP_PRIVATE"):  # Windows
        return mmap.mmap(-1, max(size, 1))
    mapping = mmap.mmap(-1, max(size, 1), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if HUGE_PAGES and hasattr(mmap, "MADV_HUGEPAGE"):
        with contextlib.suppress(OSError):  # EINVAL from a kernel built without huge pages
            mapping.madvise(mmap.MADV_HUGEPAGE)
    return mapping


class _Both:
    """A file's sha256 and its chunk digests, from one pass over its bytes."""

    def __init__(self, h: Any, chunks: _chunks.ChunkHasher) -> None:
        self._h, self._chunks = h, chunks

    def update(self, data: Any) -> None:
        self._h.update(data)
        self._chunks.update(data)

    def hexdigest(self) -> str:
        return str(self._h.hexdigest())

"""Writing a file in steps while a second thread computes the sha256 of what is written.

hashlib releases the GIL for buffers of more than a couple of kilobytes, and so does `os.writev`:
with the hash in a thread of its own, hashing and writing run side by side on two cores, and the
file's fsync overlaps the end of the hash. Both see the same buffers (views of the caller's
arrays, never copies), in the same order, so the digest is that of the bytes written.

Writes go out in steps of at most `STEP_BYTES`, each one `writev` of many tensors: the caller
reports progress and Ctrl-C acts between two steps. Each written step is handed to the kernel's
writeback at once (Linux `sync_file_range`, as RocksDB's `bytes_per_sync` does), so that the
disk works while the next steps are copied in, and the final fsync has little left to wait for.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType

from . import _libc

STEP_BYTES = 8 * 1024 * 1024  # small enough that Ctrl-C acts at once, large for few syscalls
# Steps the writer may run ahead of the hash: mostly views of the arrays, but a converted copy
# (a transposed column-major array) lives until it is hashed, so this bounds them too.
_AHEAD = 8
_MAX_BUFFERS = 512  # per writev; Linux's IOV_MAX is 1024
_new_hash = hashlib.sha256


def steps(buffers: Iterable[memoryview]) -> Iterator[list[memoryview]]:
    """Group byte buffers, in order, into steps of at most STEP_BYTES (a larger buffer is cut
    into pieces of that size); empty buffers are dropped."""
    step: list[memoryview] = []
    size = 0
    for buffer in buffers:
        for begin in range(0, len(buffer), STEP_BYTES):
            piece = buffer[begin : begin + STEP_BYTES]
            if step and (size + len(piece) > STEP_BYTES or len(step) == _MAX_BUFFERS):
                yield step
                step, size = [], 0
            step.append(piece)
            size += len(piece)
    if step:
        yield step


class HashingWriter:
    """Writes steps of buffers to an open file descriptor, in order, and hashes them in a
    thread. Use as a context manager: `write()` each step, then `finish()` for the digest.
    Leaving the block early (an error, Ctrl-C) stops the thread and waits for it."""

    def __init__(self, fd: int, also: Callable[[memoryview], None] | None = None) -> None:
        """`also`: a second consumer of every buffer, in order, in the hashing thread (the
        chunk digests of format 2.1)."""
        self._fd = fd
        self._also = also
        self._offset = 0
        self._hash = _new_hash()
        self._queue: queue.Queue[list[memoryview] | None] = queue.Queue(maxsize=_AHEAD)
        self._error: BaseException | None = None
        self._stop = False
        self._ended = False  # the end of the steps is queued
        self._thread = threading.Thread(target=self._run, name="hlobundle-sha256", daemon=True)

    def __enter__(self) -> HashingWriter:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._thread.is_alive():  # left before finish() ended: drop what is queued
            self._stop = True
            if not self._ended:
                self._queue.put(None)
            self._thread.join()

    def _run(self) -> None:
        update, also = self._hash.update, self._also
        while (step := self._queue.get()) is not None:
            if self._stop or self._error is not None:
                continue  # keep taking steps, so that the writer never waits on a full queue
            try:
                for buffer in step:
                    update(buffer)
                    if also is not None:
                        also(buffer)
            except BaseException as e:  # handed to the writing thread
                self._error = e

    def write(self, step: list[memoryview]) -> int:
        """Hand `step` to the hash, write it whole, and start its writeback; its byte count."""
        self._raise_hash_error()
        self._queue.put(step)
        size = _writev_all(self._fd, step)
        _start_writeback(self._fd, self._offset, size)
        self._offset += size
        return size

    def finish(self, *, fsync: bool) -> str:
        """The sha256 of everything written, after an fsync of the file when asked (while the
        hash of the last steps finishes)."""
        self._queue.put(None)
        self._ended = True
        if fsync:
            os.fsync(self._fd)
        self._thread.join()
        self._raise_hash_error()
        return str(self._hash.hexdigest())

    def _raise_hash_error(self) -> None:
        if self._error is not None:
            raise self._error


def _writev_all(fd: int, step: list[memoryview]) -> int:
    """Write every buffer of `step`, resuming after short writes."""
    pending = step
    while pending:
        written = os.writev(fd, pending)
        while pending and written >= len(pending[0]):
            written -= len(pending[0])
            pending = pending[1:]
        if pending and written:
            pending = [pending[0][written:], *pending[1:]]
    return sum(len(b) for b in step)


_SYNC_FILE_RANGE_WRITE = 2  # start writeback of the range's dirty pages, without waiting


def _start_writeback(fd: int, offset: int, size: int) -> None:
    call = _libc.function(
        "sync_file_range", ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint
    )
    if call is not None:  # a hint: its result is ignored (a failure leaves the work to fsync)
        call(fd, offset, size, _SYNC_FILE_RANGE_WRITE)

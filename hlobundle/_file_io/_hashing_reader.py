"""Reading a file in steps while a second thread hashes what was read.

The mirror of `_hashing_writer`: `os.preadv` and hashlib both release the GIL, so with the hash
in a thread of its own, reading step k + 1 overlaps hashing step k, and a verify of one large
file takes about as long as its hash alone instead of the read and the hash one after the other.
The thread hashes the very bytes read, in order: into the caller's memory (a private copy that
tensors then come from), or through two buffers in turn when nothing is kept.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from concurrent.futures import Future

STEP_BYTES = 8 * 1024 * 1024  # small enough that Ctrl-C and progress act often


class ShrankError(OSError):
    """The file ended before its size (it shrank while it was read)."""


def read_hashed(
    fd: int,
    size: int,
    hasher: Any,
    into: memoryview | None = None,
    advance: Callable[[int], object] = lambda n: None,
) -> None:
    """Read bytes `[0, size)` of `fd` (into `into`, when given, else through two buffers) and
    feed them to `hasher.update` in order, in a second thread; `advance` is told each step's
    size. A `ShrankError` when the file ends early. A file of one step is read, then hashed,
    in this thread: nothing to overlap, and no thread to start."""
    if size <= STEP_BYTES:
        target = memoryview(bytearray(size)) if into is None else _at(into, 0, size)
        got = os.preadv(fd, [target], 0) if size else 0
        if got < size:  # one read of a regular file returns what it holds, up to its size
            _read_rest(fd, target, got, size)
        hasher.update(target)
        advance(size)
        return
    from concurrent.futures import ThreadPoolExecutor  # imported by a large read alone

    buffers = None if into is not None else [memoryview(bytearray(STEP_BYTES)) for _ in "ab"]
    pending: Future[Any] | None = None
    with ThreadPoolExecutor(1, thread_name_prefix="hlobundle-sha256") as pool:
        done, step = 0, 0
        while done < size:
            n = min(STEP_BYTES, size - done)
            # a buffer is read into again only once its hash is done (waited for below)
            target = buffers[step % 2][:n] if buffers is not None else _at(into, done, n)
            got = os.preadv(fd, [target], done)
            if pending is not None:
                pending.result()
            if got == 0:
                raise ShrankError(f"the file ended at {done} of {size} bytes")
            pending = pool.submit(hasher.update, target[:got])
            done, step = done + got, step + 1
            advance(got)
        if pending is not None:
            pending.result()


def _at(into: memoryview | None, begin: int, n: int) -> memoryview:
    if into is None:
        raise ValueError("read_hashed: no buffers and nothing to read into")
    return into[begin : begin + n]


def _read_rest(fd: int, target: memoryview, done: int, size: int) -> None:
    while done < size:
        got = os.preadv(fd, [target[done:]], done)
        if got == 0:
            raise ShrankError(f"the file ended at {done} of {size} bytes")
        done += got

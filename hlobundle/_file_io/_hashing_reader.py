"""Reading a file in steps while a second thread hashes what was read.

The mirror of `_hashing_writer`: `os.preadv` and hashlib both release the GIL, so with the hash
in a thread of its own, reading step k + 1 overlaps hashing step k, and a verify of one large
file takes about as long as its hash alone instead of the read and the hash one after the other.
The thread hashes the very bytes read, in order: into the caller's memory (a private copy that
tensors then come from), or through two buffers in turn when nothing is kept.

`read_chunks_hashed` spreads a file's chunk digests (format 2.1) over a pool's threads, each
reading its runs of chunks and hashing what it read: a large file is checked on every core,
where one sha256 of the whole file runs on one.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from concurrent.futures import Executor, Future

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


def read_chunks_hashed(
    fd: int,
    size: int,
    chunk: int,
    pool: Executor,
    into: memoryview | None = None,
    whole: Any = None,
    advance: Callable[[int], object] = lambda n: None,
) -> list[str]:
    """The sha256 (hex) of each `chunk`-byte chunk of bytes `[0, size)` of `fd`, read and
    hashed by `pool`'s threads, runs of chunks of about a step each: into `into` when given,
    else into a buffer each run (a pool of `w` threads holds `w` runs at most). `whole`, when
    given (only with `into`), is fed every byte in order, in this thread, each run as soon as
    it is read: a file's sha256, which cannot be cut up, overlaps its chunks'. A `ShrankError`
    when the file ends early."""
    if whole is not None and into is None:
        raise ValueError("read_chunks_hashed: the whole file's hash needs `into`")
    per_run = max(1, STEP_BYTES // chunk)
    starts = range(0, -(-size // chunk), per_run)
    runs = [(i * chunk, min(size, (i + per_run) * chunk)) for i in starts]
    futures = [pool.submit(_read_run, fd, begin, end, chunk, into) for begin, end in runs]
    digests: list[str] = []
    try:
        for (begin, end), future in zip(runs, futures, strict=True):
            digests += future.result()
            if whole is not None:
                whole.update(_at(into, begin, end - begin))
            advance(end - begin)
    finally:
        for future in futures:  # after an error: what has not started never will
            future.cancel()
    return digests


def _read_run(fd: int, begin: int, end: int, chunk: int, into: memoryview | None) -> list[str]:
    """Bytes `[begin, end)` of `fd` read (into `into`, else a buffer of their own) and their
    chunks' sha256, in order."""
    target = memoryview(bytearray(end - begin)) if into is None else _at(into, begin, end - begin)
    return read_run(fd, begin, target, chunk)


def read_run(fd: int, begin: int, target: memoryview, chunk: int | None) -> list[str]:
    """Fill `target` with the bytes of `fd` from `begin` on, and return the sha256 of each
    `chunk`-byte piece of it, in order (none when `chunk` is None). A `ShrankError` when the
    file ends first."""
    got = os.preadv(fd, [target], begin)
    if got < len(target):
        _read_rest_at(fd, target, got, begin)
    if chunk is None:
        return []
    return [hashlib.sha256(target[k : k + chunk]).hexdigest() for k in range(0, len(target), chunk)]


def _read_rest_at(fd: int, target: memoryview, done: int, begin: int) -> None:
    while done < len(target):
        got = os.preadv(fd, [target[done:]], begin + done)
        if got == 0:
            raise ShrankError(
                f"the file ended at {begin + done} of at least {begin + len(target)} bytes"
            )
        done += got


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

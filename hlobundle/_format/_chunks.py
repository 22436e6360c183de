"""Chunk digests (format 2.1, SPEC.md 2.9): a listed file cut into chunks of one fixed size, a
power of two, each with its own sha256, so that a reader of a byte range (a remote load) checks
every chunk it uses before it uses a byte of it. Chunk `i` is bytes `[i * size, (i + 1) * size)`
of the file, the last one shorter."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

MIN_CHUNK = 1 << 16  # 64 KiB
MAX_CHUNK = 1 << 26  # 64 MiB
DEFAULT_CHUNK = 1 << 20  # what the reference writer uses: 1 MiB
# Which files the reference writer chunks: the tensor files (modules are read whole).
CHUNKED_SUFFIX = ".safetensors"


def count(size: int, chunk: int) -> int:
    """How many chunks of `chunk` bytes a file of `size` bytes has (none when empty)."""
    return -(-size // chunk)


def valid_size(chunk: int) -> bool:
    return MIN_CHUNK <= chunk <= MAX_CHUNK and chunk & (chunk - 1) == 0


def covering(size: int, chunk: int, begin: int, end: int) -> range:
    """The indices of the chunks that hold bytes `[begin, end)` of a file of `size` bytes."""
    if end <= begin:
        return range(0)
    return range(begin // chunk, min(count(size, chunk), -(-end // chunk)))


def span(size: int, chunk: int, index: int) -> tuple[int, int]:
    """Bytes `[begin, end)` of chunk `index`."""
    return index * chunk, min(size, (index + 1) * chunk)


def digest(data: bytes | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


class ChunkHasher:
    """The chunk digests of bytes given in pieces of any size, in order."""

    def __init__(self, chunk: int) -> None:
        self.chunk = chunk
        self.digests: list[str] = []
        self._hash = hashlib.sha256()
        self._filled = 0

    def update(self, data: bytes | memoryview) -> None:
        view = memoryview(data).cast("B")
        while len(view):
            take = min(len(view), self.chunk - self._filled)
            self._hash.update(view[:take])
            self._filled += take
            view = view[take:]
            if self._filled == self.chunk:
                self.digests.append(self._hash.hexdigest())
                self._hash, self._filled = hashlib.sha256(), 0

    def finish(self) -> list[str]:
        """Every chunk's digest, the last (short) one included."""
        if self._filled:
            self.digests.append(self._hash.hexdigest())
            self._hash, self._filled = hashlib.sha256(), 0
        return self.digests


def digests_of(pieces: Iterable[bytes | memoryview], chunk: int) -> list[str]:
    hasher = ChunkHasher(chunk)
    for piece in pieces:
        hasher.update(piece)
    return hasher.finish()

"""The shared memory a front door (`serve --frontends`) hands tensors to the process that holds the
device through: buffers of anonymous memory (`memfd_create`; an unlinked file elsewhere), each
mapped by both processes, its descriptor sent once over their socket pair. A request leases a
buffer large enough for its inputs and its results, the front door writes the inputs there, the
device's process reads them in place and writes the results after them; the buffer goes back to
the pool once the answer is read. Buffers come in powers of two (at least `SMALLEST`), so that
a few sizes serve every request, and the pool keeps at most `MAX_POOLED` bytes of them idle.
Nothing is named in the file system: a process that dies leaves nothing behind.

A mapping read after its file shrank is a SIGBUS, which would end the device's process (and
the model with it): a front door's memfds are sealed against shrinking (`F_SEAL_SHRINK`), and
the device's process maps only such a buffer (`mapped`), whatever a front door sends it."""

from __future__ import annotations

import fcntl
import itertools
import mmap
import os
import tempfile
from dataclasses import dataclass, field

SMALLEST = 64 << 10
MAX_POOLED = 256 << 20  # bytes of idle buffers a front door keeps for the next requests
ALIGN = 64  # each tensor starts at a multiple of this, as numpy and XLA like it
_SEALS = hasattr(os, "memfd_create") and hasattr(fcntl, "F_ADD_SEALS")  # Linux


@dataclass(eq=False)
class Buffer:
    """One shared buffer: `id` names it to the other process, which gets `fd` with its first
    use (then closed here: the mapping keeps the memory)."""

    id: int
    size: int
    view: mmap.mmap
    fd: int | None = field(default=None)

    def sent(self) -> None:
        """Its descriptor went to the other process: the mapping alone keeps it here."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class Pool:
    """A front door's buffers: `lease` one of at least a size, `give_back` it when its answer is
    read; `forget` then names the buffers closed here, for the other process to unmap."""

    def __init__(self) -> None:
        self.idle: dict[int, list[Buffer]] = {}
        self.idle_bytes = 0
        self.ids = itertools.count(1)
        self.forgotten: list[int] = []

    def lease(self, size: int) -> Buffer:
        size = max(SMALLEST, 1 << (max(size, 1) - 1).bit_length())
        free = self.idle.get(size)
        if free:
            self.idle_bytes -= size
            return free.pop()
        fd = anonymous(size)
        return Buffer(next(self.ids), size, mmap.mmap(fd, size), fd)

    def give_back(self, buffer: Buffer) -> None:
        if self.idle_bytes + buffer.size > MAX_POOLED:
            self.forgotten.append(buffer.id)
            buffer.sent()
            try:
                buffer.view.close()
            except BufferError:  # an array still views it: unmapped once that is gone
                pass
            return
        self.idle_bytes += buffer.size
        self.idle.setdefault(buffer.size, []).append(buffer)

    def forget(self) -> list[int]:
        """The ids of the buffers closed since the last call."""
        forgotten, self.forgotten = self.forgotten, []
        return forgotten


def anonymous(size: int) -> int:
    """A descriptor of `size` bytes of memory no file name reaches (close-on-exec)."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("hlobundle-frontdoor", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    else:  # an unlinked file, in memory where there is /dev/shm
        where = "/dev/shm" if os.path.isdir("/dev/shm") else None
        with tempfile.TemporaryFile(dir=where) as file:
            fd = os.dup(file.fileno())
    try:
        os.ftruncate(fd, size)
        if _SEALS:
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL)
    except BaseException:
        os.close(fd)
        raise
    return fd


def mapped(fd: int, size: int) -> mmap.mmap:
    """The other process's buffer `fd`, mapped here: where memfds can be sealed, only one
    sealed against shrinking (else ValueError; OSError where `fd` is no memfd)."""
    if _SEALS and not fcntl.fcntl(fd, fcntl.F_GET_SEALS) & fcntl.F_SEAL_SHRINK:
        raise ValueError("a buffer its front door could shrink")
    return mmap.mmap(fd, size)


def aligned(offset: int) -> int:
    return -(-offset // ALIGN) * ALIGN

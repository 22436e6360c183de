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

import asyncio
import collections
import fcntl
import itertools
import mmap
import os
import tempfile
from dataclasses import dataclass, field

SMALLEST = 64 << 10
MAX_POOLED = 256 << 20  # bytes of idle buffers a front door keeps for the next requests
MAX_BUFFERS = 256  # a front door's buffers, leased and idle (the device's process keeps a
# descriptor open for each: `serve --frontends` gives each front door its share of them)
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
    known: bool = False  # a call carrying it succeeded: the other process has it mapped

    def sent(self) -> None:
        """Its descriptor went to the other process: the mapping alone keeps it here."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class Pool:
    """A front door's buffers: `lease` one of at least a size, `give_back` it when its answer is
    read; `forget` then names the buffers closed here, for the other process to unmap.

    At most `max_buffers` of them, leased and idle: the device's process keeps a descriptor
    open for each it maps (Python's mmap keeps its own), so that requests without bound would
    take every descriptor it may open. A lease over the bound closes an idle buffer of another
    size, or waits for one given back."""

    def __init__(self, max_buffers: int = MAX_BUFFERS) -> None:
        self.idle: dict[int, list[Buffer]] = {}
        self.idle_bytes = 0
        self.ids = itertools.count(1)
        self.forgotten: list[int] = []
        self.max_buffers, self.count = max_buffers, 0  # made and not closed: leased or idle
        self.waiting: collections.deque[asyncio.Future[None]] = collections.deque()

    async def lease(self, size: int) -> Buffer:
        size = max(SMALLEST, 1 << (max(size, 1) - 1).bit_length())
        while True:
            free = self.idle.get(size)
            if free:
                self.idle_bytes -= size
                return free.pop()
            if self.count < self.max_buffers or self._closed_idle():
                break
            await self._given_back()
        fd = anonymous(size)
        self.count += 1
        return Buffer(next(self.ids), size, mmap.mmap(fd, size), fd)

    async def _given_back(self) -> None:
        waiter = asyncio.get_running_loop().create_future()
        self.waiting.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():  # woken, then cancelled: the next
                self._wake()
            raise
        finally:
            if waiter in self.waiting:
                self.waiting.remove(waiter)

    def _wake(self) -> None:
        while self.waiting:
            waiter = self.waiting.popleft()
            if not waiter.done():
                return waiter.set_result(None)

    def _closed_idle(self) -> bool:
        """An idle buffer closed (the largest), to make room for one of another size."""
        for size in sorted(self.idle, reverse=True):
            if self.idle[size]:
                self.idle_bytes -= size
                self._close(self.idle[size].pop())
                return True
        return False

    def give_back(self, buffer: Buffer) -> None:
        """`buffer`'s answer was read: idle for the next lease, or closed where it would be
        over `MAX_POOLED`, or where no call carrying it succeeded (the other process may not
        have it: its descriptor travels with the first call only)."""
        if not buffer.known or self.idle_bytes + buffer.size > MAX_POOLED:
            self._close(buffer)
        else:
            self.idle_bytes += buffer.size
            self.idle.setdefault(buffer.size, []).append(buffer)
        self._wake()

    def _close(self, buffer: Buffer) -> None:
        self.count -= 1
        self.forgotten.append(buffer.id)
        buffer.sent()
        try:
            buffer.view.close()
        except BufferError:  # an array still views it: unmapped once that is gone
            pass

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

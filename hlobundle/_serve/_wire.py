"""The socket pair between a front door (`serve --frontends`) and the process that holds the
device: one message a datagram (`SOCK_SEQPACKET`: its bounds kept, never a partial one), a
list in JSON (never a pickle: a front door reads what hostile clients send), with the descriptors of new shared buffers (`_arena`) passed along. Both ends
are our own processes; a request's tensors never travel here, only where they lie.

Messages, front door to device: ("call", id, model, buffer id, buffer size, inputs, results at),
each input (name, dtype, shape, offset); ("forget", [buffer ids]). Device to front door:
("ready",) is the front door's first word, then ("answer", id, status, outputs or the JSON of
the failure), each output (name, dtype, shape, offset) in the buffer.

Messages without descriptors sent in one turn of the event loop travel together, as one
("batch", message, ...): a call is two messages, and each datagram costs both processes a
system call and a wake-up (under load, a batched model call's answers go back as one). A batch
holds messages only: one inside another is dropped as an unknown kind, and a batch longer than
either end makes (`MAX_BATCH`) is dropped whole."""

from __future__ import annotations

import array
import asyncio
import collections
import os
import socket
from collections.abc import Callable, Sequence
from typing import Any

import orjson

MAX_MESSAGE = 1 << 20  # a message's bytes: descriptors, or a failure's JSON
MAX_FDS = 8
BATCH_BYTES = 64 << 10  # a batch is sent once it holds this many bytes of messages
# A batch's datagram is under BATCH_BYTES and a separator a message (each at least 2 bytes):
# a longer one is not what the other end sends, and is dropped whole, unread.
MAX_BATCH = 2 * BATCH_BYTES
_ANCILLARY = socket.CMSG_LEN(MAX_FDS * array.array("i").itemsize)


def pair() -> tuple[socket.socket, socket.socket]:
    """The two ends: the first for this process, the second for the child (inheritable)."""
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    theirs.set_inheritable(True)
    return mine, theirs


class Channel:
    """One end of the pair on an event loop: `on_message(message, fds)` for each message that
    arrives, `on_closed()` once when the other end is gone; `send` queues what the socket cannot
    take at once (the other process is busy), in order. The descriptors given to `send` are
    the channel's: closed once sent."""

    def __init__(
        self,
        sock: socket.socket,
        on_message: Callable[[tuple[Any, ...], list[int]], None],
        on_closed: Callable[[], None],
    ) -> None:
        self.sock, self.on_message, self.on_closed = sock, on_message, on_closed
        self.queued: collections.deque[tuple[bytes, Sequence[int]]] = collections.deque()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.closed = False
        self.buffer = bytearray(MAX_MESSAGE)  # each message is read into it (`_received`)
        self.batch: list[bytes] = []  # messages to send together, at the end of this turn
        self.batch_bytes = 0

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self.sock.setblocking(False)
        self.loop = loop
        loop.add_reader(self.sock.fileno(), self._readable)

    def send(self, message: tuple[Any, ...], fds: Sequence[int] = ()) -> None:
        if self.closed:
            for fd in fds:
                os.close(fd)
            return
        data = orjson.dumps(message)
        if fds or self.loop is None or len(data) >= BATCH_BYTES:  # alone, after the batch
            self._flush()
            return self._send(data, fds)
        if self.batch_bytes + len(data) >= BATCH_BYTES:
            self._flush()
        if not self.batch:
            self.loop.call_soon(self._flush)
        self.batch.append(data)
        self.batch_bytes += len(data)

    def _flush(self) -> None:
        """The messages batched so far, sent: one alone, several as a ("batch", ...)."""
        if not self.batch:
            return
        batch, self.batch, self.batch_bytes = self.batch, [], 0
        if self.closed:
            return
        data = batch[0] if len(batch) == 1 else b'["batch",' + b",".join(batch) + b"]"
        self._send(data, ())

    def _send(self, data: bytes, fds: Sequence[int]) -> None:
        if self.queued:
            self.queued.append((data, fds))
            return
        if not self._sent(data, fds):
            self.queued.append((data, fds))
            if self.loop is not None:
                self.loop.add_writer(self.sock.fileno(), self._writable)

    def _sent(self, data: bytes, fds: Sequence[int]) -> bool:
        try:
            if fds:
                socket.send_fds(self.sock, [data], list(fds))
            else:
                self.sock.send(data)
        except BlockingIOError:
            return False
        except OSError:  # the other end is gone: its reader says so
            pass
        for fd in fds:
            os.close(fd)
        return True

    def _writable(self) -> None:
        while self.queued:
            data, fds = self.queued[0]
            if not self._sent(data, fds):
                return
            self.queued.popleft()
        if self.loop is not None:
            self.loop.remove_writer(self.sock.fileno())

    def _readable(self) -> None:
        while not self.closed:
            try:
                data, fds = self._received()
            except BlockingIOError:
                return
            except OSError:
                data, fds = b"", []
            if data is not None and not data:  # the other end is gone
                for fd in fds:
                    os.close(fd)
                return self.close()
            message = _parsed(data)
            if message is None:  # not what the other end sends: dropped, its descriptors closed
                for fd in fds:
                    os.close(fd)
                continue
            if message[0] != "batch":
                self.on_message(message, fds)
                continue
            for fd in fds:  # a batch carries none
                os.close(fd)
            for item in message[1:]:
                if not self.closed and type(item) is list and item and type(item[0]) is str:
                    self.on_message(tuple(item), [])

    def _received(self) -> tuple[Any, list[int]]:
        """The next message (a view of the channel's buffer, good until the next; None where
        it was longer than `MAX_MESSAGE`) and its descriptors. Into a buffer made once: a
        new one of `MAX_MESSAGE` for each (`socket.recv_fds`) cost 23 us of CPU a message
        sent and received, against 4 (measured on this project's machine), and every model
        call is two messages."""
        n, ancillary, flags, _ = self.sock.recvmsg_into([self.buffer], _ANCILLARY)
        fds = array.array("i")
        for level, kind, data in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
        if flags & socket.MSG_TRUNC:
            return None, list(fds)
        return memoryview(self.buffer)[:n], list(fds)

    def close(self) -> None:
        if self.closed:
            return
        self._flush()  # what this turn sent, before the end
        self.closed = True
        for _, fds in self.queued:  # never sent: the channel's to close
            for fd in fds:
                os.close(fd)
        self.queued.clear()
        if self.loop is not None:
            self.loop.remove_reader(self.sock.fileno())
            self.loop.remove_writer(self.sock.fileno())
        self.sock.close()
        self.on_closed()


def _parsed(data: Any) -> tuple[Any, ...] | None:
    """A message: a non-empty JSON list whose first item (its kind) is a string; else None
    (`data` None: a message too long; a batch longer than `MAX_BATCH`)."""
    if data is None:
        return None
    try:
        message = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    if type(message) is not list or not message or type(message[0]) is not str:
        return None
    if message[0] == "batch" and len(data) > MAX_BATCH:  # each of its messages would be
        return None  # made and answered in one turn of the loop
    return tuple(message)

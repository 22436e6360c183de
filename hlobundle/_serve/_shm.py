"""The Open Inference Protocol's system shared-memory extension, as Triton defines it: a local
client registers a region of a POSIX shared-memory object (`/dev/shm/KEY`) by name, then names
it in an inference request, whose input's bytes are read from it instead of the body and whose
output's are written into it.

A region is read and written through its file descriptor (`os.preadv`, `os.pwrite`), not a
mapping: a mapping read after the file's owner shrank it is a SIGBUS, which kills the server
(seen in tests/test_serve_shm.py with the check below removed), and no check before the read can
close that race; a read from a file shrunk meanwhile is a short read, refused here.

A server offers it on a unix socket, which serve makes owner-only, and on a loopback address
only when asked (`offered`: every user of the machine may connect there, and register a file of
the server's user that another process of that user made for itself); and only a file of the
server's own user may be a region: opened without following a link (`O_NOFOLLOW`), then
checked on the file opened (`os.fstat`): a regular file, owned by the server's uid, writable by
no group or other user, its size covering the region. Every request's region, offset and size are
checked against the registration before any work, and an input's bytes are copied out of the
file once, into the array that runs: what was checked is what runs, whatever the client
writes there afterwards. The registered bytes are bounded in all (`--max-shared-memory`), and so
is the number of regions (each holds a file descriptor)."""

from __future__ import annotations

import errno
import ipaddress
import os
import re
import stat
import threading
from dataclasses import dataclass
from typing import Any

from ._protocol import RequestError

SHM_DIR = "/dev/shm"
DEFAULT_MAX_SHARED_MEMORY = 64 << 20  # bytes registered at once, over every region
MAX_REGIONS = 64  # regions registered at once: each holds a file descriptor open
# A region's name (in the URL and in requests) and its key (a file name under /dev/shm, with
# POSIX's optional leading "/"): letters, digits, "_", "-" and "." only, and at most 128 of them.
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}\Z")


def offered(host: str, uds: str | None, over_loopback: bool = False) -> bool:
    """Whether a server listening on `host` (or on the unix socket `uds`) offers the extension:
    on a unix socket (serve's are owner-only: the server's user's clients alone); on a loopback
    `host` only `over_loopback` (`--shared-memory-over-loopback`), since every user of the
    machine can connect there, and the server cannot cheaply tell which one did; never
    elsewhere."""
    if uds is not None:
        return True
    return over_loopback and _loopback(host)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass
class Region:
    """A registered region: the bytes [offset, offset + byte_size) of /dev/shm/KEY, open as
    `fd` while it is registered."""

    name: str
    key: str
    offset: int
    byte_size: int
    fd: int

    def status(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "key": self.key,
            "offset": self.offset,
            "byte_size": self.byte_size,
        }

    def close(self) -> None:
        os.close(self.fd)


class Regions:
    """The regions registered with one server, at most `max_bytes` of them in all."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.regions: dict[str, Region] = {}
        self.lock = threading.Lock()  # requests read them on the event loop and in threads

    def register(self, name: str, body: Any) -> None:
        """Register `name` (checked) for the request body `{"key", "offset", "byte_size"}`."""
        _check_name(name, "region name")
        if not isinstance(body, dict):
            raise RequestError(400, "the body must be a JSON object with key, offset and byte_size")
        key, offset, size = body.get("key"), body.get("offset", 0), body.get("byte_size")
        if not isinstance(key, str):
            raise RequestError(400, f"region {name!r}: 'key' must be a string")
        file = key[1:] if key.startswith("/") else key  # shm_open's name, or the file's
        _check_name(file, "key")
        if file in (".", ".."):
            raise RequestError(400, f"region {name!r}: key {key!r} names no file")
        offset = _count(offset, 0, f"region {name!r}: 'offset'")
        size = _count(size, 1, f"region {name!r}: 'byte_size'")
        with self.lock:
            self._admit(name, size)
            self.regions[name] = _opened(name, key, file, offset, size)

    def _admit(self, name: str, size: int) -> None:
        if name in self.regions:
            raise RequestError(400, f"region {name!r} is registered already; unregister it first")
        if len(self.regions) >= MAX_REGIONS:
            raise RequestError(413, f"{MAX_REGIONS} regions are registered, the most at once")
        held = sum(r.byte_size for r in self.regions.values())
        if held + size > self.max_bytes:
            raise RequestError(
                413,
                f"region {name!r}: {size} bytes more than the {held} registered is over the "
                f"limit of {self.max_bytes} (--max-shared-memory)",
            )

    def unregister(self, name: str | None) -> None:
        """Drop `name` and close its file (every region's with None); an unknown name is
        no error."""
        with self.lock:
            names = list(self.regions) if name is None else [name] if name in self.regions else []
            for n in names:
                self.regions.pop(n).close()

    def status(self, name: str | None) -> list[dict[str, Any]]:
        with self.lock:
            if name is None:
                return [r.status() for r in self.regions.values()]
            return [self._named(name).status()]

    def _named(self, name: str) -> Region:
        region = self.regions.get(name)
        if region is None:
            raise RequestError(400, f"no shared-memory region {name[:128]!r} is registered")
        return region

    def checked(self, holder: str, params: dict[str, Any], needed: int, exact: bool) -> Use:
        """The region, offset and size `params` declare for the input or output `holder`,
        checked against its registration and against the `needed` bytes of its tensor (the
        size must equal them for an input (`exact`), and hold them for an output)."""
        name, size = params.get("shared_memory_region"), params.get("shared_memory_byte_size")
        offset = params.get("shared_memory_offset", 0)
        if not isinstance(name, str):
            raise RequestError(400, f"{holder}: shared_memory_region must be a region's name")
        size = _count(size, 0, f"{holder}: shared_memory_byte_size")
        offset = _count(offset, 0, f"{holder}: shared_memory_offset")
        with self.lock:
            region = self._named(name)
        if offset + size > region.byte_size:
            raise RequestError(
                400,
                f"{holder}: bytes [{offset}, {offset + size}) are outside region {name!r}'s "
                f"{region.byte_size}",
            )
        if size != needed if exact else size < needed:
            raise RequestError(
                400,
                f"{holder}: shared_memory_byte_size {size}, expected "
                f"{needed if exact else f'at least {needed}'} bytes for its shape and datatype",
            )
        return Use(region, offset, size)

    def read(self, use: Use) -> bytearray:
        """The bytes `use` names, copied out of the region's file (once, here, into memory of
        the server's own)."""
        at, fd = self._at(use)
        data = bytearray(use.byte_size)
        view, done = memoryview(data), 0
        try:
            while done < len(data):
                n = os.preadv(fd, [view[done:]], at + done)
                if n == 0:  # shrunk by its owner since the check
                    raise RequestError(400, f"region {use.region.name!r}: its file was shrunk")
                done += n
        finally:
            os.close(fd)
        return data

    def write(self, use: Use, data: Any) -> None:
        """`data` (bytes-like, at most `use.byte_size`) written where `use` names; more is
        refused unwritten (an output larger than the shape its size was checked against)."""
        view, done = memoryview(data).cast("B"), 0
        if len(view) > use.byte_size:
            raise RequestError(
                500,
                f"region {use.region.name!r}: the output is {len(view)} bytes, more than the "
                f"{use.byte_size} checked for it",
            )
        at, fd = self._at(use)
        try:
            while done < len(view):
                done += os.pwrite(fd, view[done:], at + done)
        finally:
            os.close(fd)

    def _at(self, use: Use) -> tuple[int, int]:
        """Where `use`'s bytes start in the region's file, and a descriptor of it of the
        caller's own (to close), once the region is known to be registered still and its file
        to cover it still. Its own: an unregister closes the region's, whose number a file
        opened next may take, and a read in progress would go on in that file."""
        region = use.region
        with self.lock:
            if self.regions.get(region.name) is not region:
                raise RequestError(400, f"region {region.name!r} was unregistered")
            if os.fstat(region.fd).st_size < region.offset + region.byte_size:
                raise RequestError(400, f"region {region.name!r}: its file was shrunk")
            return region.offset + use.offset, os.dup(region.fd)

    def close(self) -> None:
        self.unregister(None)


@dataclass(frozen=True)
class Use:
    """A request's use of a region: `byte_size` bytes at `offset` within it."""

    region: Region
    offset: int
    byte_size: int


def _count(value: Any, least: int, what: str) -> int:
    if type(value) is not int or value < least:
        raise RequestError(400, f"{what} must be an integer of at least {least}")
    return value


def _check_name(name: str, what: str) -> None:
    if not _NAME.match(name):
        raise RequestError(
            400,
            f"{what} {name[:40]!r} must be 1 to 128 letters, digits, '_', '-' or '.'",
        )


def _opened(name: str, key: str, file: str, offset: int, size: int) -> Region:
    """/dev/shm/KEY opened (never through a link) and checked on what was opened."""
    path = os.path.join(SHM_DIR, file)
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(path, flags)
    except OSError as e:
        why = "is a symbolic link" if e.errno == errno.ELOOP else f"cannot be opened ({e.strerror})"
        raise RequestError(400, f"region {name!r}: {path} {why}") from None
    try:
        _check_file(name, path, os.fstat(fd), offset + size)
    except BaseException:
        os.close(fd)
        raise
    return Region(name, key, offset, size, fd)


def _check_file(name: str, path: str, st: os.stat_result, end: int) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise RequestError(400, f"region {name!r}: {path} is not a regular file")
    if st.st_uid != os.getuid():
        raise RequestError(
            400, f"region {name!r}: {path} is owned by uid {st.st_uid}, not the server's"
        )
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise RequestError(
            400,
            f"region {name!r}: {path} is writable by its group or others (mode "
            f"{stat.S_IMODE(st.st_mode):o}); only its owner may write a region",
        )
    if st.st_size < end:
        raise RequestError(
            400, f"region {name!r}: offset + byte_size is {end}, beyond {path}'s {st.st_size} bytes"
        )

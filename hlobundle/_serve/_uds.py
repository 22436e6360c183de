"""Unix domain sockets for `serve --uds PATH` (REST) and `--grpc-uds PATH` (gRPC): for hosts
that allow no TCP socket, and for sidecars.

A socket file is made where others may be able to reach it, so:
- It is owner-only (mode 0600, whatever the umask: the umask is 0177 while it is bound, so it
  is never reachable by others, not even for a moment): only this user's processes (and root)
  can connect. (The umask is the process's: a file another thread makes in that instant is
  owner-only too, which errs on the safe side.)
- It never replaces anything: where PATH exists (a file, a directory, a symbolic link, another
  server's socket, live or stale) it is refused, before binding, with what is there. The
  kernel's bind replaces nothing either; grpc's, asked for `unix:PATH`, first deletes a socket
  there, which the check before it keeps it from (only a socket made in the instant between
  the two could still be deleted: grpc offers no bind that replaces nothing).
- On shutdown only the socket made here is removed: PATH is unlinked only while it still is
  that socket (same device and inode), not whatever was put there since. (grpc, stopping,
  unlinks whatever socket is at its path: one put at `--grpc-uds`'s PATH since is lost.)
- A path that does not fit in `sockaddr_un` (107 bytes and a NUL) is refused, naming the limit,
  rather than cut short by the kernel or grpc.
Linking a socket bound under a private name into place would close grpc's instant, but gVisor
(the sandbox of the TPU hosts) refuses to link a socket (EOPNOTSUPP)."""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from .._format._errors import InputError

MAX_PATH_BYTES = 107  # sun_path's 108 bytes, the last a NUL
T = TypeVar("T")


@dataclass(frozen=True)
class Placed:
    """The socket file made at `path`: its device and inode, to remove it and nothing else."""

    path: str
    dev: int
    ino: int

    def remove(self) -> None:
        """Unlink `path` if it is still the socket made there (nothing, if it is gone)."""
        with contextlib.suppress(FileNotFoundError):
            now = os.lstat(self.path)
            if stat.S_ISSOCK(now.st_mode) and (now.st_dev, now.st_ino) == (self.dev, self.ino):
                os.unlink(self.path)


def check(path: str, flag: str) -> None:
    """Refuse PATH where it cannot be bound: too long, or already there (for before anything
    compiles; `place` checks again)."""
    _fits(path, flag)
    _absent(path, flag)


def place(path: str, flag: str, bind: Callable[[str], T]) -> tuple[T, Placed]:
    """`bind(path)`'s result, run under the umask 0177 where nothing is at `path`, and the
    `Placed` socket it made. InputError (argument `flag`) where `path` is too long, exists, or
    cannot be made."""
    check(path, flag)
    old = os.umask(0o177)
    try:
        bound = bind(path)
    except FileExistsError:
        raise _exists(path, flag) from None
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            raise _exists(path, flag) from None
        raise _refused(path, flag, f"cannot be made ({e.strerror})") from None
    finally:
        os.umask(old)
    made = os.lstat(path)
    if not stat.S_ISSOCK(made.st_mode) or made.st_mode & 0o077:
        raise _refused(path, flag, f"is not the owner-only socket bound ({oct(made.st_mode)})")
    return bound, Placed(path, made.st_dev, made.st_ino)


@contextlib.contextmanager
def listening(path: str) -> Iterator[socket.socket]:
    """A stream socket bound at `path` (as `place` makes it), for uvicorn's `run(sockets=...)`;
    closed, and its file removed, on exit."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        _, placed = place(path, "--uds", sock.bind)
    except BaseException:
        sock.close()
        raise
    try:
        with sock:
            sock.listen(2048)  # from now on connections wait for the server (or front doors)
            yield sock
    finally:
        placed.remove()


def _fits(path: str, flag: str) -> None:
    if not path or path.endswith("/"):
        raise _refused(path, flag, "is no file name")
    size = len(os.fsencode(path))
    if size > MAX_PATH_BYTES:
        raise _refused(
            path,
            flag,
            f"is {size} bytes long: a unix socket's path holds at most {MAX_PATH_BYTES} bytes; "
            "choose a shorter one (a relative path counts from the working directory)",
        )


def _absent(path: str, flag: str) -> None:
    try:
        os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as e:
        raise _refused(path, flag, f"cannot be checked ({e.strerror})") from None
    raise _exists(path, flag)


def _exists(path: str, flag: str) -> InputError:
    try:
        kind = _KINDS.get(stat.S_IFMT(os.lstat(path).st_mode), "a file")
    except OSError:
        kind = "gone again"
    return _refused(
        path,
        flag,
        f"exists ({kind}); serve replaces nothing: remove it (a socket a server left when it "
        "was killed) or choose another path",
    )


_KINDS = {
    stat.S_IFSOCK: "a socket",
    stat.S_IFREG: "a regular file",
    stat.S_IFDIR: "a directory",
    stat.S_IFLNK: "a symbolic link",
    stat.S_IFIFO: "a FIFO",
}


def _refused(path: str, flag: str, why: str) -> InputError:
    return InputError(f"{flag} {path!r}: {why}", argument=flag.lstrip("-").replace("-", "_"))

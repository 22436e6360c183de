"""Reading the files an importer is pointed at (a Reactant export, a ReactantServer.jl bundle).

Their names come from files a hostile producer may have written, so every one must stay inside
the directory it was found in, be reached through no symlink, and be a regular file of bounded
size. Files are opened without following a final symlink and without blocking (a FIFO opened
for reading would wait for a writer forever), and checked with `fstat` on what was opened.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path, PurePosixPath

from .._format._errors import InputError

_OPEN_FLAGS = (
    os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | os.O_CLOEXEC
)


def inside(root: Path, name: str, *, what: str) -> Path:
    """The file `name` (as a producer's file wrote it) in `root`: relative, without `..`, through
    no symlink, and a regular file; else an InputError naming it."""
    pure = PurePosixPath(name)
    if not name or "\x00" in name or "\\" in name or pure.is_absolute():
        raise InputError(
            f"{what} {name!r} is absolute or empty; it must be a file name relative "
            f"to {str(root)!r}",
            path=name,
        )
    if any(part in ("..", ".", "") for part in name.split("/")):
        raise InputError(
            f"{what} {name!r} contains '..', '.' or an empty component; it must "
            f"name a file inside {str(root)!r}",
            path=name,
        )
    current = root
    for part in name.split("/"):
        current = current / part
        if current.is_symlink():
            raise InputError(
                f"{what} {name!r} is reached through a symlink ({part}); an "
                "importer reads only regular files inside the export",
                path=current,
            )
    check_regular(current, what=what)
    return current


def check_regular(path: Path, *, what: str) -> None:
    """An InputError unless `path` is a regular file itself (not a symlink, FIFO or directory)."""
    try:
        mode = path.lstat().st_mode
    except OSError as e:
        raise InputError(f"{what} {str(path)!r} cannot be read: {e.strerror}", path=path) from None
    if stat.S_ISLNK(mode):
        raise InputError(
            f"{what} {str(path)!r} is a symlink; an importer reads only regular files", path=path
        )
    if not stat.S_ISREG(mode):
        raise InputError(f"{what} {str(path)!r} is not a regular file", path=path)


def read_regular(path: Path, limit: int, *, what: str) -> bytes:
    """The bytes of the regular file `path`, at most `limit` of them; else an InputError."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as e:  # ELOOP: the name is a symlink
        why = "is a symlink" if e.errno == errno.ELOOP else f"cannot be read: {e.strerror}"
        raise InputError(f"{what} {str(path)!r} {why}", path=path) from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
        os.close(fd)
        why = (
            "is not a regular file"
            if not stat.S_ISREG(info.st_mode)
            else (f"is {info.st_size} bytes; the limit is {limit}")
        )
        raise InputError(f"{what} {str(path)!r} {why}", path=path)
    os.set_blocking(fd, True)
    with os.fdopen(fd, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:  # grew since fstat
        raise InputError(f"{what} {str(path)!r} is over the limit of {limit} bytes", path=path)
    return data

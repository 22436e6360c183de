"""The local store of what remote loads and pulls fetched (docs/distribution.md, "The
store"): `cache_root()/remote/<manifest sha256>/`, the directory a remote bundle is opened
from, which holds the bytes fetched for it (its tensor files sparse), and
`cache_root()/located/<hex>`, a record of where bytes of that sha256 lie: a file (a remote
bundle's in `remote/`, or one a pull wrote) and the offset in it. Each fetched file and chunk is
stored once, in the file it was fetched for: a record is a path and an offset, never a copy
(nor a link: a bundle's file may have only its own name, SPEC.md 'Reader safety'). It is a
cache, with the caches' trust rules (SPEC.md section 8, "Caches"): private to this user, and
nothing read through a record is used before it is hashed again against the digest asked for,
read from this user's regular file, not through a symlink, of at least that many bytes. A second
version of a model that shares files or chunks with the first fetches only what is new."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from . import _cache

VIEWS = "remote"
LOCATED = "located"
_MAX_RECORD = 4096
_MAX_OFFSET_DIGITS = 20
_HEX = frozenset("0123456789abcdef")
_PIECE = 1 << 20
# A temporary (`.partial-*`) not written for this long is a killed process's: a running load
# writes to its own within a read's timeout (seconds), then renames it.
_STALE_S = 86400


def _is_digest(name: str) -> bool:
    return len(name) == 64 and set(name) <= _HEX


class Store:
    """Where fetched bytes lie, or nothing (`HLOBUNDLE_NO_CACHE`, or a cache that is not
    private): then `get` finds nothing and `remember` keeps nothing."""

    def __init__(self) -> None:
        self.located = _cache.directory(LOCATED)

    def get(self, digest: str, size: int) -> bytes | None:
        """The `size` bytes of sha256 `digest`, read where a record says they lie and hashed
        again now; None when there is no record, or the bytes there are not those."""
        found = self._open(digest, size)
        if found is None:
            return None
        fd, offset = found
        try:
            data = os.pread(fd, size, offset) if size else b""
        except OSError:
            return None
        finally:
            os.close(fd)
        if len(data) != size or hashlib.sha256(data).hexdigest() != digest:
            return None
        return data

    def pieces(self, digest: str, size: int) -> Iterator[bytes] | None:
        """The `size` bytes of sha256 `digest`, where a record says they lie, in pieces (the
        caller hashes them again); None when there is no record, or no file of this user's
        that holds that many bytes there."""
        found = self._open(digest, size)
        if found is None:
            return None
        fd, offset = found

        def read() -> Iterator[bytes]:  # ends early where the file cannot be read (EIO)
            with os.fdopen(fd, "rb") as f, contextlib.suppress(OSError):
                f.seek(offset)
                left = size
                while left > 0 and (piece := f.read(min(_PIECE, left))):
                    left -= len(piece)
                    yield piece

        return read()

    def remember(self, digest: str, where: Path, offset: int = 0) -> None:
        """Remember that the file `where` holds the bytes of sha256 `digest` (which the caller
        checked) from `offset` on: a later `get` or `pieces` reads them from there. Best
        effort."""
        if self.located is None or not _is_digest(digest):
            return
        text = b"%d\n" % offset + os.fsencode(where.resolve())
        if len(text) <= _MAX_RECORD:
            _keep(self.located / digest, lambda f: f.write(text), 0o600)

    def _open(self, digest: str, size: int) -> tuple[int, int] | None:
        """The file a record names for `digest`, opened (the caller closes it), and the offset
        of the bytes in it; None when there is no record, or the file is not this user's
        regular file of at least `offset + size` bytes (reached through no symlink at its
        last step)."""
        if self.located is None or not _is_digest(digest):
            return None
        record = _read_record(self.located / digest)
        if record is None:
            return None
        where, offset = record
        fd = _cache.open_own_file(where, lambda got: got >= offset + size)
        return None if fd is None else (fd, offset)


def _keep(path: Path, write: Callable[[IO[bytes]], object], mode: int) -> None:
    """`path` written whole by `write` or not at all (a temporary beside it, renamed over it),
    of `mode`. Best effort: a failure keeps nothing, and removes only the temporary."""
    temporary = None
    try:
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".partial-", delete=False) as f:
            temporary = f.name
            write(f)
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except OSError:
        if temporary is not None:  # ours: made just now
            Path(temporary).unlink(missing_ok=True)


def view_directory(manifest_sha256: str) -> Path | None:
    """The private directory a remote bundle of this manifest is opened from (None: caching
    is off, and the caller opens it from a temporary one)."""
    views = _cache.directory(VIEWS)
    if views is None:
        return None
    path = views / manifest_sha256
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            return None
    return path


# ---- `hlobundle cache ls` and `cache prune`


@dataclass(frozen=True)
class Usage:
    """What the cache directory holds: the store's remote bundles and their bytes, its records
    of where fetched bytes lie, and each cache's entries and bytes (`caches`: {name:
    {"entries": N, "bytes": N}})."""

    views: int
    view_bytes: int
    located: int
    caches: dict[str, dict[str, int]]


def _read_record(record: Path) -> tuple[Path, int] | None:
    """The path and offset a `located/` record names: when it is this user's regular file of
    at most _MAX_RECORD bytes (not a FIFO, not through a symlink), an offset in decimal, a
    newline, and a path without NUL; else None."""
    fd = _cache.open_own_file(record, lambda got: 0 < got <= _MAX_RECORD)
    if fd is None:
        return None
    try:
        data = os.pread(fd, _MAX_RECORD, 0)
    except OSError:
        return None
    finally:
        os.close(fd)
    offset, newline, path = data.partition(b"\n")
    digits = 0 < len(offset) <= _MAX_OFFSET_DIGITS and offset.isdigit()
    if not newline or not digits or not path or b"\0" in path:
        return None
    return Path(os.fsdecode(path)), int(offset)


def _entries(name: str) -> list[tuple[Path, os.stat_result]]:
    """The entries named by a sha256 in the store's directory `name` (under the cache root)
    that are this user's, each with its own lstat: none when that directory is missing (none
    is made here) or is not a private one of this user's (`_cache.directory`'s rules: no
    symlink, no other owner, no one else may write), or cannot be read. Only names the store
    writes."""
    base = _cache.directory(name, create=False)
    if base is None:
        return []
    return [(path, st) for path, st in _cache.own_names(base) if _is_digest(path.name)]


def _views() -> list[tuple[Path, os.stat_result]]:
    return [(p, st) for p, st in _entries(VIEWS) if stat.S_ISDIR(st.st_mode)]


def _records() -> list[tuple[Path, os.stat_result]]:
    return [(p, st) for p, st in _entries(LOCATED) if stat.S_ISREG(st.st_mode)]


def usage() -> Usage:
    """What the store holds (its remote bundles' directories and their bytes, as allocated:
    their tensor files hold only the chunks fetched; its records) and what each cache holds."""
    views = _views()
    caches = {}
    for name in _cache.CACHES:
        found = _cache.entries(name)
        caches[name] = {"entries": len(found), "bytes": sum(e.size for e in found)}
    return Usage(len(views), sum(_allocated(p) for p, _ in views), len(_records()), caches)


def _allocated(directory: Path) -> int:
    """The bytes allocated to the regular files under `directory`, no symlink followed."""
    total = 0
    for top, _, files in os.walk(directory):
        for name in files:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(top, name))
                if stat.S_ISREG(st.st_mode):
                    total += st.st_blocks * 512
    return total


def prune(max_bytes: int) -> Usage:
    """Remove what was used longest ago first (remote bundles' directories and the caches'
    entries alike) until the store and the caches hold at most `max_bytes`, then the records
    of bytes whose file is gone (all of them, with `max_bytes` 0), and the temporaries killed
    loads left. Only names the store and the caches' writers make, in their own private
    directories, are touched, never a pulled file. What is left."""
    candidates: list[tuple[float, int, Callable[[], None]]] = [
        (st.st_atime, _allocated(view), functools.partial(shutil.rmtree, view, ignore_errors=True))
        for view, st in _views()
    ]
    for name in _cache.CACHES:
        candidates += [
            (e.used, e.size, functools.partial(_cache.remove, e)) for e in _cache.entries(name)
        ]
    total = sum(size for _, size, _ in candidates)
    for _, size, remove in sorted(candidates, key=lambda c: c[0]):
        if total <= max_bytes:
            break
        remove()
        total -= size
    for record, _ in _records():
        if max_bytes == 0 or not _still_there(record):
            record.unlink(missing_ok=True)  # where a pull put a file: the file stays
    for temporary in _left_by_the_killed():
        temporary.unlink(missing_ok=True)
    return usage()


def _left_by_the_killed() -> list[Path]:
    """The temporaries a killed load left in the store's directories (its fetched files',
    its records'): `.partial-*`, this user's regular files, not written for _STALE_S."""
    now, found = time.time(), []
    for name in (VIEWS, LOCATED):
        base = _cache.directory(name, create=False)
        if base is None:
            continue
        found += [
            path
            for path, st in _cache.own_names(base)
            if path.name.startswith(".partial-")
            and stat.S_ISREG(st.st_mode)
            and now - st.st_mtime > _STALE_S
        ]
    return found


def _still_there(record: Path) -> bool:
    found = _read_record(record)
    return found is not None and found[0].is_file()

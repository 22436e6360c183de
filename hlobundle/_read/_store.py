"""The local store of what remote loads and pulls fetched (docs/distribution.md, "The
store"): `cache_root()/blobs/sha256/<hex>`, one file per fetched file or chunk, named by its
sha256, and `cache_root()/remote/<manifest sha256>/`, the directory a remote bundle is opened
from. It is a cache, with the caches' trust rules (SPEC.md section 8, "Caches"): private to
this user, and nothing read from it is used before it is hashed again against the digest asked
for. A second version of a model that shares files or chunks with the first fetches only what
is new. A pulled bundle's files are not copied (they would be on the disk twice) nor linked (a
bundle's file may have only its own name, SPEC.md 'Reader safety'): `pulled/<hex>` remembers
where a file of that sha256 was pulled to, and a later pull reads it from there, hashed again,
when it is still this user's regular file of that size."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from . import _cache

BLOBS = "blobs"
VIEWS = "remote"
PULLED = "pulled"
_MAX_POINTER = 4096
_HEX = frozenset("0123456789abcdef")
_PIECE = 1 << 20


def _is_digest(name: str) -> bool:
    return len(name) == 64 and set(name) <= _HEX


class Store:
    """The blob store, or none (`HLOBUNDLE_NO_CACHE`, or a cache that is not private): then
    `get` finds nothing and `put` keeps nothing."""

    def __init__(self) -> None:
        blobs = _cache.directory(BLOBS)
        self.blobs: Path | None = None
        self.pulled: Path | None = None
        if blobs is not None:
            self.blobs = blobs / "sha256"
            self.blobs.mkdir(mode=0o700, exist_ok=True)
            self.pulled = _cache.directory(PULLED)

    def get(self, digest: str, size: int) -> bytes | None:
        """The stored bytes of sha256 `digest`, hashed again now; None when absent or wrong."""
        path = self._path(digest)
        if path is None:
            return None
        data = _read_own(path, size)
        if data is None or hashlib.sha256(data).hexdigest() != digest:
            return None
        return data

    def put(self, digest: str, data: bytes) -> None:
        """Keep `data` (whose sha256, `digest`, the caller checked). Best effort."""
        path = self._path(digest)
        if path is not None and not path.exists():
            _keep(path, lambda f: f.write(data), 0o400)

    def pieces(self, digest: str, size: int) -> Iterator[bytes] | None:
        """The stored bytes of sha256 `digest` (a blob, or a file a pull remembered), in
        pieces, at most `size` + 1 of them (the caller hashes them again); None when absent or
        not this user's regular file of that size."""
        path = self._path(digest)
        fd = None if path is None else _open_own(path, size)
        if fd is None:
            pulled = self._pulled_to(digest)
            fd = None if pulled is None else _open_own(pulled, size)
        if fd is None:
            return None

        def read() -> Iterator[bytes]:
            with os.fdopen(fd, "rb") as f:
                left = size + 1
                while left > 0 and (piece := f.read(min(_PIECE, left))):
                    left -= len(piece)
                    yield piece

        return read()

    def put_file(self, digest: str, source: Path) -> None:
        """Keep a copy of the file `source` (whose sha256, `digest`, the caller checked). Best
        effort."""
        path = self._path(digest)
        if path is None or path.exists():
            return

        def copy(f: IO[bytes]) -> None:
            with open(source, "rb") as original:
                shutil.copyfileobj(original, f, _PIECE)

        _keep(path, copy, 0o400)

    def remember(self, digest: str, pulled: Path) -> None:
        """Remember that the file `pulled` (whose sha256, `digest`, the caller checked) holds
        those bytes: a later `pieces(digest)` reads them from there. Best effort."""
        if self.pulled is None or not _is_digest(digest):
            return
        text = os.fsencode(pulled.resolve())
        if len(text) <= _MAX_POINTER:
            _keep(self.pulled / digest, lambda f: f.write(text), 0o600)

    def _pulled_to(self, digest: str) -> Path | None:
        if self.pulled is None or not _is_digest(digest):
            return None
        return _read_pointer(self.pulled / digest)

    def _path(self, digest: str) -> Path | None:
        if self.blobs is None or not _is_digest(digest):
            return None
        return self.blobs / digest


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


def _read_own(path: Path, size: int) -> bytes | None:
    """A regular file of this user's, of `size` bytes, not through a symlink; else None."""
    fd = _open_own(path, size)
    if fd is None:
        return None
    try:
        return os.pread(fd, size + 1, 0) if size else b""
    except OSError:
        return None
    finally:
        os.close(fd)


def _open_own(path: Path, size: int) -> int | None:
    """`path` opened, when it is a regular file of this user's, of `size` bytes, not reached
    through a symlink; else None."""
    return _cache.open_own_file(path, lambda got: got == size)


# ---- `hlobundle cache ls` and `cache prune`


@dataclass(frozen=True)
class Usage:
    """What the cache directory holds: the store's blobs and remote bundles, and each cache's
    entries and bytes (`caches`: {name: {"entries": N, "bytes": N}})."""

    blobs: int
    blob_bytes: int
    views: int
    view_bytes: int
    caches: dict[str, dict[str, int]]


def _read_pointer(pointer: Path) -> Path | None:
    """The path a `pulled/` pointer names: its bytes, when it is this user's regular file of
    at most _MAX_POINTER bytes (not a FIFO, not through a symlink) naming a path without NUL."""
    fd = _cache.open_own_file(pointer, lambda got: 0 < got <= _MAX_POINTER)
    if fd is None:
        return None
    try:
        data = os.pread(fd, _MAX_POINTER, 0)
    except OSError:
        return None
    finally:
        os.close(fd)
    return None if b"\0" in data else Path(os.fsdecode(data))


def _entries(*names: str) -> list[tuple[Path, os.stat_result]]:
    """The entries named by a sha256 in the store's directory `names` (under the cache root) that
    are this user's, each with its own lstat: none when that directory, or one between it and
    the root, is missing (none is made here) or is not a private one of this user's
    (`_cache.directory`'s rules: no symlink, no other owner, no one else may write), or cannot
    be read. Only names the store writes."""
    base = _cache.directory(names[0], create=False)
    if base is None:
        return []
    for name in names[1:]:
        base = base / name
        if not _cache.is_private(base):
            return []
    return [(path, st) for path, st in _cache.own_names(base) if _is_digest(path.name)]


def _blobs() -> list[tuple[Path, os.stat_result]]:
    return [(p, st) for p, st in _entries(BLOBS, "sha256") if stat.S_ISREG(st.st_mode)]


def _views() -> list[tuple[Path, os.stat_result]]:
    return [(p, st) for p, st in _entries(VIEWS) if stat.S_ISDIR(st.st_mode)]


def usage() -> Usage:
    """What the store holds (its blobs and remote bundles' directories, and their bytes: a
    directory's bytes as allocated, its tensor files holding only the chunks fetched) and what
    each cache holds."""
    blobs, views = _blobs(), _views()
    caches = {}
    for name in _cache.CACHES:
        found = _cache.entries(name)
        caches[name] = {"entries": len(found), "bytes": sum(e.size for e in found)}
    return Usage(
        len(blobs),
        sum(st.st_size for _, st in blobs),
        len(views),
        sum(_allocated(p) for p, _ in views),
        caches,
    )


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
    """Remove what was used longest ago first (remote bundles' directories, blobs, the caches'
    entries alike) until the store and the caches hold at most `max_bytes`, then what the store
    remembers of pulled files that are gone (all of it, with `max_bytes` 0). Only names the
    store and the caches' writers make, in their own private directories, are touched, never a
    pulled file. What is left."""
    candidates: list[tuple[float, int, Callable[[], None]]] = [
        (st.st_atime, _allocated(view), functools.partial(shutil.rmtree, view, ignore_errors=True))
        for view, st in _views()
    ]
    candidates += [
        (st.st_atime, st.st_size, functools.partial(blob.unlink, missing_ok=True))
        for blob, st in _blobs()
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
    for pointer, st in _entries(PULLED):
        if stat.S_ISREG(st.st_mode) and (max_bytes == 0 or not _still_there(pointer)):
            pointer.unlink(missing_ok=True)  # where a pull put a file: the file stays
    return usage()


def _still_there(pointer: Path) -> bool:
    pulled = _read_pointer(pointer)
    return pulled is not None and pulled.is_file()

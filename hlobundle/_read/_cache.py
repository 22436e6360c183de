"""The persistent caches (SPEC.md section 8, "Caches"): compiled programs, and the verdicts of
module checks (`_checks`). Trusted input, so kept where only this user can write, and (those
whose entries we read ourselves) bound to what they were made from.

- `directory(name)`: `cache_root()/name`, used only when the root and it are real directories
  (not symlinks) owned by this user and writable by no one else; missing ones are created 0700.
  Otherwise a warning, and no caching. `HLOBUNDLE_NO_CACHE` turns every cache off: nothing is
  read, created or written.
- `read(directory, key)` / `write(directory, key, data)`: an entry is named
  `<key>.<sha256 of key and bytes><suffix>`, where `key` names what it was made from (for IREE
  the source, flags, compiler and CPU), in the subdirectory named by the first two hex digits
  of the key's sha256 (`entry_path`): a lookup lists one of 256 shards, so that a cache of
  thousands of verdicts costs a load no more than an empty one (in one directory, 11,400
  entries made the LeNet's load 21 ms instead of 1.3 ms).
  It is read as a regular file of ours (no symlink followed), and used only when its bytes give
  its name's digest: a copied, renamed, truncated or replaced entry is ignored (and the module
  compiled again), never run. Nothing here deletes an entry it finds wrong.
- `entries(name)` / `remove(entry)`: what `hlobundle cache ls` counts and `cache prune` removes
  in each of `CACHES`: only files named as `write` (or, in `jax/`, JAX's own cache) names
  them, regular files of this user's, in private directories, no symlink followed.

JAX's persistent cache is read by XLA itself, which checks nothing: it is enabled only in such a
private directory, and trusted as this user's own files are.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import stat
import tempfile
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from .._format._errors import HloBundleWarning
from .._format._limits import MAX_EXECUTABLE_BYTES

SUFFIX = ".vmfb"
_DIGEST_LENGTH = 64
# The caches' subdirectories of `cache_root()` (the store's are `_store`'s): `hlobundle cache`
# lists and prunes these.
CHECKS, IREE, JAX, HEADERS = "checks", "iree", "jax", "safetensors-headers"
DIGESTS = "file-digests"  # a chunked file's sha256, hashed whole once (`_file_digests`)
CACHES = (CHECKS, IREE, JAX, HEADERS, DIGESTS)
_ENTRY = re.compile(r"([0-9a-f]{64})\.[0-9a-f]{64}\.[a-z]{2,4}")  # what `entry_name` makes
# what JAX's cache writes: `<module name>-<sha256>-cache`, and `-atime` beside it
_JAX_ENTRY = re.compile(r"([\w.-]{1,256}-[0-9a-f]{64})-(cache|atime)")  # \w as JAX's
_MAX_CANDIDATES = 8  # entries looked at for one key (there is one, unless planted)


def cache_root() -> Path:
    """Where compiled programs are kept between processes: `$HLOBUNDLE_CACHE_DIR`, else
    `$XDG_CACHE_HOME/hlobundle` (`~/.cache/hlobundle`). JAX's cache is its `jax/`, IREE's its
    `iree/`."""
    home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return Path(os.environ.get("HLOBUNDLE_CACHE_DIR") or home / "hlobundle")


def disabled() -> bool:
    """`HLOBUNDLE_NO_CACHE` (any value but empty; what `--no-cache` sets): no cache is used."""
    return bool(os.environ.get("HLOBUNDLE_NO_CACHE"))


@contextlib.contextmanager
def turned_off(off: bool = True) -> Iterator[None]:
    """Within it, when `off`, no cache is read or written (`HLOBUNDLE_NO_CACHE=1`, restored after)."""
    before = os.environ.get("HLOBUNDLE_NO_CACHE")
    if off:
        os.environ["HLOBUNDLE_NO_CACHE"] = "1"
    try:
        yield
    finally:
        if off and before is None:
            del os.environ["HLOBUNDLE_NO_CACHE"]
        elif off and before is not None:
            os.environ["HLOBUNDLE_NO_CACHE"] = before


def directory(name: str, *, create: bool = True) -> Path | None:
    """The private cache directory `cache_root()/name`, created 0700 where missing (with
    `create`; else None where it is missing); None when caching is off, or (with a
    `HloBundleWarning`) when it is not private."""
    if disabled():
        return None
    root = cache_root()
    try:
        why = _unsafe_above(str(root))
        if why is not None:
            raise _NotPrivate(why)
        for path in (root, root / name):
            why = _not_private(path, create=create)
            if why is not None:
                raise _NotPrivate(f"{path} {why}")
    except (_NotPrivate, OSError) as e:
        if isinstance(e, FileNotFoundError) and not create:
            return None  # not made yet
        warnings.warn(
            f"not using the cache: {e}. A cache is trusted input: it must be a "
            "directory of this user's that no one else can write (SPEC.md section 8, "
            "'Caches'); set HLOBUNDLE_CACHE_DIR to one, or HLOBUNDLE_NO_CACHE=1",
            HloBundleWarning,
            stacklevel=3,
        )
        return None
    return root / name


class _NotPrivate(Exception):
    pass


@functools.lru_cache(maxsize=8)
def _unsafe_above(root: str) -> str | None:
    """Why a directory above the cache root would let someone else swap the root, or what is
    below it, between our checks and our use (a rename needs write access to the directory
    above): one owned by another user than this one or root, or one that group or others may
    write without the sticky bit (which keeps them from renaming what is not theirs). Checked
    along the path as given (each symlink on it, too, must be ours or root's) and along the
    path it resolves to. None when there is none; a missing one is made by this user.
    Once per process and root (a load asks six times; 57 us each): the directories above a
    cache are a system's and a home's, whose owners and modes do not change under a running
    process but by an administrator's hand; the root and its subdirectory are checked at each
    use."""
    if not hasattr(os, "geteuid"):
        return None
    absolute = Path(os.path.abspath(root))
    for above in dict.fromkeys([*absolute.parents, *Path(os.path.realpath(root)).parents]):
        try:
            followed, itself = os.stat(above), os.lstat(above)
        except FileNotFoundError:
            continue
        for st in (followed, itself):
            if st.st_uid not in (0, os.geteuid()):
                return f"{above}, above the cache, is owned by uid {st.st_uid}"
        mode = followed.st_mode
        if mode & (stat.S_IWGRP | stat.S_IWOTH) and not mode & stat.S_ISVTX:
            return (
                f"{above}, above the cache, is writable by group or others without the sticky "
                f"bit (mode {stat.S_IMODE(mode):o})"
            )
    return None


def _not_private(path: Path, *, create: bool = True) -> str | None:
    """Why `path` cannot hold a cache (creating it 0700 when missing, with `create`); None when
    it can."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if not create:
            raise
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:  # made by another process meanwhile: checked below as it is
            pass
        st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        return "is a symlink"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
        return f"is owned by uid {st.st_uid}, not by this user (uid {os.geteuid()})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def is_private(path: Path) -> bool:
    """Whether `path` is a directory of this user's that no one else may write, not a symlink
    (`_not_private`'s rules; nothing is made)."""
    try:
        return _not_private(path, create=False) is None
    except OSError:
        return False


def entry_name(key: str, data: bytes, suffix: str = SUFFIX) -> str:
    """The file name of the entry for `key` holding `data`: bound to both."""
    digest = hashlib.sha256(key.encode() + b"\n" + data).hexdigest()
    return f"{key}.{digest}{suffix}"


def shard(where: Path, key: str) -> Path:
    """The subdirectory of `where` that holds `key`'s entries."""
    return where / hashlib.sha256(key.encode()).hexdigest()[:2]


def _is_key(key: str) -> bool:
    """Every key is a sha256 in hex (of what the entry was made from): anything else, never
    made here, names no entry and is written nowhere."""
    return len(key) == _DIGEST_LENGTH and all(c in "0123456789abcdef" for c in key)


def entry_path(where: Path, key: str, data: bytes, suffix: str = SUFFIX) -> Path:
    """Where the entry for `key` holding `data` is kept."""
    return shard(where, key) / entry_name(key, data, suffix)


def read(where: Path, key: str, suffix: str = SUFFIX) -> bytes | None:
    """The bytes of an entry for `key` that we wrote, checked; None when there is none (or
    its shard is not a private directory of ours)."""
    if not _is_key(key):
        return None
    folder = shard(where, key)
    try:
        if _not_private(folder, create=False) is not None:
            return None
        names = sorted(n for n in os.listdir(folder) if _is_entry_name(n, key, suffix))
    except OSError:
        return None
    for name in names[:_MAX_CANDIDATES]:
        data = _read_regular_file(folder / name)
        if data is not None and entry_name(key, data, suffix) == name:
            return data
    return None


def _is_entry_name(name: str, key: str, suffix: str) -> bool:
    digest = name[len(key) + 1 : -len(suffix)]
    return name.startswith(f"{key}.") and name.endswith(suffix) and len(digest) == _DIGEST_LENGTH


def open_own_file(path: Path, fits: Callable[[int], bool]) -> int | None:
    """`path` opened read-only, when it is a regular file owned by this user, not reached
    through a symlink, whose size `fits`; None otherwise. Nothing else is opened: opening a
    terminal, a FIFO or a device acts (a terminal becomes a session's own, a FIFO's writer is let
    through, a watchdog arms); one put in the file's place since its lstat is opened
    non-blocking, and refused. The caller closes the descriptor."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        seen = os.lstat(path)
        if not stat.S_ISREG(seen.st_mode):
            return None
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and _mine(st) and fits(st.st_size):
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def _read_regular_file(path: Path) -> bytes | None:
    """A regular file's bytes, owned by this user, not reached through a symlink, within the
    executable limit; None otherwise."""
    fd = open_own_file(path, lambda size: size <= MAX_EXECUTABLE_BYTES)
    if fd is None:
        return None
    try:
        with os.fdopen(os.dup(fd), "rb") as f:
            # its size and one byte more: a read of the limit allocates the limit (256 MiB)
            size = os.fstat(f.fileno()).st_size
            data = f.read(min(size, MAX_EXECUTABLE_BYTES) + 1)
        return data if len(data) <= MAX_EXECUTABLE_BYTES else None
    except OSError:
        return None
    finally:
        os.close(fd)


def write(where: Path, key: str, data: bytes, suffix: str = SUFFIX) -> None:
    """Store an entry for `key` (best effort: a cache that cannot be written is not an error).
    Written to a new private file, then renamed into place."""
    if not _is_key(key):
        return
    temporary = None
    folder = shard(where, key)
    try:
        with contextlib.suppress(FileExistsError):  # `where` itself is never made here
            os.mkdir(folder, 0o700)
        if _not_private(folder, create=False) is not None:
            return
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".partial-", delete=False) as f:
            temporary = f.name
            f.write(data)
        os.replace(temporary, folder / entry_name(key, data, suffix))
    except OSError:
        if temporary is not None:  # ours: made just now
            Path(temporary).unlink(missing_ok=True)


# ---- what `hlobundle cache ls` lists and `cache prune` removes


@dataclass(frozen=True)
class Entry:
    """One cached thing: its files (one for an entry `write` made; a value and its access time
    for JAX's), their bytes, and when it was last used (the latest access or change)."""

    files: tuple[Path, ...]
    size: int
    used: float


def entries(name: str) -> list[Entry]:
    """The entries of the cache `name` (one of `CACHES`): only files named as their writer names
    them (`write`, in the shard its key names; or JAX's cache in `jax/`), regular files of this
    user's, in directories that are private and not symlinks (`directory`'s rules). Nothing
    when caching is off, or the cache is missing (it is not made) or not private."""
    where = directory(name, create=False)
    if where is None:
        return []
    if name == JAX:
        return _jax_entries(where)
    found = []
    for folder in _shards(where):
        for path, st in _own_files(folder):
            match = _ENTRY.fullmatch(path.name)
            if match and shard(where, match.group(1)) == folder:
                found.append(Entry((path,), st.st_size, max(st.st_atime, st.st_mtime)))
    return found


def _jax_entries(where: Path) -> list[Entry]:
    """JAX's entries: `<key>-cache` with its `<key>-atime`, which JAX rewrites at each use."""
    pairs: dict[str, list[tuple[Path, os.stat_result]]] = {}
    for path, st in _own_files(where):
        match = _JAX_ENTRY.fullmatch(path.name)
        if match:
            pairs.setdefault(match.group(1), []).append((path, st))
    return [
        Entry(
            tuple(p for p, _ in files),
            sum(st.st_size for _, st in files),
            max(max(st.st_atime, st.st_mtime) for _, st in files),
        )
        for files in pairs.values()
    ]


def _names(where: Path) -> list[str]:
    try:
        return os.listdir(where)
    except OSError:
        return []


def _shards(where: Path) -> Iterator[Path]:
    """The shard folders in `where` (two hex digits) that are private (`_not_private`)."""
    for name in _names(where):
        hexadecimal = len(name) == 2 and all(c in "0123456789abcdef" for c in name)
        if hexadecimal and is_private(where / name):
            yield where / name


def own_names(where: Path) -> Iterator[tuple[Path, os.stat_result]]:
    """What is directly in `where` and this user's, each with its lstat (no symlink is
    followed); nothing when `where` cannot be listed."""
    for name in _names(where):
        try:
            st = os.lstat(where / name)
        except OSError:  # gone meanwhile (another prune)
            continue
        if _mine(st):
            yield where / name, st


def _own_files(where: Path) -> Iterator[tuple[Path, os.stat_result]]:
    """This user's regular files directly in `where` that have no other name (what the caches
    write has one)."""
    for path, st in own_names(where):
        if stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
            yield path, st


def _mine(st: os.stat_result) -> bool:
    return not hasattr(os, "geteuid") or st.st_uid == os.geteuid()


def remove(entry: Entry) -> None:
    """Remove an entry's files (already gone is fine)."""
    for path in entry.files:
        with contextlib.suppress(OSError):
            path.unlink()

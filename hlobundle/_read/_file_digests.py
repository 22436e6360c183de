"""A chunked file's sha256, recalled from its chunk digests (SPEC.md 8, "Caches").

A file's sha256 runs on one core; its chunk digests (format 2.1) run on all of them. Once a
reader has hashed a file whole and found both its sha256 and every chunk digest as listed, it
records that these chunk digests (with the file's size and chunk size) go with that sha256.
Later, bytes that give exactly those chunk digests are, by sha256's collision resistance, the
same bytes, so their sha256 is the recorded one: a reader that recalls the verdict checks the
chunks alone, on every core, and counts the sha256 as computed (a signature then covers it as
before). Any other sha256, size, chunk size or digest is another key: a miss, hashed whole.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from . import _cache

if TYPE_CHECKING:
    from .._format._manifest import FileEntry

_SUFFIX = ".ok"
_CONSISTENT = b"sha256 and chunk digests of the same bytes"


def recalled(listed: FileEntry) -> bool:
    """Whether bytes with exactly `listed`'s chunk digests were hashed whole to its sha256."""
    where = _cache.directory(_cache.DIGESTS, create=False)
    return where is not None and _cache.read(where, _key(listed), _SUFFIX) == _CONSISTENT


def record(listed: FileEntry) -> None:
    """Remember that `listed`'s sha256 and chunk digests were both computed from one file's
    bytes, and matched (call it only then)."""
    where = _cache.directory(_cache.DIGESTS)
    if where is not None:
        _cache.write(where, _key(listed), _CONSISTENT, _SUFFIX)


def _key(listed: FileEntry) -> str:
    if listed.chunks is None:
        raise ValueError("_file_digests: a file without chunk digests has no verdict")
    parts = [str(listed.size), str(listed.chunks.size), listed.sha256, *listed.chunks.sha256]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()

"""A small file read whole, up to a limit: a manifest's bytes (`_format/_fields.py`'s
`MAX_MANIFEST_BYTES`), without allocating the limit for a small file."""

from __future__ import annotations

import os
from pathlib import Path


def read_at_most(file: Path, limit: int) -> bytes:
    """`file`'s bytes, at most one more than `limit` (so that the caller, `parse_manifest`, can
    say how large it is), without allocating the limit for a small file."""
    with open(file, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        return f.read(min(size, limit) + 1)

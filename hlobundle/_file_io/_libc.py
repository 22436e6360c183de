"""C library calls Python's `os` lacks (Linux's `renameat2`, `sync_file_range`), through ctypes."""

from __future__ import annotations

import ctypes
from functools import cache
from typing import Any


@cache
def function(name: str, *argtypes: Any) -> Any:
    """libc's `name`, taking `argtypes` and setting `errno` (read with `ctypes.get_errno()`);
    None where there is none (not Linux, or a libc too old to have it)."""
    try:
        call = getattr(ctypes.CDLL(None, use_errno=True), name)
    except (OSError, AttributeError):
        return None
    call.argtypes = list(argtypes)
    return call

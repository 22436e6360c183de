"""The module text a pack takes: MLIR text given directly or read from a file (a binary file
gets a hint at what it probably is), stored without source locations.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .._format._errors import InputError
from .._parse import _mlir


def without_locations(text: str, *, path: str | None) -> str:
    """The text a bundle stores of any module form: without MLIR source locations, which name
    the producer's files (its home, project and site-packages; SPEC.md 8). Text that has none
    is stored as it is; parsed without a file name, it gives the portable artifact none either."""
    if "loc(" not in text:
        return text
    return str(_mlir.parse(text, path=path).operation.get_asm(enable_debug_info=False))


_MLIR_BYTECODE = b"ML\xefR"  # MLIR bytecode's magic number, never valid UTF-8


def _binary_hint(data: bytes) -> str:
    """What a binary file given as module text probably is, and what takes it."""
    if data.startswith(_MLIR_BYTECODE):
        return (
            "a .mlirbc portable artifact is what the bundle stores beside it, not what pack takes"
        )
    if _MLIR_BYTECODE in data[:_HINT_SCAN]:  # a flatbuffer around a portable artifact
        return (
            "this looks like a serialized jax.export.Exported: pack it with "
            "`pack --from-jax-export BLOB` (hlobundle.from_exported in Python)"
        )
    return (
        "a serialized jax.export.Exported takes `pack --from-jax-export BLOB`; a .mlirbc "
        "portable artifact is what the bundle stores, not what pack takes"
    )


_HINT_SCAN = 1 << 20


def read(module: Any) -> tuple[str, str | None]:
    """MLIR text and the file it came from (None for text given directly)."""
    if isinstance(module, os.PathLike) or (isinstance(module, str) and "{" not in module):
        path = Path(module)
        try:
            data = path.read_bytes()
        except OSError as e:
            raise InputError(
                f"cannot read the module {str(path)!r}: {e.strerror}", path=path
            ) from None
        try:
            return data.decode("utf-8"), str(path)
        except UnicodeDecodeError:
            raise InputError(
                f"the module {str(path)!r} is not UTF-8 text; give MLIR text ({_binary_hint(data)})",
                path=path,
            ) from None
    if not isinstance(module, str):
        raise InputError(f"module must be MLIR text or a path, got {type(module).__name__}")
    return module, None

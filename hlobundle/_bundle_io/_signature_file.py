"""A bundle's signature file read (SPEC.md, "Signature"): its bytes, size-limited and not
through a symlink, and whether there is one. What the file is: `_format/_signature.py`."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .._format._errors import LimitError, SignatureInvalidError
from .._format._signature import MAX_SIGNATURE_BYTES, SIGNATURE_NAME


def read(root: Path) -> bytes | None:
    """The signature's bytes (size-limited, not through a symlink), or None when there is none."""
    path = root / SIGNATURE_NAME
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return None
    except OSError as e:  # a symlink (ELOOP), a directory, no permission
        raise SignatureInvalidError(
            f"{SIGNATURE_NAME} cannot be read: {e}", path=SIGNATURE_NAME
        ) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise SignatureInvalidError(f"{SIGNATURE_NAME} is not a file", path=SIGNATURE_NAME)
    with os.fdopen(fd, "rb") as f:
        data = f.read(MAX_SIGNATURE_BYTES + 1)
    if len(data) > MAX_SIGNATURE_BYTES:
        raise LimitError(
            f"{SIGNATURE_NAME} is over {MAX_SIGNATURE_BYTES} bytes (SPEC.md, 'Signature')",
            path=SIGNATURE_NAME,
        )
    return data


def present(root: Path) -> bool:
    return os.path.lexists(root / SIGNATURE_NAME)

"""Files and directories made durable before anyone sees them: a file written through a
temporary, fsynced and renamed into place (`write_file_atomically`), a tree built with
`mkdtemp`'s private modes given the usual ones (`set_modes`), and a tree fsynced, its
directories after their entries (`fsync_tree`)."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Collection
from pathlib import Path


def write_file_atomically(
    path: Path, data: bytes, mode: int = 0o644, *, scratch: Path | None = None
) -> None:
    """Write one file through a temporary in `scratch` (default: beside it; give another
    directory on the same file system when no stray file may appear beside it, as in a bundle),
    fsynced and renamed into place."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.partial-", dir=scratch or path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def set_modes(root: Path) -> None:
    """mkdtemp makes the directory private; give it and its files the usual umask modes. A path
    that has its mode already is left alone (a chmod would dirty an inode fsynced already)."""
    umask = os.umask(0)
    os.umask(umask)
    for path in [root, *root.rglob("*")]:
        st = path.lstat()
        mode = (0o777 if stat.S_ISDIR(st.st_mode) else 0o666) & ~umask
        if stat.S_IMODE(st.st_mode) != mode:
            os.chmod(path, mode)


def fsync_tree(root: Path, *, synced: Collection[Path] = ()) -> None:
    """fsync every file and directory under `root`, then `root`, but the files in `synced`."""
    for path in [*sorted(root.rglob("*"), key=lambda p: -len(p.parts)), root]:
        if path in synced:
            continue
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

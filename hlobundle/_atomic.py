"""Writing a bundle directory atomically (SPEC.md, "Packing").

The bundle is built in `.<name>.partial-<pid>-<random>` beside the target, fsynced, and renamed
into place: the output name never holds a half bundle. A killed writer's temporaries are removed
by the next write to the same name, once their process is gone.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from . import _tensors
from ._errors import OutputExistsError
from ._manifest import MANIFEST_NAME, FileEntry, Manifest


def sha256_file(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def write_bundle(
    out: Path,
    manifest: Manifest,
    files: dict[str, bytes],
    arrays: dict[str, dict[str, tuple[np.ndarray, Any]]],
    *,
    force: bool,
) -> Path:
    _check_target(out, force)
    out.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_partials(out)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-{os.getpid()}-", dir=out.parent))
    try:
        for name, data in files.items():
            (tmp / name).write_bytes(data)
        digests = {
            name: _tensors.write(tmp / name, tensors) for name, tensors in sorted(arrays.items())
        }
        _set_modes(tmp)
        table = {
            name: FileEntry(
                size=(tmp / name).stat().st_size,
                sha256=digests.get(name) or sha256_file(tmp / name),
            )
            for name in sorted([*files, *arrays])
        }
        final = Manifest.model_validate(manifest.model_copy(update={"files": table}).model_dump())
        (tmp / MANIFEST_NAME).write_bytes(final.to_json())
        _fsync_tree(tmp)
        _move_into_place(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _check_target(out: Path, force: bool) -> None:
    if not (out.exists() or out.is_symlink()):
        return
    if not force:
        raise OutputExistsError(
            f"{str(out)!r} already exists; pass --force (force=True) to replace it", path=out
        )
    if out.is_symlink() or not (out / MANIFEST_NAME).is_file():
        raise OutputExistsError(
            f"{str(out)!r} exists and is not a bundle; --force only replaces bundles", path=out
        )


def _move_into_place(tmp: Path, out: Path) -> None:
    if not out.exists():
        os.rename(tmp, out)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-{os.getpid()}-", dir=out.parent))
    os.rename(out, old / "bundle")
    os.rename(tmp, out)
    shutil.rmtree(old, ignore_errors=True)


def _remove_stale_partials(out: Path) -> None:
    """Delete temporaries left by killed packs of the same target (their process is gone)."""
    for prefix in (f".{out.name}.partial-", f".{out.name}.old-"):
        for leftover in out.parent.glob(prefix + "*"):
            pid = leftover.name[len(prefix) :].split("-", 1)[0]
            if pid.isdigit() and not _alive(int(pid)):
                shutil.rmtree(leftover, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _set_modes(root: Path) -> None:
    """mkdtemp makes the directory private; give it and its files the usual umask modes."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(root, 0o777 & ~umask)
    for path in root.iterdir():
        os.chmod(path, 0o666 & ~umask)


def _fsync_tree(root: Path) -> None:
    for path in [*root.iterdir(), root]:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

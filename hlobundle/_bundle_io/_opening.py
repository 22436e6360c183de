"""A bundle's files reached as the path rules of `_format/_paths.py` say (SPEC.md, "Reader
safety"): a listed file resolved inside the bundle without a symlink, opened without following
one put in its place since, and a bundle walked without following or reading anything but
regular files."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import NoReturn

from .._format._errors import FileMissingError, UnsafePathError
from .._format._paths import check_name


def open_no_follow(path: Path, name: str) -> int:
    """A read-only descriptor of `path`, the bundle's file `name`, not through a symlink put in
    its place since its name was checked: `PATH_UNSAFE` (ELOOP, no permission), or
    `FILE_MISSING` when it is gone."""
    try:
        return os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        raise FileMissingError(f"{name} is listed in the manifest but missing", path=name) from None
    except OSError as e:
        raise UnsafePathError(f"{name!r} cannot be opened: {e.strerror}", path=name) from None


def resolve(root: Path, name: str, *, field: str | None = None) -> Path:
    """The file `name` inside `root`; it must exist as a regular file reached without symlinks."""
    check_name(name, field=field)
    target = root.joinpath(*name.split("/"))
    current = root
    for part in name.split("/"):
        current = current / part
        if current.is_symlink():
            raise UnsafePathError(
                f"{name!r} is reached through a symlink ({current.name}); bundles may not "
                "contain symlinks (SPEC.md, 'Reader safety')",
                path=name,
                field=field,
            )
    return target


def walk(root: Path) -> list[str]:
    """Every file under `root` as a relative POSIX path; symlinks and special files are errors."""
    found = []

    def refuse(e: OSError) -> NoReturn:
        raise UnsafePathError(
            f"a path in the bundle cannot be read ({e.strerror}): {e.filename!s:.200}",
            path=str(e.filename),
        )

    for dirpath, dirnames, filenames in os.walk(root, onerror=refuse, followlinks=False):
        for entry in [*dirnames, *filenames]:
            full = Path(dirpath, entry)
            rel = full.relative_to(root).as_posix()
            try:
                mode = full.lstat().st_mode
            except OSError as e:
                refuse(e)
            if stat.S_ISLNK(mode):
                raise UnsafePathError(
                    f"{rel!r} is a symlink; bundles may not contain symlinks "
                    "(SPEC.md, 'Reader safety')",
                    path=rel,
                )
            if entry in filenames and not stat.S_ISREG(mode):
                raise UnsafePathError(f"{rel!r} is not a regular file", path=rel)
            if entry in filenames:
                found.append(rel)
    return sorted(found)

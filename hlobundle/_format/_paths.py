"""The path rules of SPEC.md ("Reader safety"): every file named by a manifest must be a
relative POSIX path without `..`, resolving to a regular file inside the bundle, never via a symlink.
And what a caller's bundle argument is: a remote reference rather than a path (`is_remote`)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import NoReturn

from ._errors import FileMissingError, UnsafePathError


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


def check_name(name: str, *, field: str | None = None) -> str:
    """Reject any file name a manifest may not use; return it unchanged when it is safe."""
    problem = _name_problem(name)
    if problem:
        raise UnsafePathError(
            f"file name {name!r} {problem} (SPEC.md, 'Reader safety')", path=name, field=field
        )
    return name


def check_tree(names: Iterable[str], reserved: Iterable[str] = ()) -> None:
    """Every name is safe, and none is inside another listed (or `reserved`) name: a file and
    a file inside it could not both be written into one directory (`PATH_UNSAFE`)."""
    names = list(names)
    for name in names:
        check_name(name, field=f"files[{name!r}]")
    taken = {*names, *reserved}
    for name in sorted(names):
        parts = name.split("/")
        for i in range(1, len(parts)):
            if "/".join(parts[:i]) in taken:
                raise UnsafePathError(
                    f"files lists {name!r}, inside {'/'.join(parts[:i])!r}, which is a file",
                    path=name,
                    field=f"files[{name!r}]",
                )


def _name_problem(name: str) -> str | None:
    if not name or "\x00" in name or "\\" in name:
        return "is empty or contains NUL or a backslash"
    pure = PurePosixPath(name)
    if pure.is_absolute() or (len(name) > 1 and name[1] == ":"):
        return "is absolute; paths must be relative to the bundle"
    if any(part in ("..", ".", "") for part in name.split("/")):  # "a//b", "a/" too
        return "contains '..', '.' or an empty component"
    return None


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


def check_single_link(st: os.stat_result, name: str) -> None:
    """A listed file must have one hard link: another name, maybe outside the bundle, could
    change its bytes in place after they were checked (SPEC.md, 'Reader safety')."""
    if st.st_nlink > 1:
        raise UnsafePathError(
            f"{name!r} has {st.st_nlink} hard links; a listed file may have only its name in "
            "the bundle (SPEC.md, 'Reader safety')",
            path=name,
        )


def is_remote(text: object) -> bool:
    """Whether `text` names a remote bundle (`oci://`, `https://`, `http://`), not a path."""
    return isinstance(text, str) and text.startswith(("oci://", "https://", "http://"))

"""The path rules of SPEC.md ("Reader safety"): every file named by a manifest must be a
relative POSIX path without `..`, resolving to a regular file inside the bundle, never via a symlink
(the files are reached by these rules in `_bundle_io/_opening.py`). And what a caller's bundle
argument is: a remote reference rather than a path (`is_remote`)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import PurePosixPath

from ._errors import UnsafePathError


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

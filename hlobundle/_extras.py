"""How a user installs an optional part of hlobundle (an extra of pyproject.toml): one form in
every message and guide (README.md, "Extras"), for a package from an index and for a clone."""

from __future__ import annotations


def pip_line(extras: str) -> str:
    """The pip line of `extras` (`"serve"`, `"serve,grpc"`): the published package's form, and
    in a clone of the repository, its own."""
    return f'pip install "hlobundle[{extras}]" (in a clone of hlobundle: pip install ".[{extras}]")'

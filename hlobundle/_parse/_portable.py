"""A module form's portable artifact, as the format defines it (SPEC.md 5 and 8): the MLIR
bytecode magic it starts with, and the StableHLO versions this jaxlib reads. Whether an artifact
holds the same program as its text is shown in `_artifacts.py`, which reads untrusted
artifacts in child processes.
"""

from __future__ import annotations

import shlex

from .._format._errors import VersionError
from . import _mlir

MAGIC = b"ML\xefR"


def check_target(target: str, *, what: str, bundle: str, path: str | None = None) -> None:
    """A StableHLO version this jaxlib reads, or a VersionError with the command that refreshes
    `bundle`'s artifacts for it (SPEC.md 5, "Versions")."""
    oldest, newest = _mlir.minimum_version(), _mlir.current_version()
    command = f"hlobundle refresh {shlex.quote(bundle)}"
    if _mlir.version_key(target) < _mlir.version_key(oldest):
        raise VersionError(
            f"{what} StableHLO {target}, older than this jaxlib reads (StableHLO {oldest} at "
            f"least). Write its artifacts again from the module texts it keeps: {command} "
            "(SPEC.md 5, 'Versions')",
            path=path,
        )
    if _mlir.version_key(target) > _mlir.version_key(newest):
        raise VersionError(
            f"{what} StableHLO {target}, newer than this jaxlib reads (StableHLO {newest} at "
            f"most). Write its artifacts again for this jaxlib from the module texts it keeps, "
            f"here or where it was made: {command} --target-version {newest}; or upgrade "
            "jaxlib (SPEC.md 5, 'Versions')",
            path=path,
        )


def check_text_version(target: str, why: str, *, text: str, path: str, bundle: str) -> None:
    """Where the form's `text` does not parse here (MLIR's `why`) and its artifact `path`
    targets a StableHLO newer than this jaxlib reads, a VersionError: the module uses what
    this jaxlib lacks, and the message says what can be done."""
    newest = _mlir.current_version()
    if _mlir.version_key(target) <= _mlir.version_key(newest):
        return
    raise VersionError(
        f"{text} does not parse here ({why.rpartition('error: ')[2]}) and {path} targets "
        f"StableHLO {target}, newer than this jaxlib reads (StableHLO {newest} at most): the "
        f"module uses what this jaxlib lacks. Upgrade jaxlib to one that reads StableHLO "
        f"{target}; or, where the bundle was made, write its artifacts for this jaxlib, which "
        "works only if the module needs nothing newer: hlobundle refresh "
        f"{shlex.quote(bundle)} --target-version {newest} (SPEC.md 5, 'Versions')",
        path=path,
    )

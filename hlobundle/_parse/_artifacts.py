"""One program per module form: the text and its portable artifact must agree (SPEC.md 8).

`check_same_program` first re-serializes the (already checked) text at the artifact's target
version: when the bytes are equal, the artifact is that text and no untrusted bytecode is ever
deserialized. Otherwise (another producer, another jaxlib) the artifact is deserialized in a
child process (`_isolation/_portable_child.py`), where a crash of MLIR's bytecode reader becomes
a coded error (`_children.run_child`), and its canonical print is compared with the text's,
round-tripped the same way.
"""

from __future__ import annotations

from typing import Any

from .._format import _limits
from .._format._errors import LimitError, ModuleError, ModuleMismatchError
from .._isolation import _child
from .._mlir_context import canonical
from . import _mlir
from ._children import run_child
from ._portable import MAGIC, check_target

CHILD = _child.PORTABLE_CHILD
# Forks of one server, which imports MLIR's bindings once: a load of a bundle another jaxlib
# wrote has an artifact to deserialize per form and function (benchmarks/RESULTS.md, "Verify of
# a bundle another jaxlib wrote": with a fresh interpreter per artifact, the first verify of a
# bundle of three forms takes 1.6x as long; of one form, as long).
FORK_SERVER = True


def check_same_program(
    text_module: Any, artifact: bytes, target: str, *, text: str, path: str, bundle: str
) -> None:
    """Raise unless `artifact` (the file `path` of `bundle`) holds the same program as
    `text_module`."""
    if not artifact.startswith(MAGIC):
        raise ModuleError(
            f"{path} is not a StableHLO portable artifact (no MLIR bytecode magic)", path=path
        )
    check_target(target, what=f"{path} targets", bundle=bundle, path=path)
    ours = _mlir.to_portable(text_module, target, path=text)
    if ours == artifact:
        return
    with _mlir.context():
        mine = canonical(_mlir.from_portable(ours, path=text))
    theirs, whole = _canonical_prefix(artifact, path, len(mine))
    if not whole:
        theirs += "\n(the artifact prints more)"
    if mine != theirs:
        line, want, got = _first_difference(mine, theirs)
        raise ModuleMismatchError(
            f"{path} and {text} are not the same program: deserialized, the artifact prints "
            f"differently from the text, first at line {line}: the text has {want!r:.160}, the "
            f"artifact {got!r:.160}. A bundle must carry one program in both forms (SPEC.md, "
            "'Reader safety and security')",
            path=path,
        )


def canonical_in_child(artifact: bytes, *, path: str) -> str:
    """The artifact's canonical text, deserialized in a child process that may crash."""
    text, whole = _canonical_prefix(artifact, path, _limits.MAX_MODULE_BYTES)
    if not whole:
        raise LimitError(
            f"{path} prints as more than {_limits.MAX_MODULE_BYTES} characters of text, the limit "
            "for a module (SPEC.md, 'Reader safety and security')",
            path=path,
        )
    return text


def _canonical_prefix(artifact: bytes, path: str, max_chars: int) -> tuple[str, bool]:
    """The first `max_chars` characters of the artifact's canonical text, deserialized in a
    child process that may crash, and whether that is the whole text."""
    what = "the StableHLO portable artifact"
    stdout, why, status = run_child(
        CHILD,
        child_args(max_chars, len(artifact)),
        artifact,
        path=path,
        what=what,
        max_output=4 * max_chars,
        statuses=(0, 3, 4),
        forked=FORK_SERVER,
    )
    if status == 3:
        raise LimitError(
            f"{what} {path}: {why}; the limit is "
            f"{_limits.MAX_MLIR_NESTING} (SPEC.md, 'Reader safety and security')",
            path=path,
        )
    try:
        return stdout.decode("utf-8"), status == 0
    except UnicodeDecodeError:
        raise ModuleError(
            f"{what} {path} holds strings that are not UTF-8 (SPEC.md, 'Reader safety and "
            "security')",
            path=path,
        ) from None


def child_args(max_chars: int, artifact_bytes: int) -> list[str]:
    """The arguments of `_portable_child.py` for an artifact of `artifact_bytes` printed to at
    most `max_chars` characters."""
    limits = (
        _limits.CHILD_MEMORY_BYTES,
        _limits.MAX_MLIR_NESTING,
        max_chars,
        _limits.child_allowance(artifact_bytes),
    )
    return [str(n) for n in limits]


def _first_difference(a: str, b: str) -> tuple[int, str, str]:
    """(line number, line of a, line of b) where two texts first differ."""
    lines_a, lines_b = a.splitlines(), b.splitlines()
    n = max(len(lines_a), len(lines_b))
    padded = zip(
        lines_a + [""] * (n - len(lines_a)), lines_b + [""] * (n - len(lines_b)), strict=True
    )
    return next(
        ((i, x.strip(), y.strip()) for i, (x, y) in enumerate(padded, start=1) if x != y),
        (n, "", ""),
    )

"""One program per module form: the text and its portable artifact must agree (SPEC.md 8).

`check_same_program` first re-serializes the (already checked) text at the artifact's target
version: when the bytes are equal, the artifact is that text and no untrusted bytecode is ever
deserialized. Otherwise (another producer, another jaxlib) the artifact is deserialized in a
child process (`_isolation/_portable_child.py`), where a crash of MLIR's bytecode reader becomes
a coded error, and its canonical print is compared with the text's, round-tripped the same way.
`run_child` turns how any child ended into the format's coded errors.
"""

from __future__ import annotations

import re
import shlex
import signal
from pathlib import Path
from typing import Any

from .._isolation import _child, _fork_servers
from .._isolation._mlir_context import canonical
from . import _limits, _mlir
from ._errors import LimitError, ModuleError, ModuleMismatchError, VersionError

MAGIC = b"ML\xefR"
CHILD = _child.PORTABLE_CHILD
# Forks of one server, which imports MLIR's bindings once: a load of a bundle another jaxlib
# wrote has an artifact to deserialize per form and function (benchmarks/RESULTS.md, "Verify of
# a bundle another jaxlib wrote": with a fresh interpreter per artifact, the first verify of a
# bundle of three forms takes 1.6x as long; of one form, as long).
FORK_SERVER = True
_SIGNALS = frozenset(s.value for s in signal.Signals)  # real-time signals have no name
# A child past its address-space limit: the child scripts' own exit status (they import nothing
# of the package) for what Python sees;
# an abort with what MLIR or the C++ runtime says when an allocation or a thread fails.
OUT_OF_MEMORY = 5
_ALLOCATION_FAILED = re.compile(r"out of memory|bad_alloc|pthread_create failed|allocation failed")


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


def run_child(
    script: Path,
    args: list[str],
    data: bytes,
    *,
    path: str,
    what: str,
    max_output: int,
    statuses: tuple[int, ...] = (0,),
    forked: bool = False,
) -> tuple[bytes, str, int]:
    """(stdout, stderr's line, exit status) of a child process (`script`, with `args`) reading
    untrusted `data` (`what`, from `path`) on stdin: run once (`_child`), or in a fork of the
    script's server when `forked` (`_fork_servers`). It exits with one of `statuses`, or 1 with
    one line on stderr when `data` does not load; a crash, a timeout or another exit status is
    a ModuleError, more than `max_output` bytes of output a LimitError. The time limit grows
    with the data's size."""
    timeout = _limits.child_timeout_s(len(data))
    runner = _fork_servers.run if forked else _child.run
    try:
        done = runner(script, args, data, timeout=timeout, max_output=max_output)
    except _fork_servers.ServerError as e:
        raise ModuleError(
            f"{path}: {what} could not be read in a child process: {e}", path=path
        ) from None
    why = _mlir.short(done.stderr.decode("utf-8", "replace").strip())
    if done.timed_out:
        raise ModuleError(
            f"{path}: deserializing {what} took over {timeout:.0f} s, the limit for "
            f"{len(data)} bytes (SPEC.md, 'Reader safety and security')",
            path=path,
        )
    if done.overflow:
        raise LimitError(
            f"{path}: {what} printed more than {max_output} bytes (SPEC.md, 'Reader safety "
            "and security')",
            path=path,
        )
    if done.status == OUT_OF_MEMORY or (done.status < 0 and _ALLOCATION_FAILED.search(why)):
        raise LimitError(
            f"{path}: {what} needs more memory than a child process reading {len(data)} bytes "
            f"may take ({_limits.child_allowance(len(data)) >> 20} MiB beyond what it holds at "
            f"its start; SPEC.md, 'Reader safety and security'): {why}",
            path=path,
        )
    if done.status < 0:
        number = -done.status
        name = signal.Signals(number).name if number in _SIGNALS else f"signal {number}"
        raise ModuleError(
            f"{what} {path} crashed MLIR's bytecode reader ({name}, caught in a child "
            "process): it is malformed",
            path=path,
        )
    if done.status not in statuses:
        raise ModuleError(f"{what} does not load: {why or done.status}", path=path)
    return done.stdout, why, done.status


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

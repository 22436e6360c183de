"""A child process reading untrusted bytes (`_isolation/`), and how it ended as the format's
coded errors: a crash, a timeout, an exit status it may not give or too much output."""

from __future__ import annotations

import re
import signal
from pathlib import Path

from .._format import _limits
from .._format._errors import LimitError, ModuleError
from .._format._prechecks import short
from .._isolation import _child, _fork_servers

_SIGNALS = frozenset(s.value for s in signal.Signals)  # real-time signals have no name
# A child past its address-space limit: the child scripts' own exit status (they import nothing
# of the package) for what Python sees;
# an abort with what MLIR or the C++ runtime says when an allocation or a thread fails; the
# dynamic loader's own exit (`_dl_fatal_printf`: status 127) when it cannot allocate a module's
# thread-local data.
OUT_OF_MEMORY = 5
_LOADER_FATAL = 127
_ALLOCATION_FAILED = re.compile(
    r"out of memory|bad_alloc|pthread_create failed|allocation failed"
    r"|cannot allocate memory for thread-local data"
)


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
    why = short(done.stderr.decode("utf-8", "replace").strip())
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
    ended = done.status < 0 or done.status == _LOADER_FATAL
    if done.status == OUT_OF_MEMORY or (ended and _ALLOCATION_FAILED.search(why)):
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

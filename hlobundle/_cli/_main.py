"""The `hlobundle` command line: pack, run, emit, inspect, verify, serve, refresh, compile, sign,
push, pull, conformance and schema (README.md, "Command line"). `main` parses (`_parser`), calls the
command's handler (`_commands`, `_pack`) and turns what it raises into an exit status.

Errors print `error [CODE] message` on stderr and exit 1; usage errors exit 2 (`_parser`'s
EXIT_STATUSES, printed by `hlobundle --help`). Set `HLOBUNDLE_TRACEBACK=1` to see tracebacks.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import sys
import warnings
from collections.abc import Sequence
from typing import Any, NoReturn

from .._format._errors import HloBundleError
from .._terminal import _progress
from . import _parser
from ._common import EXIT_FAIL


def entry(argv: Sequence[str] | None = None) -> NoReturn:
    """The `hlobundle` command (`python -m hlobundle`): `main`, then a prompt exit. The exit
    handlers run (jax.distributed's shutdown among them) and the output is flushed, but the
    interpreter's teardown of jax's runtime, about 0.1 s that nothing needs, is skipped."""
    code = main(argv)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:  # the reader of our output went away
        pass
    run_exit_handlers = getattr(atexit, "_run_exitfuncs", None)
    if run_exit_handlers is None:  # not CPython: the usual exit
        sys.exit(code)
    run_exit_handlers()
    os._exit(code)


def _network_named(args: Any) -> contextlib.AbstractContextManager[None]:
    """What `--ca-file` and `--proxy` named, for the command's requests; the network module
    is imported only then (`inspect` and `verify` of a local bundle start without it)."""
    ca_file, proxy = getattr(args, "ca_file", None), getattr(args, "proxy", None)
    if not (ca_file or proxy):
        return contextlib.nullcontext()
    from .._oci import _network

    return _network.named(ca_file, proxy)


def main(argv: Sequence[str] | None = None) -> int:
    # XLA's C++ INFO lines ("PjRt-IFRT device count ...") are not for users; an explicit
    # TF_CPP_MIN_LOG_LEVEL still wins. Set before anything imports jax.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    args = _parser.parser().parse_args(argv)  # a usage error exits 2 here, or in the handler
    warnings.formatwarning = lambda message, *_, **__: f"warning: {message}\n"
    # Progress bars for a person at a terminal: never on a pipe, nor beside --json.
    _progress.enable(sys.stderr.isatty() and not getattr(args, "json", False))
    try:
        with _network_named(args):
            return int(args.handler(args))
    except KeyboardInterrupt:  # what was being written is removed by its own cleanup
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of our output went away (`| head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAIL
    except HloBundleError as e:
        if _tracebacks():
            raise
        if getattr(args, "json", False):
            print(json.dumps({"ok": False, "code": e.code, "message": e.message, **e.context()}))
        _print_error(e)
        if e.fatal:  # skip the teardown of a runtime whose state is lost (it would crash)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(EXIT_FAIL)
        return EXIT_FAIL
    except OSError as e:  # the machine's, not the bundle's: a full disk, a read-only output
        if _tracebacks():
            raise
        where = f" (path: {e.filename})" if e.filename else ""
        print(_shown(f"error [OS_ERROR] {e.strerror or e}{where}"), file=sys.stderr)
        return EXIT_FAIL
    finally:
        _progress.enable(False)


def _print_error(e: HloBundleError) -> None:
    where = ", ".join(f"{k}: {v}" for k, v in e.context().items())
    text = f"error [{e.code}] {e.message}" + (f" ({where})" if where else "")
    print(_shown(text), file=sys.stderr)


def _shown(text: str) -> str:
    from .._terminal._display import shown

    return shown(text)


def _tracebacks() -> bool:
    """`HLOBUNDLE_TRACEBACK=1` (or true, yes, on) shows tracebacks; 0, false, no, off or empty
    do not, as unset."""
    value = os.environ.get("HLOBUNDLE_TRACEBACK", "").strip().lower()
    return value not in ("", "0", "false", "no", "off")

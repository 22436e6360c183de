"""A long-lived child that runs `hlobundle` commands one after another (helpers.ChildProcess).

    python tests/cli_child.py [--main MODULE:FUNCTION]

Each request is a JSON line on stdin: {"args": [...], "out": PATH, "err": PATH, "cwd": PATH}.
The command runs in that directory, its file descriptors 1 and 2 (Python's output and C++'s
alike) pointed at those files, as a process of its own would have them, and its exit status is
answered as a JSON line on the descriptor that was stdout at start. A command that kills the
process (a signal, an abort, `os._exit`) answers nothing: the parent reads the end of the pipe
and the child's status.
`--main` runs another function than hlobundle's `main` (`crash_on`, to test that path).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import traceback
import warnings


def run(main, args: list[str], out: str, err: str) -> int:
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(out, "wb") as o, open(err, "wb") as e:
        os.dup2(o.fileno(), 1)
        os.dup2(e.fileno(), 2)
    formatwarning = warnings.formatwarning
    try:
        with warnings.catch_warnings():  # each command warns as a fresh process would
            return main(args)
    except SystemExit as exit:  # usage errors, as the interpreter reports them
        if exit.code is None or isinstance(exit.code, int):
            return exit.code or 0
        print(exit.code, file=sys.stderr)
        return 1
    except BaseException:  # what escapes main() ends a process with a traceback and status 1
        traceback.print_exc()
        return 1
    finally:
        warnings.formatwarning = formatwarning
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])


def crash_on(args: list[str]) -> int:
    """A stand-in for `main`: `abort` aborts the process, `exit N` ends it with status N."""
    if args == ["abort"]:
        os.abort()
    if args[:1] == ["exit"]:
        os._exit(int(args[1]))
    print("ran", *args)
    return 0


def serve(target: str) -> None:
    module, name = target.split(":")
    main = getattr(importlib.import_module(module), name)
    channel = os.fdopen(os.dup(1), "w")
    for line in sys.stdin:
        request = json.loads(line)
        os.chdir(request["cwd"])
        code = run(main, request["args"], request["out"], request["err"])
        channel.write(json.dumps({"returncode": code}) + "\n")
        channel.flush()


if __name__ == "__main__":
    serve(sys.argv[2] if sys.argv[1:2] == ["--main"] else "hlobundle._cli._main:main")

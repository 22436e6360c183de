"""A process that has imported jax, numpy and scipy's LAPACK, and forks a fresh child for each
script it is asked to run (helpers.ScriptZygote): every script starts in a process of its own,
as `python SCRIPT ARGS` would, without paying for those imports each time.

    python tests/script_zygote.py

Each request is a JSON line on stdin: {"args": [SCRIPT, ARGS...], "out": PATH, "err": PATH,
"cwd": PATH}.
The forked child points its descriptors 1 and 2 at those files (0 at /dev/null), runs the
script as `__main__`, then fails if the script imported hlobundle (an emitted script must be
standalone). The answer, a JSON line on the zygote's stdout, is the child's exit status as
`subprocess` reports it (negative for a signal). hlobundle is never imported here.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import traceback

import jax  # noqa: F401  (imported once, before any fork: the point of the zygote)
import numpy  # noqa: F401

# What jax imports when it first lowers an Exported on CPU, for its LAPACK kernels (scipy's
# BLAS and LAPACK: 0.27 CPU-s, in 9 of the edit loop's 20 scripts): imported, never called, so
# a script still initializes the kernels itself or crashes (test_run's emitted LAPACK script).
import scipy.linalg.cython_blas  # noqa: F401
import scipy.linalg.cython_lapack  # noqa: F401


def child(argv: list[str], out: str, err: str, cwd: str) -> None:
    """Run in the forked child; never returns."""
    code = 1
    try:
        os.chdir(cwd)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        sys.stdin = open(os.devnull)  # not the zygote's buffered requests
        os.dup2(os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 1)
        os.dup2(os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
        sys.argv = argv
        try:
            runpy.run_path(argv[0], run_name="__main__")
            assert "hlobundle" not in sys.modules, "the script imported hlobundle"
            code = 0
        except SystemExit as exit:  # as the interpreter reports it
            if exit.code is None or isinstance(exit.code, int):
                code = exit.code or 0
            else:
                print(exit.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def serve() -> None:
    channel = sys.stdout
    for line in sys.stdin:
        request = json.loads(line)
        channel.flush()
        pid = os.fork()
        if pid == 0:
            child(request["args"], request["out"], request["err"], request["cwd"])
        _, status = os.waitpid(pid, 0)
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        channel.write(json.dumps({"returncode": code}) + "\n")
        channel.flush()


if __name__ == "__main__":
    serve()

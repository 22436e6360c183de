"""Run by tests/on_accelerator_corpus.py (by hand, on a machine with an accelerator): several
`hlobundle` commands in this one process, each as `python -m hlobundle ARGS` runs it (its
`main()`), so that the device's runtime starts once for all of them (12-14 s a process on a
TPU v5e, most of a fresh process's time to a first result).

    python tests/accelerator_runs.py '["run", "B", "--json"]' '["run", "C", "--json"]' ...

Each argument is one command's argv as a JSON list. Prints one JSON list: for each command, its
exit status, standard output and the end of its standard error (a command that raises is exit
status 1 with the traceback there, and the rest still run).
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import traceback


def one(argv: list[str]) -> dict[str, object]:
    from hlobundle._cli._main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as e:  # a usage error
            rc = e.code if isinstance(e.code, int) else 2
        except Exception:  # reported with the others, not the end of the list
            traceback.print_exc()
            rc = 1
    return {"argv": argv, "rc": rc, "stdout": out.getvalue(), "stderr": err.getvalue()[-3000:]}


if __name__ == "__main__":
    print(json.dumps([one(json.loads(a)) for a in sys.argv[1:]]))

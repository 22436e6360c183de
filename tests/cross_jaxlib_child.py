"""Run by each interpreter of tests/test_cross_jaxlib.py's corpus, with the checkout on
PYTHONPATH, as one long-lived process: it prints `{"jaxlib": VERSION}` on a line, then answers
each request (a JSON list on a line of stdin) with a JSON line: `["pack", OUT, LUX?]` writes the
corpus's bundles into OUT, their expected outputs computed by this interpreter's jaxlib, and
answers null; `["run", BUNDLE[:FUNCTION], ...]` runs each as `hlobundle run --backend xla
--json` does and answers a list of {"rc", "report"}. One process packs and runs, so that each
interpreter imports jax once. It compiles with the suite's compile options (conftest.py's
XLA_FLAGS, given as CROSS_JAXLIB_XLA_FLAGS) that its jaxlib knows."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def pack(out: Path, lux: str | None) -> None:
    sys.path.insert(0, str(ROOT / "examples"))
    import lenet5
    import lm

    import hlobundle
    from hlobundle._cli._main import main

    lenet5.main(str(out / "lenet5.hlobundle"))
    params = hlobundle.load(ROOT / "examples" / "lm.hlobundle").select("prefill").example_args()[0]
    lm.export(params, out / "lm.hlobundle")
    if lux:
        argv = ["pack", "--from-reactant", lux, "-o", str(out / "lux.hlobundle")]
        assert main([*argv, "--compute-expected"]) == 0


def run(specs: list[str]) -> list[dict]:
    from hlobundle._cli._main import main

    done = []
    for spec in specs:
        bundle, _, function = spec.partition(":")
        told = io.StringIO()
        with contextlib.redirect_stdout(told):
            rc = main(
                ["run", bundle, "--backend", "xla", "--json"]
                + (["--function", function] if function else [])
            )
        done.append({"rc": rc, "report": json.loads(told.getvalue())})
    return done


def keep_known_flags() -> None:
    """XLA_FLAGS: those of the suite's (CROSS_JAXLIB_XLA_FLAGS, conftest.py's compile options)
    that this interpreter's jaxlib knows, set before jax is imported (XLA ends the process
    on a flag it does not know)."""
    from jaxlib_flags import known

    os.environ["XLA_FLAGS"] = known(os.environ.pop("CROSS_JAXLIB_XLA_FLAGS", ""))


def serve() -> None:
    keep_known_flags()
    import jaxlib

    # What the commands print (Python's or C++'s) goes to stderr, never into an answer.
    answers = os.fdopen(os.dup(1), "w")
    sys.stdout.flush()
    os.dup2(2, 1)
    print(json.dumps({"jaxlib": jaxlib.__version__}), file=answers, flush=True)
    for line in sys.stdin:
        command, *args = json.loads(line)
        if command == "pack":
            answer = pack(Path(args[0]), args[1] if len(args) > 1 else None)
        else:
            answer = run(args)
        print(json.dumps(answer), file=answers, flush=True)


if __name__ == "__main__":
    serve()

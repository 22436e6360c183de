"""Run by each interpreter of tests/test_cross_jaxlib.py's corpus, with the checkout on
PYTHONPATH: `pack OUT [LUX]` writes the corpus's bundles into OUT, their expected outputs
computed by this interpreter's jaxlib; `run BUNDLE[:FUNCTION]...` runs each as `hlobundle run
--backend xla --json` does and prints one JSON list of {"rc", "report"}."""

from __future__ import annotations

import contextlib
import io
import json
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


def run(specs: list[str]) -> None:
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
    print(json.dumps(done))


if __name__ == "__main__":
    if sys.argv[1] == "pack":
        pack(Path(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else None)
    else:
        run(sys.argv[2:])

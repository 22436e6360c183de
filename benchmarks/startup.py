"""Start-up and time to first result: `hlobundle run` in a fresh process against a
Reactant-style script (section `first`), and the start-up of `inspect` and `verify` (`startup`)."""

from __future__ import annotations

import json
import statistics
import subprocess
from pathlib import Path

import numpy as np

from benchmarks.harness import PY, ROOT, interleaved, run_py

REACTANT_STYLE = """
import numpy as np, jax
from enzyme_ad.jax import hlo_call
with open({module!r}) as f:
    code = f.read()
npz = np.load({npz!r})
args = [npz[f"arr_{{i}}"] for i in range(1, {n} + 1)]
print(jax.jit(lambda *a: hlo_call(*a, source=code))(*args)[0].sum())
"""


BREAKDOWN = """
import json, time
t0 = time.perf_counter(); import jax; t1 = time.perf_counter()
import hlobundle._read._reader; from hlobundle._cli import _commands; t2 = time.perf_counter()
b = hlobundle.load({example!r}); t3 = time.perf_counter()
f = b.function("xla"); args = [b.tensor(a.name) for a in b.arguments]; t4 = time.perf_counter()
jax.block_until_ready(f.call_flat(*args)); t5 = time.perf_counter()
print(json.dumps([{{"case": "  in which: import jax", "ours_s": t1 - t0}},
                  {{"case": "  in which: import hlobundle", "ours_s": t2 - t1}},
                  {{"case": "  in which: load (parse, check)", "ours_s": t3 - t2}},
                  {{"case": "  in which: function('xla') and arguments", "ours_s": t4 - t3}},
                  {{"case": "  in which: first call (trace, lower, compile, run)", "ours_s": t5 - t4}}]))
"""


def hlo_call_text(bundle) -> str:
    """The module text enzyme-ad's `hlo_call` takes, as the enzyme backend's emitted script
    holds it (through the backends' door: its lines when rewritten, else the module's text)."""
    from hlobundle import Trust
    from hlobundle._run import _backends

    script = _backends.kind("enzyme").script(bundle, Trust.NOTHING)
    return "\n".join(script.slots["MODULE_LINES"]) or bundle.module_text


def first_result(tmp: Path, quick: bool) -> list[dict]:
    """`hlobundle run` (auto: xla, a forward run needs only jax) in a fresh process against a
    Reactant-style script (npz + enzyme-ad's hlo_call); no cache of any kind, then a second
    run with warm caches (compile and check verdicts) against the import floor."""
    import hlobundle

    example = ROOT / "examples" / "lenet5.hlobundle"
    b = hlobundle.load(example)
    np.savez(
        tmp / "inputs.npz",
        **{f"arr_{i + 1}": np.asarray(b.tensor(a.name)) for i, a in enumerate(b.arguments)},
    )
    (tmp / "module.mlir").write_text(hlo_call_text(b))
    script = REACTANT_STYLE.format(
        module=str(tmp / "module.mlir"), npz=str(tmp / "inputs.npz"), n=len(b.arguments)
    )
    cli = (
        "from hlobundle._cli._main import entry; entry({argv!r})  # what the hlobundle command runs"
    )
    run, enzyme = (
        cli.format(argv=["run", str(example)]),
        cli.format(argv=["run", str(example), "--backend", "enzyme"]),
    )
    reps = 2 if quick else 5
    ours, theirs, on_enzyme, cold, warm, floor = [], [], [], [], [], []
    nothing = {"HLOBUNDLE_NO_CACHE": "1"}
    for i in range(reps):
        ours.append(run_py(run, nothing)[0])
        theirs.append(run_py(script)[0])
        on_enzyme.append(run_py(enzyme, nothing)[0])
        cache = {"HLOBUNDLE_CACHE_DIR": str(tmp / f"cache-{i}")}
        cold.append(run_py(run, cache)[0])
        warm.append(run_py(run, cache)[0])
        floor.append(run_py("import jax")[0])  # what `run` (xla) imports: no enzyme_ad
    parts = run_py(BREAKDOWN.format(example=str(example)), nothing)[1]
    med = statistics.median
    return [
        {
            "case": "floor: a fresh process that only imports jax, as `hlobundle run` (xla) does "
            "(before 2026-12-05 the floor also imported enzyme_ad.jax, which run does not: 0.1 s "
            "more, and a flattering ratio)",
            "ours_s": med(floor),
        },
        {
            "case": "hlobundle run (no cache) vs Reactant-style script (npz + hlo_call) (goal <= 1)",
            "ratio": med(ours) / med(theirs),
            "ours_s": med(ours),
            "baseline_s": med(theirs),
        },
        *json.loads(parts),
        {
            "case": "hlobundle run --backend enzyme (no cache) vs Reactant-style script",
            "ratio": med(on_enzyme) / med(theirs),
            "ours_s": med(on_enzyme),
            "baseline_s": med(theirs),
        },
        {
            "case": "hlobundle run, second run (warm caches) / the import floor (goal <= 1.25); "
            "both fresh processes in a user's environment",
            "ratio": med(warm) / med(floor),
            "ours_s": med(warm),
            "baseline_s": med(floor),
        },
        {
            "case": "hlobundle run, second run / first run (caches)",
            "ratio": med(warm) / med(cold),
            "ours_s": med(warm),
            "baseline_s": med(cold),
        },
    ]


def startup() -> list[dict]:
    import hlobundle

    example = str(ROOT / "examples" / "lenet5.hlobundle")
    fns = {
        "python -c pass": lambda: subprocess.run([PY, "-c", "pass"]),
        "hlobundle inspect": lambda: subprocess.run(
            [PY, "-m", "hlobundle", "inspect", example], capture_output=True
        ),
        "hlobundle verify": lambda: subprocess.run(
            [PY, "-m", "hlobundle", "verify", example], capture_output=True
        ),
        "python -c 'import jax'": lambda: subprocess.run([PY, "-c", "import jax"]),
    }
    del hlobundle
    res = interleaved(fns, 5)
    base = res["python -c pass"][0]
    return [
        {"command": k, "s": v[0], "ratio": v[0] / base}
        for k, v in res.items()
        if k != "python -c pass"
    ]

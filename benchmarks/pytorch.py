"""PyTorch models in (section `torch`): each model of tests/test_torch.py's corpus (and
`transformers`' BERT, GPT-2, ViT and T5 where that package is installed), its bundle's forward
pass under `jax.jit` against eager PyTorch on the CPU, each timed in its steady state (in a
process of its own, JAX's CPU calls inline), and the time `from_torch` takes against
`torch.export.export` alone, each pair interleaved in one run. Skipped, with the reason, where
torch is not installed."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness import ROOT, interleaved, run_py
from hlobundle._extras import pip_line

# JAX's CPU client runs a call inline in the caller's thread, not handed to its worker and
# waited for: a setting read when the client starts, so the section runs in a process of its own
# (whatever sections ran before it in run.py's). Dispatch-bound models pay the hand-off on every
# call: the MLP's bundle under jax.jit took a median of 86-87 us a call handed off and 26-38
# inline, eager torch's 59-92 (two runs each, in one minute of a load of 9 on 2 cores). Eager
# PyTorch runs in the caller's thread alike. 64-bit values as run.py has them.
_SETTINGS = {"jax_cpu_enable_async_dispatch": False, "jax_enable_x64": True}


def torch_cost(tmp: Path, quick: bool) -> list[dict]:
    if importlib.util.find_spec("torch") is None:
        return [{"case": "all", "skipped": f"torch is not installed: {pip_line('torch')}"}]
    code = (
        "import json, jax; from pathlib import Path; from benchmarks.pytorch import rows; "
        f"[jax.config.update(k, v) for k, v in {_SETTINGS!r}.items()]; "
        f"print(json.dumps(rows(Path({str(tmp)!r}), {quick!r})))"
    )
    _, out = run_py(code, env={"PYTHONPATH": str(ROOT)})
    return json.loads(out.splitlines()[-1])


def rows(tmp: Path, quick: bool) -> list[dict]:
    """Each model's row, measured in this process."""
    import jax

    found = [_one(name, *built, tmp, quick) for name, built in _corpus(quick).items()]
    dispatch = "async" if jax.config.read("jax_cpu_enable_async_dispatch") else "inline"
    return [{**row, "jax dispatch": dispatch} for row in found]


def _corpus(quick: bool) -> dict[str, tuple[Any, tuple[Any, ...], Any]]:
    """Each model by name, built (a smoke run: two)."""
    sys.path.insert(0, str(ROOT / "tests"))  # the corpus the tests pack: tests/torch_models.py
    import torch_models

    found = {}
    for name, make in torch_models.cases().items():
        if quick and name not in ("mlp", "cnn"):
            continue
        case = make()
        found[name] = (case.module, case.args, case.dynamic_shapes)
    if not quick and importlib.util.find_spec("transformers") is not None:
        for name, (build, args) in torch_models.hf_cases().items():
            found[name] = (build(), args, None)
    return found


def _one(name: str, module: Any, args: tuple, dynamic: Any, tmp: Path, quick: bool) -> dict:
    import jax
    import torch

    import hlobundle

    out = tmp / f"torch-{name}.hlobundle"
    packing = _packing(module, args, dynamic, out, reps=1 if quick else 3)
    bundle = hlobundle.load(out)
    dtypes = [a.dtype for a in bundle.manifest.arguments]
    inputs = [jax.device_put(np.asarray(t.numpy(), d)) for t, d in zip(args, dtypes, strict=False)]
    # the weights after the inputs, in the manifest's order, as positional arguments: jax.jit's
    # cheapest call (a list and a dict of them cost the unused-parameter model 26.5 us a call
    # against 21.1, inline, in one minute here)
    stored = bundle.parameters()
    weights = [jax.device_put(stored[a.name]) for a in bundle.manifest.arguments[len(inputs) :]]
    f = bundle.function()
    jitted = jax.jit(lambda *flat: f(*flat))

    def eager() -> None:
        with torch.no_grad():
            module(*args)

    def on(threads: int) -> Any:
        def setup() -> None:
            torch.set_num_threads(threads)
            eager()

        return setup

    # Eager torch at 1 thread and at one per core (as XLA's CPU client takes), its faster the
    # baseline: on a shared machine torch's OpenMP threads wait at each operator's barrier for a
    # thread the scheduler took away (the MLP's eager call: a median of 95 us on 2 threads with
    # a 90th percentile of 36 ms, 54 and 112 us on 1, in one minute of a load of 10 on 2 cores).
    counts = sorted({1, os.cpu_count() or 1})

    def bundle_call() -> None:
        # one array waited for by its own method: jax.block_until_ready's walk of a tree cost
        # the unused-parameter model 31.5 us a call against 21.5 (inline, in one minute here)
        out = jitted(*inputs, *weights)
        if isinstance(out, jax.Array):
            out.block_until_ready()
        else:
            jax.block_until_ready(out)

    fns = {**{f"eager/{n}": eager for n in counts}, "bundle": bundle_call}
    setup = {**{f"eager/{n}": on(n) for n in counts}, "bundle": bundle_call}
    for fn in setup.values():
        fn()  # compile, warm
    # Each timed call follows an untimed call of its own (`setup`): called in plain turns, each
    # side ran right after the other and paid for the other's threads still holding the 2 cores
    # (torch's OpenMP workers spinning, XLA's pool): the MLP with a dynamic batch took 364 us a
    # call after eager torch's and 167 after its own; eager torch 10 ms after the bundle's and
    # 0.46 after its own (medians of 1,500 on this machine, loaded). The steady state of each
    # is what a server or a loop of calls sees.
    res = interleaved(fns, 20 if quick else 300, setup=setup)
    threads = min(counts, key=lambda n: res[f"eager/{n}"][0])
    eager_s, bundle_s = res[f"eager/{threads}"][0], res["bundle"][0]
    return {
        "case": name,
        "eager_s": eager_s,
        "torch threads": threads,
        "bundle_jit_s": bundle_s,
        "ratio": bundle_s / eager_s,
        "met (<= 1.0)": "yes" if bundle_s <= eager_s else "NO",
        "spread": res["bundle"][1],
        **{f"eager_s on {n}": res[f"eager/{n}"][0] for n in counts},
        **packing,
    }


def _packing(module: Any, args: tuple, dynamic: Any, out: Path, reps: int) -> dict:
    """from_torch's seconds (export, decomposition, lowering, eager expected outputs, writing)
    against torch.export.export's alone, in turns."""
    import torch

    import hlobundle

    times: dict[str, list[float]] = {"export": [], "from_torch": []}
    for _ in range(reps):
        start = time.perf_counter()
        torch.export.export(module, args, dynamic_shapes=dynamic)
        times["export"].append(time.perf_counter() - start)
        start = time.perf_counter()
        hlobundle.from_torch(module, args, out=out, dynamic_shapes=dynamic, force=True)
        times["from_torch"].append(time.perf_counter() - start)
    export_s, from_torch_s = (float(np.median(v)) for v in times.values())
    return {
        "from_torch_s": from_torch_s,
        "torch_export_s": export_s,
        "from_torch / export": from_torch_s / export_s,
    }

"""PyTorch models in (section `torch`): each model of tests/test_torch.py's corpus (and
`transformers`' BERT, GPT-2, ViT and T5 where that package is installed), its bundle's forward
pass under `jax.jit` against eager PyTorch on the CPU, each timed in its steady state, and the
time `from_torch` takes against `torch.export.export` alone, each pair interleaved in one run.
Skipped, with the reason, where torch is not installed."""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness import ROOT, interleaved
from hlobundle._extras import pip_line


def torch_cost(tmp: Path, quick: bool) -> list[dict]:
    if importlib.util.find_spec("torch") is None:
        return [{"case": "all", "skipped": f"torch is not installed: {pip_line('torch')}"}]
    import torch

    # as many threads as XLA's CPU client takes (one per core), so that both use the machine alike
    torch.set_num_threads(os.cpu_count() or 1)
    rows = []
    for name, (module, args, dynamic) in _corpus(quick).items():
        rows.append(_one(name, module, args, dynamic, tmp, quick))
    return rows


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
    params = jax.device_put(bundle.parameters())
    f = bundle.function()
    jitted = jax.jit(lambda xs, p: f(*xs, **p))

    def eager() -> None:
        with torch.no_grad():
            module(*args)

    fns = {
        "eager": eager,
        "bundle": lambda: jax.block_until_ready(jitted(inputs, params)),
    }
    for fn in fns.values():
        fn()  # compile, warm
    # Each timed call follows an untimed call of its own (`setup`): called in plain turns, each
    # side ran right after the other and paid for the other's threads still holding the 2 cores
    # (torch's OpenMP workers spinning, XLA's pool): the MLP with a dynamic batch took 364 us a
    # call after eager torch's and 167 after its own; eager torch 10 ms after the bundle's and
    # 0.46 after its own (medians of 1,500 on this machine, loaded). The steady state of each
    # is what a server or a loop of calls sees.
    res = interleaved(fns, 20 if quick else 300, setup=fns)
    return {
        "case": name,
        "eager_s": res["eager"][0],
        "bundle_jit_s": res["bundle"][0],
        "ratio": res["bundle"][0] / res["eager"][0],
        "met (<= 1.0)": "yes" if res["bundle"][0] <= res["eager"][0] else "NO",
        "spread": res["bundle"][1],
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

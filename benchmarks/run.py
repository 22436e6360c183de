"""The benchmark suite: `python benchmarks/run.py [--quick]` writes benchmarks/RESULTS.md.

Every number is a ratio against a baseline measured in the same run (median of interleaved
repetitions), because absolute times on a shared 2-core machine are noise. `--quick` uses tiny
sizes (a smoke run, as the test suite does); the full run takes a few minutes and ~12 GB of disk.
"""

from __future__ import annotations

import argparse
import compileall
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "benchmarks"))
PY = sys.executable
GiB = 1024**3


def interleaved(fns: dict[str, Callable[[], object]], reps: int) -> dict[str, tuple[float, float]]:
    """(median, spread) in seconds per function, running them in turns so drift hits all alike."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {
        k: (statistics.median(v), (max(v) - min(v)) / statistics.median(v))
        for k, v in times.items()
    }


# What a fresh process gets: a user's shell environment, not this process's (which sections
# change, HLOBUNDLE_CACHE_DIR say, and which JAX may have touched).
# PYTHONPATH and TPU_*: where a TPU machine's jax is found and how it reaches its chip.
_USER_ENV = (
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "TMPDIR",
    "USER",
    "PYTHONDONTWRITEBYTECODE",
    "PYTHONPATH",
)


def user_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a process a user starts from a shell, with `env` added."""
    kept = {k: v for k, v in os.environ.items() if k in _USER_ENV or k.startswith("TPU_")}
    return kept | (env or {})


def run_py(code: str, env: dict[str, str] | None = None) -> tuple[float, str]:
    """Wall time of a fresh Python process running `code` in a user's environment
    (`user_env`), and its stdout."""
    start = time.perf_counter()
    r = subprocess.run([PY, "-c", code], capture_output=True, text=True, env=user_env(env))
    if r.returncode:
        raise RuntimeError(r.stderr[-2000:])
    return time.perf_counter() - start, r.stdout


# --- run overhead ---------------------------------------------------------------------------


def overhead(tmp: Path, quick: bool) -> list[dict]:
    import jax
    import jax.numpy as jnp
    import lenet5

    import hlobundle

    rows = []
    mlp_width = 256 if quick else 4096

    def mlp(params, x):
        return jnp.maximum(x @ params["w1"], 0) @ params["w2"]

    cases = [
        (
            "LeNet, batch 4",
            lenet5.lenet5,
            lenet5.init_params(),
            np.random.default_rng(0).random((4, 1, 28, 28), np.float32),
        ),
        (
            "LeNet, batch 256",
            lenet5.lenet5,
            lenet5.init_params(),
            np.random.default_rng(0).random((16 if quick else 256, 1, 28, 28), np.float32),
        ),
        (
            f"2-layer MLP, width {mlp_width}, batch 64",
            mlp,
            {
                "w1": np.random.default_rng(1).standard_normal((mlp_width, mlp_width), np.float32)
                / 64,
                "w2": np.random.default_rng(2).standard_normal((mlp_width, mlp_width), np.float32)
                / 64,
            },
            np.random.default_rng(3).standard_normal((64, mlp_width), np.float32),
        ),
    ]
    for name, fn, params, x in cases:
        out = tmp / f"overhead-{len(rows)}"
        bundle = hlobundle.load(hlobundle.export(fn, params, x, out=out, store_expected=False))
        params_d = jax.device_put(params)
        x_d = jax.device_put(x)
        native = jax.jit(fn)
        fns = {"native jax.jit": lambda: jax.block_until_ready(native(params_d, x_d))}
        for backend in ("enzyme", "xla"):
            f = bundle.function(backend)
            jitted = jax.jit(lambda p, x, f=f: f(p, x))
            fns[backend] = lambda j=jitted: jax.block_until_ready(j(params_d, x_d))
        for f in fns.values():
            f()  # compile
        res = interleaved(fns, 30 if quick else 200)
        base = res["native jax.jit"][0]
        for backend in ("enzyme", "xla"):
            rows.append(
                {
                    "case": name,
                    "backend": backend,
                    "native_s": base,
                    "bundle_s": res[backend][0],
                    "ratio": res[backend][0] / base,
                    "spread": res[backend][1],
                }
            )
    return rows


# --- vmap -------------------------------------------------------------------------------------


def vmap_cost(tmp: Path, quick: bool) -> list[dict]:
    import jax
    import lenet5

    import hlobundle

    params, x = lenet5.init_params(), lenet5.example_images()
    bundle = hlobundle.load(
        hlobundle.export(
            lenet5.lenet5, params, x, out=tmp / "vmap", store_expected=False, with_vjp=True
        )
    )
    batched = hlobundle.load(
        hlobundle.export(
            lenet5.lenet5,
            params,
            x,
            out=tmp / "vmap-batched",
            store_expected=False,
            with_vjp=True,
            vmap_in_axes=(None, 0),
        )
    )
    declared = hlobundle.load(  # SPEC.md 2.13: rows independent along b, no batched module
        hlobundle.export(
            lenet5.lenet5,
            params,
            x,
            out=tmp / "vmap-declared",
            store_expected=False,
            with_vjp=True,
            shapes_specs=(None, "b, 1, 28, 28"),
            independent_rows="b",
        )
    )
    assert declared.manifest.batched is None and declared.manifest.independent_rows is not None
    batch = np.stack([x * (i + 1) for i in range(4 if quick else 16)])
    native = jax.jit(jax.vmap(lambda xi: lenet5.lenet5(params, xi)))
    fns = {"native": lambda: jax.block_until_ready(native(batch))}
    grads = {
        "native": jax.jit(jax.vmap(jax.grad(lambda xi: (lenet5.lenet5(params, xi) ** 2).sum())))
    }
    for backend in ("enzyme", "xla"):
        f = bundle.function(backend)
        v = jax.jit(jax.vmap(lambda xi, f=f: f(params, xi)))
        fns[backend] = lambda v=v: jax.block_until_ready(v(batch))
        grads[backend] = jax.jit(jax.vmap(jax.grad(lambda xi, f=f: (f(params, xi) ** 2).sum())))
        f = batched.function(backend)
        v = jax.jit(jax.vmap(lambda xi, f=f: f(params, xi)))
        fns[f"{backend}, batched module"] = lambda v=v: jax.block_until_ready(v(batch))
        f = declared.function(backend, trust=hlobundle.Trust.BATCHED)
        v = jax.jit(jax.vmap(lambda xi, f=f: f(params, xi)))
        fns[f"{backend}, declared rows"] = lambda v=v: jax.block_until_ready(v(batch))
        g = jax.grad(lambda xi, f=f: (f(params, xi) ** 2).sum())
        grads[f"{backend}, declared rows"] = jax.jit(jax.vmap(g))
    gfns = {k: (lambda g=g: jax.block_until_ready(g(batch))) for k, g in grads.items()}
    for f in [*fns.values(), *gfns.values()]:
        f()
    rows = []
    for label, group in (("vmap forward", fns), ("vmap of grad (per-example gradients)", gfns)):
        res = interleaved(group, 10 if quick else 50)
        for backend in [k for k in group if k != "native"]:
            rows.append(
                {
                    "case": f"{label}, {len(batch)} x LeNet batch 4",
                    "backend": backend,
                    "ratio": res[backend][0] / res["native"][0],
                    "spread": res[backend][1],
                }
            )
    return rows


# --- time to first result ---------------------------------------------------------------------

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


# --- IREE: a stored executable against XLA with a warm compile cache -------------------------

IREE_PHASES = """
import json, os, time
t0 = time.perf_counter()
if {backend!r} == "iree":
    import iree.runtime
else:
    import jax
t1 = time.perf_counter()
import hlobundle
b = hlobundle.load({bundle!r}); t2 = time.perf_counter()
if {backend!r} == "iree":
    f = b.function("iree", trust=hlobundle.Trust.EXECUTABLES)
    first = lambda: f.call_flat(*args)
else:
    from hlobundle._run._process import enable_compilation_cache as _enable_compilation_cache
    _enable_compilation_cache()
    f = b.function("xla")
    first = lambda: jax.block_until_ready(f.call_flat(*args))
args = [b.tensor(a.name) for a in b.arguments]; t3 = time.perf_counter()
first(); t4 = time.perf_counter()
print(json.dumps([t1 - t0, t2 - t1, t3 - t2, t4 - t3, getattr(f, "source", "")]))
"""


def iree_first_result(tmp: Path, quick: bool) -> list[dict]:
    """A fresh process to its first result: IREE running the stored executable against the xla
    backend with a warm persistent compile cache (goal: ratio <= 0.5), whole `hlobundle run`
    processes and a breakdown of each."""
    import hlobundle

    bundle = tmp / "iree" / "lenet5.hlobundle"
    shutil.copytree(ROOT / "examples" / "lenet5.hlobundle", bundle)
    hlobundle.compile(bundle)
    env = {"HLOBUNDLE_CACHE_DIR": str(tmp / "iree-cache")}
    cli = (
        "from hlobundle._cli._main import entry; entry({argv!r})  # what the hlobundle command runs"
    )
    runs = {
        "iree": cli.format(argv=["run", str(bundle), "--backend", "iree", "--trust-executables"]),
        "xla": cli.format(argv=["run", str(bundle), "--backend", "xla"]),
    }
    run_py(runs["xla"], env)  # warms the cache
    reps = 2 if quick else 7
    times: dict[str, list[float]] = {"iree": [], "xla": []}
    phases: dict[str, list[list]] = {"iree": [], "xla": []}
    for _ in range(reps):
        for name in ("iree", "xla"):
            times[name].append(run_py(runs[name], env)[0])
            phases[name].append(
                json.loads(run_py(IREE_PHASES.format(backend=name, bundle=str(bundle)), env)[1])
            )
    med = statistics.median
    rows = [
        {
            "case": "hlobundle run, fresh process: iree (stored executable) / xla (warm cache)",
            "ratio": med(times["iree"]) / med(times["xla"]),
            "ours_s": med(times["iree"]),
            "baseline_s": med(times["xla"]),
        }
    ]
    names = [
        "import (iree.runtime / jax)",
        "load (hlobundle.load: parse, check)",
        "prepare (function(): load the executable / build the Exported)",
        "first call",
    ]
    for k, what in enumerate(names):
        ours, theirs = med(p[k] for p in phases["iree"]), med(p[k] for p in phases["xla"])
        rows.append(
            {
                "case": f"  in which: {what}",
                "ratio": ours / theirs if theirs else "",
                "ours_s": ours,
                "baseline_s": theirs,
            }
        )
    assert phases["iree"][0][4].startswith("stored executable"), phases["iree"][0][4]
    return rows + _against_onnx_runtime(tmp, bundle, env, cli, reps)


ORT_SCRIPT = """
import numpy as np, onnxruntime as ort
s = ort.InferenceSession({model!r}, providers=["CPUExecutionProvider"])
print(float(s.run(None, {{"images": np.load({images!r})}})[0].sum()))
"""

IREE_SCRIPT = """
import sys, json, hlobundle
b = hlobundle.load({bundle!r})
f = b.function("iree", trust=hlobundle.Trust.EXECUTABLES)
total = float(f.call_flat(*[b.tensor(a.name) for a in b.arguments])[0].sum())
print(json.dumps([total, "pydantic" in sys.modules]))
"""


# --- XLA: a stored executable against a cold compile and JAX's persistent cache ----------------

TRANSFORMER = """
import jax, jax.numpy as jnp, numpy as np, hlobundle

layers, d, heads, seq, batch, vocab = {layers}, {d}, {heads}, {seq}, {batch}, {vocab}
rng = np.random.default_rng(0)
w = lambda *shape: (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)
params = dict(
    embed=w(vocab, d),
    **{{f"l{{i}}_{{k}}": w(d, m * d) for i in range(layers) for k, m in (("qkv", 3), ("o", 1), ("up", 4))}},
    **{{f"l{{i}}_down": w(4 * d, d) for i in range(layers)}},
)

def norm(x):
    return (x - x.mean(-1, keepdims=True)) * jax.lax.rsqrt(x.var(-1, keepdims=True) + 1e-5)

def lm(params, tokens):
    x = params["embed"][tokens]
    mask = jnp.tril(jnp.ones((seq, seq), bool))
    for i in range(layers):
        q, k, v = jnp.split(norm(x) @ params[f"l{{i}}_qkv"], 3, axis=-1)
        q, k, v = (t.reshape(batch, seq, heads, d // heads) for t in (q, k, v))
        a = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(d // heads)
        a = jax.nn.softmax(jnp.where(mask, a, -1e9), axis=-1)
        x = x + jnp.einsum("bhqk,bkhd->bqhd", a, v).reshape(batch, seq, d) @ params[f"l{{i}}_o"]
        x = x + jax.nn.gelu(norm(x) @ params[f"l{{i}}_up"]) @ params[f"l{{i}}_down"]
    return norm(x) @ params["embed"].T

tokens = rng.integers(0, vocab, (batch, seq)).astype(np.int32)
hlobundle.export(lm, params, tokens, out={out!r}, name="lm")
hlobundle.compile({out!r}, ["xla-" + jax.devices()[0].platform])
print(jax.devices()[0].device_kind)
"""

XLA_FIRST = """
import json, time
t0 = time.perf_counter()
import jax, hlobundle
jax.devices()  # the backend started (a TPU's takes seconds): not the function's first result
t1 = time.perf_counter()
if {how!r} == "jax-cache":
    from hlobundle._run._process import enable_compilation_cache
    enable_compilation_cache()
b = hlobundle.load({bundle!r})
trust = hlobundle.Trust.EXECUTABLES if {how!r} == "stored" else hlobundle.Trust.NOTHING
f = b.function("xla", trust=trust)
args = [b.tensor(a.name) for a in b.arguments]
(out,) = jax.block_until_ready(f.call_flat(*args)); t2 = time.perf_counter()
print(json.dumps([t1 - t0, t2 - t1, f.source, float(jax.numpy.abs(out).sum())]))
"""


def xla_first_result(tmp: Path, quick: bool) -> list[dict]:
    """A fresh process to its first result on the xla backend, for a transformer of a few
    layers: a cold compile, JAX's persistent compilation cache (warmed by an earlier process),
    and the bundle's stored XLA executable (trusted; SPEC.md 2.7). Runs wherever jax does: on
    a TPU machine it compiles and measures the TPU's executable."""
    out = tmp / "transformer.hlobundle"
    size = (
        dict(layers=2, d=64, heads=2, seq=16, batch=2, vocab=128)
        if quick
        else dict(layers=4, d=512, heads=8, seq=256, batch=8, vocab=4096)
    )
    _, kind = run_py(TRANSFORMER.format(out=str(out), **size))
    reps = 2 if quick else 3  # 13 processes in all: a TPU's start costs each about 15 s
    # hlobundle's own caches (the load's verdicts) are warm for all three; only the
    # jax-cache runs turn JAX's persistent compilation cache on (warmed by the first run).
    cache = {"HLOBUNDLE_CACHE_DIR": str(tmp / "xla-cache")}
    runs: dict[str, list[tuple[float, list]]] = {"cold": [], "jax-cache": [], "stored": []}
    for how in runs:
        run_py(XLA_FIRST.format(bundle=str(out), how=how), cache)
    for _ in range(reps):
        for how in runs:
            wall, printed = run_py(XLA_FIRST.format(bundle=str(out), how=how), cache)
            runs[how].append((wall, json.loads(printed)))
    med = statistics.median
    first = {how: med(r[1][1] for r in rs) for how, rs in runs.items()}
    wall = {how: med(r[0] for r in rs) for how, rs in runs.items()}
    sources = {how: rs[0][1][2] for how, rs in runs.items()}
    shape = ", ".join(f"{k} {v}" for k, v in size.items())
    labels = {
        "cold": "cold compile (no cache)",
        "jax-cache": "JAX's persistent compilation cache, warm",
        "stored": f"stored executable ({sources['stored']})",
    }
    return [
        {
            "case": f"transformer ({shape}) on {kind.strip()}: {labels[how]}",
            "load_to_first_result_s": first[how],
            "ratio_to_cold": first[how] / first["cold"],
            "process_s": wall[how],
            "import_jax_and_start_backend_s": med(r[1][0] for r in runs[how]),
            "sum_abs_result": runs[how][0][1][3],  # the same in each row: the same program
        }
        for how in runs
    ]


def _against_onnx_runtime(tmp: Path, bundle: Path, env: dict, cli: str, reps: int) -> list[dict]:
    """The issue's peer: ONNX Runtime running the same LeNet (same weights and images) in a
    fresh process, against a fresh process running the stored IREE executable; with the check
    cache warm (a second load of the same bytes) and off (`HLOBUNDLE_NO_CACHE`: every check)."""
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError:
        return [{"case": "ONNX Runtime peer: not measured (pip install 'hlobundle[bench]')"}]
    import hlobundle

    b = hlobundle.load(bundle)
    lenet_onnx(b, tmp / "lenet.onnx")
    np.save(tmp / "images.npy", np.asarray(b.tensor("images")))
    ort = ORT_SCRIPT.format(model=str(tmp / "lenet.onnx"), images=str(tmp / "images.npy"))
    ours = IREE_SCRIPT.format(bundle=str(bundle))
    want = float(b.expected_outputs()["result"].sum())
    assert abs(float(run_py(ort)[1]) - want) < 1e-3
    total, _ = json.loads(run_py(ours, env)[1])  # the first load of these bytes: remembered
    assert abs(total - want) < 1e-3
    total, pydantic = json.loads(run_py(ours, env)[1])
    assert not pydantic, "a load of remembered bytes imported pydantic"
    cold = {**env, "HLOBUNDLE_NO_CACHE": "1"}
    run = cli.format(argv=["run", str(bundle), "--backend", "iree", "--trust-executables"])
    models = "import iree.runtime, hlobundle._format._manifest"
    cases = {
        "ort": (ort, {}),
        "imports": ("import onnxruntime, numpy", {}),
        "iree": ("import iree.runtime", {}),
        "models": (models, {}),
        "mlir": (models + ", hlobundle._mlir_context as m\nm.new_context()", {}),
        "run": (run, env),
        "python": (ours, env),
        "python, cold": (ours, cold),
        "run, cold": (run, cold),
    }
    times: dict[str, list[float]] = {k: [] for k in cases}
    order = list(cases)
    for i in range(reps):  # each round starts with another case: none always follows another
        for k in order[i % len(order) :] + order[: i % len(order)]:
            code, e = cases[k]
            times[k].append(run_py(code, e)[0])
    med = {k: statistics.median(v) for k, v in times.items()}
    base = med["ort"]

    def part(what: str, s: float) -> dict:
        return {"case": what, "ours_s": s, "ratio": s / base}

    return [
        {
            "case": "ONNX Runtime, fresh process: InferenceSession + run (the peer); every row "
            "here a fresh process in a user's environment, rounds rotated",
            "ours_s": base,
        },
        {"case": "  in which: import onnxruntime, numpy", "ours_s": med["imports"]},
        {
            "case": "floor: a process that only imports IREE's runtime (numpy with it) / ONNX Runtime",
            "ratio": med["iree"] / base,
            "ours_s": med["iree"],
            "baseline_s": base,
        },
        {
            "case": "hlobundle run --backend iree (stored executable; the manifest's and the "
            "modules' verdicts remembered: no pydantic, no MLIR) / ONNX Runtime (goal <= 1.0)",
            "ratio": med["run"] / base,
            "ours_s": med["run"],
            "baseline_s": base,
        },
        part(
            "  in which: Python and import iree.runtime (s; ratio: its part of the ratio above)",
            med["iree"],
        ),
        part(
            "  in which: the rest: hlobundle's modules, read, the manifest's records from its "
            "verdict, load the executable, call (s; ratio: its part)",
            med["run"] - med["iree"],
        ),
        {
            "case": "load + function('iree') + call, Python / ONNX Runtime (goal <= 1.0)",
            "ratio": med["python"] / base,
            "ours_s": med["python"],
            "baseline_s": base,
        },
        {
            "case": "  the same, first load of these bytes (no cache: every check) / ONNX Runtime (goal <= 1.3)",
            "ratio": med["python, cold"] / base,
            "ours_s": med["python, cold"],
            "baseline_s": base,
        },
        {
            "case": "  hlobundle run, first load of these bytes / ONNX Runtime (goal <= 1.3)",
            "ratio": med["run, cold"] / base,
            "ours_s": med["run, cold"],
            "baseline_s": base,
        },
        part(
            "    in which: the checks remembered verdicts save (first load less the run above; "
            "s, and its part of the ratio)",
            med["run, cold"] - med["run"],
        ),
        part(
            "    in which, of those: import pydantic and build the manifest's models (s, and its part)",
            med["models"] - med["iree"],
        ),
        part(
            "    in which, of those: import jaxlib's MLIR bindings and make the context they "
            "parse in (s, and its part)",
            med["mlir"] - med["models"],
        ),
    ]


def lenet_onnx(bundle, path) -> None:
    """The example LeNet as an ONNX model with the bundle's weights (for the ONNX Runtime peer)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = {a.name: np.asarray(bundle.tensor(a.name)) for a in bundle.arguments if a.role != "input"}
    inits = [numpy_helper.from_array(v, k) for k, v in w.items()]
    inits.append(numpy_helper.from_array(np.array([4, -1], np.int64), "flat"))
    p = "params_"
    nodes = [
        helper.make_node("Conv", ["images", f"{p}conv1_w", f"{p}conv1_b"], ["c1"]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["m1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["m1", f"{p}conv2_w", f"{p}conv2_b"], ["c2"]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("MaxPool", ["r2"], ["m2"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Reshape", ["m2", "flat"], ["f"]),
        helper.make_node("Gemm", ["f", f"{p}dense1_w", f"{p}dense1_b"], ["d1"]),
        helper.make_node("Relu", ["d1"], ["a1"]),
        helper.make_node("Gemm", ["a1", f"{p}dense2_w", f"{p}dense2_b"], ["d2"]),
        helper.make_node("Relu", ["d2"], ["a2"]),
        helper.make_node("Gemm", ["a2", f"{p}dense3_w", f"{p}dense3_b"], ["result"]),
    ]
    graph = helper.make_graph(
        nodes,
        "lenet5",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [4, 1, 28, 28])],
        [helper.make_tensor_value_info("result", TensorProto.FLOAT, [4, 10])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


# --- load, pack, column-major, startup --------------------------------------------------------

LOAD = """
import time, numpy as np, jax, json
jax.config.update("jax_platforms", "cpu")
t0 = time.perf_counter()
{body}
jax.block_until_ready(arrays)
dt = time.perf_counter() - t0
hwm = [int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM")][0] * 1024
print(json.dumps({{"s": dt, "peak": hwm}}))
"""
BASELINE_RSS = LOAD.format(body="arrays = []")
BODIES = {
    "bundle": "import hlobundle\nb = hlobundle.load({bundle!r})\narrays = jax.device_put([b.tensor(a.name) for a in b.arguments])",
    "npz": "z = np.load({npz!r})\narrays = jax.device_put([z[k] for k in z.files])",
    "jax.export + npz": "from jax import export\ne = export.deserialize(open({exp!r}, 'rb').read())\n"
    "z = np.load({npz!r})\narrays = jax.device_put([z[k] for k in z.files])",
}


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)


def weights(total: int, count: int) -> list[np.ndarray]:
    n = total // 4 // count
    rng = np.random.default_rng(0)
    return [rng.standard_normal(n, dtype=np.float32) for _ in range(count)]


def module_for(arrays: list[np.ndarray]) -> str:
    args = ", ".join(f"%a{i}: tensor<{a.shape[0]}xf32>" for i, a in enumerate(arrays))
    return f"func.func @main({args}) -> tensor<{arrays[0].shape[0]}xf32> {{\n  return %a0 : tensor<{arrays[0].shape[0]}xf32>\n}}\n"


class PackPhases(dict):
    """Where the time of `hlobundle.pack` goes: wrappers around its steps add each step's own
    time (less that of wrapped steps inside it) to this dict, by phase, while in the block."""

    def __enter__(self) -> PackPhases:
        from hlobundle._bundle_io import _tensor_writing
        from hlobundle._file_io import _durable, _hashing_writer
        from hlobundle._format import _main_signature, _mlir
        from hlobundle._read import _inputs
        from hlobundle._write import _atomic, _normalize, _writer

        steps = {
            "module checks (normalize, parse, @main's signature)": [
                (_normalize, "normalize"),
                (_mlir, "parse"),
                (_main_signature, "signature"),
            ],
            "example inputs checked, manifest planned (pydantic)": [
                (_inputs, "from_python"),
                (_writer, "plan"),
            ],
            "portable artifact of the module": [(_mlir, "to_portable")],
            "tensor file: written in steps, sha256 in a second thread": [
                (_tensor_writing, "write")
            ],
            "tensor file: its fsync, and the end of its sha256": [
                (_hashing_writer.HashingWriter, "finish")
            ],
            "manifest.json (final manifest validated, JSON)": [(_atomic, "_finish")],
            "fsync of the other files and the directory": [(_durable, "fsync_tree")],
        }
        self._restore: list[tuple[object, str, object]] = []
        inner = [0.0]  # time of wrapped steps inside the current one

        def timed(phase: str, fn: Callable) -> Callable:
            def step(*args: object, **kwargs: object) -> object:
                outer, inner[0] = inner[0], 0.0
                start = time.perf_counter()
                try:
                    return fn(*args, **kwargs)
                finally:
                    took = time.perf_counter() - start
                    self[phase] = self.get(phase, 0.0) + took - inner[0]
                    inner[0] = outer + took

            return step

        for phase, places in steps.items():
            for owner, name in places:
                fn = getattr(owner, name)
                self._restore.append((owner, name, fn))
                setattr(owner, name, timed(phase, fn))
        return self

    def __exit__(self, *exc: object) -> None:
        for owner, name, fn in reversed(self._restore):
            setattr(owner, name, fn)


def phase_rows(spent: dict[str, float], total: float, synced: float) -> list[dict]:
    """`in which` rows: each phase's seconds in one pack, and its share of the ratio against
    save_file + fsync (the rows add up to the pack's)."""
    rest = total - sum(spent.values())
    return [
        {"case": f"  in which: {phase}", "fastest_s": s, "fastest_vs_save_file_fsync": s / synced}
        for phase, s in [*spent.items(), ("the rest (temp dir, module files, rename)", rest)]
    ]


def sha256_alone(arrays: list[np.ndarray]) -> float:
    """Seconds to hash the arrays' bytes in one thread: the floor of a pack on this machine."""
    import hashlib

    start = time.perf_counter()
    h = hashlib.sha256()
    for a in arrays:
        h.update(memoryview(a).cast("B"))
    return time.perf_counter() - start


def load_and_pack(tmp: Path, quick: bool) -> tuple[list[dict], list[dict]]:
    import jax
    from jax import export
    from safetensors.numpy import save_file

    import hlobundle

    total = 64 * 1024**2 if quick else GiB
    base_rss = json.loads(run_py(BASELINE_RSS)[1])["peak"]
    load_rows, pack_rows = [], []
    for count in (64, 4096):
        arrays = weights(total, count)
        text = module_for(arrays)
        names = [f"w{i}" for i in range(count)]
        writers = {
            "hlobundle.pack (with sha256, fsync)": (
                tmp / "b",
                lambda: hlobundle.pack(text, arrays, tmp / "b", names=names),
            ),
            "np.savez": (tmp / "w.npz", lambda: np.savez(tmp / "w.npz", *arrays)),
            "safetensors save_file": (
                tmp / "w.safetensors",
                lambda: save_file(
                    dict(zip(names, arrays, strict=True)), str(tmp / "w.safetensors")
                ),
            ),
            "safetensors save_file + fsync": (
                tmp / "d.safetensors",
                lambda: (
                    save_file(dict(zip(names, arrays, strict=True)), str(tmp / "d.safetensors")),
                    _fsync(tmp / "d.safetensors"),
                ),
            ),
        }
        times: dict[str, list[float]] = {k: [] for k in writers}
        phases: list[dict[str, float]] = []  # of each pack run
        for _ in range(2 if quick else 3):
            for k, (target, write) in writers.items():
                shutil.rmtree(target, ignore_errors=True) if target.is_dir() else target.unlink(
                    missing_ok=True
                )
                os.sync()  # nobody pays for another's dirty pages
                with PackPhases() as spent:
                    start = time.perf_counter()
                    write()
                    times[k].append(time.perf_counter() - start)
                if k.startswith("hlobundle.pack"):
                    phases.append(spent)
        base = statistics.median(times["safetensors save_file"])
        synced = min(times["safetensors save_file + fsync"])  # the issue's baseline: fastest runs
        for k in (
            "hlobundle.pack (with sha256, fsync)",
            "np.savez",
            "safetensors save_file + fsync",
        ):
            med = statistics.median(times[k])
            pack_rows.append(
                {
                    "case": f"{total / GiB:.3g} GiB in {count} tensors",
                    "what": k,
                    "ratio": med / base,
                    "s": med,
                    "baseline_s": base,
                    "fastest_s": min(times[k]),
                    "fastest_vs_save_file_fsync": min(times[k]) / synced,
                }
            )
        fastest = min(
            range(len(phases)), key=lambda i: times["hlobundle.pack (with sha256, fsync)"][i]
        )
        pack_rows += phase_rows(
            phases[fastest], times["hlobundle.pack (with sha256, fsync)"][fastest], synced
        )
        alone = min(sha256_alone(arrays) for _ in range(2 if quick else 3))
        pack_rows.append(
            {
                "case": "  for reference: sha256 of the same bytes alone, one core",
                "fastest_s": alone,
                "fastest_vs_save_file_fsync": alone / synced,
            }
        )
        exp = export.export(jax.jit(lambda *a: a[0]))(
            *[jax.ShapeDtypeStruct(a.shape, a.dtype) for a in arrays]
        )
        (tmp / "fn.jaxexport").write_bytes(exp.serialize())
        paths = {
            "bundle": str(tmp / "b"),
            "npz": str(tmp / "w.npz"),
            "exp": str(tmp / "fn.jaxexport"),
        }
        measured = {k: [] for k in BODIES}
        for _ in range(2 if quick else 3):
            for k, body in BODIES.items():
                subprocess.run(["sync"])
                measured[k].append(json.loads(run_py(LOAD.format(body=body.format(**paths)))[1]))
        med = {k: statistics.median(m["s"] for m in v) for k, v in measured.items()}
        peak = {k: max(m["peak"] for m in v) - base_rss for k, v in measured.items()}
        for k in ("npz", "jax.export + npz"):
            load_rows.append(
                {
                    "case": f"{total / GiB:.3g} GiB in {count} tensors",
                    "baseline": k,
                    "speedup": med[k] / med["bundle"],
                    "bundle_peak_x": peak["bundle"] / total,
                    "baseline_peak_x": peak[k] / total,
                }
            )
    return load_rows, pack_rows


COLUMN_MAJOR = """
import numpy as np, json, hlobundle
from pathlib import Path
files = sorted(Path({dir!r}).glob("*.npy"))
hlobundle.pack_files({module!r}, files, {out!r}, layout="column_major", force=True)
hwm = [int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM")][0] * 1024
print(json.dumps({{"peak": hwm}}))
"""


def column_major(tmp: Path, quick: bool) -> list[dict]:
    total = 64 * 1024**2 if quick else GiB
    n = int((total // 4 // 16) ** 0.5)
    rows = []
    base_rss = json.loads(
        run_py(
            "import numpy, hlobundle, json\n"
            + "hwm = [int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM')][0] * 1024\nprint(json.dumps({'peak': hwm}))"
        )[1]
    )["peak"]
    for order, label in (
        ("F", "Julia-written (column-major memory, as NPZ.jl writes)"),
        ("C", "row-major memory (a transpose per tensor)"),
    ):
        d = tmp / f"cm-{order}"
        d.mkdir()
        for i in range(16):
            np.save(
                d / f"w{i:02d}.npy",
                np.asarray(
                    np.random.default_rng(i).standard_normal((n, n + 1), np.float32), order=order
                ),
            )
        shapes = ", ".join(f"%a{i}: tensor<{n + 1}x{n}xf32>" for i in range(16))
        (tmp / "cm.mlir").write_text(
            f"func.func @main({shapes}) -> tensor<{n + 1}x{n}xf32> {{\n  return %a0 : tensor<{n + 1}x{n}xf32>\n}}\n"
        )
        peak = json.loads(
            run_py(
                COLUMN_MAJOR.format(
                    dir=str(d), module=str(tmp / "cm.mlir"), out=str(tmp / "cm.hlobundle")
                )
            )[1]
        )["peak"]
        rows.append(
            {
                "case": f"{16 * n * (n + 1) * 4 / GiB:.3g} GiB, 16 tensors, {label}",
                "peak_x": (peak - base_rss) / total,
            }
        )
        shutil.rmtree(d)
    return rows


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


# --- scale --------------------------------------------------------------------------------------


def scale(tmp: Path, quick: bool) -> list[dict]:
    """A bundle of 10 GiB of (sparse) weights: what touches the data and what does not."""
    import hlobundle
    from hlobundle._write._atomic import sha256_file

    per, count = (64 * 1024**2, 4) if quick else (GiB, 10)
    n = per // 4
    args = ", ".join(f"%a{i}: tensor<{n}xf32>" for i in range(count))
    text = f"func.func @main({args}) -> tensor<4xf32> {{\n  %s = stablehlo.slice %a0 [0:4] : (tensor<{n}xf32>) -> tensor<4xf32>\n  return %s : tensor<4xf32>\n}}\n"
    out = hlobundle.pack(text, None, tmp / "big", names=[f"w{i}" for i in range(count)])
    header = {
        f"w{i}": {"dtype": "F32", "shape": [n], "data_offsets": [i * per, (i + 1) * per]}
        for i in range(count)
    }
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    path = out / "weights.safetensors"
    with open(path, "wb") as f:
        f.write(len(raw).to_bytes(8, "little") + raw)
        f.truncate(8 + len(raw) + count * per)  # sparse: no disk blocks, zeros on read
    m = json.loads((out / "manifest.json").read_text())
    for i, a in enumerate(m["arguments"]):
        a["value"] = {"file": "weights.safetensors", "key": f"w{i}"}
    m["files"]["weights.safetensors"] = {"size": path.stat().st_size, "sha256": sha256_file(path)}
    (out / "manifest.json").write_text(json.dumps(m, indent=2, sort_keys=True) + "\n")
    total = count * per
    rows = []
    looks = (
        ("inspect", ["inspect"], "the first look at its files"),
        ("inspect", ["inspect"], "again"),
        ("verify --quick", ["verify", "--quick"], "after inspect"),
    )
    for label, cmd, when in looks:
        start = time.perf_counter()
        subprocess.run(
            [PY, "-m", "hlobundle", *cmd, str(out)], check=True, capture_output=True, env=user_env()
        )
        rows.append(
            {
                "case": f"{label}, {total / GiB:.3g} GiB bundle (fresh process; {when})",
                "s": time.perf_counter() - start,
            }
        )
    start = time.perf_counter()
    b = hlobundle.load(out)
    rows.append({"case": "load() in process", "s": time.perf_counter() - start})
    start = time.perf_counter()
    b.verify(in_memory=False)  # hashing through the mapping, as `hlobundle verify` does
    ours = time.perf_counter() - start
    start = time.perf_counter()
    subprocess.run(["sha256sum", str(path)], check=True, capture_output=True)
    theirs = time.perf_counter() - start
    rows.append(
        {
            "case": f"full verify vs sha256sum of the data file ({total / GiB:.3g} GiB)",
            "s": ours,
            "ratio": ours / theirs,
        }
    )
    code = (
        "import json, hlobundle\nfrom hlobundle._run._run import run\n"
        "from hlobundle._run._backends import resolve\n"
        f"report, _ = run(hlobundle.load({str(out)!r}), backend=resolve('xla'))\n"
        "hwm = [int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM')][0] * 1024\n"
        "print(json.dumps({'peak': hwm}))\n"
    )
    peak = json.loads(run_py(code)[1])["peak"]
    rows.append(
        {
            "case": f"run a function reading 1 of {count} weights ({per / GiB:.3g} GiB each): peak RSS / one weight",
            "ratio": peak / per,
        }
    )
    return rows


# --- trust: the checking reader against the one before it -----------------------------------------

# The last commit before the reader checked module hashes on load, held files open, and proved
# each portable artifact to be its text's program (issue 12).
TRUST_BASELINE = "ea0a2c9"


def trust_cost(tmp: Path, quick: bool) -> list[dict]:
    """`load()` and `verify --quick` of this reader / the baseline commit's, fresh processes."""
    import hlobundle

    worktree = tmp / "baseline"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(worktree), TRUST_BASELINE],
        check=True,
        capture_output=True,
    )
    try:
        arrays = weights(64 * 1024**2 if quick else GiB, 64)
        big = hlobundle.pack(module_for(arrays), arrays, tmp / "trust-big")
        del arrays
        # `from hlobundle import load` first: the imports are not load()'s work (and hlobundle
        # now imports its modules on first use, the baseline on `import hlobundle`).
        load = "import sys, time\nfrom hlobundle import load\nt = time.perf_counter()\nload(sys.argv[1])\nprint(time.perf_counter() - t)"
        rows = []
        for label, bundle in (
            ("LeNet", ROOT / "examples" / "lenet5.hlobundle"),
            (f"{'64 MiB' if quick else '1 GiB'}, 64 tensors", big),
        ):
            for what, argv, inner in (
                ("load()", ["-c", load, str(bundle)], True),
                (
                    "verify --quick (whole process)",
                    ["-m", "hlobundle", "verify", "--quick", str(bundle)],
                    False,
                ),
            ):
                times: dict[str, list[float]] = {"ours": [], "baseline": []}
                for _ in range(5 if quick else 15):
                    for name, path in (("ours", ROOT), ("baseline", worktree)):
                        start = time.perf_counter()
                        r = subprocess.run(
                            [PY, *argv],
                            capture_output=True,
                            text=True,
                            cwd=tmp,
                            env={**os.environ, "PYTHONPATH": str(path)},
                            check=True,
                        )
                        wall = time.perf_counter() - start
                        times[name].append(float(r.stdout.strip()) if inner else wall)
                ours, base = (statistics.median(times[k]) for k in ("ours", "baseline"))
                rows.append(
                    {
                        "case": f"{what}, {label}: this reader / {TRUST_BASELINE} (goal <= 1.2)",
                        "s": ours,
                        "ratio": ours / base,
                    }
                )
        return rows
    finally:
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(worktree)],
            capture_output=True,
        )


def children_cost(tmp: Path, quick: bool) -> list[dict]:
    """Untrusted bytes read in a child process: a fork of the script's server
    (`_isolation/_fork_servers.py`) / a fresh `python -E -s SCRIPT` each time (`_isolation/
    _child.py`, as the script runs alone), with the same input and limits and the same output.
    An untrusted portable artifact deserialized and printed (LeNet's); an Exported's backward
    module lowered through its VJP (`from_exported`, `pack --from-jax-export`: a session that
    imports several Exporteds pays for jax's import once)."""
    import jax
    import jax.numpy as jnp

    from hlobundle._bundle_io import _artifacts
    from hlobundle._format import _limits
    from hlobundle._isolation import _child
    from hlobundle._write import _jax_export

    artifact = (ROOT / "examples" / "lenet5.hlobundle" / "module.mlirbc").read_bytes()
    specs = [jax.ShapeDtypeStruct((4, 3), np.float32), jax.ShapeDtypeStruct((2, 4), np.float32)]
    exported = jax.export.export(jax.jit(lambda w, x: jnp.tanh(x @ w)))(*specs)
    blob = bytes(exported.serialize(vjp_order=1))
    return [
        *_fork_against_fresh(
            ("one artifact", "the first"),
            lambda: _artifacts.canonical_in_child(artifact, path="module.mlirbc"),
            [
                PY,
                "-E",
                "-s",
                str(_artifacts.CHILD),
                *_artifacts.child_args(_limits.MAX_MODULE_BYTES, len(artifact)),
            ],
            artifact,
            5 if quick else 30,
        ),
        *_fork_against_fresh(
            ("an Exported's backward module", "the first backward module"),
            lambda: _jax_export._backward_in_child(exported, blob),
            [PY, "-E", "-s", str(_child.JAX_EXPORT_CHILD), *_jax_export.backward_child_args(blob)],
            blob,
            3 if quick else 10,
        ),
    ]


def _fork_against_fresh(
    cases: tuple[str, str], forked: Callable[[], str], fresh: list[str], data: bytes, rounds: int
) -> list[dict]:
    """Rows for one child script: a call `forked` in its server / `fresh`, the script run alone
    on `data`; and the first call, which starts the server (it imports the heavy modules once)."""

    def alone() -> str:
        return subprocess.run(fresh, input=data, capture_output=True, check=True).stdout.decode()

    start = time.perf_counter()
    first = forked()
    started = time.perf_counter() - start
    assert first == alone(), f"{cases[0]}: the two ways print different texts"
    t = interleaved({"forked": forked, "alone": alone}, rounds)
    return [
        {
            "case": f"{cases[0]}: a fork of the server / a fresh process",
            "s": t["forked"][0],
            "ratio": t["forked"][0] / t["alone"][0],
            "spread": t["forked"][1],
        },
        {
            "case": f"{cases[1]}, starting the server / a fresh process",
            "s": started,
            "ratio": started / t["alone"][0],
            "spread": "",
        },
    ]


def _written_by_another_jaxlib(bundle: Path) -> Path:
    """`bundle` with every form's artifact serialized for StableHLO 1.0.0 and the manifest's
    target left as it was: the same programs, in bytes this jaxlib does not write for that
    target (as another jaxlib's serializer writes them; `tests/test_trust.py` does the same)."""
    from hlobundle._format import _mlir

    manifest = json.loads((bundle / "manifest.json").read_text())
    for form in ("module", "vjp", "batched"):
        if manifest.get(form) is None:
            continue
        text, name = manifest[form]["text"], manifest[form]["portable"]["file"]
        data = _mlir.to_portable(_mlir.parse((bundle / text).read_text()), "1.0.0")
        (bundle / name).write_bytes(data)
        manifest["files"][name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    return bundle


def foreign_verify_cost(tmp: Path, quick: bool) -> list[dict]:
    """`hlobundle verify`, whole process, of a bundle another jaxlib wrote, with no verdict
    cached (its first verify): each form's artifact is deserialized in a child. The reader's
    way (forks of one server, `_bundle_io/_artifacts.FORK_SERVER`) / a fresh interpreter per
    artifact (`_isolation/_child.py`), run in turns; one form, and three (module, backward,
    batched)."""
    import jax

    import hlobundle

    w = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    x = np.linspace(0, 1, 8, dtype=np.float32).reshape(2, 4)
    fn = lambda w, x: jax.numpy.tanh(x @ w)  # noqa: E731
    bundles = {
        "1 form (module)": hlobundle.export(fn, w, x, out=tmp / "foreign-1"),
        "3 forms (module, backward, batched)": hlobundle.export(
            fn, w, x, out=tmp / "foreign-3", with_vjp=True, vmap_in_axes=(None, 0)
        ),
    }
    code = (
        "import sys\nfrom hlobundle._bundle_io import _artifacts\n"
        "_artifacts.FORK_SERVER = sys.argv[1] == 'forked'\n"
        "from hlobundle._cli._main import main\nsys.exit(main(['verify', sys.argv[2]]))"
    )
    env = {**os.environ, "HLOBUNDLE_NO_CACHE": "1"}
    rows = []
    for label, bundle in bundles.items():
        _written_by_another_jaxlib(bundle)

        def verify(how: str) -> None:
            subprocess.run(
                [PY, "-c", code, how, str(bundle)], env=env, check=True, capture_output=True
            )

        t = interleaved({k: lambda k=k: verify(k) for k in ("forked", "once")}, 5 if quick else 20)
        rows.append(
            {
                "case": f"{label}: forks of one server / a fresh process per artifact",
                "s": t["forked"][0],
                "ratio": t["forked"][0] / t["once"][0],
                "spread": t["forked"][1],
            }
        )
    return rows


# --- signing ------------------------------------------------------------------------------------


def _sha256_of(path: Path) -> str:
    """One core's sha256 of a file, read in 8 MiB steps: the hash bound of a verify."""
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        while block := f.read(8 << 20):
            h.update(block)
    return h.hexdigest()


def sign_cost(tmp: Path, quick: bool) -> list[dict]:
    """Signing a bundle / verifying it: both hash every byte, and signing reuses the hashes its
    own verification computed (goal <= 1.2). The standard tool, which hashes again, for scale.
    And a full verify (`load(path).verify()`: every tensor file read into private memory, its
    sha256 computed from the copy) / one core's sha256 of the same tensor file, the bound of any
    verify of one file, whose sha256 is one sequential pass (goal <= 1.15): 64 and 4,096
    tensors."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    import hlobundle

    arrays = weights(64 * 1024**2 if quick else GiB, 64)
    path = hlobundle.pack(module_for(arrays), arrays, tmp / "sign-big")
    del arrays
    key = ec.generate_private_key(ec.SECP256R1())
    (tmp / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    tool = [
        str(Path(PY).parent / "model_signing"),
        "sign",
        "key",
        str(path),
        "--signature",
        str(tmp / "tool.sig"),
        "--private_key",
        str(tmp / "key.pem"),
    ]
    (data,) = path.glob("*.safetensors")
    res = interleaved(
        {
            "verify": lambda: hlobundle.load(path).verify(),
            "sign": lambda: hlobundle.sign(path, tmp / "key.pem", force=True),
            "tool": lambda: subprocess.run(tool, check=True, capture_output=True),
            "sha256": lambda: _sha256_of(data),
        },
        3 if quick else 5,
    )
    size = "64 MiB" if quick else "1 GiB"
    base = res["verify"][0]
    rows = [
        {
            "case": f"hlobundle sign / full verify, {size} (goal <= 1.2)",
            "s": res["sign"][0],
            "ratio": res["sign"][0] / base,
        },
        {
            "case": f"model_signing sign key (the standard tool, hashing itself) / full verify, {size}",
            "s": res["tool"][0],
            "ratio": res["tool"][0] / base,
        },
        {"case": f"full verify, {size}", "s": base, "ratio": 1.0},
        {
            "case": f"hlobundle sign / one core's sha256 of the tensor file, {size} in 64 "
            "tensors (goal <= 1.1)",
            "s": res["sign"][0],
            "ratio": res["sign"][0] / res["sha256"][0],
        },
    ]
    shutil.rmtree(path)
    for count in (64, 4096):
        arrays = weights(64 * 1024**2 if quick else GiB, count)
        path = hlobundle.pack(module_for(arrays), arrays, tmp / f"verify-{count}")
        del arrays
        (data,) = path.glob("*.safetensors")
        res = interleaved(
            {
                "verify": lambda path=path: hlobundle.load(path).verify(),
                "command": lambda path=path: hlobundle.load(path).verify(in_memory=False),
                "sha256": lambda data=data: _sha256_of(data),
            },
            3 if quick else 7,
        )
        rows.append(
            {
                "case": f"full verify / one core's sha256 of the tensor file, {size} in {count:,} "
                "tensors (goal <= 1.15)",
                "s": res["verify"][0],
                "ratio": res["verify"][0] / res["sha256"][0],
            }
        )
        rows.append(
            {
                "case": "  as `hlobundle verify` does it (nothing runs after: hashed through two "
                "buffers, no private copy) / the same sha256",
                "s": res["command"][0],
                "ratio": res["command"][0] / res["sha256"][0],
            }
        )
        shutil.rmtree(path)
    return rows


# --- cost that grows with what is used -----------------------------------------------------------


def _many_functions(out: Path, functions: int, per_function: int) -> Path:
    """`functions` functions `fK(p, x) = x + sum(p)` over `per_function` weights of 4 floats
    each (their own), one bundle."""
    import jax.numpy as jnp

    import hlobundle

    x = np.ones(4, np.float32)
    for k in range(functions):
        p = {f"w{k}_{j}": np.full(4, j, np.float32) for j in range(per_function)}
        hlobundle.export(
            lambda p, x: x + sum(jnp.asarray(v) for v in p.values()),
            p,
            x,
            out=out,
            name=f"f{k}",
            roles={"p": "parameter"},
            store_expected=False,
            add=k > 0,
            force=k == 0,
        )
    return out


def usage_cost(tmp: Path, quick: bool) -> list[dict]:
    """What one function costs in a big bundle against the same function alone, and how the
    reading commands grow with the manifest (in process: the process's start is the same for
    every size)."""
    import jax

    import hlobundle
    from hlobundle._read._inspect import summarize

    functions, per = (8, 16) if quick else (64, 156)  # 64 x 156: 9,984 tensors
    big = _many_functions(tmp / "usage-big", functions, per)
    alone = _many_functions(tmp / "usage-alone", 1, per)  # its f0 is the big bundle's f0

    def call(path: Path) -> None:
        b = hlobundle.load(path, functions=["f0"])
        f = b.function("xla")
        jax.block_until_ready(f.call_flat(*[b.tensor(a.name) for a in b.arguments]))

    res = interleaved({"big": lambda: call(big), "alone": lambda: call(alone)}, 5 if quick else 15)
    rows = [
        {
            "case": f"load one function of {functions} over {functions * per:,} tensors and "
            "call it / the same function in a bundle of its own (goal <= 1.2)",
            "s": res["big"][0],
            "ratio": res["big"][0] / res["alone"][0],
            "spread": res["big"][1],
        },
        *_one_function_phases(big, alone, res["big"][0] - res["alone"][0], 5 if quick else 15),
    ]
    rows.append(_cache_growth(tmp, quick))
    # Growth: seconds per tensor (one function) and per function (16 tensors each), each
    # against the smallest size on its axis: 1.0 is linear, above it grows faster.
    axes = {
        "tensor": [(1, 100), (1, 1000)] + ([] if quick else [(1, 10000)]),
        "function": [(1, 16), (4 if quick else 8, 16)] + ([] if quick else [(64, 16)]),
    }
    made = {s: _many_functions(tmp / f"usage-{s[0]}-{s[1]}", *s) for a in axes.values() for s in a}
    for what, fn in (
        ("inspect (summarize)", summarize),
        ("verify --quick (load)", hlobundle.load),
    ):
        times = interleaved({s: (lambda p=p: fn(p)) for s, p in made.items()}, 3 if quick else 7)
        for unit, sizes in axes.items():
            count = (lambda s: s[1]) if unit == "tensor" else (lambda s: s[0])  # noqa: E731
            first = times[sizes[0]][0] / count(sizes[0])
            for size in sizes[1:]:
                rows.append(
                    {
                        "case": f"{what}: {size[0]} function(s) of {size[1]:,} tensors, seconds "
                        f"per {unit} / at {count(sizes[0]):,} (1.0 = linear)",
                        "s": times[size][0],
                        "ratio": times[size][0] / count(size) / first,
                        "spread": times[size][1],
                    }
                )
    rows += _use_growth(made, axes["tensor"], 3 if quick else 7)
    return rows


def _use_growth(made: dict, sizes: list[tuple[int, int]], reps: int) -> list[dict]:
    """What a user does with every argument of a function of many (load, each tensor,
    `function("xla")`, the source of its script): seconds per argument against the smallest
    size, in process (1.0 = linear; each of four steps was quadratic once)."""
    import hlobundle

    def use(path: Path) -> None:
        b = hlobundle.load(path)
        for a in b.arguments:
            b.tensor(a.name)
        b.function("xla")
        hlobundle.emit_script(b, backend="xla")

    times = interleaved({s: (lambda p=made[s]: use(p)) for s in sizes}, reps)
    first = times[sizes[0]][0] / sizes[0][1]
    return [
        {
            "case": f"load, every tensor, function('xla') and emit_script: 1 function of "
            f"{size[1]:,} tensors, seconds per tensor / at {sizes[0][1]:,} (1.0 = linear)",
            "s": times[size][0],
            "ratio": times[size][0] / size[1] / first,
            "spread": times[size][1],
        }
        for size in sizes[1:]
    ]


def _gc_paused(step: Callable[[], object]) -> None:
    from hlobundle._read._gc import collector_paused

    with collector_paused():
        step()


def _one_function_phases(big: Path, alone: Path, extra: float, reps: int) -> list[dict]:
    """Where loading one function of the big bundle spends the time (`extra`) it takes beyond
    the bundle of its own: each whole-manifest step of `load`, and the whole load, timed alone
    on both (seconds: the big bundle's; ratio: its extra seconds / `extra`)."""
    import hlobundle
    from hlobundle._format import _manifest_json
    from hlobundle._read import _files, _manifest_records, _tensor_files

    def steps(path: Path) -> dict[str, Callable[[], object]]:
        raw = (path / "manifest.json").read_bytes()
        data = json.loads(raw)
        manifest = _manifest_json.parse_manifest(raw)  # 1.x (one function) or 2.x
        present = _files.files_of(manifest, ["f0"])
        digest = hashlib.sha256(raw).hexdigest()
        _manifest_records.parse(raw, digest, "m")  # its verdict remembered
        return {
            "JSON (limits, then json.loads)": lambda: _manifest_json._decode_json(raw, "m"),
            "the models (pydantic, every function; a first load's)": lambda: type(
                manifest
            ).model_validate(data),
            "the records from the manifest's remembered verdict (every function; a later "
            "load's)": lambda: _manifest_records.parse(raw, digest, "m"),
            "the tensor file's header, against every function's references": lambda: (
                _tensor_files.open_tensor_files(path, manifest, only=present)
            ),
            "the whole load (functions=['f0'])": lambda: hlobundle.load(path, functions=["f0"]),
        }

    def paused(step: Callable[[], object]) -> Callable[[], object]:
        return lambda: _gc_paused(step)  # as load() runs them (_read/_gc.py)

    mine, theirs = steps(big), steps(alone)
    timed = interleaved(
        {f"{k} big": paused(v) for k, v in mine.items()}
        | {f"{k} alone": paused(v) for k, v in theirs.items()},
        reps,
    )
    return [
        {
            "case": f"  in which: {k} (ratio: its extra seconds over the bundle of its own / "
            "those of the whole load and call)",
            "s": timed[f"{k} big"][0],
            "ratio": (timed[f"{k} big"][0] - timed[f"{k} alone"][0]) / extra,
        }
        for k in mine
    ]


def _cache_growth(tmp: Path, quick: bool) -> dict:
    """load() of the LeNet (its check verdicts recalled) with a cache holding 10,000 other
    verdicts, as a user's does after many bundles / with a cache holding its own alone."""
    import hlobundle
    from hlobundle._read import _cache

    example = ROOT / "examples" / "lenet5.hlobundle"
    roots = {"full": tmp / "cache-full", "own": tmp / "cache-own"}
    for root in roots.values():
        root.mkdir(mode=0o700)
        (root / "checks").mkdir(mode=0o700)
    for i in range(1000 if quick else 10_000):
        _cache.write(
            roots["full"] / "checks", hashlib.sha256(b"%d" % i).hexdigest(), b"{}", ".json"
        )

    def load(root: Path) -> None:
        before = os.environ.get("HLOBUNDLE_CACHE_DIR")
        os.environ["HLOBUNDLE_CACHE_DIR"] = str(root)
        try:
            hlobundle.load(example)
        finally:
            os.environ.pop("HLOBUNDLE_CACHE_DIR")
            if before is not None:
                os.environ["HLOBUNDLE_CACHE_DIR"] = before

    for root in roots.values():
        load(root)  # its own verdicts recorded
    res = interleaved({k: (lambda r=r: load(r)) for k, r in roots.items()}, 7 if quick else 31)
    return {
        "case": f"load() of the LeNet with {1000 if quick else 10_000:,} other verdicts in the "
        "cache / with its own alone (goal <= 1.1)",
        "s": res["full"][0],
        "ratio": res["full"][0] / res["own"][0],
        "spread": res["full"][1],
    }


def _serve_ready(bundles: list[Path]) -> tuple[float, int]:
    """Seconds from starting `hlobundle serve` on `bundles` (each NAME=PATH) to its readiness
    (every function compiled and warmed up), and its RSS then, in KiB."""
    import socket
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    named = [f"{b.name}={b}" for b in bundles]
    start = time.perf_counter()
    proc = subprocess.Popen(
        [PY, "-m", "hlobundle", "serve", *named, "--port", str(port), "--backend", "xla"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=user_env(),
    )
    try:
        for _ in range(6000):
            try:
                url = f"http://127.0.0.1:{port}/v2/health/ready"
                with urllib.request.urlopen(url, timeout=1):
                    return time.perf_counter() - start, _rss_kib(proc.pid)
            except OSError:  # not listening yet
                time.sleep(0.02)
        raise RuntimeError("the server did not start")
    finally:
        proc.terminate()
        proc.communicate(timeout=60)


def serve_many_cost(tmp: Path, quick: bool) -> list[dict]:
    """`serve` of 8 bundles of 8 functions each, against the sum of serving each alone: time to
    ready (each function compiled at start-up, one after another) and RSS (goal <= 1.2 each)."""
    count = 2 if quick else 8
    bundles = [_many_functions(tmp / f"serve-many-{k}", count, 4) for k in range(count)]
    together, alone = [], []
    for _ in range(1 if quick else 3):
        together.append(_serve_ready(bundles))
        alone.append([_serve_ready([b]) for b in bundles])
    med = statistics.median
    t_all, m_all = med(t for t, _ in together), med(m for _, m in together)
    t_sum = med(sum(t for t, _ in run) for run in alone)
    m_sum = med(sum(m for _, m in run) for run in alone)
    what = f"{count} bundles of {count} functions"
    return [
        {
            "case": f"serve {what}: seconds to ready / the sum of each served alone (goal <= 1.2)",
            "s": t_all,
            "ratio": t_all / t_sum,
        },
        {
            "case": f"serve {what}: RSS at ready (MiB) / the sum of each served alone (goal <= 1.2)",
            "s": m_all / 1024,
            "ratio": m_all / m_sum,
        },
    ]


# --- registries ---------------------------------------------------------------------------------


def _registry(tmp: Path) -> tuple[subprocess.Popen, str]:
    """CNCF distribution's `docker-registry serve` on loopback, storing under `tmp`."""
    import socket
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = tmp / "registry.yml"
    config.write_text(
        f"version: 0.1\nlog: {{level: error}}\nstorage: {{filesystem: "
        f"{{rootdirectory: {tmp / 'registry'}}}}}\nhttp: {{addr: 127.0.0.1:{port}}}\n"
    )
    process = subprocess.Popen(
        ["docker-registry", "serve", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(200):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=1).close()
            return process, f"127.0.0.1:{port}"
        except OSError:
            time.sleep(0.05)
    process.kill()
    raise RuntimeError("docker-registry did not start")


# VmHWM, not getrusage's ru_maxrss: that one survives exec, and is the forking parent's peak.
PULL_PEAK = """
import sys
import oras.provider
import hlobundle._oci._pull as p
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
start = status("VmRSS")
p.pull(sys.argv[1], sys.argv[2])
print(status("VmHWM") - start)
"""


def pull_cost(tmp: Path, quick: bool) -> list[dict]:
    """`hlobundle pull` (every blob hashed as it streams, the bundle then verified; the store
    emptied first, so every byte comes from the registry) / `oras pull` (oras' Python client, no digest
    checks) of the same artifact from a local registry; peak RSS of a pull above its start-up
    / the bundle's size (goal <= 0.1)."""
    import oras.provider

    import hlobundle

    size = 32 * 1024**2 if quick else 256 * 1024**2  # 1 GiB is too slow for this 2-core machine
    arrays = weights(size, 16)
    bundle = hlobundle.pack(module_for(arrays), arrays, tmp / "pull-big.hlobundle")
    del arrays
    process, host = _registry(tmp)
    # Every pull from the registry, as oras': the store of what earlier pulls put where is
    # emptied before each (the caches of check verdicts stay, as on a user's machine).
    cache = tmp / "pull-cache"
    os.environ["HLOBUNDLE_CACHE_DIR"] = str(cache)

    def no_store() -> None:
        for name in ("pulled", "blobs"):
            shutil.rmtree(cache / name, ignore_errors=True)

    try:
        ref = hlobundle.push(bundle, f"oci://{host}/bench/pull:v1").ref
        client = oras.provider.Registry(hostname=host, insecure=True)
        counter = iter(range(1000))

        def ours() -> None:
            no_store()
            hlobundle.pull(ref, tmp / f"ours-{next(counter)}.hlobundle")

        def theirs() -> None:
            client.pull(target=f"{host}/bench/pull:v1", outdir=str(tmp / f"oras-{next(counter)}"))

        res = interleaved({"hlobundle pull": ours, "oras pull": theirs}, 3 if quick else 7)
        out = tmp / "peak.hlobundle"
        no_store()
        r = subprocess.run(
            [PY, "-c", PULL_PEAK, ref, str(out)], capture_output=True, text=True, check=True
        )
        peak = int(r.stdout.split()[-1])
    finally:
        os.environ.pop("HLOBUNDLE_CACHE_DIR")
        process.terminate()
        process.wait()
    total = sum(p.stat().st_size for p in bundle.iterdir())
    base = res["oras pull"][0]
    mib = f"{total / 1024**2:.0f} MiB"
    return _new_version_pull(tmp, quick) + [
        {
            "case": f"hlobundle pull / oras pull, {mib} (goal <= 1.1)",
            "s": res["hlobundle pull"][0],
            "ratio": res["hlobundle pull"][0] / base,
            "spread": res["hlobundle pull"][1],
        },
        {"case": f"oras pull, {mib}", "s": base, "ratio": 1.0, "spread": res["oras pull"][1]},
        {
            "case": f"peak RSS of a pull above start-up / bundle size, {mib} (goal <= 0.1)",
            "s": "",
            "ratio": peak / total,
        },
    ]


def _sharded_bundle(out: Path, count: int, size: int, changed: int | None = None) -> Path:
    """`f(p, x) = sum of x @ p[wK]` over `count` weights of `size` bytes, each in a shard of its
    own; `changed`: that weight differs (a new version of the model)."""
    import hlobundle

    rows = 256
    params = {
        f"w{k}": np.full((rows, size // 4 // rows), k + (0.5 if k == changed else 0.0), np.float32)
        for k in range(count)
    }
    return hlobundle.export(
        lambda p, x: sum(x @ p[k] for k in sorted(p)),
        params,
        np.ones((1, rows), np.float32),
        out=out,
        roles={"p": "parameter"},
        max_shard_size=size + (1 << 20),
    )


def _new_version_pull(tmp: Path, quick: bool) -> list[dict]:
    """`pull` of a new version of a model of 10 weight shards, one changed, after the old one:
    bytes through loopback / the files that changed (the shard, the expected outputs)."""
    import hlobundle

    count, size = 10, (4 if quick else 100) * 1024**2
    old = _sharded_bundle(tmp / "shards-v1.hlobundle", count, size)
    new = _sharded_bundle(tmp / "shards-v2.hlobundle", count, size, changed=3)
    changed = sum(
        p.stat().st_size
        for p in new.iterdir()
        if p.name != "manifest.json" and (old / p.name).read_bytes() != p.read_bytes()
    )
    process, host = _registry(tmp)
    os.environ["HLOBUNDLE_CACHE_DIR"] = str(tmp / "store-pull")
    try:
        hlobundle.push(old, f"oci://{host}/bench/versions:v1")
        hlobundle.push(new, f"oci://{host}/bench/versions:v2")
        hlobundle.pull(f"oci://{host}/bench/versions:v1", tmp / "pulled-v1.hlobundle")
        before = _loopback_bytes()
        hlobundle.pull(f"oci://{host}/bench/versions:v2", tmp / "pulled-v2.hlobundle")
        moved = _loopback_bytes() - before
    finally:
        os.environ.pop("HLOBUNDLE_CACHE_DIR", None)
        process.terminate()
        process.wait()
    return [
        {
            "case": f"pull of a new version of {count} shards of {size // 1024**2} MiB, one "
            "changed, after the old one: bytes through loopback / the files that changed "
            "(goal <= 1.1)",
            "s": moved,
            "ratio": moved / changed,
        }
    ]


# --- remote loading -----------------------------------------------------------------------------


def _loopback_bytes() -> int:
    """Bytes through the loopback interface so far (/proc/net/dev, received side): what every
    connection on 127.0.0.1 carried, both directions, requests and headers included."""
    for line in Path("/proc/net/dev").read_text().splitlines():
        name, _, counters = line.partition(":")
        if name.strip() == "lo":
            return int(counters.split()[0])
    raise RuntimeError("no loopback interface in /proc/net/dev")


def _static_server(root: Path) -> tuple[Any, str]:
    """Starlette's StaticFiles (FileResponse honours Range) under uvicorn, in a thread, on a
    free loopback port: any HTTP server a bundle could be put on."""
    import socket
    import threading

    import uvicorn
    from starlette.applications import Starlette
    from starlette.routing import Mount
    from starlette.staticfiles import StaticFiles

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    app = Starlette(routes=[Mount("/", StaticFiles(directory=root))])
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.02)
    return server, f"http://127.0.0.1:{port}/"


def _functions_bundle(out: Path, count: int, size: int, changed: int | None = None) -> Path:
    """`count` functions `fK(p, x) = x @ p["wK"]` over one weights file, each weight `size`
    bytes; `changed`: that function's weight differs (a new version of the model)."""

    import hlobundle

    rows = 256
    cols = size // 4 // rows
    x = np.ones((2, rows), np.float32)
    for k in range(count):
        w = np.full((rows, cols), k + (0.5 if k == changed else 0.0), np.float32)
        hlobundle.export(
            lambda p, x, k=k: x @ p[f"w{k}"],
            {f"w{k}": w},
            x,
            out=out,
            name=f"f{k}",
            roles={"p": "parameter"},
            add=k > 0,
            force=k == 0,
        )
    return out


def _function_bytes(bundle: Path, name: str) -> int:
    """The bytes function `name` uses: its module files, stored examples and its weight."""
    manifest = json.loads((bundle / "manifest.json").read_bytes())
    (f,) = [f for f in manifest["functions"] if f["name"] == name]
    files = {f["module"]["text"], f["module"]["portable"]["file"]}
    files |= {a["value"]["file"] for a in f["arguments"] if a.get("value")}
    files |= {r["expected"]["file"] for r in f["results"] if r.get("expected")}
    files.discard("weights.safetensors")
    (w,) = [a for a in f["arguments"] if a["role"] == "parameter"]
    weight = int(np.prod(w["shape"])) * 4
    return sum(manifest["files"][n]["size"] for n in files) + weight


def remote_cost(tmp: Path, quick: bool) -> list[dict]:
    """`load(REF, functions=[one])` of a bundle of 10 functions over one weights file: bytes
    through loopback / the bytes that function uses (its module files, examples and weight;
    goal <= 1.1), over https:// (Starlette's StaticFiles) and oci:// (docker-registry); and a
    new version whose one function's weight changed, loaded whole after the old one: bytes /
    that weight (goal <= 1.1). Each load starts from an empty store but the last."""
    import hlobundle

    count, size = 10, (4 if quick else 100) * 1024**2
    root = tmp / "remote"
    root.mkdir()
    old = _functions_bundle(root / "v1.hlobundle", count, size)
    _functions_bundle(root / "v2.hlobundle", count, size, changed=3)
    used = _function_bytes(old, "f3")
    server, base = _static_server(root)
    process, host = _registry(tmp)
    rows = []
    try:
        ref = hlobundle.push(old, f"oci://{host}/bench/remote:v1").ref
        for label, where in (("https://", base + "v1.hlobundle/"), ("oci://", ref)):
            os.environ["HLOBUNDLE_CACHE_DIR"] = str(tmp / f"store-{label[:3]}")
            before = _loopback_bytes()
            hlobundle.load(where, functions=["f3"])
            moved = _loopback_bytes() - before
            rows.append(
                {
                    "case": f"load {label}, one function of 10 ({size // 1024**2} MiB weights "
                    "each): bytes / its module, examples and weight (goal <= 1.1)",
                    "bytes": moved,
                    "ratio": moved / used,
                    "baseline_bytes": used,
                }
            )
        os.environ["HLOBUNDLE_CACHE_DIR"] = str(tmp / "store-new")
        every = [f"f{k}" for k in range(count)]
        hlobundle.load(base + "v1.hlobundle/", functions=every)
        before = _loopback_bytes()
        hlobundle.load(base + "v2.hlobundle/", functions=every)
        moved = _loopback_bytes() - before
        rows.append(
            {
                "case": "load https:// of a new version, every function, after the old one: "
                "bytes / the one weight that changed (goal <= 1.1)",
                "bytes": moved,
                "ratio": moved / size,
                "baseline_bytes": size,
            }
        )
    finally:
        os.environ.pop("HLOBUNDLE_CACHE_DIR", None)
        server.should_exit = True
        process.terminate()
        process.wait()
    return rows


# --- serving ------------------------------------------------------------------------------------


# Where a served process listens: a loopback port, or the path of a unix socket (`serve --uds`).
Where = int | str


def _connection(where: Where, timeout: float | None = None) -> Any:
    """An http.client connection to the server at `where`, over TCP or a unix socket."""
    import http.client
    import socket

    if isinstance(where, int):
        return http.client.HTTPConnection("127.0.0.1", where, timeout=timeout)

    class UnixConnection(http.client.HTTPConnection):
        def connect(self) -> None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(timeout)
            self.sock.connect(where)

    return UnixConnection("localhost", timeout=timeout)


def _served(
    max_batch: int, uds: str | None = None, ready_s: float = 60.0, flags: tuple[str, ...] = ()
) -> tuple[subprocess.Popen, Where]:
    """`hlobundle serve` of the LeNet, batching up to `max_batch`, on a free loopback port or
    the unix socket `uds`, with `flags`, once it answers ready (within `ready_s`)."""
    import socket

    if uds is None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            where: Where = s.getsockname()[1]
        listen = ["--port", str(where)]
    else:
        where, listen = uds, ["--uds", uds]
    proc = subprocess.Popen(
        [
            PY,
            "-m",
            "hlobundle",
            "serve",
            str(ROOT / "examples" / "lenet5.hlobundle"),
            *listen,
            "--backend",
            "xla",
            "--max-batch-size",
            str(max_batch),
            "--trust-batched",
            *flags,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + ready_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            conn = _connection(where, timeout=1)
            conn.request("GET", "/v2/health/ready")
            if conn.getresponse().status == 200:
                return proc, where
        except OSError:  # not listening yet
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the server did not start")


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return int([line.split()[1] for line in f if line.startswith("VmRSS")][0])


def _load(
    where: Where,
    body: bytes,
    header: int,
    want: np.ndarray,
    clients: int,
    each: int,
    processes: bool = False,
) -> tuple[float, int]:
    """Requests per second from `clients` threads (or processes), each with its own keep-alive
    connection sending `each` binary requests; and how many answers were lost or wrong."""

    def client() -> int:
        conn, bad = _connection(where), 0
        for _ in range(each):
            conn.request(
                "POST",
                "/v2/models/lenet5/infer",
                body,
                {"Inference-Header-Content-Length": str(header)},
            )
            r = conn.getresponse()
            data = r.read()
            n = int(r.headers.get("Inference-Header-Content-Length", len(data)))
            got = np.frombuffer(data[n:], "<f4") if r.status == 200 else None
            if (
                got is None
                or got.size != want.size
                or not np.allclose(got, want, rtol=1e-5, atol=1e-6)
            ):
                bad += 1  # lost, or outside SPEC's float32 tolerance (batched: 1 ulp apart)
        return bad

    seconds, bad = (_in_processes if processes else _in_threads)(client, clients)
    return clients * each / seconds, bad


MODEL_BOUND = """
import json, sys, time
sys.path.insert(0, {here!r})
import numpy as np
import hlobundle
from hlobundle._serve._models import load_models
from run import interleaved
served = load_models([{bundle!r}], backend="xla", max_batch=16, trust=hlobundle.Trust.BATCHED)["lenet5"]
many = [{{"images": np.asarray(hlobundle.load({bundle!r}).tensor("images"))}}] * 16
fns = {{"one": lambda: [served(g) for g in many], "batched": lambda: served.call_many(many)}}
if {threads!r}:  # 16 calls at once, each in a thread, as serve runs a call over 1 ms unbatched
    from concurrent.futures import ThreadPoolExecutor
    pool = ThreadPoolExecutor(16)
    fns["threads"] = lambda: list(pool.map(served, many))
times = interleaved(fns, {reps})
print(json.dumps({{**{{k: v[0] for k, v in times.items()}}, "call_s": served.call_s}}))
"""


def _model_bound(served, images: np.ndarray, reps: int) -> tuple[list[dict], float, float]:
    """The most batching can give, with no request overhead at all: 16 requests' inputs in one
    call of the batched module (as the server makes it) against 16 calls; and the seconds per
    request of each. Measured in a fresh process set up as `serve`'s (no jax_enable_x64, which
    this process turns on, and a user's environment): the bound and the server's gain then
    come from the same configuration (issue 38: a bound measured here was 2.04x, 2.68x in a
    process of its own)."""
    code = MODEL_BOUND.format(
        here=str(ROOT / "benchmarks"),
        bundle=str(ROOT / "examples" / "lenet5.hlobundle"),
        reps=reps,
        threads=False,
    )
    times = json.loads(run_py(code)[1].strip().splitlines()[-1])
    one, batched = times["one"] / 16, times["batched"] / 16
    return (
        [
            {
                "case": "model only, a fresh process set up as serve's: 16 requests one by one / "
                "in one batched call (the bound on any batching gain)",
                "s": times["batched"],
                "ratio": one / batched,
            }
        ],
        one,
        batched,
    )


def _in_process_parts(served, body: bytes, header: bytes, reps: int) -> dict[str, float]:
    """Median seconds of each step of a request as the server takes it, warm, in this process:
    the model call, decoding the binary request, encoding the binary response, and the whole
    ASGI application (all three and the rest, no HTTP)."""
    import asyncio

    from hlobundle._serve import _app

    asgi, length = _app.app({"lenet5": served}), str(len(header))
    decoded = _app.decoded_body(served, body, length)
    outputs = served(decoded.given)
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v2/models/lenet5/infer",
        "headers": [
            (b"content-length", str(len(body)).encode()),
            (b"inference-header-content-length", length.encode()),
        ],
    }

    async def receive() -> dict:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict) -> None:
        pass

    loop = asyncio.new_event_loop()
    try:
        times = interleaved(
            {
                "model": lambda: served(decoded.given),
                "decode": lambda: _app.decoded_body(served, body, length),
                "encode": lambda: _app.encoded(served, decoded, outputs),
                "app": lambda: loop.run_until_complete(asgi(scope, receive, send)),
            },
            reps,
        )
    finally:
        loop.close()
    return {k: v[0] for k, v in times.items()}


def _latency(port: int, body: bytes, header: bytes, n: int) -> tuple[list[float], list[float]]:
    """Seconds of each binary inference request, and of each GET /v2/health/live between them
    (HTTP alone: uvicorn and http.client over loopback, no model), one client on one keep-alive
    connection, as clients connect."""
    import http.client

    conn, infer, live = http.client.HTTPConnection("127.0.0.1", port), [], []
    for _ in range(n):
        start = time.perf_counter()
        conn.request(
            "POST",
            "/v2/models/lenet5/infer",
            body,
            {"Inference-Header-Content-Length": str(len(header))},
        )
        conn.getresponse().read()
        infer.append(time.perf_counter() - start)
        start = time.perf_counter()
        conn.request("GET", "/v2/health/live")
        conn.getresponse().read()
        live.append(time.perf_counter() - start)
    conn.close()
    return infer, live


def _handler_mean_s(where: Where) -> float:
    """The server's own mean seconds per inference request, from body read to response built
    (its /metrics histogram hlobundle_request_seconds)."""
    return _metric_mean(where, "hlobundle_request_seconds")


def _metric_mean(where: Where, histogram: str) -> float:
    """The mean of the server's /metrics histogram `histogram` for the LeNet."""
    conn = _connection(where, timeout=10)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    values = {
        line.split("{")[0]: float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith(f"{histogram}_") and 'model="lenet5"' in line
    }
    return values[f"{histogram}_sum"] / values[f"{histogram}_count"]


def _ceiling(where: Where, clients: int, each: int, processes: bool = False) -> float:
    """Requests per second the same clients get from the server when no model runs at all: what
    HTTP on both sides costs, the most any batching could reach."""

    def client() -> int:
        conn = _connection(where)
        for _ in range(each):
            conn.request("GET", "/v2/health/live")
            conn.getresponse().read()
        return 0

    return clients * each / (_in_processes if processes else _in_threads)(client, clients)[0]


def _in_threads(client: Callable[[], int], clients: int) -> tuple[float, int]:
    """Seconds `clients` threads take to run `client` each, all started together, and the sum
    of what they return."""
    import threading

    results: list[int] = []
    threads = [threading.Thread(target=lambda: results.append(client())) for _ in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - start, sum(results)


def _in_processes(client: Callable[[], int], clients: int) -> tuple[float, int]:
    """As `_in_threads`, in forked processes (timed once all are forked): clients that share no
    interpreter lock, as a server's clients are."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    gate, results = ctx.Barrier(clients + 1), ctx.SimpleQueue()

    def run() -> None:
        gate.wait()
        results.put(client())

    procs = [ctx.Process(target=run) for _ in range(clients)]
    for p in procs:
        p.start()
    gate.wait()
    start = time.perf_counter()
    total = sum(results.get() for _ in procs)
    seconds = time.perf_counter() - start
    for p in procs:
        p.join()
    return seconds, total


def json_decode_cost(tmp: Path, quick: bool) -> list[dict]:
    """Decoding the shipped LeNet's JSON request (examples/lenet5.hlobundle's inputs, batch 4,
    3,136 float32 values), warm, in this process: orjson's parse (`_protocol._parsed`) / the
    standard library's (the decoder before it, kept as the fallback), and the whole decode of
    a request (`_app.decoded_body`: parse, checks, arrays) with each."""
    from unittest import mock

    import hlobundle
    from hlobundle._serve import _app, _protocol
    from hlobundle._serve._models import load_models

    path = ROOT / "examples" / "lenet5.hlobundle"
    images = np.asarray(hlobundle.load(path).tensor("images"))
    body = json.dumps(
        {
            "inputs": [
                {
                    "name": "images",
                    "shape": list(images.shape),
                    "datatype": "FP32",
                    "data": images.ravel().tolist(),
                }
            ]
        }
    ).encode()
    served = load_models([str(path)], backend="xla")["lenet5"]

    old_parse = _protocol._parsed_exactly  # nesting checked, then the standard library

    def old_decode() -> object:
        with mock.patch.object(_protocol, "_parsed", old_parse):
            return _app.decoded_body(served, body, None)

    reps = 50 if quick else 500
    times = interleaved(
        {
            "parse": lambda: _protocol._parsed(body),
            "old parse": lambda: old_parse(body),
            "decode": lambda: _app.decoded_body(served, body, None),
            "old decode": old_decode,
        },
        reps,
    )
    t = {k: v[0] for k, v in times.items()}
    return [
        {
            "case": f"parse the JSON ({len(body)} bytes): orjson / the standard library (s: orjson)",
            "s": t["parse"],
            "ratio": t["parse"] / t["old parse"],
        },
        {
            "case": "parse the JSON: the standard library (the decoder before orjson)",
            "s": t["old parse"],
            "ratio": 1.0,
        },
        {
            "case": "decode the request (parse, checks, the array): with orjson / with the "
            "standard library (s: with orjson)",
            "s": t["decode"],
            "ratio": t["decode"] / t["old decode"],
        },
        {
            "case": "decode the request with the standard library's parse (the same checks)",
            "s": t["old decode"],
            "ratio": 1.0,
        },
    ]


def serve_cost(tmp: Path, quick: bool) -> list[dict]:
    """`hlobundle serve` over loopback: latency over an in-process call, and where it goes;
    throughput with and without dynamic batching under 16 concurrent clients, against the bound
    the model sets; and a bounded load test (none lost or wrong, RSS flat). The clients
    are threads of this process, sharing its 2 cores with the server."""
    import jax

    import hlobundle
    from hlobundle._serve._models import load_models

    bundle = hlobundle.load(ROOT / "examples" / "lenet5.hlobundle")
    images = np.asarray(bundle.tensor("images"))
    fn = jax.jit(bundle.function("xla"))
    args = bundle.example_args()
    want = np.asarray(fn(*args)).reshape(-1)
    header, body = _binary_request(images)
    n = 200 if quick else 1000
    local = []
    for _ in range(n):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        local.append(time.perf_counter() - start)
    served = load_models(
        [str(ROOT / "examples" / "lenet5.hlobundle")],
        backend="xla",
        max_batch=16,
        trust=hlobundle.Trust.BATCHED,
    )["lenet5"]
    rows, one_s, batched_s = _model_bound(served, images, n // 10)
    parts = _in_process_parts(served, body, header, n)
    proc, port = _served(1)
    try:
        remote, live = _latency(port, body, header, n)
        handler = _handler_mean_s(port)
        unbatched, _ = _load(port, body, len(header), want, 16, 25 if quick else 125)
        ceiling = _ceiling(port, 16, 25 if quick else 125)
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
    proc, port = _served(16)
    try:
        batched, _ = _load(port, body, len(header), want, 16, 25 if quick else 125)
        total = 1600 if quick else 10_000
        before = _rss_kib(proc.pid)
        _, wrong = _load(port, body, len(header), want, 16, total // 16)
        after = _rss_kib(proc.pid)
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
    p50, base = float(np.median(remote)), float(np.median(local))
    for q in (50, 99):
        over = float(np.percentile(remote, q) - np.percentile(local, q))
        rows.append(
            {
                "case": f"request p{q}, LeNet batch 4 (binary, keep-alive): s, and s over the in-process call"
                + (" (goal <= 0.0005)" if q == 50 else ""),
                "s": float(np.percentile(remote, q)),
                "ratio": over,
            }
        )
    share = "s, and its share of the request p50"
    rows += [
        {"case": "in-process jitted call p50 (the baseline)", "s": base, "ratio": 0.0},
        {
            "case": f"in which: HTTP alone, GET /v2/health/live p50 between the requests ({share})",
            "s": float(np.median(live)),
            "ratio": float(np.median(live)) / p50,
        },
        {
            "case": f"in which: the server's handler, mean from its /metrics: body read to response built, model included ({share})",
            "s": handler,
            "ratio": handler / p50,
        },
        {
            "case": f"in which, in process and warm: the model call as served ({share})",
            "s": parts["model"],
            "ratio": parts["model"] / p50,
        },
        {
            "case": f"in which, in process and warm: decode the binary request ({share})",
            "s": parts["decode"],
            "ratio": parts["decode"] / p50,
        },
        {
            "case": f"in which, in process and warm: encode the binary response ({share})",
            "s": parts["encode"],
            "ratio": parts["encode"] / p50,
        },
        {
            "case": f"in which, in process and warm: the whole ASGI app, no HTTP ({share})",
            "s": parts["app"],
            "ratio": parts["app"] / p50,
        },
    ]
    bound = one_s / batched_s
    rows += [
        {
            "case": "throughput, 16 concurrent clients, no batching (requests/s)",
            "s": unbatched,
            "ratio": 1.0,
        },
        {
            "case": "throughput, 16 concurrent clients, dynamic batching up to 16 (requests/s; ratio: over no batching)",
            "s": batched,
            "ratio": batched / unbatched,
        },
        {
            "case": "batching gain / the model-only bound (goal >= 0.8)",
            "s": batched / unbatched,
            "ratio": batched / unbatched / bound,
        },
        {
            "case": "ceiling: GET /v2/health/live, no model call, same clients (requests/s)",
            "s": ceiling,
            "ratio": ceiling / unbatched,
        },
        {
            "case": f"load test: {total} requests from 16 clients: wrong or lost",
            "s": float(wrong),
            "ratio": 0.0,
        },
        {
            "case": "load test: server RSS (MiB) at the end / after warm-up (goal within 1.1)",
            "s": after / 1024,
            "ratio": after / before,
        },
    ]
    return rows


def _binary_request(images: np.ndarray) -> tuple[bytes, bytes]:
    """The LeNet's binary inference request (the binary extension both ways): its JSON header,
    and the whole body."""
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "images",
                    "shape": list(images.shape),
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": images.nbytes},
                }
            ],
            "outputs": [{"name": "result", "parameters": {"binary_data": True}}],
        }
    ).encode()
    return header, header + images.astype("<f4").tobytes()


def _answer(where: Where, body: bytes, header: bytes) -> np.ndarray:
    """The result of one binary request (float32, flat)."""
    conn = _connection(where)
    conn.request(
        "POST",
        "/v2/models/lenet5/infer",
        body,
        {"Inference-Header-Content-Length": str(len(header))},
    )
    r = conn.getresponse()
    data = r.read()
    conn.close()
    if r.status != 200:
        raise RuntimeError(f"the server answered {r.status}: {data[:300]!r}")
    return np.frombuffer(data[int(r.headers["Inference-Header-Content-Length"]) :], "<f4")


# What the model-only bound's fresh process gets beside a user's environment: where the
# package and jax are (a machine where nothing is installed, as the TPU hosts) and the
# accelerator's settings.
_PASSED = ("PYTHONPATH", "JAX_PLATFORMS")


def _accelerator_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k in _PASSED or k.startswith("TPU_")}


# The servers serve_uds_cost asks in turn: a name, --max-batch-size, other flags.
SERVED_OVER_UDS = (
    ("one", 1, ()),
    ("batched", 16, ()),
    ("batched, waiting 10 ms", 16, ("--batch-timeout-ms", "10")),
)


def serve_uds_cost(tmp: Path, quick: bool) -> list[dict]:
    """The batching gain of `hlobundle serve --uds` (REST over a unix socket, no TCP socket at
    all: it runs on hosts that allow none, the TPU machines), 16 clients, against the
    model-only bound, as `serve` measures it over loopback; the clients are threads of this
    process, as there, and then forked processes, which share no interpreter lock (HTTP on the
    clients' side then costs less than the model's batched call on a TPU). Nothing here runs a model in this
    process: the bound's process, then each server, hold the accelerator in turn (one program
    at a time can hold a TPU chip). A wrong answer is one that differs from the unbatched
    server's."""
    images_file = tmp / "uds-images.npy"
    code = MODEL_BOUND.format(
        here=str(ROOT / "benchmarks"),
        bundle=str(ROOT / "examples" / "lenet5.hlobundle"),
        reps=20 if quick else 100,
        threads=True,
    )
    code += f"np.save({str(images_file)!r}, many[0]['images'])\n"
    times = json.loads(run_py(code, _accelerator_env())[1].strip().splitlines()[-1])
    bound = times["one"] / times["batched"]
    header, body = _binary_request(np.load(images_file))
    each = 25 if quick else 125
    runs: dict[str, dict[str, float]] = {}
    want = None
    for name, max_batch, flags in SERVED_OVER_UDS:
        path = str(tmp / f"uds-{len(runs)}.sock")
        proc, where = _served(max_batch, uds=path, ready_s=600, flags=flags)
        try:
            want = _answer(where, body, header) if want is None else want
            runs[name] = _uds_run(where, body, len(header), want, each, max_batch > 1)
        finally:
            proc.terminate()
            proc.communicate(timeout=60)
    rows = [
        {
            "case": "model only, a fresh process set up as serve's: 16 requests one by one / "
            "in one batched call (the bound on any batching gain)",
            "s": times["batched"],
            "ratio": bound,
        },
        _concurrent_bound(times, runs),
    ]
    for kind in ("threads", "processes"):
        rows += _uds_rows(runs, kind, bound)
    wrong = sum(run["wrong threads"] + run["wrong processes"] for run in runs.values())
    rows.append(
        {
            "case": f"answers lost or not the unbatched server's, of {len(runs) * 32 * each}",
            "s": float(wrong),
            "ratio": 0.0,
        }
    )
    return rows


def _concurrent_bound(times: dict[str, float], runs: dict[str, dict[str, float]]) -> dict:
    """The bound against what an unbatched server itself does with 16 concurrent requests: it
    runs a model whose call took over `_app.INLINE_CALL_S` in threads, whose calls overlap on an
    accelerator (a TPU's transfers and dispatch); ratio: 16 such calls / one batched call; s:
    the processes' batched gain / this bound."""
    from hlobundle._serve._app import INLINE_CALL_S

    threaded = times["call_s"] is not None and times["call_s"] > INLINE_CALL_S
    gain = runs["batched"]["rate processes"] / runs["one"]["rate processes"]
    bound = times["threads"] / times["batched"]
    return {
        "case": f"model only: 16 requests in 16 threads / in one batched call (the bound "
        f"against an unbatched server that {'runs' if threaded else 'would run'} its calls in "
        f"threads: its warm call took {times['call_s'] * 1e3:.2f} ms); s: the processes' "
        "batched gain / this bound",
        "s": gain / bound,
        "ratio": bound,
    }


def _uds_run(
    where: Where, body: bytes, header: int, want: np.ndarray, each: int, batching: bool
) -> dict[str, float]:
    """One server's figures under 16 clients, threads of this process and forked processes:
    requests/s, answers wrong, the no-model ceiling, and the mean batch it ran."""
    run = {}
    for kind in ("threads", "processes"):
        forked = kind == "processes"
        rate, wrong = _load(where, body, header, want, 16, each, processes=forked)
        run[f"rate {kind}"], run[f"wrong {kind}"] = rate, wrong
        run[f"ceiling {kind}"] = _ceiling(where, 16, each, processes=forked)
    run["batch"] = _metric_mean(where, "hlobundle_batch_size") if batching else 1.0
    return run


def _uds_rows(runs: dict[str, dict[str, float]], kind: str, bound: float) -> list[dict]:
    """The rows of one kind of client (threads of the benchmark or processes)."""
    unbatched = runs["one"][f"rate {kind}"]
    ceiling = runs["one"][f"ceiling {kind}"] / unbatched
    rows = [
        {
            "case": f"{kind}: no batching (requests/s)",
            "s": unbatched,
            "ratio": 1.0,
        },
        {
            "case": f"{kind}: ceiling, GET /v2/health/live, no model call (requests/s; ratio: "
            "over no batching)",
            "s": runs["one"][f"ceiling {kind}"],
            "ratio": ceiling,
        },
    ]
    for name in ("batched", "batched, waiting 10 ms"):
        gain = runs[name][f"rate {kind}"] / unbatched
        rows += [
            {
                "case": f"{kind}: {name} (requests/s; ratio: over no batching; mean batch "
                f"{runs[name]['batch']:.1f} of 16, over both kinds of client)",
                "s": runs[name][f"rate {kind}"],
                "ratio": gain,
            },
            {
                "case": f"{kind}: {name}: gain / the model-only bound (goal >= 0.8); s: gain "
                "/ the most this HTTP allows (the smaller of the bound and the ceiling)",
                "s": gain / min(bound, ceiling),
                "ratio": gain / bound,
            },
        ]
    return rows


# --- the engines side by side (peers.py, ray_scaling.py) ---------------------------------------


def peers_cost(tmp: Path, quick: bool) -> list[dict]:
    """peers.py: hlobundle serve beside MLServer and KServe, each in its own environment, in a
    network namespace of loopback alone (KServe binds every interface; `unshare` needs root,
    as .ci/run has)."""
    out = tmp / "peers.json"
    script = f"ip link set lo up && exec {PY} {ROOT / 'benchmarks' / 'peers.py'} {out}"
    command = [
        "unshare",
        "--net",
        "--fork",
        "--",
        "sh",
        "-c",
        script + (" --quick" if quick else ""),
    ]
    r = subprocess.run(command, capture_output=True, text=True)
    if r.returncode != 0:
        why = (r.stderr.strip().splitlines() or ["?"])[-1][:200]
        return [{"case": f"not measured: {why}", "s": "", "ratio": ""}]
    return json.loads(out.read_text())


def ray_cost(tmp: Path, quick: bool) -> list[dict]:
    """ray_scaling.py, in Ray's environment (.venv-ray): Ray Data on 2 actors / this process
    alone, and Ray Serve with 2 replicas / 1, on the LeNet with a symbolic batch."""
    import peers

    python = peers.venv_python("ray")
    if python is None:
        return [
            {
                "case": "not measured: no .venv-ray (pip install -e '.[ray-tests]')",
                "s": "",
                "ratio": "",
            }
        ]
    bundle, out = peers.symbolic_lenet(tmp / "ray-lenet.hlobundle"), tmp / "ray.json"
    command = [str(python), str(ROOT / "benchmarks" / "ray_scaling.py"), str(bundle), str(out)]
    subprocess.run(command + (["--quick"] if quick else []), capture_output=True, check=True)
    got = json.loads(out.read_text())
    rows, cpus = got["rows"], got["cpus"]
    return [
        {
            "case": f"Ray Data, {rows} rows of one image, 2 actors on {cpus} CPUs: rows/s, and / one process without Ray",
            "s": got["data_two_workers"],
            "ratio": got["data_two_workers"] / got["data_one_process"],
        },
        {
            "case": "one process, the same predictor over the same batches: rows/s",
            "s": got["data_one_process"],
            "ratio": 1.0,
        },
        {
            "case": "Ray Serve, JSON, 8 clients, 2 replicas: requests/s, and / 1 replica",
            "s": got["serve_2"],
            "ratio": got["serve_2"] / got["serve_1"],
        },
        {"case": "Ray Serve, 1 replica: requests/s", "s": got["serve_1"], "ratio": 1.0},
    ]


# --- the language model (examples/lm.hlobundle) ------------------------------------------------


def lm_cost(tmp: Path, quick: bool) -> list[dict]:
    """Decode per token through the committed bundle under jit / native jax.jit of lm.decode
    (goal <= 1.05), at batch 1 and 8; and its tensor bytes / one copy of the weights plus the
    stored examples (goal <= 1.02)."""
    import jax
    import lm

    import hlobundle

    path = ROOT / "examples" / "lm.hlobundle"
    bundle = hlobundle.load(path)
    params = jax.device_put(bundle.select("decode").example_args()[0])
    rows = []
    for batch in (1, 8):
        tokens = np.random.default_rng(0).integers(32, 127, (batch, 16)).astype(np.int32)
        _, cache = jax.jit(lm.prefill)(params, tokens)
        token = jax.device_put(tokens[:, -1])
        native = jax.jit(lm.decode)
        fns = {
            "native jax.jit": lambda n=native, c=cache, t=token: jax.block_until_ready(
                n(params, c, t)
            )
        }
        for backend in ("enzyme", "xla"):
            f = bundle.function(backend, name="decode")
            j = jax.jit(lambda p, c, t, f=f: f(p, c, t))
            fns[backend] = lambda j=j, c=cache, t=token: jax.block_until_ready(j(params, c, t))
        for f in fns.values():
            f()  # compile
        res = interleaved(fns, 30 if quick else 300)
        base = res["native jax.jit"][0]
        for backend in ("enzyme", "xla"):
            rows.append(
                {
                    "case": f"decode one token, batch {batch}",
                    "backend": backend,
                    "native_s": base,
                    "bundle_s": res[backend][0],
                    "ratio": res[backend][0] / base,
                    "spread": res[backend][1],
                }
            )
    size = lm.storage(path)
    rows.append(
        {
            "case": "tensor bytes / (one copy of the weights + stored examples)",
            "backend": "",
            "native_s": "",
            "bundle_s": "",
            "ratio": size["stored"] / (size["weights"] + size["examples"]),
            "spread": "",
        }
    )
    return rows


# --- report -------------------------------------------------------------------------------------


def table(rows: list[dict]) -> str:
    if not rows:
        return ""
    keys = list(dict.fromkeys(k for r in rows for k in r))
    fmt = lambda v: f"{v:.3g}" if isinstance(v, float) else str(v)  # noqa: E731
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(fmt(r.get(k, "")) for k in keys) + " |" for r in rows]
    return "\n".join(lines)


def sections_of(tmp: Path, quick: bool) -> dict[str, Callable[[], list[tuple[str, list[dict]]]]]:
    """Each benchmark by a short name (for --only), giving its titled tables."""

    def one(
        title: str, fn: Callable[[Path, bool], list[dict]]
    ) -> Callable[[], list[tuple[str, list[dict]]]]:
        return lambda: [(title, fn(tmp, quick))]

    def load_pack() -> list[tuple[str, list[dict]]]:
        load_rows, pack_rows = load_and_pack(tmp, quick)
        return [
            (
                "Load to device-ready arrays: speedup over the baseline (goal >= 3); peak RSS / weights (goal <= 1.2)",
                load_rows,
            ),
            (
                "Pack with checksums: ratio, median time / median safetensors save_file; "
                "fastest_vs_save_file_fsync, fastest run / fastest safetensors save_file + fsync "
                "(goal <= 1.3; fastest runs, as disk writeback swings the medians); in which: "
                "the phases of the fastest pack, their seconds and their part of that ratio",
                pack_rows,
            ),
        ]

    return {
        "overhead": one(
            "Run overhead: bundle function under jit / native jax.jit of the same JAX function (goal <= 1.02)",
            overhead,
        ),
        "vmap": one(
            "vmap: time / native jax.vmap of the same function. A loop, unless the bundle has a "
            "batched module for the mapped arguments (export(..., vmap_in_axes=...)), or its "
            "rows are declared independent along a symbolic batch (SPEC.md 2.13; "
            "export(..., independent_rows='b')) and trusted: then one call of 16 x 4 rows",
            vmap_cost,
        ),
        "first": one(
            "Time to first result, fresh process (goals: ratio <= 1 with no cache; a second run <= 1.25x the import floor)",
            first_result,
        ),
        "iree": one(
            "IREE: time to first result, fresh process, stored executable / xla backend with a "
            "warm compile cache (goal <= 0.5)",
            iree_first_result,
        ),
        "first-result-executable": one(
            "XLA: time to first result, fresh process, transformer of a few layers: a cold "
            "compile, JAX's warm persistent cache, the bundle's stored XLA executable (trusted)",
            xla_first_result,
        ),
        "pack": load_pack,
        "column": one("Column-major packing: peak RSS above start-up / weights", column_major),
        "startup": lambda: [
            (
                "Start-up: time / `python -c pass` (inspect and verify parse and check the modules "
                "with jaxlib's MLIR bindings, as load() does, without jax)",
                startup(),
            )
        ],
        "scale": one("Scale: a sparse bundle of many GiB", scale),
        "lm": one(
            "Language model (examples/lm.hlobundle): decode per token under jit / native jax.jit "
            "(goal <= 1.05); tensor bytes / one copy of the weights + examples (goal <= 1.02)",
            lm_cost,
        ),
        "trust": one(
            "Trust: load() and verify --quick of the checking reader / the reader before it",
            trust_cost,
        ),
        "children": one(
            "Untrusted artifacts in a child process: a fork of one server / a fresh process each",
            children_cost,
        ),
        "foreign": one(
            "Verify of a bundle another jaxlib wrote (whole process, no verdict cached): the "
            "reader's forks of one server / a fresh process per artifact",
            foreign_verify_cost,
        ),
        "sign": one(
            "Signing and full verify: sign / a full verify of the same bundle; each / one core's sha256 of "
            "the tensor file (the bound: a file's sha256 is one sequential pass)",
            sign_cost,
        ),
        "usage": one(
            "Cost that grows with what is used: one function of a big bundle, and the reading "
            "commands as the manifest grows",
            usage_cost,
        ),
        "serve-many": one(
            "Serving many bundles: one server against each bundle served alone",
            serve_many_cost,
        ),
        "pull": one(
            "Pull from a local registry (docker-registry): time / oras pull of the same artifact; "
            "peak RSS above start-up / bundle size",
            pull_cost,
        ),
        "remote": one(
            "Remote loading: bytes fetched / the bytes the function uses (loopback counters)",
            remote_cost,
        ),
        "serve": one(
            "Serving (hlobundle serve; clients: threads of the benchmark, http.client over loopback): "
            "latency (ratio column: seconds over the in-process call), throughput, load",
            serve_cost,
        ),
        "serve-uds": one(
            "Serving over a unix socket (hlobundle serve --uds; no TCP socket at all): dynamic "
            "batching's gain, 16 clients (http.client; threads of the benchmark, then forked "
            "processes), against the model-only bound",
            serve_uds_cost,
        ),
        "peers": one(
            "Serving beside the engines (peers.py): the LeNet with a symbolic batch, the same "
            "request bytes and client (8 threads, keep-alive) against hlobundle serve, MLServer "
            "1.7.1 and KServe 0.21, each through hlobundle's adapter in its own environment; "
            "medians of interleaved rounds",
            peers_cost,
        ),
        "ray": one(
            "Ray (ray_scaling.py, Ray 2.60 on this machine): Ray Data scoring and Ray Serve replicas",
            ray_cost,
        ),
        "json": one(
            "Serving: decoding the LeNet JSON request (batch 4), warm, in process: with orjson / "
            "with the standard library (the decoder before it)",
            json_decode_cost,
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated section names; prints them and writes --out only if given",
    )
    parser.add_argument("--out", default=None, help="default: benchmarks/RESULTS.md for a full run")
    args = parser.parse_args()
    import jax

    jax.config.update("jax_enable_x64", True)
    # The package's bytecode, as `pip install` compiles it (this machine sets
    # PYTHONDONTWRITEBYTECODE, so an editable checkout would otherwise compile every import).
    compileall.compile_dir(ROOT / "hlobundle", quiet=1)
    tmp = Path(tempfile.mkdtemp(prefix="hlobundle-bench-"))
    try:
        available = sections_of(tmp, args.quick)
        chosen = [name for name in args.only.split(",") if name] or list(available)
        unknown = [name for name in chosen if name not in available]
        if unknown:
            parser.error(f"unknown sections {unknown}; choose from {list(available)}")
        sections = [section for name in chosen for section in available[name]()]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, jax {jax.__version__}"
    body = "\n\n".join(f"## {title}\n\n{table(rows)}" for title, rows in sections)
    text = (
        textwrap.dedent(f"""\
        # Benchmark results

        Generated by `python benchmarks/run.py{" --quick" if args.quick else ""}` on {time.strftime("%Y-%m-%d")}: {machine}.
        Ratios compare against a baseline measured in the same run; medians of interleaved repetitions;
        "spread" is (max - min) / median of the bundle's times.

        """)
        + body
        + "\n"
    )
    out = args.out or (None if args.only else str(ROOT / "benchmarks" / "RESULTS.md"))
    if out:
        Path(out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()

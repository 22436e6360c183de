"""Relabelling fuzzing of symbolic manifests (SPEC.md 2.8): the manifest's word against the module.

    python fuzz/fuzz_shapes.py --runs 10000 --jobs 2

The seed is a 2.0 bundle of four functions with symbolic dimensions: three from jax.export
(whose modules assert what their exporter assumed) and one hand-written `add` of two
`tensor<?x3xf32>` (no assertion at all: what IREE would run past a buffer). Each run relabels
the manifest of one function: a symbol of an argument or a result becomes another symbol, a
new one or an expression (`2*b`, `b + 1`), a constraint is added or dropped. It then calls the
function on the xla or iree backend (and enzyme where it is installed), with shapes that bind
the relabelled symbols, sometimes one dimension off. The allowed outcomes:

- an `HloBundleError` (the relabelled manifest refused at load, or the call's shapes refused);
- results equal to the seed's own function on the same inputs, when the seed's manifest (the
  module's real requirements) accepts those shapes.

A result for shapes the seed refuses, a result that differs from the seed's, any other
exception, or a worker that dies is a finding, reported with its case; the exit status is 1.
The test suite runs 300 of these (`tests/test_hostile.py`).
"""

from __future__ import annotations

import collections
import json
import random
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

import hlobundle

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fuzz_forms  # noqa: E402  (the worker driver, shared)

SYMBOLS = ("b", "c", "s", "z")
W = np.linspace(-1, 1, 24, dtype=np.float32).reshape(8, 3)


def seed_bundle(root: Path) -> Path:
    """pair(x: [b, 8], y: [b, 3]), cat(x: [b, 4], y: [c, 4]) -> [b + c, 4],
    twice(x: [b, 2]) -> [2*b, 2], and the hand-written add(x: [b, 3], y: [b, 3])."""
    import jax.numpy as jnp

    from hlobundle._write._functions import add_function
    from hlobundle._write._writer import PackOptions, pack_planned

    out = root / "seed"
    hlobundle.export(
        lambda x, y: (x @ W) * y,
        np.ones((2, 8), np.float32),
        np.ones((2, 3), np.float32),
        out=out,
        name="pair",
        shapes_specs=("b, 8", "b, 3"),
    )
    hlobundle.export(
        lambda x, y: jnp.concatenate([x, y]),
        np.ones((2, 4), np.float32),
        np.ones((3, 4), np.float32),
        out=out,
        name="cat",
        shapes_specs=("b, 4", "c, 4"),
        add=True,
    )
    hlobundle.export(
        lambda x: jnp.concatenate([x, 2 * x]),
        np.ones((2, 2), np.float32),
        out=out,
        name="twice",
        shapes_specs=("b, 2",),
        add=True,
    )
    t = "tensor<?x3xf32>"
    text = (
        f"func.func @main(%x: {t}, %y: {t}) -> {t} {{\n"
        f"  %z = stablehlo.add %x, %y : {t}\n  return %z : {t}\n}}\n"
    )
    options = PackOptions(
        names=["x", "y"],
        result_names=["z"],
        function="add",
        shapes=[["b", 3], ["b", 3]],
        result_shapes=[["b", 3]],
    )
    add_function(out, pack_planned(text, None, root / "add", options))
    shutil.rmtree(root / "add")
    _without_values(out)
    return out


def _without_values(bundle: Path) -> None:
    """No stored values: a stored example binds the symbols at load, which relabelling would
    only make the loader refuse (`TENSOR_MISMATCH`), never reaching a call."""
    path = bundle / "manifest.json"
    m = json.loads(path.read_text())
    for f in m["functions"]:
        for v in [*f["arguments"], *f["results"]]:
            v.pop("value", None)
            v.pop("expected", None)
    for name in [n for n in m["files"] if n.endswith(".safetensors")]:
        del m["files"][name]
        (bundle / name).unlink()
    path.write_text(json.dumps(m))


def _dimension(rng: random.Random) -> str:
    s = rng.choice(SYMBOLS)
    return rng.choice([s, s, s, f"2*{s}", f"{s} + 1"])


def relabel(function: dict[str, Any], rng: random.Random) -> str:
    """Change one to three symbols or constraints of `function` (a manifest entry)."""
    done = []
    for _ in range(rng.randint(1, 3)):
        kind = rng.choice(["argument", "argument", "result", "constraint", "drop"])
        if kind == "drop":
            function.pop("constraints", None)
            done.append("drop constraints")
            continue
        if kind == "constraint":
            s, t = rng.sample(SYMBOLS[:3], 2)
            text = rng.choice(
                [
                    f"{s} >= {rng.randint(1, 4)}",
                    f"{s} <= {rng.randint(1, 4)}",
                    f"{s} == {t}",
                    f"{s} >= {t}",
                ]
            )
            function.setdefault("constraints", []).append(text)
            done.append(f"constraint {text}")
            continue
        values = function["arguments" if kind == "argument" else "results"]
        value = rng.choice(values)
        dims = [k for k, d in enumerate(value["shape"]) if isinstance(d, str)]
        if not dims:
            continue
        k = rng.choice(dims)
        value["shape"][k] = new = _dimension(rng)
        done.append(f"{value['name']}.shape[{k}] = {new}")
    return "; ".join(done) or "nothing"


def call_shapes(manifest: Any, rng: random.Random) -> list[tuple[int, ...]]:
    """Shapes binding the manifest's symbols (each 1 to 5), one dimension off in a fifth."""
    from hlobundle._format import _symbolic

    env = {s: rng.randint(1, 5) for s in SYMBOLS}
    shapes = [
        [d if isinstance(d, int) else _symbolic.parse(d).value(env) for d in a.shape]
        for a in manifest.arguments
    ]
    if rng.random() < 0.2:
        shape = rng.choice(shapes)
        shape[0] = max(1, shape[0] + rng.choice([-1, 1, 2]))
    return [tuple(s) for s in shapes]


def attempt(bundle: Path, reference: hlobundle.Function, backend: str, rng: random.Random) -> str:
    """The outcome: "ok" (results equal to `reference`'s, the seed's own function on the xla
    backend) or the error code. A finding raises."""
    name = reference.manifest.function
    try:
        b = hlobundle.load(bundle).select(name)
        b.verify()
        shapes = call_shapes(b.manifest, rng)
        args = [np.asarray(rng.choice([0.5, 1.0, 2.0]) * np.ones(s, np.float32)) for s in shapes]
        got = [np.asarray(x) for x in b.function(backend).call_flat(*args)]
    except hlobundle.HloBundleError as e:
        return e.code
    try:
        want = [np.asarray(x) for x in reference.call_flat(*args)]
    except hlobundle.InputError as e:
        raise AssertionError(f"a result for shapes {shapes}, which the module refuses: {e}") from e
    for g, w in zip(got, want, strict=True):
        if g.shape != w.shape or not np.allclose(g, w, rtol=1e-5, atol=1e-5):
            raise AssertionError(
                f"shapes {shapes}: got {g.shape} {g.ravel()[:6]}, "
                f"the module computes {w.shape} {w.ravel()[:6]}"
            )
    return "ok"


def backends() -> list[str]:
    from hlobundle._run import _backends

    iree = _backends.kind("iree").available()
    return (
        ["xla", "iree"] * iree
        + ["xla"] * (not iree)
        + (["enzyme"] if _backends.kind("enzyme").available() else [])
    )


def work(seed: Path, first: int, runs: int, progress: Path) -> collections.Counter[str]:
    import jax

    jax.config.update("jax_platforms", "cpu")
    # JAX's persistent compilation cache, as every `hlobundle` command has it: a relabelled
    # manifest is a new function each case, whose call compiles the same module for the same
    # shapes as an earlier case's.
    hlobundle.configure_jax(x64=False)
    names = hlobundle.load(seed).functions
    # One function per name, made once: what it compiled for a shape is reused by later cases.
    references = {n: hlobundle.load(seed).select(n).function("xla", max_shapes=1000) for n in names}
    choices = backends()
    outcomes: collections.Counter[str] = collections.Counter()
    scratch = Path(tempfile.mkdtemp(prefix="fuzz-shapes-"))
    # One copy of the seed for every case: a case writes only its relabelled manifest (from the
    # seed's), and its attempt only reads the bundle.
    bundle = shutil.copytree(seed, scratch / "bundle")
    listing = sorted(p.relative_to(bundle) for p in bundle.rglob("*"))
    manifest = (seed / "manifest.json").read_text()
    try:
        for case in range(first, first + runs):
            rng = random.Random(case)
            name, backend = rng.choice(names), rng.choice(choices)
            m = json.loads(manifest)
            what = relabel(next(f for f in m["functions"] if f["name"] == name), rng)
            fuzz_forms.overwrite(bundle / "manifest.json", json.dumps(m))
            fuzz_forms.overwrite(progress, f"case {case}: {name} on {backend}, {what}\n")
            outcomes[f"{name} on {backend}: {attempt(bundle, references[name], backend, rng)}"] += 1
            if sorted(p.relative_to(bundle) for p in bundle.rglob("*")) != listing:
                raise AssertionError(f"case {case} left the bundle's files changed")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return outcomes


def main(argv: list[str] | None = None, start: Any = fuzz_forms.fresh) -> int:
    return fuzz_forms.main(
        argv,
        script=Path(__file__),
        seed_bundle=seed_bundle,
        work=work,
        description=__doc__.split("\n")[0],
        start=start,
    )


if __name__ == "__main__":
    sys.exit(main())

"""Run by tests/on_accelerator_corpus.py (by hand, on a machine with an accelerator): `jax.grad`
through the bundles of the PyTorch corpus that tests/pack_torch_corpus.py wrote with their
backward module (the CNN's and BERT's), against torch's autograd on the CPU it saved beside them.

    python tests/accelerator_torch_grads.py CORPUS_DIR

For each such bundle, as stored and at `precision="highest"`, the gradient of its loss (the sum
of one result's elements, as index.json names it, times the fixed weights of
NAME.cotangent.safetensors) by every argument torch gave a gradient for, on the stored example
inputs. Each gradient is checked as `run` checks a result
(SPEC.md 2.15): rtol = atol = the dtype's, atol widened to `2 * u * max|torch's|`, `u` both
sides' unit roundoffs. A gradient is a contraction too (over the batch and the positions it is
summed across), so the bound holds as for a forward result. Torch's side is its own CPU kernels,
no jaxlib's XLA: another computation than any run here, at float32's roundoff (`u` 2^-24), as a
bundle that names no jaxlib is. Prints each tensor's largest difference against its atol, then
one JSON line; exits 1 if any gradient is off.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from safetensors.numpy import load_file

import hlobundle
from hlobundle._run._run import sides
from hlobundle._run._tolerance import Computed, compare, tolerance, widening

TORCH = Computed("cpu", None, None, None)  # torch's autograd: no jaxlib's XLA computed it


def gradients(
    f: Any, bundle: hlobundle.Bundle, wanted: list[str], result: str | None, cotangent: Any
) -> dict[str, np.ndarray]:
    """jax.grad of sum(result * cotangent) by the arguments `wanted`, the others stored."""
    stored = bundle.example_inputs()
    fixed = {k: v for k, v in stored.items() if k not in wanted}

    def scalar(diff: dict[str, Any]) -> Any:
        out = f(**fixed, **diff)
        return jnp.sum((out if result is None else out[result]) * cotangent)

    grads = jax.jit(jax.grad(scalar))({k: stored[k] for k in wanted})
    return {k: np.asarray(v) for k, v in grads.items()}


def checked(name: str, precision: str | None, corpus: Path, result: str | None) -> dict:
    bundle = hlobundle.load(corpus / f"{name}.hlobundle")
    want = load_file(str(corpus / f"{name}.grads.safetensors"))
    cotangent = load_file(str(corpus / f"{name}.cotangent.safetensors"))["cotangent"]
    f = bundle.function("xla", precision=precision)
    got = gradients(f, bundle, list(want), result, cotangent)
    here = sides(bundle, f)[1]
    u = widening(TORCH, here)
    worst, failed = (None, 0.0), []
    for key, w in want.items():
        rtol, atol = tolerance(str(w.dtype), w, u, None, None)
        ok, largest, _ = compare(got[key], w, rtol, atol)
        worst = max(worst, (key, largest / atol), key=lambda t: t[1])
        if not ok:
            failed.append(key)
        print(f"  {name} {precision or 'as stored'} {key}: diff {largest:.3g} / atol {atol:.3g}")
    line = {
        "model": name,
        "precision": precision or here.precision,
        "platform": here.platform,
        "u": u,
        "tensors": len(want),
        "worst": worst,
        "failed": failed,
    }
    print(f"{name} {precision or 'as stored'}: {len(want)} gradients, worst {worst}, u {u:.3g}")
    return line


def main(corpus: Path) -> int:
    print("jax", jax.__version__, "on", jax.devices())
    index = json.loads((corpus / "index.json").read_text())
    done = [
        checked(name, precision, corpus, told["result"])
        for name, told in index["grads"].items()
        for precision in (None, "highest")
    ]
    print(json.dumps(done))
    return 1 if any(d["failed"] for d in done) else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))

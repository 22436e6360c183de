"""Run by tests/on_accelerator.py (by hand, on a machine with an accelerator): a function
lowered for several platforms (SPEC.md 2.14) runs the lowering of the platform it runs on.

    python tests/accelerator_platforms.py

On a TPU it checks, with the xla backend:
- a module whose cpu lowering (index 0) computes x + x and whose tpu lowering (index 1)
  computes x * x gives x * x there (and x + x on a CPU);
- `export(..., platforms=("cpu", "tpu"))` of a dense layer equals the layer run by jax there,
  and so does its gradient through the backward module lowered for both;
- a function lowered for ("cpu", "cuda") is refused there with BACKEND_UNSUPPORTED.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import hlobundle
from hlobundle._read._inputs import from_python
from hlobundle._write._writer import PackOptions, pack_planned

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "conformance"))
from generate import PLATFORMS_TEXT as TEXT  # noqa: E402  (the conformance case's module)


def main() -> int:
    platform = jax.devices()[0].platform
    print("jax", jax.__version__, "on", platform, jax.devices())
    out = Path(tempfile.mkdtemp())
    x = np.array([1.0, 2.0, 3.0], np.float32)
    options = PackOptions(names=["x"], result_names=["y"], platforms=("cpu", "tpu"))
    chosen = pack_planned(TEXT, from_python([x]), out / "chosen", options)
    got = np.asarray(hlobundle.load(chosen).function("xla").call_flat(x)[0])
    want = x * x if platform == "tpu" else x + x
    print("hand-written cpu/tpu module:", got, "expected", want)
    assert np.array_equal(got, want), "the xla backend ran another platform's lowering"

    w = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    xs = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)

    def dense(w, x):
        return jnp.tanh(x @ w)

    both = hlobundle.export(dense, w, xs, out=out / "both", platforms=("cpu", "tpu"), with_vjp=True)
    f = hlobundle.load(both).function("xla")
    err = float(np.abs(np.asarray(f(w, xs)) - np.asarray(jax.jit(dense)(w, xs))).max())
    g = jax.grad(lambda w: f(w, xs).sum())(w)
    gerr = float(
        np.abs(np.asarray(g) - np.asarray(jax.grad(lambda w: dense(w, xs).sum())(w))).max()
    )
    print(f"exported for cpu and tpu: max |bundle - jax| = {err:.2e}, gradient {gerr:.2e}")
    assert err < 1e-5 and gerr < 1e-4

    gpu = hlobundle.export(dense, w, xs, out=out / "gpu", platforms=("cpu", "cuda"))
    try:
        hlobundle.load(gpu).function("xla")(w, xs)
    except hlobundle.errors.BackendUnsupportedError as e:
        print("lowered for cpu and cuda, refused on", platform, ":", e.code)
    else:
        if platform != "cpu":
            raise AssertionError("a function not lowered for this platform ran")
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())

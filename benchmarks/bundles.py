"""The bundles several areas measure: made-up weights and a module over them, and a bundle of
many small functions."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def weights(total: int, count: int) -> list[np.ndarray]:
    """`count` float32 vectors of random values, `total` bytes in all (the same each run)."""
    n = total // 4 // count
    rng = np.random.default_rng(0)
    return [rng.standard_normal(n, dtype=np.float32) for _ in range(count)]


def module_for(arrays: list[np.ndarray]) -> str:
    """A module taking `arrays` as its arguments and returning the first."""
    args = ", ".join(f"%a{i}: tensor<{a.shape[0]}xf32>" for i, a in enumerate(arrays))
    return f"func.func @main({args}) -> tensor<{arrays[0].shape[0]}xf32> {{\n  return %a0 : tensor<{arrays[0].shape[0]}xf32>\n}}\n"


def many_functions(out: Path, functions: int, per_function: int) -> Path:
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

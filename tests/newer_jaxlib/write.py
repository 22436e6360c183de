"""Write the bundles of one folder of tests/newer_jaxlib/ with the newest jax there is, once.

Not a generator: a folder is never written again (README.md beside this file). This file
records what each bundle was written with, and the reference functions the tests compare with:

    python tests/newer_jaxlib/write.py OUT_DIR

run from the repository root in an environment of the newest Python and jax (the one CI's
second run of the suite uses), at the commit that adds the folder.

- `predict`: `tanh(x @ params["w"] + params["b"])`, `params` a parameter pytree, with stored
  inputs, expected outputs and a backward module, every artifact at the writer's default target;
- `exp2`: `exp2(x)`, which jax 0.12 lowers to `stablehlo.exp2`, an op StableHLO 1.23.0 added:
  the default target steps up to it, and an older jaxlib refuses the bundle, saying what to run.
"""

from __future__ import annotations

import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np

import hlobundle

TIMESTAMP = "2026-12-06T00:00:00Z"


def predict(params, x):
    return jnp.tanh(x @ params["w"] + params["b"])


def exp2(x):
    return jnp.exp2(x)


def example() -> tuple[dict[str, np.ndarray], np.ndarray]:
    w = np.linspace(-1.0, 1.0, 12, dtype=np.float32).reshape(4, 3)
    b = np.array([0.25, -0.5, 0.125], dtype=np.float32)
    x = np.linspace(-2.0, 2.0, 8, dtype=np.float32).reshape(2, 4)
    return {"w": w, "b": b}, x


def write_predict(out: Path) -> Path:
    params, x = example()
    return hlobundle.export(
        predict,
        params,
        x,
        out=out,
        roles={"params": "parameter"},
        with_vjp=True,
        timestamp=TIMESTAMP,
    )


def write_exp2(out: Path) -> Path:
    return hlobundle.export(exp2, example()[1], out=out, timestamp=TIMESTAMP)


WRITERS = {"predict": write_predict, "exp2": write_exp2}


def main(out_dir: str) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, write in WRITERS.items():
        print(write(out / f"{name}.hlobundle"))


if __name__ == "__main__":
    main(sys.argv[1])

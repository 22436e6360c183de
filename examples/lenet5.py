"""The LeNet-5 of Lux's tutorial, written in JAX, with deterministic weights.

Layers: conv 5x5 1->6 relu, maxpool 2, conv 5x5 6->16 relu, maxpool 2, flatten,
dense 256->128 relu, 128->84 relu, 84->10. Images are NCHW, batch 4, as Reactant lowers
Lux's WHCN (28, 28, 1, 4) input: `tensor<4x1x28x28xf32>`.

Run `python examples/lenet5.py` to rebuild `examples/lenet5.hlobundle`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

BATCH = 4


def init_params(seed: int = 0) -> dict[str, dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)

    def dense(n_in: int, n_out: int) -> dict[str, np.ndarray]:
        w = rng.standard_normal((n_in, n_out)) / np.sqrt(n_in)
        return {"w": w.astype(np.float32), "b": np.zeros(n_out, np.float32)}

    def conv(c_in: int, c_out: int) -> dict[str, np.ndarray]:
        w = rng.standard_normal((c_out, c_in, 5, 5)) / np.sqrt(c_in * 25)
        return {"w": w.astype(np.float32), "b": np.zeros(c_out, np.float32)}

    return {
        "conv1": conv(1, 6),
        "conv2": conv(6, 16),
        "dense1": dense(256, 128),
        "dense2": dense(128, 84),
        "dense3": dense(84, 10),
    }


def _conv_relu(x: jax.Array, p: dict[str, jax.Array]) -> jax.Array:
    y = jax.lax.conv_general_dilated(
        x, p["w"], (1, 1), "VALID", dimension_numbers=("NCHW", "OIHW", "NCHW")
    )
    return jax.nn.relu(y + p["b"][None, :, None, None])


def _maxpool2(x: jax.Array) -> jax.Array:
    return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")


def lenet5(params: dict[str, dict[str, jax.Array]], images: jax.Array) -> jax.Array:
    x = _maxpool2(_conv_relu(images, params["conv1"]))
    x = _maxpool2(_conv_relu(x, params["conv2"]))
    x = x.reshape(x.shape[0], -1)
    x = jax.nn.relu(x @ params["dense1"]["w"] + params["dense1"]["b"])
    x = jax.nn.relu(x @ params["dense2"]["w"] + params["dense2"]["b"])
    return x @ params["dense3"]["w"] + params["dense3"]["b"]


def example_images(seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).random((BATCH, 1, 28, 28), dtype=np.float32)


def main(out: str = str(Path(__file__).parent / "lenet5.hlobundle")) -> None:
    import hlobundle

    path = hlobundle.export(
        lenet5,
        init_params(),
        example_images(),
        out=out,
        force=True,
        roles={"params": "parameter"},
        vmap_in_axes=(None, 0),
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main(*sys.argv[1:])

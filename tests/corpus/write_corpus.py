"""How the 1.x corpus was written, once per version, by that version's own code.

Not a generator: the bundles under tests/corpus/<version>/ are never regenerated (see README.md
there). This file records what each was written with, and runs only against the commit that
wrote a version (`PYTHONPATH=/tmp/corpus-<version>`), through the API that commit had:

    python tests/corpus/write_corpus.py VERSION OUT_DIR [PUBLIC_KEY PRIVATE_KEY]

Every 1.x version writes `predict` (two arguments, a parameter pytree, a backward module, stored
inputs and expected outputs); 1.0 also writes `column_major`; 1.1 `batched` (a batched
module); 1.2 `signed` (with the key given) and `int4` (a sub-byte dtype); 1.3 `iree` (an IREE
executable for llvm-cpu, generic CPU); 2.0 `functions` (two functions over one parameter
pytree, with a symbolic batch dimension); 2.1 `rows` (declared independent rows, metadata and a
model card).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

import hlobundle

TIMESTAMP = "2026-12-04T00:00:00Z"


def predict(params, x):
    return jnp.tanh(x @ params["w"] + params["b"])


def example() -> tuple[dict[str, np.ndarray], np.ndarray]:
    w = np.linspace(-1.0, 1.0, 12, dtype=np.float32).reshape(4, 3)
    b = np.array([0.25, -0.5, 0.125], dtype=np.float32)
    x = np.linspace(-2.0, 2.0, 8, dtype=np.float32).reshape(2, 4)
    return {"w": w, "b": b}, x


def write_predict(out: Path, **options: object) -> Path:
    params, x = example()
    return hlobundle.export(
        predict,
        params,
        x,
        out=out,
        roles={"params": "parameter"},
        with_vjp=True,
        timestamp=TIMESTAMP,
        **options,
    )


def write_column_major(out: Path) -> Path:
    """A module packed from its text, values stored in the producer's column-major orientation."""
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.arange(3, dtype=np.float32)
    text = jax.jit(lambda a, b: (a * 2.0 + b, a.sum(axis=1))).lower(a, b).as_text()
    return hlobundle.pack(
        text,
        [a.T, b],  # as the producer holds them: axes reversed
        out,
        names=["a", "b"],
        result_names=["scaled", "rows"],
        layout="column_major",
        expected="compute",
        timestamp=TIMESTAMP,
    )


def write_int4(out: Path) -> Path:
    x = np.array([-8, -3, 0, 1, 7, 5], dtype=ml_dtypes.int4)
    y = np.arange(6, dtype=np.int8)
    return hlobundle.export(
        lambda x, y: x.astype(jnp.int8) * 3 + y, x, y, out=out, timestamp=TIMESTAMP
    )


def write_functions(out: Path) -> Path:
    """Two functions over one parameter pytree, with a symbolic batch dimension `b` (2.0)."""
    params, x = example()
    y = np.zeros((2, 3), np.float32)
    roles = {"params": "parameter"}
    hlobundle.export(
        predict,
        params,
        x,
        out=out,
        name="predict",
        roles=roles,
        shapes_specs=(None, "b, 4"),
        timestamp=TIMESTAMP,
    )
    return hlobundle.export(
        lambda params, x, y: ((predict(params, x) - y) ** 2).mean(),
        params,
        x,
        y,
        out=out,
        name="loss",
        roles=roles,
        shapes_specs=(None, "b, 4", "b, 3"),
        timestamp=TIMESTAMP,
        add=True,
    )


def write_rows(out: Path) -> Path:
    """`predict` over a symbolic batch `b` declared independent along it (2.13), with metadata
    and its model card (2.12): format 2.1."""
    params, x = example()
    return hlobundle.export(
        predict,
        params,
        x,
        out=out,
        roles={"params": "parameter"},
        shapes_specs=(None, "b, 4"),
        independent_rows="b",
        metadata={"description": "tanh(x @ w + b), rows independent", "license": "MIT"},
        timestamp=TIMESTAMP,
    )


def main(version: str, out_dir: str, *keys: str) -> None:
    assert hlobundle.FORMAT_VERSION == version, (hlobundle.FORMAT_VERSION, version)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if version.startswith("1."):  # one static function: 1.x at every later version too
        write_predict(out / "predict.hlobundle")
    if version == "1.0":
        write_column_major(out / "column_major.hlobundle")
    if version == "1.1":
        write_predict(out / "batched.hlobundle", vmap_in_axes=(None, 0))
    if version == "1.2":
        public_key, private_key = keys
        signed = write_predict(out / "signed.hlobundle")
        hlobundle.sign(signed, private_key)
        shutil.copyfile(public_key, out / "signed.pub.pem")
        write_int4(out / "int4.hlobundle")
    if version == "1.3":
        hlobundle.compile(write_predict(out / "iree.hlobundle"), ["llvm-cpu"])
    if version == "2.0":
        write_functions(out / "functions.hlobundle")
    if version == "2.1":
        write_rows(out / "rows.hlobundle")


if __name__ == "__main__":
    main(*sys.argv[1:])

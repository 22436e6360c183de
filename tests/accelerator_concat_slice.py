"""Run by tests/on_accelerator_corpus.py (by hand, on a machine with an accelerator): the XLA bug
that made GPT-2's bundle wrong on a TPU (issue 65), replayed in pure JAX, and the form the
converter writes instead (hlobundle/_interop/_torch_slices.py).

    python tests/accelerator_concat_slice.py

XLA on a TPU (jaxlib 0.10.2's libtpu, a TPU v5e, 2026-12-07) fuses
`concatenate([broadcast(p, (rows, 1)), broadcast(iota(n), (rows, n))], -1)[:, :n]` into a pad
of the iota and a slice, and computed it wrong for rows 2 and 4 (n 6, 127, 128; int32 and
float32 alike): row 1 read `[p, 128, 129, ...]` where it is `[p, 0, 1, ...]`; 1 and 8 rows came
out right. For each case this prints, as one JSON object a line, whether the form as written
(`written`) and the converter's (`converted`: the pieces sliced, then joined) give the values,
and row 1 of what the form as written gave (its first six, and whether they are the bug's as
recorded: the values plus 128 after `p`); then a last line, the versions.
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np

from hlobundle._interop._torch_slices import sliced

CASES = [(rows, n) for rows, n in ((2, 6), (1, 6), (4, 6), (2, 127), (2, 128), (8, 200))]
DTYPES = ["int32", "float32"]


def pieces(p: jax.Array, rows: int, n: int) -> list[jax.Array]:
    return [
        jnp.broadcast_to(p, (rows, 1)),
        jnp.broadcast_to(jnp.arange(n, dtype=p.dtype), (rows, n)),
    ]


def written(p: jax.Array, rows: int, n: int) -> jax.Array:
    return jnp.concatenate(pieces(p, rows, n), axis=-1)[:, :n]


def converted(p: jax.Array, rows: int, n: int) -> jax.Array:
    return sliced(pieces(p, rows, n), 1, 0, n, p.dtype)


def case(dtype: str, rows: int, n: int) -> dict:
    want = np.concatenate([np.full((rows, 1), -1), np.tile(np.arange(n - 1), (rows, 1))], 1)
    p = jnp.asarray(-1, dtype)
    got = {
        name: np.asarray(jax.jit(f, static_argnums=(1, 2))(p, rows, n))
        for name, f in (("written", written), ("converted", converted))
    }
    row = got["written"][min(1, rows - 1)]
    return {
        "dtype": dtype,
        "rows": rows,
        "n": n,
        **{name: bool(np.array_equal(g, want.astype(dtype))) for name, g in got.items()},
        "row_1_written": row[:6].tolist(),
        "row_1_plus_128": bool(np.array_equal(row[1:6], np.arange(len(row[1:6])) + 128)),
    }


def main() -> None:
    for dtype in DTYPES:
        for rows, n in CASES:
            print(json.dumps(case(dtype, rows, n)), flush=True)
    versions = {"jax": jax.__version__, "platform": jax.devices()[0].platform}
    versions["device"] = jax.devices()[0].device_kind
    print(json.dumps({"versions": versions}))


if __name__ == "__main__":
    main()

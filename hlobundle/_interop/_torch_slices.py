"""A slice of a concatenation, along the dim it joins, computed as the concatenation of its
pieces' slices: the one rewrite the interpreter of `_torch.py` makes to a program's graph.

Why (issue 65, docs/torch.md's TPU section): XLA on a TPU (jaxlib 0.10.2's libtpu, a TPU v5e)
miscompiles `concatenate([broadcast(p, (rows, 1)), broadcast(iota(n), (rows, n))], -1)[:, :n]`,
which it fuses into a pad of the iota and a slice: for rows 2 and 4 (n 6, 127, 128; int32 and
float32 alike) every element after column 0 came out wrong, row 1 reading iota + 128
(`[-1, 128, 129, ...]` where the CPU gives `[-1, 0, 1, ...]`); 1 and 8 rows came out right. transformers' GPT-2 computes exactly
that in its check for packed sequences (`cat([first - 1, position_ids])`, sliced `[:, 1:]` and
`[:, :-1]`): its causal mask came out wrong there, its logits 0.047 off. The pieces sliced
first and then joined (`concatenate([p, pos[:, :n - 1]])`) are computed right by the same
compiler, and mean the same everywhere. tests/on_accelerator_corpus.py replays the bug in pure
JAX on a TPU and says whether a jaxlib still has it.

Only what is known when the graph is converted is rewritten: step 1, static bounds, and the
pieces' sizes along the cat's dim static (other dimensions may be symbolic).
A slice with a step, of symbolic bounds, or of a cat of pieces of other ranks (torch's legacy
empty 1-D piece) is computed as written.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

_SLICE, _CAT = "aten.slice.Tensor", "aten.cat.default"


def pieces_sliced(
    sizes: Sequence[int], start: int | None, end: int | None
) -> list[tuple[int, int, int]]:
    """`[start:end]` of the concatenation of pieces of `sizes` (torch's and Python's meaning:
    negative bounds count from the end, both are clamped) as `(piece, start, end)` of each
    piece it takes elements of, in order; empty pieces take none, an empty slice gives []."""
    lo, hi, _ = slice(start, end).indices(sum(sizes))
    taken, offset = [], 0
    for i, size in enumerate(sizes):
        a, b = max(lo, offset), min(hi, offset + size)
        if a < b:
            taken.append((i, a - offset, b - offset))
        offset += size
    return taken


def slice_of_cat(node: Any, env: dict[Any, Any]) -> Any | None:
    """`node`'s value from its cat's pieces (`env`: each node's value) where it is a slice of
    a cat's result along the cat's dim, else None (computed as written)."""
    if str(node.target) != _SLICE or node.kwargs:
        return None
    source, dim, start, end, step = _slice_args(*node.args)
    if str(getattr(source, "target", "")) != _CAT or source.kwargs:
        return None
    nodes, cat_dim = _cat_args(*source.args)
    joined, pieces = env[source], [env[n] for n in nodes]
    ndim = joined.ndim
    if step != 1 or ndim == 0 or any(p.ndim != ndim for p in pieces):
        return None
    if dim % ndim != cat_dim % ndim or not all(_static(b) for b in (start, end)):
        return None
    axis = dim % ndim
    if not all(isinstance(p.shape[axis], int) for p in pieces):
        return None
    return sliced(pieces, axis, start, end, joined.dtype)


def sliced(pieces: Sequence[Any], axis: int, start: int | None, end: int | None, dtype: Any) -> Any:
    """`concatenate(pieces, axis)[start:end]` along `axis`, in `dtype`, from the pieces' slices
    (what tests/accelerator_concat_slice.py runs on a TPU)."""
    sizes = [p.shape[axis] for p in pieces]
    return _joined(pieces, pieces_sliced(sizes, start, end) or [(0, 0, 0)], axis, dtype)


def _slice_args(x: Any, dim: int = 0, start: Any = None, end: Any = None, step: Any = 1) -> Any:
    return x, dim, start, end, step


def _cat_args(tensors: Sequence[Any], dim: int = 0) -> tuple[Sequence[Any], int]:
    return tensors, dim


def _static(bound: Any) -> bool:
    return bound is None or isinstance(bound, int)


def _joined(pieces: Sequence[Any], taken: list[tuple[int, int, int]], axis: int, dtype: Any) -> Any:
    """The pieces' slices `taken`, each in the cat's dtype (torch's promotion of all of them),
    joined along `axis`; one piece's slice alone, without a concatenation."""
    import jax.numpy as jnp
    from jax import lax

    parts = [lax.slice_in_dim(pieces[i], a, b, axis=axis).astype(dtype) for i, a, b in taken]
    return parts[0] if len(parts) == 1 else jnp.concatenate(parts, axis=axis)

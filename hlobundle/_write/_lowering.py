"""Lowering with JAX what the writer stores beside a module (SPEC.md 2.4 and 2.6).

- `lower_backward`: the backward module of a function, `(*primals, *output cotangents)` to
  argument cotangents, following JAX's convention: integer and bool values have `float0`
  cotangents, which StableHLO carries as `i1` (bool) tensors of the same shape, always zero.
- `lower_batched`: `jax.vmap` of a function over some arguments, with a symbolic batch size.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .._format import _dtypes
from .._format._manifest import Argument, Manifest, Result
from .._format._stored import BATCH_DIMENSION, differentiable


def cotangent_avals(values: Sequence[Argument] | Sequence[Result]) -> list[Any]:
    import jax
    from jax import dtypes

    return [
        jax.core.ShapedArray(
            tuple(v.shape),
            _dtypes.BY_NAME[v.dtype].numpy if differentiable(v.dtype) else dtypes.float0,
        )
        for v in values
    ]


def lower_backward(manifest: Manifest, primal: Callable[..., Sequence[Any]]) -> str:
    """StableHLO text of the backward module of `primal`, a function of the flat arguments."""
    import jax

    n = len(manifest.arguments)
    primals = [
        jax.ShapeDtypeStruct(tuple(a.shape), _dtypes.BY_NAME[a.dtype].numpy)
        for a in manifest.arguments
    ]
    cotangents = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in cotangent_avals(manifest.results)]

    def backward(*primals_and_cotangents: Any) -> tuple[Any, ...]:
        _, pullback = jax.vjp(lambda *args: tuple(primal(*args)), *primals_and_cotangents[:n])
        return tuple(pullback(tuple(primals_and_cotangents[n:])))

    return jax.jit(backward, keep_unused=True).lower(*primals, *cotangents).as_text()


def lower_batched(
    manifest: Manifest, fn: Callable[..., Sequence[Any]], batched_arguments: Sequence[str]
) -> str:
    """StableHLO text of `jax.vmap(fn)` over `batched_arguments`, for any batch size >= 1.

    `fn` is a function of the flat arguments returning the flat results.
    """
    import jax
    from jax import export

    (b,) = export.symbolic_shape(BATCH_DIMENSION)
    batched = set(batched_arguments)
    mapped = [a.name in batched for a in manifest.arguments]
    specs = [
        jax.ShapeDtypeStruct(((b,) if m else ()) + tuple(a.shape), _dtypes.BY_NAME[a.dtype].numpy)
        for a, m in zip(manifest.arguments, mapped, strict=True)
    ]
    over_batch = jax.vmap(
        lambda *args: tuple(fn(*args)), in_axes=[0 if m else None for m in mapped]
    )
    return export.export(jax.jit(over_batch, keep_unused=True))(*specs).mlir_module()

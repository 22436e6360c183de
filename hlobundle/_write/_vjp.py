"""Backward modules (SPEC.md, "Backward module"), so that `jax.grad` works without enzyme-ad.

A backward module takes `(*primals, *output_cotangents)` and returns one cotangent per argument,
following JAX's convention: integer and bool values have `float0` cotangents, which StableHLO
carries as `i1` (bool) tensors of the same shape, always zero.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .._format import _dtypes
from .._format._manifest import Argument, Manifest, Result


def differentiable(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat", "complex"))


def cotangent_dtype(dtype: str) -> str:
    """The dtype of a value's cotangent in a backward module: itself, or bool for float0."""
    return dtype if differentiable(dtype) else "bool"


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

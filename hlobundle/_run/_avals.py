"""JAX avals of a function's values, from its manifest: static shapes, or symbolic ones
(SPEC.md 2.8) as `jax.export` symbolic dimensions sharing one scope with the constraints.

The runner builds its `Exported` from them; the writer lowers backward modules with them.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

from .._format import _dtypes
from .._format._manifest import Argument, Manifest, Result
from .._format._stored import differentiable


def value_avals(manifest: Manifest, values: Sequence[Argument] | Sequence[Result]) -> list[Any]:
    """The avals of `values` (the manifest's arguments or results)."""
    import jax

    shapes = _shapes(manifest, [list(v.shape) for v in values])
    return [
        jax.core.ShapedArray(shape, _dtypes.BY_NAME[v.dtype].numpy)
        for shape, v in zip(shapes, values, strict=True)
    ]


def cotangent_avals(manifest: Manifest, values: Sequence[Argument] | Sequence[Result]) -> list[Any]:
    """The avals of `values`' cotangents: float0 for values that are not differentiable."""
    import jax
    from jax import dtypes

    shapes = _shapes(manifest, [list(v.shape) for v in values])
    return [
        jax.core.ShapedArray(
            shape, _dtypes.BY_NAME[v.dtype].numpy if differentiable(v.dtype) else dtypes.float0
        )
        for shape, v in zip(shapes, values, strict=True)
    ]


def _shapes(manifest: Manifest, shapes: list[list[int | str]]) -> list[tuple[Any, ...]]:
    if not manifest.symbolic:
        return [tuple(s) for s in shapes]  # type: ignore[misc]
    from jax import export

    scope = _scope(tuple(manifest.constraints or ()))
    return [
        tuple(export.symbolic_shape(", ".join(map(str, s)), scope=scope)) if s else ()
        for s in shapes
    ]


@cache
def _scope(constraints: tuple[str, ...]) -> Any:
    """One scope per set of constraints: jax.export refuses symbols of different scopes in one
    lowering (a backward module's primals and cotangents)."""
    from jax import export

    return export.SymbolicScope(constraints)


def is_symbolic(avals: Sequence[Any]) -> bool:
    return any(not isinstance(d, int) for a in avals for d in a.shape)

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
from .._format._manifest import Manifest
from .._interop._jax_export import cotangent_avals, is_symbolic, value_avals
from .._parse._stored import BATCH_DIMENSION


def lower_backward(manifest: Manifest, primal: Callable[..., Sequence[Any]]) -> str:
    """StableHLO text of the backward module of `primal`, a function of the flat arguments."""
    primals = value_avals(manifest, manifest.arguments)
    cotangents = cotangent_avals(manifest, manifest.results)
    return lower_backward_of(primals, cotangents, primal, manifest.platforms)


def lower_backward_of(
    primals: Sequence[Any],
    cotangents: Sequence[Any],
    primal: Callable[..., Sequence[Any]],
    lowered_for: Sequence[str] | None = None,
) -> str:
    """`lower_backward` from the avals of the primals and of the results' cotangents, for the
    function's platforms (`lowered_for`) when it is lowered for several (SPEC.md 2.14). (The child
    that lowers an untrusted Exported's VJP, `_isolation/_jax_export_child.py`, imports nothing
    of the package and lowers as this does; `tests/test_jax_export.py` holds them alike.)"""
    import jax

    n = len(primals)
    specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in cotangents]

    def backward(*primals_and_cotangents: Any) -> tuple[Any, ...]:
        _, pullback = jax.vjp(lambda *args: tuple(primal(*args)), *primals_and_cotangents[:n])
        return tuple(pullback(tuple(primals_and_cotangents[n:])))

    return lower(backward, [*primals, *specs], lowered_for)


def lower(
    fn: Callable[..., Any], specs: Sequence[Any], lowered_for: Sequence[str] | None = None
) -> str:
    """StableHLO text of `jax.jit(fn)` on `specs`; through `jax.export` when a shape is
    symbolic, so that `@main` takes only the arrays and derives its dimensions from them, or
    for several platforms (`lowered_for`), so that `@main` takes the platform's index first."""
    import jax

    jitted = jax.jit(fn, keep_unused=True)
    if not is_symbolic(specs) and not lowered_for:
        return jitted.lower(*specs).as_text()
    from jax import export

    if lowered_for:
        return export.export(jitted, platforms=tuple(lowered_for))(*specs).mlir_module()
    return export.export(jitted)(*specs).mlir_module()


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

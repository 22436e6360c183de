"""Transformation rules shared by the backends (docs/jax.md, "Transformations").

- **vmap.** Neither enzyme-ad 0.0.16's primitives nor `jax.export`'s `call_exported` has a
  batching rule. `install_loop_rule` registers one that loops over the batch with `lax.map`,
  only where no rule exists, so a future native rule wins. It is correct for any module, and as
  slow as a loop (benchmarks/RESULTS.md gives the factor). When the bundle has a batched module
  (`_batched`) whose batched arguments are the ones mapped, the rule runs that instead.
- `differentiated` tells, before tracing, which derivative a call is under; the backends refuse
  what they cannot compute (`second_order_error` for either).

Each backend's own rules live in its room (`_backends/_enzyme_rules.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

from .. import _compat
from .._format._errors import TransformError

_AD_TRACERS = ("JVPTracer", "LinearizeTracer")


def install_exported_loop_rule() -> None:
    """The loop rule for `jax.export`'s `call_exported` (which a batched module runs through,
    on either JAX backend)."""
    install_loop_rule(_compat.call_exported_p())


def install_loop_rule(prim: Any) -> None:
    batching = _compat.batching()
    if prim in batching.fancy_primitive_batchers:  # a rule exists (perhaps a native one): keep it
        return
    batching.primitive_batchers[prim] = _loop_rule(prim)


def _loop_rule(prim: Any) -> Callable[..., Any]:
    import jax
    import jax.numpy as jnp

    from . import _batched

    def rule(args: Sequence[Any], dims: Sequence[int | None], **params: Any) -> Any:
        mapped = [d is not None for d in dims]
        moved = [
            jnp.moveaxis(a, d, 0) if d is not None else a for a, d in zip(args, dims, strict=True)
        ]

        def loop(*xs: Any) -> Any:
            def one(ys: list[Any]) -> Any:
                it = iter(ys)
                return prim.bind(
                    *[next(it) if m else x for x, m in zip(xs, mapped, strict=True)], **params
                )

            outs = jax.lax.map(one, [x for x, m in zip(xs, mapped, strict=True) if m])
            return tuple(outs) if prim.multiple_results else outs

        fast = _batched.lookup(params)
        size = next(x.shape[0] for x, m in zip(moved, mapped, strict=True) if m)
        if fast is not None and size > 0 and fast.accepts(mapped):
            outs = fast.run(moved, mapped, loop)
        else:
            outs = loop(*moved)
        return (list(outs), [0] * len(outs)) if prim.multiple_results else (outs, 0)

    return rule


def differentiated(args: Sequence[Any], second_order: str) -> Literal["forward", "reverse"] | None:
    """Which derivative the arguments show: none, forward (jvp) or reverse; second order raises
    (`second_order_error`, saying why the backend cannot).

    Inside `jax.checkpoint` the arguments are plain tracers; there the enzyme backend's
    refusals come from the wrappers `_enzyme_rules` installs.
    """
    ad = [x for x in args if type(x).__name__ in _AD_TRACERS]
    if not ad:
        return None
    if any(type(getattr(x, "primal", None)).__name__ in _AD_TRACERS for x in ad):
        raise second_order_error(second_order)
    return "forward" if any(type(x).__name__ == "JVPTracer" for x in ad) else "reverse"


def second_order_error(why: str) -> TransformError:
    """The refusal of a second derivative, with the backend's reason `why`."""
    return TransformError(
        "second-order differentiation (grad of grad, jax.hessian, jacfwd of grad) of a bundle "
        f"is not supported: {why}. Differentiate once, or export the derivative as a bundle"
    )

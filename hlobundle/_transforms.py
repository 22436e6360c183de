"""What JAX transformations need beyond what enzyme-ad and jax.export give (README, "Transformations").

- **vmap.** Neither enzyme-ad 0.0.16's primitives nor `jax.export`'s `call_exported` has a
  batching rule. We register one that loops over the batch with `lax.map`, only where no rule
  exists, so a future native rule wins. It is correct for any module, and as slow as a loop
  (benchmarks/RESULTS.md gives the factor).
- **Unsupported derivatives** are refused before tracing, with the op and the transformation,
  instead of an MLIR pass-pipeline dump: forward mode through ops Enzyme cannot differentiate
  forward, and second-order derivatives on the enzyme backend.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from ._errors import TransformError

# Ops whose forward derivative enzyme-ad 0.0.16 cannot compute ("could not compute the adjoint").
FORWARD_MODE_BLOCKERS = ("stablehlo.reduce_window",)
_AD_TRACERS = ("JVPTracer", "LinearizeTracer")


@cache
def install_batching_rules() -> None:
    """Give the primitives a bundle function binds a looping batching rule, once per process."""
    from jax._src.export._export import call_exported_p

    prims = [call_exported_p]
    try:
        from enzyme_ad.jax import primitives
    except ImportError:
        pass
    else:
        prims += [
            getattr(primitives, n)
            for n in dir(primitives)
            if n.startswith("_enzyme_") and n.endswith("_p")
        ]
    for prim in prims:
        _register_loop_rule(prim)


def _register_loop_rule(prim: Any) -> None:
    from jax._src.interpreters import batching

    if prim in batching.fancy_primitive_batchers:  # a rule exists (perhaps a native one): keep it
        return
    batching.primitive_batchers[prim] = _loop_rule(prim)


def _loop_rule(prim: Any) -> Callable[..., Any]:
    import jax
    import jax.numpy as jnp

    def rule(args: Sequence[Any], dims: Sequence[int | None], **params: Any) -> Any:
        mapped = [d is not None for d in dims]
        moved = [
            jnp.moveaxis(a, d, 0) if d is not None else a for a, d in zip(args, dims, strict=True)
        ]

        def one(xs: list[Any]) -> Any:
            it = iter(xs)
            return prim.bind(
                *[next(it) if m else a for a, m in zip(moved, mapped, strict=True)], **params
            )

        outs = jax.lax.map(one, [a for a, m in zip(moved, mapped, strict=True) if m])
        return (outs, [0] * len(outs)) if prim.multiple_results else (outs, 0)

    return rule


@dataclass(frozen=True)
class EnzymeBlockers:
    """Where enzyme-ad 0.0.16 fails to differentiate a module, as (op, location) pairs."""

    forward: tuple[tuple[str, str], ...]  # ops without a forward derivative
    reverse: tuple[str, str] | None  # an op with a complex result: reverse mode emits invalid IR
    float8: str | None = None  # a float8 argument or result: reverse mode crashes the process

    @classmethod
    def of(cls, module: Any, dtypes: Sequence[tuple[str, str]] = ()) -> EnzymeBlockers:
        """`dtypes` are the (name, dtype) of the function's arguments and results."""
        from . import _mlir

        float8 = next(
            (f"{name} ({dtype})" for name, dtype in dtypes if dtype.startswith("float8")), None
        )
        return cls(
            tuple(_mlir.find_ops(module, FORWARD_MODE_BLOCKERS)),
            _mlir.first_complex_op(module),
            float8,
        )


def check_derivatives(args: Sequence[Any], backend: str, blockers: EnzymeBlockers | None) -> None:
    """Refuse, before tracing, derivatives the backend is known not to compute."""
    ad = [x for x in args if type(x).__name__ in _AD_TRACERS]
    if not ad:
        return
    if any(type(getattr(x, "primal", None)).__name__ in _AD_TRACERS for x in ad):
        why = (
            "enzyme-ad 0.0.16 differentiates its modules once"
            if backend == "enzyme"
            else "on the xla backend the stored backward module is itself not differentiable"
        )
        raise TransformError(
            "second-order differentiation (grad of grad, jax.hessian, jacfwd of grad) of a bundle "
            f"is not supported: {why}. Differentiate once, or export the derivative as a bundle"
        )
    forward = any(type(x).__name__ == "JVPTracer" for x in ad)
    if backend != "enzyme":
        if forward:
            raise TransformError(
                "forward-mode differentiation (jax.jvp, jax.jacfwd) is not available on the xla "
                "backend: a jax.export function has only a VJP. Use reverse mode (jax.grad, "
                "jax.vjp, jax.jacrev), or backend='enzyme'"
            )
        return
    if blockers and blockers.float8 and not forward:
        raise TransformError(
            f"reverse-mode differentiation (jax.grad, jax.vjp) of float8 values ({blockers.float8}) "
            "crashes enzyme-ad 0.0.16 (a segmentation fault), so it is refused. Use backend='xla' "
            "with a backward module (JAX-made bundles: export(..., with_vjp=True))"
        )
    if blockers and blockers.reverse and not forward:
        op, where = blockers.reverse
        raise TransformError(
            f"reverse-mode differentiation (jax.grad, jax.vjp) through complex values ({op} at "
            f"{where}) fails in enzyme-ad 0.0.16, which emits invalid IR for complex derivatives. "
            "Use backend='xla' with a backward module (JAX-made bundles: export(..., with_vjp=True))"
        )
    if blockers and blockers.forward and forward:
        op, where = blockers.forward[0]
        raise TransformError(
            f"forward-mode differentiation (jax.jvp, jax.jacfwd) through this bundle needs the "
            f"forward derivative of {op} ({where}), which Enzyme (enzyme-ad 0.0.16) cannot "
            "compute. Use reverse mode (jax.grad, jax.vjp, jax.jacrev) instead"
        )

"""The rules enzyme-ad 0.0.16 lacks, and the refusals it needs (docs/jax.md, "Transformations").

- **jax.checkpoint.** Under `jax.checkpoint` (remat) JAX splits the linearized function with
  per-primitive `partial_eval_jaxpr_custom` rules, and enzyme-ad 0.0.16 registers only the
  older partial-eval rule, so grad of a checkpointed enzyme call failed ("Linearization
  failed"). We register the missing rule, only where none exists; it stages exactly what
  enzyme-ad's own rule stages (`_remat_rule`). Enzyme's reverse pass recomputes the call
  from its inputs, so nothing inside a bundle call is ever saved.
- **jax.linearize.** enzyme-ad's `enzyme_shadow_aug` (the linear part of a linearized call)
  can be transposed but not lowered, so evaluating `jax.linearize`'s linear function failed.
  We lower it to Enzyme's forward mode: the tangent results of the forward-mode call it
  was split from.
- **Unsupported derivatives** are refused with the op and the transformation, instead of an
  MLIR pass-pipeline dump or a crash: forward mode through ops Enzyme cannot differentiate
  forward, reverse mode through complex or float8 values, and second order. The backend's
  `check_derivatives` refuses them before tracing. Inside `jax.checkpoint` a call's arguments
  do not show the transformation, so the same refusals also guard enzyme-ad's JVP rule (second
  order) and its lowering (the derivative mode its pass pipeline asks for), for modules
  registered with `register_module`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from ... import _compat
from ..._format._errors import TransformError
from .._by_text import ByText
from .._transforms import install_loop_rule, second_order_error

# Why a second derivative is refused (`_transforms.second_order_error`).
SECOND_ORDER = "enzyme-ad 0.0.16 differentiates its modules once"
# Ops whose forward derivative enzyme-ad 0.0.16 cannot compute ("could not compute the adjoint").
FORWARD_MODE_BLOCKERS = ("stablehlo.reduce_window",)


@cache
def install() -> None:
    """Add the rules to enzyme-ad's primitives, once per process, only where none exists."""
    primitives = _compat.enzyme_primitives()
    pe = _compat.partial_eval()
    for name in dir(primitives):
        if name.startswith("_enzyme_") and name.endswith("_p"):
            install_loop_rule(getattr(primitives, name))
    primal = primitives._enzyme_primal_p
    rule = pe.custom_partial_eval_rules.get(primal)
    if rule is not None:
        pe.partial_eval_jaxpr_custom_rules.setdefault(primal, _remat_rule(rule))
    _register_lowering(primitives._enzyme_shadow_aug_p, _shadow_lowering(primitives))
    _guard(primal)


class _Input:
    """An equation input as enzyme-ad's partial-eval rule sees it: is its value known?"""

    def __init__(self, var: Any, unknown: bool, inst: bool) -> None:
        self.var, self.unknown, self.inst = var, unknown, inst

    def is_known(self) -> bool:
        return not self.unknown


class _Recorder:
    """Stands in for the `JaxprTrace` enzyme-ad's rule runs on: records what it would stage."""

    def __init__(self) -> None:
        self.binds: list[tuple[Any, list[_Input], dict[str, Any]]] = []

    def default_process_primitive(self, prim: Any, args: Any, params: dict[str, Any]) -> Any:
        n = len(self.binds)
        self.binds.append((prim, list(args), dict(params)))
        return [(n, i) for i in range(len(params["out_shapes"]))]


def _remat_rule(enzyme_rule: Callable[..., Any]) -> Callable[..., Any]:
    """A `partial_eval_jaxpr_custom` rule that runs enzyme-ad's own partial-eval rule.

    For a forward-mode call whose primals are known and some tangents not, enzyme-ad's rule
    binds a known primal call and an unknown `enzyme_shadow_aug`, whose transpose is Enzyme's
    reverse pass. Run against `_Recorder`, those binds become the known and the staged
    equation. Any other call is left whole and split the way JAX splits a primitive that
    has no rule.
    """
    core, pe = _compat.jax_core(), _compat.partial_eval()

    def not_instantiated(inputs: Sequence[_Input]) -> list[Any]:
        return [a.var for a in inputs if isinstance(a.var, core.Var) and not a.inst]

    def rule(saveable: Any, unks_in: Any, inst_in: Any, eqn: Any) -> Any:
        inputs = [_Input(*a) for a in zip(eqn.invars, unks_in, inst_in, strict=True)]
        recorder = _Recorder()
        outs = enzyme_rule(recorder, *inputs, **eqn.params)
        n = len(eqn.outvars)
        if len(recorder.binds) == 1:  # enzyme-ad did not split it
            if any(unks_in):
                return None, eqn, [True] * n, [True] * n, not_instantiated(inputs)
            avals = [v.aval for v in eqn.invars]
            if isinstance(
                pe.ensure_enum(saveable(eqn.primitive, *avals, **eqn.params)), pe.RecomputeType
            ):
                return eqn, eqn, [False] * n, [True] * n, not_instantiated(inputs)
            return eqn, None, [False] * n, [False] * n, []
        binders = [[None] * len(params["out_shapes"]) for _, _, params in recorder.binds]
        for (b, i), var in zip(outs, eqn.outvars, strict=True):
            binders[b][i] = var
        split: dict[bool, list[tuple[Any, list[_Input]]]] = {False: [], True: []}
        for (prim, ins, params), outvars in zip(recorder.binds, binders, strict=True):
            new = pe.new_jaxpr_eqn(
                [a.var for a in ins], outvars, prim, params, set(), eqn.source_info, eqn.ctx
            )
            split[any(a.unknown for a in ins)].append((new, ins))
        if len(split[False]) != 1 or len(split[True]) != 1:
            raise TransformError(
                "jax.checkpoint around a bundle call on the enzyme backend: this enzyme-ad "
                "splits its derivative in a way hlobundle does not know. Use backend='xla' with "
                "a backward module, or leave the call outside jax.checkpoint"
            )
        [(known, _)], [(staged, staged_inputs)] = split[False], split[True]
        unks_out = [v in staged.outvars for v in eqn.outvars]
        return known, staged, unks_out, unks_out, not_instantiated(staged_inputs)

    return rule


# Blockers of the modules bundle functions pass to hlo_call, by module text, while the
# callable that runs each module lives.
_MODULES: ByText[EnzymeBlockers] = ByText()


def register_module(text: str, blockers: EnzymeBlockers, owner: object) -> None:
    """Know `text`'s blockers while `owner` (the callable that runs it) lives."""
    _MODULES.add(text, blockers, owner)


def _guard(primal: Any) -> None:
    """Wrap enzyme-ad's JVP rule and lowering of `primal` with the refusals (module docstring)."""
    ad, mlir = _compat.ad(), _compat.mlir_lowering()

    jvp = ad.primitive_jvps[primal]

    def guarded_jvp(primals: Any, tangents: Any, **params: Any) -> Any:
        if params["pipeline_options"].mlir_ad() and params["pipeline_options"].ad_level() > 0:
            raise second_order_error(SECOND_ORDER)  # differentiating a derivative
        return jvp(primals, tangents, **params)

    ad.primitive_jvps[primal] = guarded_jvp
    entry = mlir._lowerings[primal]

    def guarded_lowering(ctx: Any, *args: Any, **params: Any) -> Any:
        blockers = _MODULES.get(params["source"][3])
        passes = params["pipeline_options"].pass_pipeline()
        error = blockers and (
            (blockers.forward_error() if "mode=ForwardMode" in passes else None)
            or (blockers.reverse_error() if "mode=ReverseMode" in passes else None)
        )
        if error:
            raise error
        return entry.rule(ctx, *args, **params)

    mlir.register_lowering(primal, guarded_lowering, inline=entry.inline)


def _register_lowering(prim: Any, rule: Callable[..., Any]) -> None:
    mlir = _compat.mlir_lowering()

    if prim not in mlir._lowerings and not any(
        prim in rules for rules in mlir._platform_specific_lowerings.values()
    ):
        mlir.register_lowering(prim, rule)


def _shadow_lowering(primitives: Any) -> Callable[..., Any]:
    """Lower `enzyme_shadow_aug(*primals, *tangents)` to the forward-mode call it came from.

    Its parameters are that call's, with only the primal results' shapes: the call takes
    each primal followed by its tangent when the pipeline marks it `enzyme_dup`, and
    returns each result followed by its tangent.
    """
    mlir = _compat.mlir_lowering()

    def tangent_results(*args: Any, out_shapes: Any, pipeline_options: Any, **params: Any) -> Any:
        _, acts, _ = primitives.arg_activity_from_pipeline(pipeline_options.pass_pipeline())
        primals, tangents = iter(args[: len(acts)]), iter(args[len(acts) :])
        call_args = []
        for act in acts:
            call_args.append(next(primals))
            if act == "enzyme_dup":
                call_args.append(next(tangents))
        outs = primitives._enzyme_primal_p.bind(
            *call_args,
            out_shapes=tuple(s for s in out_shapes for _ in "pt"),
            pipeline_options=pipeline_options,
            **params,
        )
        return outs[1::2]

    return mlir.lower_fun(tangent_results, multiple_results=True)


@dataclass(frozen=True)
class EnzymeBlockers:
    """Where enzyme-ad 0.0.16 fails to differentiate a module, as (op, location) pairs."""

    forward: tuple[tuple[str, str], ...]  # ops without a forward derivative
    reverse: tuple[str, str] | None  # an op with a complex result: reverse mode emits invalid IR
    float8: str | None = None  # a float8 argument or result: reverse mode crashes the process

    @classmethod
    def of(cls, module: Any, dtypes: Sequence[tuple[str, str]] = ()) -> EnzymeBlockers:
        """`dtypes` are the (name, dtype) of the function's arguments and results."""
        from ..._parse import _mlir

        float8 = next(
            (f"{name} ({dtype})" for name, dtype in dtypes if dtype.startswith("float8")), None
        )
        return cls(
            tuple(_mlir.find_ops(module, FORWARD_MODE_BLOCKERS)),
            _mlir.first_complex_op(module),
            float8,
        )

    def forward_error(self) -> TransformError | None:
        if not self.forward:
            return None
        op, where = self.forward[0]
        return TransformError(
            f"forward-mode differentiation (jax.jvp, jax.jacfwd, jax.linearize) through this "
            f"bundle needs the forward derivative of {op} ({where}), which Enzyme (enzyme-ad "
            "0.0.16) cannot compute. Use reverse mode (jax.grad, jax.vjp, jax.jacrev) instead"
        )

    def reverse_error(self) -> TransformError | None:
        if self.float8:
            return TransformError(
                f"reverse-mode differentiation (jax.grad, jax.vjp) of float8 values "
                f"({self.float8}) crashes enzyme-ad 0.0.16 (a segmentation fault), so it is "
                "refused. Use backend='xla' with a backward module (JAX-made bundles: "
                "export(..., with_vjp=True))"
            )
        if self.reverse:
            op, where = self.reverse
            return TransformError(
                f"reverse-mode differentiation (jax.grad, jax.vjp) through complex values ({op} "
                f"at {where}) fails in enzyme-ad 0.0.16, which emits invalid IR for complex "
                "derivatives. Use backend='xla' with a backward module (JAX-made bundles: "
                "export(..., with_vjp=True))"
            )
        return None

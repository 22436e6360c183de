"""What precision a module's dot and convolution ops ask for, and the rewrite that asks for
the highest (SPEC.md 2.15), with the `jaxlib.mlir` bindings.

StableHLO's `precision_config` (one `#stablehlo<precision ...>` per operand; absent means
DEFAULT) lets a platform compute float32 operands with fewer bits: a TPU's DEFAULT is one pass
of bfloat16 (jax.lax.Precision). A CPU ignores it.

A `dot_general` may instead carry an explicit `algorithm` (`jax.lax.DotAlgorithmPreset`), which
already says how its operands are rounded, and StableHLO's verifier then requires a DEFAULT
precision_config: the rewrite leaves such an op as it is, and it counts as DEFAULT.

A `stablehlo.composite` whose `composite_attributes` hold a precision_config (jax's
`chlo.ragged_dot` on a TPU: `["DEFAULT", "DEFAULT"]`, as strings) is run by a compiler that
knows it as one op at that precision, not its decomposition's: on a TPU v5e rewriting only the
decomposition's dot_generals left a ragged dot off by a bfloat16 pass (0.0025 of its largest
value), and rewriting the attribute too made it float32's (1.3e-7). So it is one of the ops
here, its precision read from and rewritten in that attribute (a string not of `ORDER` counts
as DEFAULT).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._format._errors import TransformError
from .._format._prechecks import short
from .._parse import _mlir

if TYPE_CHECKING:
    from jaxlib.mlir import ir

# The ops with a precision_config (stablehlo.dot is the deprecated form of dot_general).
OPS = ("stablehlo.dot_general", "stablehlo.dot", "stablehlo.convolution")
COMPOSITE = "stablehlo.composite"  # one whose composite_attributes hold a precision_config
ORDER = ("DEFAULT", "HIGH", "HIGHEST")  # lowest first
HIGHEST = "HIGHEST"
CONFIG = "precision_config"


def _ops(module: ir.Module) -> list[ir.Operation]:
    from jaxlib.mlir import ir

    found: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name in OPS or (op.name == COMPOSITE and CONFIG in _attributes(op)):
            found.append(op)
        return ir.WalkResult.ADVANCE

    with _mlir.context():
        module.operation.walk(visit)
    return found


def _attributes(op: ir.Operation) -> Any:
    """Where an op's precision_config and algorithm are: its attributes, or a composite's
    `composite_attributes` (a DictAttr; empty where it has none)."""
    from jaxlib.mlir import ir

    if op.name != COMPOSITE:
        return op.attributes
    attributes = op.attributes
    held = attributes["composite_attributes"] if "composite_attributes" in attributes else None
    return held if isinstance(held, ir.DictAttr) else {}  # the bindings give the subclass


def _asked(op: ir.Operation) -> str:
    """The lowest precision one op asks for (no precision_config: DEFAULT)."""
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import stablehlo

    with _mlir.context():
        held = _attributes(op)
        config = held[CONFIG] if CONFIG in held else None
        if not isinstance(config, ir.ArrayAttr):
            return ORDER[0]
        if op.name == COMPOSITE:  # strings, as jax writes them
            names = [a.value if isinstance(a, ir.StringAttr) else ORDER[0] for a in config]
        else:
            names = [stablehlo.PrecisionAttr(a).value for a in config]
    names = [n if n in ORDER else ORDER[0] for n in names] or [ORDER[0]]
    return min(names, key=ORDER.index)


def lowest_asked(module: ir.Module) -> str | None:
    """The lowest precision any dot_general, dot, convolution or composite with a
    precision_config of the module (its functions and regions included) asks for; None when
    it has none of them. A composite counts only where its decomposition holds a contraction
    (one of them, or such a composite): one around anything else rounds no operand, whatever
    its attribute says, and would widen a check for nothing (SPEC.md 2.15)."""
    asked = [_asked(op) for op in _ops(module) if _contracts(op, module)]
    return min(asked, key=ORDER.index) if asked else None


def _contracts(op: ir.Operation, module: ir.Module, seen: frozenset[str] = frozenset()) -> bool:
    """Whether `op` contracts: a dot or convolution, or a composite whose decomposition holds
    one (followed through nested composites, each function once)."""
    from jaxlib.mlir import ir

    if op.name != COMPOSITE:
        return True
    with _mlir.context():
        name = ir.FlatSymbolRefAttr(op.attributes["decomposition"]).value
        if name in seen:
            return False
        inner: list[ir.Operation] = []
        for f in module.body.operations:
            if "sym_name" in f.attributes and ir.StringAttr(f.attributes["sym_name"]).value == name:

                def visit(o: ir.Operation) -> ir.WalkResult:
                    if o.name in OPS or o.name == COMPOSITE:
                        inner.append(o)
                    return ir.WalkResult.ADVANCE

                f.walk(visit)
    return any(_contracts(o, module, seen | {name}) for o in inner)


def possible(recorded: str | None, asked: str | None) -> str | None:
    """The precision a record of where expected outputs were computed (SPEC.md 2.15) may mean
    for a module that asks for `asked` at the lowest: the record's, which is the module's own
    or HIGHEST, so never lower than `asked`, and none where the module has no dot or
    convolution op (`asked` None). A record that claims less is refuted by the module."""
    if asked is None or recorded is None:
        return None
    return max(recorded, asked, key=ORDER.index)


def with_algorithm(module: ir.Module) -> int:
    """How many of the module's dot_general ops carry an explicit algorithm."""
    return sum(keeps_its_precision(op) for op in _ops(module))


@dataclass(frozen=True)
class Rewrite:
    rewritten: int  # ops that now ask for HIGHEST
    kept: int  # dot_general ops with an explicit algorithm, left as they were


def keeps_its_precision(op: ir.Operation) -> bool:
    """An op whose explicit algorithm already says its precision (the verifier couples the two)."""
    with _mlir.context():
        return "algorithm" in _attributes(op)


def at_highest(module: ir.Module, *, path: str | None = None) -> Rewrite:
    """Rewrite, in place, the precision_config of every such op without an explicit algorithm
    to HIGHEST for each operand (at most two entries, as the verifier allows). Give it a module
    of its own, never a stored form's parse. What StableHLO's verifier refuses afterwards is a
    TransformError about `path`."""
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import stablehlo

    ops = _ops(module)
    kept = [op for op in ops if keeps_its_precision(op)]
    with _mlir.context():
        for op in ops:
            if keeps_its_precision(op):
                continue
            if op.name == COMPOSITE:
                _composite_at_highest(op)
            else:
                highest = stablehlo.PrecisionAttr.get(HIGHEST)
                op.attributes[CONFIG] = ir.ArrayAttr.get([highest, highest])
    _verified(module, path)
    return Rewrite(len(ops) - len(kept), len(kept))


def _composite_at_highest(op: ir.Operation) -> None:
    """A composite's precision_config, as jax writes HIGHEST there (one string per operand)."""
    from jaxlib.mlir import ir

    held = _attributes(op)
    attributes = {held[i].name: held[i].attr for i in range(len(held))}
    config = attributes[CONFIG]
    count = len(config) if isinstance(config, ir.ArrayAttr) else 0
    attributes[CONFIG] = ir.ArrayAttr.get([ir.StringAttr.get(HIGHEST)] * (count or 2))
    op.attributes["composite_attributes"] = ir.DictAttr.get(attributes)


def _verified(module: ir.Module, path: str | None) -> None:
    from jaxlib.mlir import ir

    with _mlir.context():
        try:
            module.operation.verify()
        except ir.MLIRError as e:
            said = e.error_diagnostics[0] if e.error_diagnostics else None
            why = f"{said.message} ({_mlir.place(str(said.location))})" if said else str(e)
            raise TransformError(
                f"precision 'highest' cannot rewrite {path or 'the module'}: StableHLO refuses "
                f"the rewritten op: {short(why)}; run it without --precision highest "
                "(precision=None), as it asks (SPEC.md 2.15)",
                path=path,
                argument="precision",
            ) from None

"""The allow-list of `_format/_policy.py` (SPEC.md 6.1 and 8) held against a parsed module:
every op walked, each custom call's target and every other op's name asked of the policy."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .._format._errors import NotPortableError
from .._format._policy import CUSTOM_CALL_OPS, HINT, op_problem, target_problem


def refuse_unportable(module: Any, allowed: Iterable[str], path: str | None) -> tuple[str, ...]:
    """Raise `NotPortableError` naming up to five ops the policy refuses, with their locations.

    **Returns:** every custom call target in the module (sorted, unique).
    """
    from jaxlib.mlir import ir

    from . import _mlir

    allowed = set(allowed)
    calls: list[str] = []
    problems: list[str] = []

    def visit(op: Any) -> Any:
        name = op.name
        if name in CUSTOM_CALL_OPS:
            target = _mlir.string_attr(op, "call_target_name", path)
            calls.append(target)
            if target_problem(target, allowed):
                problems.append(f"custom_call @{target} at {_mlir.location(op)}")
        elif op_problem(name):
            problems.append(f"{name} at {_mlir.location(op)}")
            return ir.WalkResult.SKIP  # what a refused op holds is refused with it
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
    if problems:
        raise NotPortableError(
            f"the module is not portable: {'; '.join(problems[:5])}. {HINT}", path=path
        )
    return tuple(sorted(set(calls)))

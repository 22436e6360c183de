"""Normalizing producer quirks at pack time, with the `jaxlib.mlir` bindings (SPEC.md, "Normalization").

Reactant.jl writes modules that JAX's MLIR context cannot always take as they are. Each fix
is recorded as one line in `module.normalizations`, so that nothing is lost silently:

- a leading `Module:` line (a printed label, not MLIR) is removed;
- attributes in Reactant's and Enzyme's own namespaces (`enzymexla.*`, `enzyme.*`,
  `reactant.*`), some of whose values (`#enzymexla<...>`) JAX cannot even parse, are removed;
- the `llvm.data_layout` module attribute and top-level ops without a symbol name
  (`llvm.module_flags`) are removed;
- a quoted or truncated module name (`@"reactant_Chain{@..."`) becomes an identifier.

Modules that cannot travel are refused by the allow-list of `_policy`: custom calls into the
producer's process, `enzymexla.jit_call`, `enzymexla.kernel_call`, `llvm.func`, host transfers,
and any op outside the dialects a bundle may hold.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from .._mlir_context import new_context
from .._parse import _mlir
from .._parse._unportable import refuse_unportable

PRODUCER_NAMESPACES = ("enzymexla.", "enzyme.", "reactant.")
PREAMBLE = "Module:"


@dataclass(frozen=True)
class Normalized:
    text: str
    changes: tuple[str, ...]
    custom_calls: tuple[str, ...]  # every custom_call target in the module


@cache
def _lenient_context() -> Any:
    """JAX's dialects, plus unregistered ones kept as opaque, so that they can be removed."""
    return new_context(allow_unregistered=True)


def normalize(
    text: str, *, path: str | None = None, allow_custom_calls: Sequence[str]
) -> Normalized:
    """Return the module text hlobundle stores, the changes made, and the custom calls it has
    (refusing those the policy refuses but `allow_custom_calls`, the writer's option)."""
    from jaxlib.mlir import ir

    changes: list[str] = []
    body = _strip_preamble(text, changes)
    module = _mlir.parse(body, path=path, ctx=_lenient_context())
    with _lenient_context(), ir.Location.unknown():
        _drop_module_attribute(module, "llvm.data_layout", changes)
        changes += [
            f"removed the top-level op {name} (it has no symbol name)"
            for name in _mlir.drop_unnamed_top_level_ops(module)
        ]
        calls = refuse_unportable(module, allow_custom_calls, path)
        _strip_producer_attributes(module, changes)
        _clean_module_name(module, changes)
        out = str(module) if changes else text
    return Normalized(out, tuple(changes), calls)


def _strip_preamble(text: str, changes: list[str]) -> str:
    first, _, rest = text.lstrip().partition("\n")
    if first.strip() == PREAMBLE:
        changes.append(f"removed a leading {PREAMBLE!r} line")
        return rest
    return text


def _drop_module_attribute(module: Any, name: str, changes: list[str]) -> None:
    attrs = module.operation.attributes
    if name in attrs:
        del attrs[name]
        changes.append(f"removed the module attribute {name}")


def _strip_producer_attributes(module: Any, changes: list[str]) -> None:
    from jaxlib.mlir import ir

    removed: Counter[str] = Counter()

    def visit(op: Any) -> Any:
        attrs = op.attributes
        for name in list(attrs):
            if name.startswith(PRODUCER_NAMESPACES):
                del attrs[name]
                removed[name] += 1
        for key in ("arg_attrs", "res_attrs"):
            if key in attrs:
                attrs[key] = _filtered_array(ir.ArrayAttr(attrs[key]), removed)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    for name, count in sorted(removed.items()):
        changes.append(f"removed the attribute {name} ({count} use{'s' if count > 1 else ''})")


def _filtered_array(array: Any, removed: Counter[str]) -> Any:
    from jaxlib.mlir import ir

    dicts = []
    for entry in array:
        d = ir.DictAttr(entry)
        kept = {}
        for i in range(len(d)):
            named = d[i]
            if named.name.startswith(PRODUCER_NAMESPACES):
                removed[named.name] += 1
            else:
                kept[named.name] = named.attr
        dicts.append(ir.DictAttr.get(kept))
    return ir.ArrayAttr.get(dicts)


def _clean_module_name(module: Any, changes: list[str]) -> None:
    from jaxlib.mlir import ir

    attrs = module.operation.attributes
    if "sym_name" not in attrs:
        return
    name = _mlir.string_value(attrs["sym_name"], "the module's name", None)
    clean = re.match(r"[A-Za-z_][A-Za-z0-9_]*", name)
    if clean and clean.group(0) == name:
        return
    new = clean.group(0) if clean else "module"
    attrs["sym_name"] = ir.StringAttr.get(new)
    changes.append(f"renamed the module @{name!r} (quoted or truncated by the producer) to @{new}")

"""The rules a manifest's validators apply across fields (SPEC.md 2.3, 2.8): unique names,
pytrees over them, sharding over the mesh, aliases, symbolic dimensions and constraints.

Each raises ValueError, which pydantic reports with the field's location.
"""

from __future__ import annotations

import keyword
from typing import TYPE_CHECKING, Any

from . import _symbolic
from ._fields import COMPILERS, EXECUTABLE_KEY_FIELDS, compiler_of

if TYPE_CHECKING:  # _manifest imports this module for its validators
    from collections.abc import Sequence

    from ._manifest import Argument, Executable, Manifest, Result


def fields_of_2_1(m: Manifest) -> list[str]:
    """The format 2.1 fields a manifest (of one function) uses, where they are."""
    used = [f"files[{n!r}].chunks" for n, e in sorted(m.files.items()) if e.chunks is not None]
    used += ["metadata"] if m.metadata is not None else []
    fields = ("independent_rows", "platforms")
    return used + [f for f in fields if getattr(m, f) is not None]


def fields_of_2_2(m: Manifest) -> list[str]:
    """The format 2.2 fields a manifest (of one function) uses, where they are."""
    used = ["expected_from"] if m.expected_from is not None else []
    return used + [f"executables[{i}] (compiler {e.compiler})" for i, e in executables_of_2_2(m)]


def executables_of_2_2(m: Manifest) -> list[tuple[int, Executable]]:
    """A function's `executables` whose compiler needs format 2.2 (XLA's), with their index."""
    entries = enumerate(m.executables or [])
    return [(i, e) for i, e in entries if COMPILERS[e.compiler].version >= (2, 2)]


def _check_2_1_fields(m: Manifest) -> None:
    """A 1.x or 2.0 manifest that has a 2.1 field is invalid."""
    major, minor = (int(p) for p in m.format_version.split("."))
    used = fields_of_2_1(m)
    if used and (major, minor) < (2, 1):
        raise ValueError(f"{used[0]} needs format_version 2.1, not {m.format_version}")
    card = m.metadata.card if m.metadata is not None else None
    # A writer's manifest has no file table until its files are written (then it is checked).
    if card is not None and m.files and card not in m.files:
        raise ValueError(f"metadata.card names {card!r}, which files does not list")


def _check_2_2_fields(m: Manifest) -> None:
    """A manifest older than 2.2 that has a 2.2 field is invalid; `expected_from` (SPEC.md
    2.15) says where expected outputs were computed, so it needs a result with one."""
    major, minor = (int(p) for p in m.format_version.split("."))
    used = fields_of_2_2(m)
    if used and (major, minor) < (2, 2):
        raise ValueError(f"{used[0]} needs format_version 2.2, not {m.format_version}")
    if m.expected_from is not None and all(r.expected is None for r in m.results):
        raise ValueError("expected_from: no result has an expected value")


def check_executables(m: Manifest) -> None:
    """Each executable's target bears its compiler's prefix (XLA's: xla-PLATFORM), and it
    gives its compiler's key fields and no other's (SPEC.md 2.7; `COMPILERS`)."""
    for i, e in enumerate(m.executables or []):
        owner = compiler_of(e.target)
        if owner != e.compiler:
            raise ValueError(
                f"executables[{i}]: target {e.target!r} and compiler {e.compiler!r} disagree: "
                f"the target is one of {owner}'s"
            )
        rule = COMPILERS[e.compiler]
        given = {f for f in EXECUTABLE_KEY_FIELDS if getattr(e, f) is not None}
        if not set(rule.key) <= given <= set(rule.key + rule.optional):
            raise ValueError(
                f"executables[{i}]: of {list(EXECUTABLE_KEY_FIELDS)}, a {e.compiler} "
                f"executable gives {list(rule.key)} (and may give {list(rule.optional)}), "
                f"got {sorted(given)}"
            )


def executable_key(e: Executable) -> str:
    """What tells an executable from the others of its function: its target and, for XLA's of
    a symbolic function, its `sizes` (`xla-cpu at b=8`)."""
    if not e.sizes:
        return e.target
    return f"{e.target} at {', '.join(f'{k}={v}' for k, v in sorted(e.sizes.items()))}"


def check_executable_sizes(m: Manifest) -> None:
    """An XLA executable of a function with symbolic dimensions gives `sizes`, a value for each
    symbol of its arguments and for no other; one of a static function, or IREE's (whose
    module stays dynamic), gives none (SPEC.md 2.7)."""
    symbols = {
        s
        for a in m.arguments
        for d in a.shape
        if isinstance(d, str)
        for s in _symbolic.parse(d).symbols
    }
    for i, e in enumerate(m.executables or []):
        given = set(e.sizes or {})
        if not COMPILERS[e.compiler].per_size or not symbols:
            if given:
                why = "an IREE module stays dynamic" if symbols else "the function is static"
                raise ValueError(f"executables[{i}] gives sizes {sorted(given)}; {why}")
        elif given != symbols:
            raise ValueError(
                f"executables[{i}]: an XLA executable of a function with symbolic dimensions "
                f"gives sizes for exactly its symbols {sorted(symbols)}, got {sorted(given)}"
            )


def check_function(m: Manifest) -> None:
    """The cross-field rules of a `Manifest` (of one function: a 2.0 bundle's view of each)."""
    check_symbols(m)
    _check_2_1_fields(m)
    _check_2_2_fields(m)
    check_independent_rows(m)
    check_unique([a.name for a in m.arguments], "arguments")
    check_unique([r.name for r in m.results], "results")
    check_unique([executable_key(e) for e in m.executables or []], "executables target")
    check_executables(m)
    check_executable_sizes(m)
    check_unique(m.platforms or [], "platforms")
    if m.platforms is not None and (m.batched is not None or m.executables):
        raise ValueError(
            "a function lowered for several platforms has no batched module or executables"
        )
    if m.batched is not None:
        check_unique(m.batched.arguments, "batched.arguments")
        unknown = sorted(set(m.batched.arguments) - {a.name for a in m.arguments})
        if unknown:
            raise ValueError(f"batched.arguments names {unknown}, which are not arguments")
    axes = {a.name for a in m.mesh.axes} if m.mesh else set()
    sides: tuple[tuple[str, Sequence[Argument | Result]], ...] = (
        ("arguments", m.arguments),
        ("results", m.results),
    )
    for what, values in sides:
        for i, v in enumerate(values):
            if v.sharding is None:
                continue
            if len(v.sharding) != len(v.shape):
                raise ValueError(
                    f"{what}[{i}].sharding has {len(v.sharding)} entries for {len(v.shape)} dimensions"
                )
            undefined = {a for dim in v.sharding for a in dim} - axes
            if undefined:
                raise ValueError(
                    f"{what}[{i}].sharding uses mesh axes {sorted(undefined)} that mesh does not define"
                )
    _check_tree(m.input_tree, {a.name for a in m.arguments}, "input_tree")
    _check_tree(m.output_tree, {r.name for r in m.results}, "output_tree")
    for i, r in enumerate(m.results):
        if r.aliases is not None and r.aliases >= len(m.arguments):
            raise ValueError(
                f"results[{i}].aliases = {r.aliases} but there are {len(m.arguments)} arguments"
            )


def check_independent_rows(m: Manifest) -> None:
    """`independent_rows` (SPEC.md 2.13): known names, every result, each axis a bare symbol,
    one symbol, found nowhere else (no other dimension, no argument left out, no constraint)."""
    rows = m.independent_rows
    if rows is None:
        return
    sides = (("arguments", m.arguments, rows.arguments), ("results", m.results, rows.results))
    symbols = set()
    for what, values, axes in sides:
        by_name = {v.name: v for v in values}
        unknown = sorted(set(axes) - set(by_name))
        if unknown:
            raise ValueError(f"independent_rows.{what} names {unknown[:5]}, which are not {what}")
        for name, axis in axes.items():
            shape = by_name[name].shape
            dim = shape[axis] if axis < len(shape) else None
            if not isinstance(dim, str) or not dim.isidentifier():
                raise ValueError(
                    f"independent_rows.{what}[{name!r}]: axis {axis} of shape {shape} is not a "
                    "symbol (a bare name such as b)"
                )
            symbols.add(dim)
    missing = [r.name for r in m.results if r.name not in rows.results]
    if missing:
        raise ValueError(
            f"independent_rows.results leaves out {missing[:5]}: every result has rows"
        )
    if len(symbols) != 1:
        raise ValueError(f"independent_rows uses symbols {sorted(symbols)}: one symbol only")
    (symbol,) = symbols
    for _, values, axes in sides:
        for v in values:
            for i, d in enumerate(v.shape):
                if i != axes.get(v.name) and isinstance(d, str) and symbol in _symbols_of(d):
                    raise ValueError(
                        f"independent_rows: {v.name!r} has {symbol} in dimension {i}, which the "
                        "declaration does not name"
                    )
    for text in m.constraints or []:
        left, op, right = _symbolic.parse_constraint(text)
        if symbol in left.symbols | right.symbols and not _lower_bound(symbol, left, op, right):
            raise ValueError(
                f"independent_rows: constraint {text!r} bounds {symbol} other than from below "
                "by a constant, which joined rows need not keep"
            )


def _lower_bound(symbol: str, left: Any, op: str, right: Any) -> bool:
    """Whether a constraint is `symbol >= N` (or `N <= symbol`): what joined rows keep."""
    alone = (((symbol,), 1),)
    if op == "<=":
        left, right = right, left
    return op in (">=", "<=") and left.poly == alone and not right.symbols


def _symbols_of(text: str) -> set[str]:
    return set(_symbolic.parse(text).symbols)


def check_expression(text: str) -> str:
    try:
        dim = _symbolic.parse(text)
    except _symbolic.SymbolicError as e:
        raise ValueError(f"not a dimension expression (SPEC.md 2.8): {e}") from None
    if not dim.symbols:
        raise ValueError(f"dimension {text!r} has no symbol: write it as an integer")
    return text


def check_identifier(name: str) -> str:
    if not name.isidentifier() or keyword.iskeyword(name):
        raise ValueError(f"{name!r} is not a Python identifier")
    return name


def check_symbols(m: Manifest) -> None:
    """Symbolic dimensions and constraints: format 2.0 only, bounded, constraints over known
    symbols, and no batched module or mesh beside them (SPEC.md 2.8)."""
    dims = [d for v in m.tensors() for d in v.shape if isinstance(d, str)]
    if not dims and not m.constraints:
        return
    if m.format_version.split(".")[0] == "1":
        raise ValueError("symbolic dimensions and constraints need format_version 2.0")
    arg_dims = [d for a in m.arguments for d in a.shape if isinstance(d, str)]
    symbols = {s for d in dims for s in _symbolic.parse(d).symbols}
    if len(symbols) > _symbolic.MAX_SYMBOLS:
        raise ValueError(f"{len(symbols)} symbols; the limit is {_symbolic.MAX_SYMBOLS}")
    arg_symbols = {s for d in arg_dims for s in _symbolic.parse(d).symbols}
    if symbols - arg_symbols:
        raise ValueError(
            f"result dimensions use symbols {sorted(symbols - arg_symbols)} that no argument's "
            "shape has: a caller could not determine them (SPEC.md 2.8)"
        )
    if len(m.constraints or []) > _symbolic.MAX_CONSTRAINTS:
        raise ValueError(f"more than {_symbolic.MAX_CONSTRAINTS} constraints")
    for text in m.constraints or []:
        try:
            left, _, right = _symbolic.parse_constraint(text)
        except _symbolic.SymbolicError as e:
            raise ValueError(f"constraints: {e}") from None
        unknown = (left.symbols | right.symbols) - symbols
        if unknown:
            raise ValueError(f"constraint {text!r} uses symbols {sorted(unknown)} no shape has")
    if m.batched is not None or m.mesh is not None:
        raise ValueError("a function with symbolic dimensions has no batched module or mesh")


def _check_tree(tree: Any, names: set[str], field: str) -> None:
    """A pytree of SPEC 2.3: arrays, objects, null, and strings that name a value, each once."""
    leaves: list[str] = []
    pending = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, str):
            leaves.append(node)
        elif isinstance(node, list):
            pending.extend(node)
        elif isinstance(node, dict):
            pending.extend(node.values())
        elif node is not None:
            raise ValueError(
                f"{field} holds {type(node).__name__} {node!r:.40}; only arrays, "
                "objects, null and names are allowed (SPEC.md 2.3)"
            )
    unknown = sorted(set(leaves) - names)
    if unknown:
        raise ValueError(
            f"{field} names {unknown[:5]}, which are not its values' names (SPEC.md 2.3)"
        )
    if len(leaves) != len(set(leaves)):
        raise ValueError(f"{field} names a value twice (SPEC.md 2.3)")


def check_unique(names: list[str], what: str) -> None:
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise ValueError(f"duplicate {what} name {n!r}")
        seen.add(n)

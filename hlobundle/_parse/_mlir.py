"""Reading StableHLO with the `jaxlib.mlir` bindings: parse, `@main`'s signature, portable artifacts.

This imports `jaxlib.mlir` only (about 0.1 s), never `jax`, so `verify` stays light.
"""

from __future__ import annotations

import re
from functools import cache
from typing import TYPE_CHECKING, Any

from .._format import _dtypes, _prechecks
from .._format._errors import ModuleError, VersionError
from .._format._prechecks import short
from .._mlir_context import new_context

if TYPE_CHECKING:
    from jaxlib.mlir import ir

ENTRY = "main"
# The oldest StableHLO target a writer tries by default (SPEC.md 5, "Versions"): each artifact is
# written at the oldest version from here up that expresses it, so that a bundle written with
# the newest jaxlib runs on the oldest one this project supports. Changelog:
# - 2026-12-06: 1.13.7, what jaxlib 0.10.2 (Python 3.11, the oldest jaxlib supported; it reads
#   0.9.0 to 1.17.0) writes for WEEK_12, so bundles written there keep their bytes. Before it,
#   each writer's own WEEK_12 version: 1.19.0 on jaxlib 0.12.1 (Python 3.13), which 0.10.2
#   refuses. Not 0.9.0, the oldest any jaxlib here writes: StableHLO promises readers 5 years
#   back from a version's release, so the older the floor, the sooner new readers may drop it.
TARGET_FLOOR = "1.13.7"


@cache
def context() -> ir.Context:
    """One MLIR context with the dialects JAX registers (func, stablehlo, chlo, sdy, mhlo...)."""
    return new_context()


def parse(
    text: str | bytes, *, path: str | None = None, ctx: ir.Context | None = None
) -> ir.Module:
    """Parse a text module, after the pre-checks that keep MLIR's parser from crashing."""
    from jaxlib.mlir import ir

    data = text.encode("utf-8") if isinstance(text, str) else text
    _prechecks.check_mlir_text(data, path=path or "<module>")
    with ctx or context(), ir.Location.unknown():
        try:
            return ir.Module.parse(data)
        except ir.MLIRError as e:
            where = f'"{path}":' if path else '"<text>":'
            message = short(str(e).replace('"-":', where))
            raise ModuleError(f"the MLIR does not parse: {message}", path=path) from None


def string_attr(op: ir.Operation, key: str, path: str | None) -> str:
    """The string attribute `key` of `op`; a missing or non-string one is a ModuleError."""
    owner = f"{op.name} at {location(op)}"
    value = optional_string(op.attributes, key, owner, path)
    if value is None:
        raise ModuleError(f"{owner} has no {key}", path=path)
    return value


def optional_string(attrs: Any, key: str, owner: str, path: str | None) -> str | None:
    """The string attribute `key` of an op's or a dictionary's attributes, or None when absent;
    any other kind of attribute is a ModuleError (the bindings would raise a bare ValueError)."""
    from jaxlib.mlir import ir

    if key not in attrs:
        return None
    if not isinstance(attrs[key], ir.StringAttr):
        raise ModuleError(f"{owner}'s {key} must be a string, got {attrs[key]}", path=path)
    return string_value(attrs[key], f"{owner}'s {key}", path)


def string_value(attr: Any, what: str, path: str | None) -> str:
    """A string attribute's text; bytes that are not UTF-8 are a ModuleError (the bindings'
    `.value` raises a bare RuntimeError)."""
    from jaxlib.mlir import ir

    try:
        return bytes(ir.StringAttr(attr).value_bytes).decode("utf-8")
    except UnicodeDecodeError:
        raise ModuleError(f"{what} is not UTF-8", path=path) from None


def drop_unnamed_top_level_ops(module: ir.Module) -> list[str]:
    """Erase the top-level ops without a symbol name (`llvm.module_flags`; enzyme-ad's hlo_call
    reads every top-level op's `sym_name`); returns their names."""
    unnamed = [op for op in module.body.operations if "sym_name" not in op.operation.attributes]
    names = [op.operation.name for op in unnamed]
    for op in unnamed:
        op.operation.erase()
    return names


def tensor_type(shape: tuple[int, ...], dtype: str) -> ir.RankedTensorType:
    """The MLIR tensor type of a shape and a dtype name (SPEC.md's)."""
    from jaxlib.mlir import ir

    return ir.RankedTensorType.get(list(shape), ir.Type.parse(_dtypes.BY_NAME[dtype].mlir))


def version_key(version: str) -> tuple[int, ...]:
    """A StableHLO version `X.Y.Z` as numbers, to compare."""
    return tuple(int(x) for x in version.split("."))


def default_target() -> str:
    """The first target a writer tries by default: `TARGET_FLOOR`, within what this jaxlib
    writes (its minimum version up to its current one)."""
    floor = max(TARGET_FLOOR, minimum_version(), key=version_key)
    return min(floor, current_version(), key=version_key)


def default_targets() -> list[str]:
    """What a writer tries, oldest first: `default_target()`, the first version of each later
    minor release (StableHLO adds ops and types only with a minor version), and this jaxlib's
    current version. A later major release starts at its X.0.0."""
    first, current = version_key(default_target()), version_key(current_version())
    majors = [(major, 0, 0) for major in range(first[0] + 1, current[0] + 1)]
    start = first[1] + 1 if not majors else 1
    minors = [(current[0], minor, 0) for minor in range(start, current[1] + 1)]
    found = [first, *majors, *minors, current]
    return [".".join(map(str, v)) for v in dict.fromkeys(found)]


def write_portable(
    module: ir.Module, target: str | None, *, path: str | None = None
) -> tuple[bytes, str]:
    """`module` as a portable artifact, and its target: `target` when given (a failure then
    names the oldest target that would do), else the oldest default (`to_portable_oldest`)."""
    if target is None:
        return to_portable_oldest(module, path=path)
    check_writable(target)
    try:
        return to_portable(module, target, path=path), target
    except ModuleError as e:
        try:
            oldest = to_portable_oldest(module, path=path)[1]
        except ModuleError:
            raise e from None
        raise ModuleError(
            f"{e.message}; the oldest target that expresses the module is {oldest}, what a "
            "writer picks when given none",
            path=path,
        ) from None


def check_writable(target: str, *, what: str = "--target-version") -> None:
    """A VersionError unless this jaxlib writes StableHLO `target` (given as `what`)."""
    oldest, newest = minimum_version(), current_version()
    if version_key(target) < version_key(oldest):
        raise VersionError(
            f"{what} {target} is older than this jaxlib writes (StableHLO {oldest} at least): "
            f"choose {oldest} or newer, or give none for the default ({default_target()} or "
            "the oldest after it that expresses the module)",
            argument="target_version",
        )
    if version_key(target) > version_key(newest):
        raise VersionError(
            f"{what} {target} is newer than this jaxlib writes (StableHLO {newest} at most): "
            f"choose {newest} or older, or upgrade jaxlib",
            argument="target_version",
        )


def to_portable_oldest(module: ir.Module, *, path: str | None = None) -> tuple[bytes, str]:
    """`module` as a portable artifact at the oldest of `default_targets()` that expresses it,
    and that target. A version expresses what an older one does, so after the first target
    (which expresses almost every module) the rest are searched by halves."""
    targets = default_targets()
    try:
        return to_portable(module, targets[0], path=path), targets[0]
    except ModuleError:
        if len(targets) == 1:
            raise
    low, high = 1, len(targets) - 1  # the newest is tried last: its error is the one raised
    while low < high:
        middle = (low + high) // 2
        try:
            to_portable(module, targets[middle], path=path)
            high = middle
        except ModuleError:
            low = middle + 1
    return to_portable(module, targets[low], path=path), targets[low]


def to_portable(module: ir.Module, target: str, *, path: str | None = None) -> bytes:
    """Serialize to a versioned StableHLO portable artifact (bytecode).

    StableHLO's serializer rewrites the module it is given into VHLO in place, so it is given
    a copy (made through MLIR bytecode of our own, never untrusted bytes). What MLIR says of a
    failure is caught (it would go to stderr) and its first line kept for the error.
    """
    import io

    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import stablehlo

    buffer = io.BytesIO()
    module.operation.write_bytecode(buffer)
    said: list[str] = []

    def keep(diagnostic: ir.Diagnostic) -> bool:
        said.append(f"{diagnostic.message} at {diagnostic.location}")
        return True

    with context() as ctx:
        copy = ir.Module.parse(buffer.getvalue())
        handler: Any = ctx.attach_diagnostic_handler(keep)  # jaxlib's stubs say `object`
        try:
            return bytes(stablehlo.serialize_portable_artifact(copy, target, True))
        except Exception as e:  # the bindings raise bare ValueError/RuntimeError
            why = _first_reason(said) or str(e)
            raise ModuleError(
                f"cannot write a StableHLO portable artifact for target {target}: {short(why)}",
                path=path,
            ) from None
        finally:
            handler.detach()


def _first_reason(said: list[str]) -> str | None:
    """MLIR's first diagnostic, less the op it quotes whole after a refused op's name."""
    if not said:
        return None
    first, _, where = said[0].rpartition(" at ")
    name, marked, _ = first.partition(" that was explicitly marked illegal")
    return f"{name} ({place(where)}), which StableHLO of that version lacks" if marked else said[0]


def place(location: str) -> str:
    """An MLIR location in a module parsed from text, as the text's line and column."""
    found = re.fullmatch(r'loc\("-":(\d+):(\d+)\)', location)
    return f"line {found[1]}, column {found[2]}" if found else location


def from_portable(data: bytes, *, path: str | None = None) -> ir.Module:
    """Deserialize a portable artifact this process wrote itself; never untrusted bytes (those
    go through `_artifacts.canonical_in_child`)."""
    from jaxlib.mlir.dialects import stablehlo

    try:
        return stablehlo.deserialize_portable_artifact(context(), data)
    except Exception as e:
        raise ModuleError(
            f"the StableHLO portable artifact does not load: {short(str(e))}", path=path
        ) from None


def minimum_version() -> str:
    from jaxlib.mlir.dialects import stablehlo

    return str(stablehlo.get_minimum_version())


def current_version() -> str:
    from jaxlib.mlir.dialects import stablehlo

    return str(stablehlo.get_current_version())


def location(op: ir.Operation) -> str:
    """`line L, column C` of an op parsed from text, else MLIR's own rendering of its location."""
    loc = op.location
    try:
        return f"line {loc.start_line}, column {loc.start_col}"  # type: ignore[attr-defined]  # a file location's; jaxlib's stubs lack them
    except (AttributeError, ValueError):  # a location kind without line information
        return str(loc)


def find_ops(module: ir.Module, names: tuple[str, ...]) -> list[tuple[str, str]]:
    """(name, location) of every op in the module whose name is in `names`."""
    from jaxlib.mlir import ir

    found = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name in names:
            found.append((op.name, location(op)))
        return ir.WalkResult.ADVANCE

    with context():
        module.operation.walk(visit)
    return found


def first_complex_op(module: ir.Module) -> tuple[str, str] | None:
    """(name, location) of the first op with a complex-valued result, if any."""
    from jaxlib.mlir import ir

    found: list[tuple[str, str]] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        for result in op.results:
            t = result.type
            if (
                t.typeid == ir.RankedTensorType.static_typeid
                and ir.RankedTensorType(t).element_type.typeid == ir.ComplexType.static_typeid
            ):
                found.append((op.name, location(op)))
                return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    with context():
        module.operation.walk(visit)
    return found[0] if found else None


def symbol_names(module: ir.Module) -> set[str]:
    """The `sym_name` of every top-level op (functions, globals...)."""
    names = set()
    for op in module.body.operations:
        attr = op.operation.attributes
        if "sym_name" in attr:
            names.add(string_value(attr["sym_name"], "a symbol's name", None))
    return names


def free_symbol(module: ir.Module, base: str) -> str:
    """`base`, or `base_1`, `base_2`...: the first name no top-level op of `module` has, for
    a symbol a rewrite adds beside the module's own."""
    taken = symbol_names(module)
    name, k = base, 0
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    return name

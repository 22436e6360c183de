"""Reading StableHLO with the `jaxlib.mlir` bindings: parse, `@main`'s signature, portable artifacts.

This imports `jaxlib.mlir` only (about 0.1 s), never `jax`, so `verify` stays light.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from . import _dtypes, _prechecks
from ._errors import ModuleError
from ._mlir_context import new_context
from ._prechecks import short

if TYPE_CHECKING:
    from jaxlib.mlir import ir

ENTRY = "main"
# Portable artifacts target what a 12-week-old StableHLO reads, unless asked otherwise.
DEFAULT_COMPATIBILITY = "WEEK_12"


@dataclass(frozen=True)
class TensorType:
    shape: tuple[int, ...]  # None is a dynamic dimension (only `main_types` allows them)
    dtype: _dtypes.DType


@dataclass(frozen=True)
class Sharding:
    """The module's distribution: its Shardy mesh and each value's partitioning.

    `arguments[i]` / `results[k]` list, per tensor dimension, the mesh axes it is split over
    (None when the value has no `sdy.sharding`); `hlo_*` keep `mhlo.sharding` strings as written.
    """

    mesh: tuple[tuple[str, int], ...] | None
    device_ids: tuple[int, ...]
    arguments: tuple[tuple[tuple[str, ...], ...] | None, ...]
    results: tuple[tuple[tuple[str, ...], ...] | None, ...]
    hlo_arguments: tuple[str | None, ...]
    hlo_results: tuple[str | None, ...]


@dataclass(frozen=True)
class Signature:
    """`@main`'s argument and result types, plus `tf.aliasing_output` (result -> argument)."""

    module_name: str | None
    arguments: tuple[TensorType, ...]
    results: tuple[TensorType, ...]
    aliases: dict[int, int]
    unused: frozenset[int] = frozenset()  # arguments @main never reads
    sharding: Sharding | None = None
    # JAX's `jax.arg_info` / `jax.result_info` of each value (untrusted text), None when absent
    argument_info: tuple[str | None, ...] = ()
    result_info: tuple[str | None, ...] = ()


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
    value = _optional_string(op.attributes, key, owner, path)
    if value is None:
        raise ModuleError(f"{owner} has no {key}", path=path)
    return value


def _optional_string(attrs: Any, key: str, owner: str, path: str | None) -> str | None:
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


def signature(module: ir.Module, *, path: str | None = None, dynamic: bool = False) -> Signature:
    """Read `@main`'s types; every one must be a tensor of a dtype in the table, static unless
    `dynamic` (a function with symbolic dimensions: a dynamic one is None)."""
    try:
        return _signature(module, path, dynamic)
    except (ValueError, TypeError, IndexError, KeyError) as e:  # attributes of the wrong kind
        raise ModuleError(f"@main's attributes are malformed: {short(str(e))}", path=path) from None


def _signature(module: ir.Module, path: str | None, dynamic: bool = False) -> Signature:
    from jaxlib.mlir import ir

    with context():
        main = find_main(module, path)
        ftype = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
        args = tuple(
            _tensor_type(t, f"@main argument {i}", path, dynamic)
            for i, t in enumerate(ftype.inputs)
        )
        results = tuple(
            _tensor_type(t, f"@main result {i}", path, dynamic) for i, t in enumerate(ftype.results)
        )
        name_attr = module.operation.attributes
        name = _optional_string(name_attr, "sym_name", "the module", path)
        body = main.regions[0].blocks[0]
        unused = frozenset(i for i, a in enumerate(body.arguments) if not list(a.uses))
        sharding = _sharding(module, main, len(args), len(results), path)
        return Signature(
            name, args, results, _aliases(main), unused, sharding,
            _recorded(main, "arg_attrs", "jax.arg_info", len(args)),
            _recorded(main, "res_attrs", "jax.result_info", len(results)),
        )  # fmt: skip


def _recorded(main: ir.Operation, key: str, name: str, n: int) -> tuple[str | None, ...]:
    """Each value's string attribute `name`, or None where it is absent, not a string or not
    UTF-8 (a name, not something to refuse the module for)."""
    from jaxlib.mlir import ir

    found: list[str | None] = []
    for attrs in _value_attrs(main, key, n):
        value = attrs[name] if attrs is not None and name in attrs else None
        text = None
        if isinstance(value, ir.StringAttr):
            with contextlib.suppress(UnicodeDecodeError):
                text = bytes(value.value_bytes).decode("utf-8")
        found.append(text)
    return tuple(found) if len(found) == n else (None,) * n


def main_types(
    module: ir.Module, *, path: str | None = None
) -> tuple[tuple[TensorType, ...], tuple[TensorType, ...]]:
    """`@main`'s argument and result types, allowing dynamic dimensions (batched modules)."""
    from jaxlib.mlir import ir

    with context():
        ftype = ir.FunctionType(
            ir.TypeAttr(find_main(module, path).attributes["function_type"]).value
        )
        return tuple(
            tuple(
                _tensor_type(t, f"@main {what} {i}", path, dynamic=True)
                for i, t in enumerate(types)
            )
            for what, types in (("argument", ftype.inputs), ("result", ftype.results))
        )  # type: ignore[return-value]


def find_main(module: ir.Module, path: str | None = None) -> ir.Operation:

    names = []
    for op in module.body.operations:
        attrs = op.operation.attributes
        if op.operation.name == "func.func" and "sym_name" in attrs:
            name = string_value(attrs["sym_name"], "a function's name", path)
            if name == ENTRY:
                if not op.operation.regions[0].blocks:
                    raise ModuleError(
                        f"@{ENTRY} is a declaration without a body; a bundle's entry must "
                        "define the computation",
                        path=path,
                    )
                return op.operation
            names.append(name)
    hint = (
        f"; rename the entry function to @{ENTRY} (for example `func.func @{ENTRY}(...)`), "
        "as Reactant and jax.export write it"
        if names
        else ""
    )
    raise ModuleError(
        f"the module has no func.func @{ENTRY}; functions found: {names or 'none'}{hint}",
        path=path,
    )


def _tensor_type(t: ir.Type, where: str, path: str | None, dynamic: bool = False) -> TensorType:
    from jaxlib.mlir import ir

    if t.typeid != ir.RankedTensorType.static_typeid:
        raise ModuleError(f"{where} has type {t}; only ranked tensors are supported", path=path)
    rt = ir.RankedTensorType(t)
    if not rt.has_static_shape and not dynamic:
        raise ModuleError(f"{where} has a dynamic shape ({t}); shapes must be static", path=path)
    try:
        row = _dtypes.from_mlir(str(rt.element_type), where=where)
    except ModuleError as e:
        e.path = path
        raise
    shape = tuple(None if rt.is_dynamic_dim(i) else d for i, d in enumerate(rt.shape))
    return TensorType(shape, row)  # type: ignore[arg-type]


def _value_attrs(main: ir.Operation, key: str, n: int) -> list[ir.DictAttr | None]:
    from jaxlib.mlir import ir

    if key not in main.attributes:
        return [None] * n
    return [ir.DictAttr(a) for a in ir.ArrayAttr(main.attributes[key])]


def _sharding(
    module: ir.Module, main: ir.Operation, n_args: int, n_results: int, path: str | None
) -> Sharding | None:
    from jaxlib.mlir.dialects import sdy

    meshes = {}
    for op in module.body.operations:
        if op.operation.name == "sdy.mesh":
            mesh = sdy.MeshAttr(op.operation.attributes["mesh"])
            axes = tuple((sdy.MeshAxisAttr(a).name, sdy.MeshAxisAttr(a).size) for a in mesh.axes)
            meshes[string_value(op.operation.attributes["sym_name"], "a mesh's name", path)] = (
                axes,
                tuple(mesh.device_ids),
            )

    def read(attrs: ir.DictAttr | None) -> tuple[tuple[tuple[str, ...], ...] | None, str | None]:
        if attrs is None:
            return None, None
        hlo = _optional_string(attrs, "mhlo.sharding", "@main", path)
        if "sdy.sharding" not in attrs:
            return None, hlo
        t = sdy.TensorShardingAttr(attrs["sdy.sharding"])
        ref = str(t.mesh_or_ref).lstrip("@")
        if ref not in meshes or len(meshes) > 1:
            raise ModuleError(
                f"sdy.sharding refers to mesh {str(t.mesh_or_ref)!r}; one named sdy.mesh per module "
                f"is supported, found {sorted(meshes) or 'none'}",
                path=path,
            )
        dims = tuple(
            tuple(sdy.AxisRefAttr(a).name for a in sdy.DimensionShardingAttr(d).axes)
            for d in t.dimension_shardings
        )
        return dims, hlo

    args = [read(a) for a in _value_attrs(main, "arg_attrs", n_args)]
    results = [read(a) for a in _value_attrs(main, "res_attrs", n_results)]
    if not meshes and not any(h for _, h in [*args, *results]):
        return None
    mesh, device_ids = next(iter(meshes.values())) if meshes else (None, ())
    return Sharding(mesh, device_ids, tuple(a for a, _ in args), tuple(r for r, _ in results),
                    tuple(h for _, h in args), tuple(h for _, h in results))  # fmt: skip


def _aliases(main: ir.Operation) -> dict[int, int]:
    from jaxlib.mlir import ir

    if "arg_attrs" not in main.attributes:
        return {}
    found = {}
    for i, attrs in enumerate(ir.ArrayAttr(main.attributes["arg_attrs"])):
        d = ir.DictAttr(attrs)
        if "tf.aliasing_output" in d:
            found[ir.IntegerAttr(d["tf.aliasing_output"]).value] = i
    return found


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


def default_target() -> str:
    from jaxlib.mlir.dialects import stablehlo

    req = getattr(stablehlo.StablehloCompatibilityRequirement, DEFAULT_COMPATIBILITY)
    return str(stablehlo.get_version_from_compatibility_requirement(req))


def to_portable(module: ir.Module, target: str, *, path: str | None = None) -> bytes:
    """Serialize to a versioned StableHLO portable artifact (bytecode).

    StableHLO's serializer rewrites the module it is given into VHLO in place, so it is given
    a copy (made through MLIR bytecode of our own, never untrusted bytes).
    """
    import io

    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import stablehlo

    buffer = io.BytesIO()
    module.operation.write_bytecode(buffer)
    with context():
        copy = ir.Module.parse(buffer.getvalue())
        try:
            return bytes(stablehlo.serialize_portable_artifact(copy, target, True))
        except Exception as e:  # the bindings raise bare ValueError/RuntimeError
            raise ModuleError(
                f"cannot write a StableHLO portable artifact for target {target}: {short(str(e))}",
                path=path,
            ) from None


def from_portable(data: bytes, *, path: str | None = None) -> ir.Module:
    """Deserialize a portable artifact this process wrote itself; never untrusted bytes (those
    go through `_portable.canonical_in_child`)."""
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
        return f"line {loc.start_line}, column {loc.start_col}"
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

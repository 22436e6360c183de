"""`@main`, the entry function, read with the `jaxlib.mlir` bindings: its argument and result
types, sharding, aliasing and JAX's names (`signature`), as the manifest must agree with them.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .._format import _dtypes
from .._format._errors import MainSignatureError, ModuleError
from .._format._prechecks import short
from ._mlir import ENTRY, context, optional_string, string_value

if TYPE_CHECKING:
    from jaxlib.mlir import ir


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


def without_platform_index(sig: Signature, path: str | None) -> Signature:
    """The signature of a module lowered for several platforms (SPEC.md 2.14) without its first
    argument, the platform index, a scalar `i32` or `i64` (a ModuleError when it is not one):
    what the manifest's arguments describe."""
    import dataclasses

    first = (sig.arguments[0].shape, sig.arguments[0].dtype.name) if sig.arguments else None
    if first not in (((), "int32"), ((), "int64")):  # i64 where jax lowered with x64 on
        raise MainSignatureError(
            "the manifest says the function is lowered for several platforms, but @main's "
            "first argument is not the platform index, a tensor<i32> or tensor<i64> "
            "(SPEC.md 2.14)",
            path=path,
            field="platforms",
        )
    sharding = sig.sharding
    if sharding is not None:
        sharding = dataclasses.replace(
            sharding,
            arguments=sharding.arguments[1:],
            hlo_arguments=sharding.hlo_arguments[1:],
        )
    return dataclasses.replace(
        sig,
        arguments=sig.arguments[1:],
        aliases={k: i - 1 for k, i in sig.aliases.items()},
        unused=frozenset(i - 1 for i in sig.unused if i > 0),
        sharding=sharding,
        argument_info=sig.argument_info[1:],
    )


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
        name = optional_string(name_attr, "sym_name", "the module", path)
        body = main.regions[0].blocks[0]
        unused = frozenset(i for i, a in enumerate(body.arguments) if not list(a.uses))
        sharding = _sharding(module, main, len(args), len(results), path)
        return Signature(
            name,
            args,
            results,
            _aliases(main),
            unused,
            sharding,
            _recorded(main, "arg_attrs", "jax.arg_info", len(args)),
            _recorded(main, "res_attrs", "jax.result_info", len(results)),
        )


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
            attr = sdy.MeshAttr(op.operation.attributes["mesh"])
            axes = tuple((sdy.MeshAxisAttr(a).name, sdy.MeshAxisAttr(a).size) for a in attr.axes)
            meshes[string_value(op.operation.attributes["sym_name"], "a mesh's name", path)] = (
                axes,
                tuple(attr.device_ids),
            )

    def read(attrs: ir.DictAttr | None) -> tuple[tuple[tuple[str, ...], ...] | None, str | None]:
        if attrs is None:
            return None, None
        hlo = optional_string(attrs, "mhlo.sharding", "@main", path)
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
    return Sharding(
        mesh,
        device_ids,
        tuple(a for a, _ in args),
        tuple(r for r, _ in results),
        tuple(h for _, h in args),
        tuple(h for _, h in results),
    )


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

"""Preparing a module for `enzyme_ad.jax.hlo_call` 0.0.16, with the `jaxlib.mlir` bindings.

hlo_call inlines the module into the caller's program and has known traps
(../shared/notes/runtime-facts.md). This rewrite handles each one:

- private symbols get a bundle-unique prefix, so they cannot clash with the caller's
  own functions (an outer `jax.nn.relu` is also emitted as `@relu`);
- top-level ops without a symbol name (`llvm.module_flags`) are dropped, since hlo_call
  reads every top-level op's `sym_name`;
- element types hlo_call cannot pass (bool, f16, i16, ui8, ui16, the float8 types) travel
  as a wider carrier type: a new `@main` converts carriers to the real types, calls the
  original entry and converts its results back. Every conversion is exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..._format import _dtypes
from ..._parse import _main_signature, _mlir

if TYPE_CHECKING:
    from jaxlib.mlir import ir

# dtype name -> the dtype that carries it through hlo_call 0.0.16.
CARRIERS: dict[str, str] = {
    "bool": "int8",
    "int16": "int32",
    "uint8": "uint32",
    "uint16": "uint32",
    "float16": "float32",
    **{d.name: "float32" for d in _dtypes.TABLE if d.name.startswith(("float8", "float4"))},
    "int4": "int32",
    "int2": "int32",
    "uint4": "uint32",
    "uint2": "uint32",
}


@dataclass(frozen=True)
class Prepared:
    text: str
    argument_carriers: tuple[str | None, ...]
    result_carriers: tuple[str | None, ...]
    changed: bool  # False when hlo_call can take the module's text as it is (the mark aside)


def symbol_prefix(module_sha256: str, length: int = 10) -> str:
    """The bundle-unique prefix of private symbols: from the sha256 of the stored module text."""
    return f"hb{module_sha256[:length]}_"


def for_hlo_call(text: str, prefix: str) -> Prepared:
    """The module text hlo_call can run, and the carrier dtype (or None) of each value."""
    from jaxlib.mlir import ir

    module = _mlir.parse(text)
    sig = _main_signature.signature(module)
    with _mlir.context(), ir.Location.unknown():
        dropped = bool(_mlir.drop_unnamed_top_level_ops(module))
        renamed = _prefix_private_symbols(module, prefix)
        args = tuple(CARRIERS.get(t.dtype.name) for t in sig.arguments)
        results = tuple(CARRIERS.get(t.dtype.name) for t in sig.results)
        wrapped = any(args) or any(results)
        if wrapped:
            _wrap_main(module, sig, prefix, args, results)
        # The prefix names the module's text too, private symbols or not: JAX's rules find what
        # belongs to a module (its batched module, its fold) by its text (`_batched`), and two
        # bundles with one module text may declare different things.
        module.operation.attributes["hlobundle.prefix"] = ir.StringAttr.get(prefix)
        # `changed`: whether a script may not run the stored text as it is (the mark aside)
        return Prepared(str(module), args, results, dropped or renamed or wrapped)


def _prefix_private_symbols(module: ir.Module, prefix: str) -> bool:
    from jaxlib.mlir import ir

    renamed = False
    for op in module.body.operations:
        name = _mlir.string_value(op.operation.attributes["sym_name"], "a symbol's name", None)
        if name == _mlir.ENTRY:
            continue
        new = prefix + name
        ir.SymbolTable.replace_all_symbol_uses(name, new, module.operation)
        ir.SymbolTable.set_symbol_name(op.operation, new)
        renamed = True
    return renamed


def _wrap_main(
    module: ir.Module,
    sig: _main_signature.Signature,
    prefix: str,
    arg_carriers: tuple[str | None, ...],
    result_carriers: tuple[str | None, ...],
) -> None:
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import func, stablehlo

    inner_name = prefix + _mlir.ENTRY
    main = _main_signature.find_main(module)
    ir.SymbolTable.set_symbol_name(main, inner_name)
    main.attributes["sym_visibility"] = ir.StringAttr.get("private")
    inner_args = [_tensor(t.shape, t.dtype.name) for t in sig.arguments]
    inner_results = [_tensor(t.shape, t.dtype.name) for t in sig.results]
    outer_args = [_carried(t, c) for t, c in zip(sig.arguments, arg_carriers, strict=True)]
    outer_results = [_carried(t, c) for t, c in zip(sig.results, result_carriers, strict=True)]
    with ir.InsertionPoint(module.body):
        wrapper = func.FuncOp(_mlir.ENTRY, (outer_args, outer_results), visibility="public")  # type: ignore[call-arg]  # jaxlib's stubs lack it
    with ir.InsertionPoint(wrapper.add_entry_block()):  # type: ignore[attr-defined]  # jaxlib's stubs lack it
        arguments = wrapper.arguments  # type: ignore[attr-defined]  # jaxlib's stubs lack it
        inputs = [
            stablehlo.convert(want, value) if want != value.type else value
            for value, want in zip(arguments, inner_args, strict=True)
        ]
        call = func.CallOp(inner_results, inner_name, inputs)
        outputs = [
            stablehlo.convert(want, value) if want != value.type else value
            for value, want in zip(call.results, outer_results, strict=True)
        ]
        func.ReturnOp(outputs)


def _carried(t: _main_signature.TensorType, carrier: str | None) -> ir.Type:
    return _tensor(t.shape, carrier or t.dtype.name)


def _tensor(shape: tuple[int, ...], dtype: str) -> ir.Type:
    return _mlir.tensor_type(shape, dtype)

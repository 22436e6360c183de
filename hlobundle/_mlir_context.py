"""The MLIR context JAX parses in, built from `jaxlib.mlir` alone.

It imports nothing of the package, so that the child process that deserializes untrusted
portable artifacts (`_isolation/_portable_child.py`, which runs alone and finds this file in
the package's folder) builds exactly the context the reader (`_parse/_mlir.py`) uses.
"""

from __future__ import annotations

from typing import Any


def bindings() -> tuple[Any, ...]:
    """The modules of MLIR's bindings a context is built from: (ir, _jax_mlir_ext, chlo, mhlo,
    sdy, stablehlo). A fork server imports them once before it forks (`preload`)."""
    from jaxlib.mlir import ir
    from jaxlib.mlir._mlir_libs import _jax_mlir_ext
    from jaxlib.mlir.dialects import chlo, mhlo, sdy, stablehlo

    return ir, _jax_mlir_ext, chlo, mhlo, sdy, stablehlo


def new_context(*, allow_unregistered: bool = False) -> Any:
    """A context with the dialects JAX registers (func, stablehlo, chlo, sdy, mhlo...)."""
    ir, _jax_mlir_ext, chlo, mhlo, sdy, stablehlo = bindings()
    registry = ir.DialectRegistry()
    _jax_mlir_ext.register_dialects(registry)
    ctx = ir.Context()
    ctx.append_dialect_registry(registry)
    ctx.load_all_available_dialects()
    for dialect in (stablehlo, chlo, sdy):
        dialect.register_dialect(ctx)
    mhlo.register_mhlo_dialect(ctx)
    ctx.allow_unregistered_dialects = allow_unregistered
    return ctx


def canonical(module: Any) -> str:
    """The module's text without locations: what two forms of one program print alike."""
    return module.operation.get_asm(enable_debug_info=False)

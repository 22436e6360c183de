"""Every private symbol of jax and enzyme-ad that hlobundle uses, in one place.

They are checked with jax 0.10.2 (Python 3.11) and 0.12 (Python 3.12+, where enzyme-ad does not
install), and with enzyme-ad 0.0.16 (../shared/notes/runtime-facts.md);
when either moves, this is the file to read first. Each accessor imports lazily, so that importing
hlobundle never imports jax. This module imports nothing of the package (a leaf of the layers).
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import weakref
from typing import Any


def jax_core() -> Any:
    from jax._src import core

    return core


def batching() -> Any:
    from jax._src.interpreters import batching

    return batching


def partial_eval() -> Any:
    from jax._src.interpreters import partial_eval

    return partial_eval


def ad() -> Any:
    from jax._src.interpreters import ad

    return ad


def mlir_lowering() -> Any:
    """`jax._src.interpreters.mlir`: `_lowerings`, `_platform_specific_lowerings`, `lower_fun`."""
    from jax._src.interpreters import mlir

    return mlir


def call_exported_p() -> Any:
    """The primitive a `jax.export.Exported.call` binds."""
    from jax._src.export._export import call_exported_p

    return call_exported_p


def initialize_lapack() -> None:
    """Give jax's CPU LAPACK kernels their functions (from scipy), as jax does before it lowers
    a linear-algebra op; a module calling `lapack_*` targets needs it before it runs."""
    from jax._src.lax import linalg

    linalg.initialize_lapack()


_LAPACK_FREE: set[int] = set()  # ids of live Exporteds whose module calls no LAPACK kernel
_SKIPPING = threading.local()


def skip_lapack_initialization(exported: Any) -> None:
    """Lower `exported` without initializing LAPACK. jax does it for every Exported it lowers
    on CPU, and that imports scipy (about 0.1 s in a fresh process); for a module whose checked
    custom calls include no LAPACK target it is not needed. Exporteds not marked keep jax's
    behaviour; without the private hooks (another jax), nothing changes."""
    if not _install_lapack_hook():
        return
    key = id(exported)
    _LAPACK_FREE.add(key)
    weakref.finalize(exported, _LAPACK_FREE.discard, key)


@functools.cache
def _install_lapack_hook() -> bool:
    try:
        from jax._src.export import _export
        from jax._src.interpreters import mlir

        ensure, lowering = _export._ensure_backends_initialized, _export._call_exported_lowering
    except (ImportError, AttributeError):
        return False

    def ensure_unless_skipping(platforms: tuple[str, ...]) -> None:
        if not getattr(_SKIPPING, "on", False):
            ensure(platforms)

    def lower(ctx: Any, *args: Any, exported: Any) -> Any:
        _SKIPPING.on = id(exported) in _LAPACK_FREE
        try:
            return lowering(ctx, *args, exported=exported)
        finally:
            _SKIPPING.on = False

    _export._ensure_backends_initialized = ensure_unless_skipping
    mlir.register_lowering(_export.call_exported_p, lower)
    return True


def refine_polymorphic_shapes(module: Any) -> Any:
    """jax's own shape refinement: a module whose `@main` has static argument types but uses
    dynamic shapes inside (a symbolic function lowered at concrete shapes) made static."""
    from jax._src.interpreters import mlir

    return mlir.refine_polymorphic_shapes(module)


def refine_shapes(bytecode: bytes) -> bytes:
    """jaxlib's shape refinement on MLIR bytecode whose `@main` has static argument types: the
    module made static, with jax's `shape_assertion`s evaluated (what `jax.export` calls do),
    or `ValueError` with MLIR's diagnostics (the reason, without jax's dump advice)."""
    from jaxlib import _jax

    try:
        return bytes(
            _jax.mlir.refine_polymorphic_shapes(
                mlir_module=bytecode,
                enable_shape_assertions=True,
                validate_static_shapes=True,
                enable_shardy=False,
            )
        )
    except Exception as e:  # jaxlib's JaxRuntimeError, a RuntimeError subclass, in 0.10
        raise ValueError(str(e)) from None


def flatten_axes(*args: Any) -> Any:
    from jax._src.api_util import flatten_axes

    return flatten_axes(*args)


def enzyme_primitives() -> Any:
    """enzyme-ad's primitives (`_enzyme_primal_p`, `_enzyme_shadow_aug_p`, ...)."""
    from enzyme_ad.jax import primitives

    return primitives


def new_exported(fields: dict[str, Any]) -> Any:
    """A `jax.export.Exported` from its dataclass fields, including private ones; fields the
    installed jax does not have are left out (jax 0.8 lacks the named-sharding fields)."""
    from jax import export

    known = {f.name for f in dataclasses.fields(export.Exported)}
    return export.Exported(**{k: v for k, v in fields.items() if k in known})


def serialize_executable(compiled: Any) -> bytes:
    """A `jax.stages.Compiled`'s executable in PJRT's own serialization (what JAX's persistent
    compilation cache stores: `jax/_src/compilation_cache.py`)."""
    executable = compiled.runtime_executable()
    return bytes(executable.client.serialize_executable(executable))


def deserialize_executable(data: bytes, device: Any) -> Any:
    """A loaded executable of one device from PJRT's bytes, as JAX's cache loads one; its
    `execute(arrays)` runs it. jaxlib's C++ parses `data`: native code, trusted bytes only."""
    from jax._src.lib import xla_client

    return device.client.deserialize_executable(data, xla_client.DeviceList((device,)), None)


def parameter_shapes(loaded: Any) -> list[tuple[tuple[int, ...], Any]]:
    """The dimensions and NumPy dtype of each parameter a loaded executable takes, read from
    the HLO module it holds (its entry computation's program shape), not from what anyone
    says it was compiled for; a tupled parameter's elements in order."""
    from jax._src.lib import xla_client

    proto = loaded.hlo_modules()[0].as_serialized_hlo_module_proto()
    shapes = xla_client.XlaComputation(proto).program_shape().parameter_shapes()
    flat = [t for s in shapes for t in (s.tuple_shapes() if s.is_tuple() else [s])]
    return [(tuple(int(d) for d in s.dimensions()), s.numpy_dtype()) for s in flat]


_uncached = threading.Lock()


def compile_uncached(lowered: Any) -> Any:
    """`lowered.compile()` by XLA itself, never taken from JAX's persistent compilation cache:
    an executable JAX loaded from its cache serializes without its code (jaxlib 0.10.2 and
    0.12 on the CPU: running the copy fails, `Function wrapped_reduce not found`). JAX decides
    whether its cache is used once per process (`is_cache_used`), so turning the option off
    is not enough once a compile has looked: that answer is no while this compiles (another
    thread's compile meanwhile compiles too)."""
    from jax._src import compilation_cache, config

    with _uncached, config.enable_compilation_cache(False):
        used = compilation_cache.is_cache_used
        compilation_cache.is_cache_used = lambda backend: False
        try:
            return lowered.compile()
        finally:
            compilation_cache.is_cache_used = used

"""`jax.export`, both ways: the one place that knows what an `Exported` is made of.

Out (`Bundle.to_exported()`, and every run on the xla backend): `exported_for` builds an
`Exported` field by field from a manifest and a portable artifact, with the avals of the
manifest's values (`value_avals`; symbolic shapes, SPEC.md 2.8, as jax.export symbolic
dimensions sharing one scope with the constraints) and its pytrees (`trees`).
In (`from_exported`, `pack --from-jax-export`, in `_write/_jax_export.py`): `read_blob` reads a
serialized Exported, `refuse_what_a_bundle_cannot_hold` says why one cannot be a bundle, and
`symbolic_shapes` gives its shapes as a manifest writes them.

jax is imported inside the functions: nothing here costs an import of jax until it is used.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import _compat
from .._format import _dtypes, _limits
from .._format._errors import InputError
from .._format._fields import PRODUCER_JAX_EXPORT, unflatten
from .._parse._stored import differentiable

if TYPE_CHECKING:
    from .._format._manifest import Argument, Manifest, Result

PRODUCER = PRODUCER_JAX_EXPORT  # the provenance's producer of a bundle from an Exported


def value_avals(manifest: Manifest, values: Sequence[Argument | Result]) -> list[Any]:
    """The avals of `values` (the manifest's arguments or results)."""
    import jax

    shapes = _shapes(manifest, [list(v.shape) for v in values])
    return [
        jax.core.ShapedArray(shape, _dtypes.BY_NAME[v.dtype].numpy)
        for shape, v in zip(shapes, values, strict=True)
    ]


def cotangent_avals(manifest: Manifest, values: Sequence[Argument | Result]) -> list[Any]:
    """The avals of `values`' cotangents: float0 for values that are not differentiable."""
    import jax
    from jax import dtypes

    shapes = _shapes(manifest, [list(v.shape) for v in values])
    return [
        jax.core.ShapedArray(
            shape, _dtypes.BY_NAME[v.dtype].numpy if differentiable(v.dtype) else dtypes.float0
        )
        for shape, v in zip(shapes, values, strict=True)
    ]


def _shapes(manifest: Manifest, shapes: list[list[int | str]]) -> list[tuple[Any, ...]]:
    if not manifest.symbolic:
        return [tuple(s) for s in shapes]
    from jax import export

    scope = _scope(tuple(manifest.constraints or ()))
    return [
        tuple(export.symbolic_shape(", ".join(map(str, s)), scope=scope)) if s else ()
        for s in shapes
    ]


@cache
def _scope(constraints: tuple[str, ...]) -> Any:
    """One scope per set of constraints: jax.export refuses symbols of different scopes in one
    lowering (a backward module's primals and cotangents)."""
    from jax import export

    return export.SymbolicScope(constraints)


def is_symbolic(avals: Sequence[Any]) -> bool:
    return any(not isinstance(d, int) for a in avals for d in a.shape)


def exported_for(
    manifest: Manifest,
    portable: bytes,
    *,
    inputs: Sequence[Any] | None = None,
    outputs: Sequence[Any] | None = None,
    name: str | None = None,
    get_vjp: Callable[[Any], Any] | None = None,
    polymorphic: bool = False,
    in_tree: Any = None,
    out_tree: Any = None,
    lapack: bool = True,
) -> Any:
    """A `jax.export.Exported` for a portable artifact, built field by field (any jax >= 0.6).

    By default its avals are the manifest's arguments and results, and its trees flat; a
    backward module passes its own avals. `lapack=False` says the module's checked custom calls
    include no LAPACK kernel, so lowering it need not initialize them.
    """
    import jax
    from jax import export

    in_avals = tuple(inputs if inputs is not None else value_avals(manifest, manifest.arguments))
    out_avals = tuple(outputs if outputs is not None else value_avals(manifest, manifest.results))
    n, m = len(in_avals), len(out_avals)
    fields = {
        "fun_name": name or manifest.function,
        "in_tree": in_tree or jax.tree_util.tree_structure((tuple(range(n)), {})),
        "in_avals": in_avals,
        "out_tree": out_tree or jax.tree_util.tree_structure(tuple(range(m))),
        "out_avals": out_avals,
        "_has_named_shardings": True,  # all None (unspecified), as jax.export writes them
        "_in_named_shardings": (None,) * n,
        "_out_named_shardings": (None,) * m,
        "in_shardings_hlo": (None,) * n,
        "out_shardings_hlo": (None,) * m,
        "nr_devices": 1,
        # One platform: the portable module runs anywhere. Several (SPEC.md 2.14): jax passes
        # the index of the platform it runs on, and refuses one the module was not lowered for.
        "platforms": tuple(manifest.platforms or ("cpu",)),
        "ordered_effects": (),
        "unordered_effects": (),
        "disabled_safety_checks": ()
        if manifest.platforms
        else (export.DisabledSafetyCheck.platform(),),
        "mlir_module_serialized": portable,
        "calling_convention_version": export.maximum_supported_calling_convention_version,
        "module_kept_var_idx": tuple(range(n)),
        "uses_global_constants": polymorphic or manifest.symbolic,  # symbolic dimensions
        "_get_vjp": get_vjp,
    }
    exported = _compat.new_exported(fields)
    if not lapack:
        _compat.skip_lapack_initialization(exported)
    return exported


def trees(manifest: Manifest) -> tuple[Any, Any]:
    """The Exported's `in_tree` (positional arguments, no keywords) and `out_tree` for the
    pytrees the manifest records, when their leaves are in `@main`'s order; None otherwise."""
    import jax

    in_tree = out_tree = None
    if manifest.input_tree is not None:
        positions = {a.name: i for i, a in enumerate(manifest.arguments)}
        args = unflatten(manifest.input_tree, positions)
        if jax.tree_util.tree_leaves(args) == list(range(len(manifest.arguments))):
            in_tree = jax.tree_util.tree_structure((tuple(args), {}))
    if manifest.output_tree is not None:
        positions = {r.name: i for i, r in enumerate(manifest.results)}
        results = unflatten(manifest.output_tree, positions)
        if jax.tree_util.tree_leaves(results) == list(range(len(manifest.results))):
            out_tree = jax.tree_util.tree_structure(results)
    return in_tree, out_tree


def read_blob(path: str | os.PathLike[str]) -> tuple[Any, bytes]:
    """A serialized `jax.export.Exported` (`Exported.serialize()`), size-limited and checked,
    and its bytes. Only the outer Exported is deserialized: its module and VJP stay bytes."""
    import jax
    from jax import export

    source = Path(path)
    try:
        size = source.stat().st_size
    except OSError as e:
        raise InputError(f"{str(source)!r}: {e.strerror}", path=source) from None
    if size > _limits.MAX_MODULE_BYTES:
        raise InputError(
            f"{source} is {size} bytes; a jax.export blob may have at most "
            f"{_limits.MAX_MODULE_BYTES}",
            path=source,
        )
    data = source.read_bytes()
    try:
        return export.deserialize(bytearray(data)), data
    except Exception as e:  # flatbuffers and jax raise many kinds on a blob that is not one
        raise InputError(
            f"{source} is not a serialized jax.export.Exported jax {jax.__version__} can read: "
            f"{type(e).__name__}: {str(e)[:300]}",
            path=source,
        ) from None


def refuse_what_a_bundle_cannot_hold(exported: Any) -> None:
    """An InputError naming each thing in `exported` a bundle's function cannot hold."""
    why = []
    if exported.ordered_effects or exported.unordered_effects:
        why.append("it has effects (ordered or unordered); a bundle's function has none")
    if tuple(exported.module_kept_var_idx) != tuple(range(len(exported.in_avals))):
        why.append(
            "jax dropped unused arguments from its module; export with jax.jit(f, keep_unused=True)"
        )
    if why:
        raise InputError(
            f"this jax.export.Exported cannot be a bundle: {'; '.join(why)}", argument="exported"
        )


def symbolic_shapes(exported: Any) -> dict[str, Any]:
    """`pack()`'s `shapes` and `result_shapes` for an Exported with symbolic dimensions
    (format 2.0), as expressions; nothing for one with static shapes."""
    import numpy as np

    static = lambda d: isinstance(d, (int, np.integer))  # noqa: E731
    avals = [*exported.in_avals, *exported.out_avals]
    if all(static(d) for a in avals for d in a.shape):
        return {}
    shape = lambda aval: [int(d) if static(d) else str(d) for d in aval.shape]  # noqa: E731
    return {
        "shapes": [shape(a) for a in exported.in_avals],
        "result_shapes": [shape(a) for a in exported.out_avals],
    }

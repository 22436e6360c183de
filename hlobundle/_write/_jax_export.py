"""`jax.export` in: `from_exported(exported, out)` and `pack --from-jax-export BLOB` write a
`jax.export.Exported` (or its serialized blob) as a bundle, which keeps the module text and so
outlives the blob's 6-month compatibility window. (Out: `Bundle.to_exported()`, in the runner.)

The module text comes from the Exported's portable artifact, deserialized in a child process
(MLIR's bytecode reader is not hardened). What a bundle cannot hold is refused with a reason:
several platforms, effects, symbolic shapes, and arguments jax dropped as unused.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._format import _limits, _portable
from .._format._errors import InputError
from .._format._manifest import Role
from ._export import _identifier, _json_tree, _key_part, _result_name, _unique, leaf_roles
from ._writer import pack


def from_exported(
    exported: Any,
    out: str | os.PathLike[str],
    *,
    inputs: Sequence[Any] | None = None,
    roles: Mapping[str, Role] | None = None,
    force: bool = False,
    target_version: str | None = None,
    timestamp: str | None = None,
) -> Path:
    """Write a `jax.export.Exported` as a bundle.

    Arguments are named after the key paths of the Exported's `in_tree` (`args[0]['w']` becomes
    `arg0_w`), results after its `out_tree`. Custom calls whose checks the exporter disabled
    (`DisabledSafetyCheck.custom_call`) are recorded as allowed; when the Exported has a VJP,
    the bundle stores it as its backward module.

    **Arguments:**

    - `inputs`: example positional arguments (pytrees, as the Exported takes them); stored
      with the results the Exported computes on them as expected outputs.
    - `roles`: as for `export()`: by argument name, or by the name of a positional argument
      (`arg0`) or keyword argument for all the leaves under it.
    - `force`, `target_version`, `timestamp`: as for `pack()`.
    """
    import jax

    _refuse_what_a_bundle_cannot_hold(exported)
    text = _portable.canonical_in_child(exported.mlir_module_serialized, path="the Exported")
    tree = jax.tree_util.tree_unflatten(exported.in_tree, list(range(exported.in_tree.num_leaves)))
    leaves, _ = jax.tree_util.tree_flatten_with_path(tree)
    names = _unique([_argument_name(path) for path, _ in leaves])
    args_tree, kwargs_tree = jax.tree_util.tree_unflatten(exported.in_tree, names)
    out_leaves, _ = jax.tree_util.tree_flatten_with_path(
        jax.tree_util.tree_unflatten(exported.out_tree, list(range(exported.out_tree.num_leaves)))
    )
    result_names = _unique([_result_name(path) for path, _ in out_leaves])
    flat, expected = None, None
    if inputs is not None:
        flat_inputs, _ = jax.tree_util.tree_flatten((tuple(inputs), {}))
        flat = [np.asarray(x) for x in flat_inputs]
        expected = [np.asarray(x) for x in jax.tree_util.tree_leaves(exported.call(*inputs))]

    def primal(*flat_args: Any) -> Any:
        args, kwargs = jax.tree_util.tree_unflatten(exported.in_tree, flat_args)
        return jax.tree_util.tree_leaves(exported.call(*args, **kwargs))

    allowed = [t for c in exported.disabled_safety_checks if (t := c.is_custom_call())]
    return pack(
        text,
        flat,
        out,
        names=names,
        paths=[_producer_path(path) for path, _ in leaves],
        roles=leaf_roles(roles, names, [_argument_name(path[:2]) for path, _ in leaves]),
        result_names=result_names,
        function=exported.fun_name,
        force=force,
        target_version=target_version,
        producer=("jax.export", jax.__version__),
        timestamp=timestamp,
        input_tree=None if kwargs_tree else _json_tree(args_tree),
        output_tree=_json_tree(jax.tree_util.tree_unflatten(exported.out_tree, result_names)),
        expected=expected,
        allow_custom_calls=allowed,
        with_vjp=primal if exported.has_vjp() else False,
    )


def read_blob(path: str | os.PathLike[str]) -> Any:
    """A serialized `jax.export.Exported` (`Exported.serialize()`), size-limited and checked."""
    from jax import export

    source = Path(path)
    try:
        size = source.stat().st_size
    except OSError as e:
        raise InputError(f"{str(source)!r}: {e.strerror}", path=source) from None
    if size > _limits.MAX_MODULE_BYTES:
        raise InputError(
            f"{source} is {size} bytes; a jax.export blob may have at most "
            f"{_limits.MAX_MODULE_BYTES}", path=source,
        )  # fmt: skip
    try:
        return export.deserialize(bytearray(source.read_bytes()))
    except Exception as e:  # flatbuffers and jax raise many kinds on a blob that is not one
        raise InputError(
            f"{source} is not a serialized jax.export.Exported jax {_jax_version()} can read: "
            f"{type(e).__name__}: {str(e)[:300]}",
            path=source,
        ) from None


def _jax_version() -> str:
    import jax

    return jax.__version__


def _refuse_what_a_bundle_cannot_hold(exported: Any) -> None:
    why = []
    if len(exported.platforms) != 1:
        why.append(f"it is lowered for several platforms {list(exported.platforms)} (a bundle's "
                   "module is one program; export for one platform)")  # fmt: skip
    if exported.ordered_effects or exported.unordered_effects:
        why.append("it has effects (ordered or unordered); a bundle's function has none")
    avals = [*exported.in_avals, *exported.out_avals]
    if exported.uses_global_constants or any(not _static(a.shape) for a in avals):
        why.append("it has symbolic (polymorphic) shapes; a bundle's shapes are static")
    if tuple(exported.module_kept_var_idx) != tuple(range(len(exported.in_avals))):
        why.append("jax dropped unused arguments from its module; export with "
                   "jax.jit(f, keep_unused=True)")  # fmt: skip
    if why:
        raise InputError(
            f"this jax.export.Exported cannot be a bundle: {'; '.join(why)}", argument="exported"
        )


def _static(shape: Sequence[Any]) -> bool:
    return all(isinstance(d, (int, np.integer)) for d in shape)


def _argument_name(path: Any) -> str:
    """`arg0_w` for the key path `(0, 0, 'w')` (args, first, 'w'); `scale` for `(1, 'scale')`."""
    kind, first, *rest = (_key_part(k) for k in path)
    return _identifier("_".join([f"arg{first}" if kind == "0" else first, *rest]))


def _producer_path(path: Any) -> str:
    import jax

    head, *rest = path
    return ("args" if _key_part(head) == "0" else "kwargs") + jax.tree_util.keystr(tuple(rest))

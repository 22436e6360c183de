"""`jax.export` in: `from_exported(exported, out)` and `pack --from-jax-export BLOB` write a
`jax.export.Exported` (or its serialized blob) as a bundle, which keeps the module text and so
outlives the blob's 6-month compatibility window. What an Exported is made of, both ways, is
`_interop/_jax_export.py` (out: `Bundle.to_exported()`, through the xla backend).

The module text comes from the Exported's portable artifact, deserialized in a child process
(MLIR's bytecode reader is not hardened). What a bundle cannot hold is refused with a reason:
several platforms, effects, symbolic shapes, and arguments jax dropped as unused.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._format import _limits
from .._format._manifest import Role, identifier
from .._interop._jax_export import PRODUCER, refuse_what_a_bundle_cannot_hold, symbolic_shapes
from .._isolation import _child
from .._parse import _artifacts, _children
from .._read._inputs import from_python
from ._options import PackOptions, takes
from ._pack_files import pack_file_inputs
from ._pytree_names import json_tree, key_part, leaf_roles, result_name, unique
from ._writer import pack_planned


@takes(
    "inputs",
    "roles",
    "force",
    "target_version",
    "timestamp",
    "blob",
    "metadata",
    "card",
    "independent_rows",
)
def from_exported(exported: Any, out: str | os.PathLike[str], opt: PackOptions) -> Path:
    """Write a `jax.export.Exported` as a bundle.

    Arguments are named after the key paths of the Exported's `in_tree` (`args[0]['w']` becomes
    `arg0_w`), results after its `out_tree`. Custom calls whose checks the exporter disabled
    (`DisabledSafetyCheck.custom_call`) are recorded as allowed; when the Exported has a VJP,
    the bundle stores it as its backward module.

    **Arguments:**

    - `exported`: the `jax.export.Exported`; `out`: the bundle directory to create.

    **Returns:** the path of the written bundle.
    """
    import jax

    text, own = _pack_options(exported, opt.blob, opt.roles)
    flat, expected = None, None
    if opt.inputs is not None:
        flat_inputs, _ = jax.tree_util.tree_flatten((tuple(opt.inputs), {}))
        flat = [np.asarray(x) for x in flat_inputs]
        outputs = exported.call(*opt.inputs)
        expected = from_python([np.asarray(x) for x in jax.tree_util.tree_leaves(outputs)])
    options = dataclasses.replace(opt, expected=expected, expected_here=expected is not None, **own)
    return pack_planned(text, None if flat is None else from_python(flat), Path(out), options)


@takes(
    "roles",
    "function",
    "force",
    "target_version",
    "timestamp",
    "expected",
    "blob",
    "metadata",
    "card",
    "independent_rows",
)
def from_exported_files(
    exported: Any,
    input_files: Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    opt: PackOptions,
) -> Path:
    """`from_exported()` with example inputs read from files: the CLI's form.

    **Arguments:**

    - `input_files`: one array per flat argument (by name, `arr_<k>` or position), as
      `pack_files()` takes them.
    """
    text, own = _pack_options(exported, opt.blob, opt.roles)
    if opt.function is not None:
        own["function"] = opt.function
    return pack_file_inputs(text, input_files, out, dataclasses.replace(opt, **own))


def _pack_options(
    exported: Any, blob: bytes | None, roles: Mapping[str, Role] | None
) -> tuple[str, dict[str, Any]]:
    """The module text of `exported` and the `pack()` options that name and describe it."""
    import jax

    refuse_what_a_bundle_cannot_hold(exported)
    text = _artifacts.canonical_in_child(exported.mlir_module_serialized, path="the Exported")
    tree = jax.tree_util.tree_unflatten(exported.in_tree, list(range(exported.in_tree.num_leaves)))
    leaves, _ = jax.tree_util.tree_flatten_with_path(tree)
    names = unique([_argument_name(path) for path, _ in leaves])
    args_tree, kwargs_tree = jax.tree_util.tree_unflatten(exported.in_tree, names)
    out_leaves, _ = jax.tree_util.tree_flatten_with_path(
        jax.tree_util.tree_unflatten(exported.out_tree, list(range(exported.out_tree.num_leaves)))
    )
    result_names = unique([result_name(path) for path, _ in out_leaves])

    allowed = [t for c in exported.disabled_safety_checks if (t := c.is_custom_call())]
    return text, dict(
        names=names,
        paths=[_producer_path(path) for path, _ in leaves],
        roles=leaf_roles(roles, names, [_argument_name(path[:2]) for path, _ in leaves]),
        result_names=result_names,
        function=exported.fun_name,
        producer=(PRODUCER, jax.__version__),
        input_tree=None if kwargs_tree else json_tree(args_tree),
        output_tree=json_tree(jax.tree_util.tree_unflatten(exported.out_tree, result_names)),
        allow_custom_calls=allowed,
        with_vjp=_backward_in_child(exported, blob) if exported.has_vjp() else False,
        # several platforms: @main takes the platform's index first (SPEC.md 2.14)
        platforms=tuple(exported.platforms) if len(exported.platforms) > 1 else None,
        **symbolic_shapes(exported),
    )


def _backward_in_child(exported: Any, blob: bytes | None) -> str:
    """The backward module, lowered through the Exported's VJP in a child process (a fork of
    a server that imported jax once: a session that packs several pays for jax's import once):
    the VJP is a nested blob whose flatbuffer and MLIR bytecode this process never
    deserializes."""
    data = bytes(exported.serialize(vjp_order=1)) if blob is None else blob
    stdout, _, _ = _children.run_child(
        _child.JAX_EXPORT_CHILD,
        backward_child_args(data),
        data,
        path="the Exported",
        what="the Exported's VJP",
        max_output=_limits.MAX_MODULE_BYTES,
        forked=True,
    )
    return stdout.decode("utf-8")


def backward_child_args(blob: bytes) -> list[str]:
    """The arguments of `_jax_export_child.py` for a serialized Exported: its address-space cap
    and its allowance for the VJP's artifact."""
    return [str(_limits.CHILD_MEMORY_BYTES), str(_limits.child_allowance(len(blob)))]


def _argument_name(path: Any) -> str:
    """`arg0_w` for the key path `(0, 0, 'w')` (args, first, 'w'); `scale` for `(1, 'scale')`."""
    kind, first, *rest = (key_part(k) for k in path)
    return identifier("_".join([f"arg{first}" if kind == "0" else first, *rest]))


def _producer_path(path: Any) -> str:
    import jax

    head, *rest = path
    return ("args" if key_part(head) == "0" else "kwargs") + jax.tree_util.keystr(tuple(rest))

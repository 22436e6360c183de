"""The JAX producer: `export(fn, *example_args, out=...)` lowers a JAX function and packs it."""

from __future__ import annotations

import dataclasses
import inspect
import os
import tempfile
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._format import _signature
from .._format._errors import HloBundleWarning, InputError
from .._format._manifest import PRODUCER_JAX, Role
from .._read._inputs import from_python
from . import _rows
from ._functions import add_function
from ._options import PackOptions, takes
from ._pytree_names import json_tree, leaf_name, leaf_roles, result_name, unique
from ._writer import pack_planned

PRODUCER = PRODUCER_JAX  # the provenance's producer of a bundle that export() wrote


@takes(
    "name",
    "shapes_specs",
    "constraints",
    "independent_rows",
    "platforms",
    "add",
    "default",
    "force",
    "roles",
    "store_inputs",
    "store_expected",
    "with_vjp",
    "vmap_in_axes",
    "target_version",
    "timestamp",
    "max_shard_size",
    "metadata",
    "card",
    "sign_key",
    "public_key",
    "replace_signature",
)
def export(
    fn: Callable[..., Any], *example_args: Any, out: str | os.PathLike[str], opt: PackOptions
) -> Path:
    """Lower `fn` on `example_args` with `jax.jit` and write it as a bundle.

    Arguments may be pytrees. Every leaf becomes one `@main` argument (unused ones are kept),
    named after `fn`'s parameter names and the leaf's key path (`params['w']` becomes
    `params_w`), with the JAX key path as its producer path. The pytree structures of the
    arguments and results are recorded when they are made of tuples, lists and dicts.

    **Arguments:**

    - `fn`: the function; `example_args`: its positional arguments, concrete (stored as the
      example even when `shapes_specs` makes the function's shapes symbolic).
    - `out`: the bundle directory to create (or, with `add`, the bundle to add to).
    - With `add`, `sign_key`, `public_key` and `replace_signature` sign the bundle again (a
      signed bundle must be), under `refresh()`'s rules; without `add`, `sign_key` signs the
      new bundle.

    **Returns:** the path of the written bundle.
    """
    return export_named(fn, example_args, out, opt)


@dataclasses.dataclass(frozen=True)
class Naming:
    """What a producer that is not a JAX function says of its flat arguments and results,
    instead of what `export` derives from pytree paths (`from_torch`: a `torch.export` program's
    names, paths and roles, its output structure and eager PyTorch's results)."""

    names: list[str]
    paths: list[str]
    roles: dict[str, Role]
    result_names: list[str]
    input_tree: Any
    output_tree: Any
    producer: tuple[str, str]
    function: str
    expected: list[np.ndarray] | None  # the results to store (the example's are computed)


def export_named(
    fn: Callable[..., Any],
    example_args: tuple[Any, ...],
    out: str | os.PathLike[str],
    opt: PackOptions,
    naming: Naming | None = None,
) -> Path:
    """`export`, the names and results given by `naming` where it is given."""
    import jax

    leaves, in_tree = jax.tree_util.tree_flatten_with_path(example_args)
    _check_array_leaves(leaves)
    flat = [np.asarray(leaf) for _, leaf in leaves]
    _check_x64(flat, leaves, jax.config.jax_enable_x64)  # type: ignore[attr-defined]  # jax's stubs lack its flags

    def flat_fn(*flat_args: Any) -> Any:
        return fn(*jax.tree_util.tree_unflatten(in_tree, flat_args))

    jitted = jax.jit(flat_fn, keep_unused=True)
    if opt.platforms is not None and opt.shapes_specs is None:
        text, out_info, symbolic = _lower_for(jitted, flat, opt.platforms)
    elif opt.shapes_specs is None:
        lowered = jitted.lower(*[_abstract(leaf) for _, leaf in leaves])
        text, out_info, symbolic = lowered.as_text(), lowered.out_info, None
    else:
        if opt.vmap_in_axes is not None:
            raise InputError(
                "a function with symbolic shapes needs no batched module: "
                "vmap_in_axes and shapes_specs exclude each other",
                argument="vmap_in_axes",
            )
        text, out_info, symbolic = _lower_symbolic(jitted, example_args, opt)
    expected, computed = None, False
    if opt.store_inputs and opt.store_expected:
        expected = naming.expected if naming is not None else None
        if expected is None:
            expected = [np.asarray(x) for x in jax.tree_util.tree_leaves(jitted(*flat))]
            computed = True
    params = _positional_names(fn)
    names = unique([leaf_name(path, params) for path, _ in leaves])
    heads = [leaf_name(path[:1], params) for path, _ in leaves]
    if naming is not None:
        names, heads = naming.names, naming.names
    batched = _batched_arguments(
        opt.vmap_in_axes, in_tree, names, [_abstract(x) for _, x in leaves]
    )
    out_leaves, out_tree = jax.tree_util.tree_flatten_with_path(out_info)
    result_names = unique([result_name(path) for path, _ in out_leaves])
    if naming is not None:
        result_names = naming.result_names
    if not opt.add and (opt.public_key is not None or opt.replace_signature or opt.default):
        raise InputError(
            "public_key, replace_signature and default go with add=True", argument="add"
        )
    if opt.add and (opt.metadata is not None or opt.card is not None):
        raise InputError(
            "metadata and card are the bundle's: give them when it is first written, not with "
            "add=True",
            argument="metadata",
        )

    rows = None
    if opt.independent_rows is not None:
        if symbolic is None:
            raise InputError(
                "independent_rows needs symbolic shapes (shapes_specs): rows are independent "
                "along a symbolic dimension",
                argument="independent_rows",
            )
        rows = _rows.axes(opt.independent_rows, names, symbolic[0], result_names, symbolic[1])
        _rows.check(jitted, flat, names, rows, result_names)

    flattened: list[str] = []
    input_tree = json_tree(jax.tree_util.tree_unflatten(in_tree, names), flattened, "args")
    output_tree = json_tree(
        jax.tree_util.tree_unflatten(out_tree, result_names), flattened, "result"
    )
    if flattened:
        warnings.warn(
            f"{'; '.join(flattened)}: a bundle cannot store such a pytree node (its class is "
            "code), so it stores its leaves, and example_args() and the results give back that "
            "list; call the function with the object itself or with the list (docs/jax.md, "
            "'Pytrees')",
            HloBundleWarning,
            stacklevel=2,
        )

    own: dict[str, Any] = dict(
        paths=[f"args{jax.tree_util.keystr(path)}" for path, _ in leaves],
        roles=leaf_roles(opt.roles, names, heads),
        function=opt.name or getattr(fn, "__name__", "main"),
        producer=(PRODUCER, jax.__version__),
        input_tree=input_tree,
        output_tree=output_tree,
    )
    if naming is not None:
        own.update(
            paths=naming.paths,
            roles={**naming.roles, **(opt.roles or {})},
            function=opt.name or naming.function,
            producer=naming.producer,
            input_tree=naming.input_tree,
            output_tree=naming.output_tree,
        )

    def write(target: Path, signing: _signature.SigningKey | None) -> Path:
        options = dataclasses.replace(
            opt,
            names=names,
            result_names=result_names,
            expected=None if expected is None else from_python(expected),
            with_vjp=(lambda *a: jax.tree_util.tree_leaves(flat_fn(*a))) if opt.with_vjp else False,
            batched=(lambda *a: jax.tree_util.tree_leaves(flat_fn(*a))) if batched else None,
            batched_arguments=batched,
            sign_key=signing,
            independent_rows=rows,
            rows_checked=rows is not None,
            expected_here=computed,
            platforms=opt.platforms,
            shapes=None if symbolic is None else symbolic[0],
            result_shapes=None if symbolic is None else symbolic[1],
            **own,
        )
        items = from_python(flat) if opt.store_inputs else None
        return pack_planned(text, items, target, options)

    if not opt.add:
        return write(Path(out), opt.signing_key)
    with tempfile.TemporaryDirectory(prefix=".hlobundle-add-", dir=Path(out).parent) as scratch:
        new = write(Path(scratch) / "function.hlobundle", None)
        return add_function(
            out,
            new,
            default=opt.default,
            max_shard_size=opt.max_shard_size,
            sign_key=opt.sign_key,
            public_key=opt.public_key,
            replace_signature=opt.replace_signature,
        )


def _lower_for(
    jitted: Any, flat: Sequence[np.ndarray], lowered_for: Sequence[str]
) -> tuple[str, Any, None]:
    """`jax.export` of `jitted` at the example's static shapes for several platforms: its text
    (@main takes the platform's index first) and its results' structure."""
    import jax

    specs = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in flat]
    exported = _export(jitted, lowered_for)(*specs)
    out_info = jax.tree_util.tree_unflatten(exported.out_tree, list(exported.out_avals))
    return exported.mlir_module(), out_info, None


def _export(jitted: Any, lowered_for: Sequence[str] | None) -> Any:
    """`jax.export.export` of `jitted`, for several platforms when `lowered_for` names them
    (an InputError naming a platform jax does not know)."""
    from jax import export

    if lowered_for is None:
        return export.export(jitted)
    if len(lowered_for) < 2 or len(set(lowered_for)) != len(lowered_for):
        raise InputError(
            f"platforms must name at least two distinct platforms, got {list(lowered_for)}; "
            "for one, leave it out (a portable module runs on any)",
            argument="platforms",
        )

    def lower(*specs: Any) -> Any:
        try:
            return export.export(jitted, platforms=tuple(lowered_for))(*specs)
        except (ValueError, NotImplementedError) as e:  # an unknown platform, an op without rule
            raise InputError(f"platforms: {str(e)[:300]}", argument="platforms") from None

    return lower


def _lower_symbolic(
    jitted: Any, example_args: tuple[Any, ...], opt: PackOptions
) -> tuple[str, Any, tuple[list[list[int | str]], list[list[int | str]]]]:
    """`jax.export` of `jitted` with symbolic shapes (`opt.shapes_specs`, `opt.constraints`,
    for `opt.platforms`): its text, its results' structure, and the arguments' and results'
    shapes, a symbolic dimension as its expression."""
    import jax
    from jax import export

    try:
        specs = export.symbolic_args_specs(
            example_args, opt.shapes_specs, constraints=opt.constraints
        )
    except (ValueError, TypeError) as e:  # jax's message says which spec and why
        raise InputError(f"shapes_specs: {e}", argument="shapes_specs") from None
    flat_specs = jax.tree_util.tree_leaves(specs)
    exported = _export(jitted, opt.platforms)(*flat_specs)
    out_info = jax.tree_util.tree_unflatten(exported.out_tree, list(exported.out_avals))
    shape = lambda aval: [d if isinstance(d, int) else str(d) for d in aval.shape]  # noqa: E731
    shapes = ([shape(a) for a in exported.in_avals], [shape(a) for a in exported.out_avals])
    return exported.mlir_module(), out_info, shapes


def _batched_arguments(
    in_axes: Any, in_tree: Any, names: list[str], leaves: list[Any]
) -> list[str]:
    """The names of the leaves `in_axes` (as `jax.vmap`'s, 0 or None) maps."""
    from .._compat import flatten_axes

    if in_axes is None:
        return []
    if isinstance(in_axes, list):
        in_axes = tuple(in_axes)
    try:
        axes = flatten_axes("vmap_in_axes", in_tree, in_axes)
    except ValueError as e:
        raise InputError(
            f"vmap_in_axes does not match the arguments: {e}", argument="vmap_in_axes"
        ) from None
    if any(a not in (0, None) for a in axes):
        raise InputError("vmap_in_axes may contain only 0 and None", argument="vmap_in_axes")
    if not any(a == 0 for a in axes):
        raise InputError("vmap_in_axes maps no argument", argument="vmap_in_axes")
    if any(leaf.sharding is not None for leaf in leaves):
        raise InputError(
            "vmap_in_axes is not supported for sharded arguments: the batched module is lowered "
            "for one device",
            argument="vmap_in_axes",
        )
    return [n for n, a in zip(names, axes, strict=True) if a == 0]


def _abstract(leaf: Any) -> Any:
    """The leaf's shape and dtype, and its sharding when it is spread over several devices."""
    import jax

    sharding = getattr(leaf, "sharding", None)
    if not isinstance(sharding, jax.sharding.NamedSharding) or len(sharding.device_set) < 2:
        sharding = None
    return jax.ShapeDtypeStruct(
        np.shape(leaf),
        np.asarray(leaf).dtype if sharding is None else leaf.dtype,
        sharding=sharding,
    )


# A Python scalar's 32-bit NumPy type: what jax.jit, x64 off, would trace it as (weakly typed).
_SCALAR_32 = {float: "np.float32", int: "np.int32", complex: "np.complex64"}


def _check_array_leaves(leaves: Sequence[tuple[Any, Any]]) -> None:
    """Every leaf of the example arguments is an array or a number: a function, a string or
    another object (an Equinox module's activation) cannot be an argument of the module."""
    import jax

    for path, leaf in leaves:
        if (
            hasattr(leaf, "shape")
            and hasattr(leaf, "dtype")
            or isinstance(leaf, (bool, int, float, complex, np.generic))
        ):
            continue
        where = f"args{jax.tree_util.keystr(path)}"
        raise InputError(
            f"{where} is a {type(leaf).__name__}, not an array: a bundle's arguments are arrays. "
            "Keep what is not an array out of the arguments: close over it in the function, or "
            "split the model (for Equinox: params, static = eqx.partition(model, eqx.is_array), "
            "and export lambda params, x: eqx.combine(params, static)(x))",
            argument=where,
        )


def _check_x64(flat: list[np.ndarray], leaves: list[tuple[Any, Any]], enabled: bool) -> None:
    """Refuse 64-bit example values while x64 is off: JAX would lower them as 32-bit ones. A
    Python scalar has no width of its own (NumPy gives it 64 bits), so its fix is a 32-bit
    scalar, not x64."""
    if enabled:
        return
    for a, (path, leaf) in zip(flat, leaves, strict=True):
        if type(leaf) in _SCALAR_32:
            raise InputError(
                f"example argument args{_keystr(path)} is a Python {type(leaf).__name__}, which "
                f"becomes {a.dtype.name}, a dtype JAX cannot lower while jax_enable_x64 is off; "
                f"give it a 32-bit type: {_SCALAR_32[type(leaf)]}({leaf!r})",
                argument=_keystr(path),
            )
        if a.dtype.itemsize == 8 and a.dtype.kind in "iuf" or a.dtype == np.complex128:
            raise InputError(
                f"example argument args{_keystr(path)} is {a.dtype.name}, but jax_enable_x64 is "
                "off, so JAX would lower it as a 32-bit type; call "
                "jax.config.update('jax_enable_x64', True) before exporting",
                argument=_keystr(path),
            )


def _keystr(path: Any) -> str:
    import jax

    return jax.tree_util.keystr(path)


def _positional_names(fn: Callable[..., Any]) -> list[str]:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return []
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in sig.parameters.values() if p.kind in kinds]

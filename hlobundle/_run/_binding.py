"""Binding a call's arguments to the bundle's: positions, names, or the exported pytrees;
checked before anything is traced (docs/jax.md, "Calling a bundle from JAX")."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .._format import _dtypes
from .._format._errors import InputDtypeError, InputError
from .._format._fields import unflatten
from .._read import _inputs
from .._terminal._display import did_you_mean, some_names

if TYPE_CHECKING:
    from .._format._manifest import Argument, Manifest


def bind(
    manifest: Manifest,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    stored: Callable[[str], Any] | None = None,
) -> list[Any]:
    """One value per argument, in manifest order, from positional, named or pytree arguments.

    A parameter or state argument left out takes its stored value from `stored(name)`, as
    `run --inputs NAME=FILE` does; an input is never taken from the stored example.
    """
    arguments = manifest.arguments
    tree = manifest.input_tree
    if tree is None and not kwargs and any(_is_tree(a) for a in args):
        args = _leaves(args)  # the leaves of the pytrees given, in JAX's order
    if tree is not None and not kwargs and any(_is_tree(a) for a in args):
        if len(args) != len(tree):
            raise InputError(
                f"expected {len(tree)} positional argument(s) with the exported pytree "
                f"structure, or {len(arguments)} arrays; got {len(args)}"
            )
        by_name = _flatten_by_tree(tree, list(args), "args")
        return [by_name[a.name] for a in arguments]
    if len(args) > len(arguments):
        raise count_error(arguments, len(args) + len(kwargs))
    values: dict[str, Any] = {a.name: x for a, x in zip(arguments, args, strict=False)}
    names = [a.name for a in arguments]
    known = set(names)  # thousands of arguments given by name: a lookup each, not a scan
    for name, x in kwargs.items():
        if name not in known:
            inputs = [a.name for a in arguments if a.role == "input"]
            raise InputError(
                f"unexpected argument {name!r}{did_you_mean([name], names) or '.'} The "
                f"arguments are {some_names(names, inputs)}",
                argument=name,
            )
        if name in values:
            raise InputError(
                f"argument {name!r} given twice (by position and by name)", argument=name
            )
        values[name] = x
    for a in arguments:
        if a.name not in values and stored is not None and a.role != "input" and a.value:
            values[a.name] = stored(a.name)
    missing = [a.name for a in arguments if a.name not in values]
    if missing:
        raise InputError(
            f"missing argument(s) {missing}; left out, only parameter and state arguments "
            "take their stored values (bundle.parameters())"
            + _bound_by_position(arguments[: len(args)], missing),
            argument=missing[0],
        )
    return [values[a.name] for a in arguments]


def _bound_by_position(bound: Sequence[Argument], missing: list[str]) -> str:
    """What positional values were taken as, where the first arguments of @main are parameters
    or state and an argument is missing: `f(x)` on LeNet binds x to params_conv1_b."""
    taken = [a for a in bound if a.role != "input"]
    if not taken:
        return ""
    count = f"The {len(bound)} positional value{'s were' if len(bound) > 1 else ' was'}"
    names = ", ".join(f"{a.name} (a {a.role})" for a in bound[:3])
    more = f" and {len(bound) - 3} more" if len(bound) > 3 else ""
    return (
        f". {count} bound to {names}{more}, by position: pass {missing[0]} by name, "
        f"f({missing[0]}=...), and the parameters left out take their stored values"
    )


def structure(manifest: Manifest, flat: tuple[Any, ...]) -> Any:
    """The results in the manifest's `output_tree` (arrays as tuples), else the flat tuple."""
    tree = manifest.output_tree
    if tree is None:
        return flat
    by_name = {r.name: x for r, x in zip(manifest.results, flat, strict=True)}
    return unflatten(tree, by_name)


def donated_arguments(manifest: Manifest, donate: Sequence[str] | str) -> tuple[str, ...]:
    """Argument names to donate: given by name, or `"aliased"` for every argument a result
    writes back (Reactant's `tf.aliasing_output`)."""
    names = [a.name for a in manifest.arguments]
    if donate == "aliased":
        return tuple(names[r.aliases] for r in manifest.results if r.aliases is not None)
    if isinstance(donate, str):
        donate = [donate]
    unknown = [n for n in donate if n not in names]
    if unknown:
        raise InputError(
            f"cannot donate unknown argument(s) {unknown}; the arguments are {names}",
            argument=unknown[0],
        )
    return tuple(donate)


def count_error(arguments: list[Argument], got: int) -> InputError:
    names = ", ".join(a.name for a in arguments)
    return InputError(f"expected {len(arguments)} argument(s) ({names}), got {got}")


# What takes arrays in Julia's orientation from Python (`_inputs.reversed_hint`).
PRODUCER_OPTION = "bundle.function(..., layout='producer')"


def check_value(x: Any, arg: Argument, index: int, producer: bool = False) -> Any:
    """`x`, of the argument's dtype and shape (`producer`: the shape in the producer's
    orientation, a column-major argument's reversed), as an array; else an error."""
    want_dtype = _dtypes.BY_NAME[arg.dtype].numpy
    if isinstance(x, (bool, int, float, complex)) and not arg.shape:
        x = np.asarray(x, dtype=want_dtype)
    elif not hasattr(x, "shape") or not hasattr(x, "dtype"):
        x = np.asarray(x)
    got = (np.dtype(x.dtype), tuple(x.shape))
    reverse = producer and arg.layout == "column_major"
    shape = list(arg.shape[::-1] if reverse else arg.shape)
    fits = len(got[1]) == len(shape) and all(
        isinstance(d, str) or d == n for d, n in zip(shape, got[1], strict=True)
    )  # a symbolic dimension (str) is checked with the others (`check_symbols`)
    if got[0] != want_dtype or not fits:
        # A wrong dtype is a TypeError, a wrong shape a ValueError, as JAX raises them.
        error = InputDtypeError if got[0] != want_dtype else InputError
        hint = (
            _inputs.reversed_hint(arg.layout, PRODUCER_OPTION)
            if not reverse and not fits and _inputs.is_reversed(arg.shape, got[1])
            else ""
        )
        orientation = " (the producer's orientation)" if reverse else ""
        raise error(
            f"argument {arg.name!r} (position {index}, producer path {arg.path}): expected "
            f"{arg.dtype}{shape}{orientation}, got {got[0].name}{list(got[1])}{hint}",
            argument=arg.name,
        )
    return x


def check_symbols(manifest: Manifest, values: Sequence[Any]) -> None:
    """The arguments' shapes bind the function's symbols consistently (SPEC.md 2.8)."""
    if manifest.symbolic:
        bind_symbols(manifest, [np.shape(x) for x in values])


def bind_symbols(manifest: Manifest, shapes: Sequence[Sequence[int]]) -> dict[str, int]:
    """The symbols' values the arguments' `shapes` bind, or an `InputError` naming the value,
    the dimension and the symbol (SPEC.md 2.8, "Binding")."""
    from .._format import _symbolic

    declared = [(a.name, a.shape) for a in manifest.arguments]
    try:
        return _symbolic.bind_shapes(declared, shapes, manifest.constraints or ())
    except _symbolic.ShapeError as e:
        raise InputError(
            f"the arguments' shapes do not fit {manifest.function}'s symbolic shapes: {e} "
            "(SPEC.md 2.8)",
            argument=e.where.split(".")[0],
        ) from None


def _flatten_by_tree(tree: Any, value: Any, where: str) -> dict[str, Any]:
    if isinstance(tree, str):
        return {tree: value}
    if tree is None:
        return {}
    if isinstance(tree, list):
        if not isinstance(value, (list, tuple)) and _is_tree(value):
            value = _leaves([value])  # a node the bundle stores as its leaves (an Equinox module)
        if not isinstance(value, (list, tuple)) or len(value) != len(tree):
            raise InputError(
                f"{where}: expected a sequence of {len(tree)}, got {_describe(value)}",
                argument=where,
            )
        found: dict[str, Any] = {}
        for i, (t, v) in enumerate(zip(tree, value, strict=True)):
            found.update(_flatten_by_tree(t, v, f"{where}[{i}]"))
        return found
    if not isinstance(value, Mapping) or set(value) != set(tree):
        raise InputError(
            f"{where}: expected a dict with keys {sorted(tree)}, got {_describe(value)}",
            argument=where,
        )
    found = {}
    for k, t in tree.items():
        found.update(_flatten_by_tree(t, value[k], f"{where}[{k!r}]"))
    return found


def _is_tree(value: Any) -> bool:
    """A pytree of arrays rather than one array: a dict, list or tuple, or a node registered
    with JAX (an Equinox module, a dataclass), which only a program that imported jax has."""
    if isinstance(value, (dict, list, tuple)):
        return True
    jax = sys.modules.get("jax")
    if jax is None or hasattr(value, "shape"):
        return False
    leaves = jax.tree_util.tree_leaves(value)
    return len(leaves) != 1 or leaves[0] is not value


def _leaves(values: Sequence[Any]) -> list[Any]:
    jax = sys.modules.get("jax")
    if jax is None:
        return list(values)
    return list(jax.tree_util.tree_leaves(list(values)))


def _describe(value: Any) -> str:
    if isinstance(value, Mapping):
        return f"a dict with keys {sorted(map(str, value))}"
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of {len(value)}"
    return type(value).__name__

"""Planning a bundle from `@main`'s signature and the example arrays: names, paths, roles,
layout, the tensor files each array goes to, and the provenance (SPEC.md sections 2 and 6)."""

from __future__ import annotations

import fnmatch
import functools
import keyword
import re
from collections.abc import Sequence
from importlib import metadata
from typing import TYPE_CHECKING, Any, TypeGuard

import numpy as np

from .._format import _symbolic
from .._format._errors import InputError
from .._format._manifest import (
    FORMAT,
    FORMAT_VERSION,
    Argument,
    Layout,
    Manifest,
    Provenance,
    Result,
    Role,
    TensorRef,
)
from .._parse import _main_signature, _mlir
from .._parse._sharding import manifest_mesh, sharding_fields
from .._parse._stored import fits
from .._read import _inputs
from ._pytree_names import positional_result_names, result_name

if TYPE_CHECKING:
    from ._options import PackOptions

EXPECTED_FILE = "expected.safetensors"
TENSOR_FILES: dict[str, str] = {
    "input": "inputs.safetensors",
    "parameter": "weights.safetensors",
    "state": "weights.safetensors",
}


def plan(
    sig: _main_signature.Signature, items: list[_inputs.Keyed] | None, opt: PackOptions
) -> tuple[Manifest, dict[str, dict[str, tuple[np.ndarray, Any]]]]:
    """The manifest (without the module and file table) and the arrays per tensor file."""
    n = len(sig.arguments)
    names = _names(
        opt.names or _jax_names(sig.argument_info, "arg"), [f"arg{i}" for i in range(n)], "names"
    )
    paths = _sized(opt.paths, n, "paths") or [f"%arg{i}" for i in range(n)]
    roles = _expand_roles(dict(opt.roles or {}), names)
    inputs = [n for n in names if roles.get(n, "input") == "input"]
    ordered = (
        None
        if items is None
        else _inputs.assign(items, names, optional=opt.without_values, inputs=inputs)
    )
    layout: Layout
    if opt.layout == "auto":  # without arrays there is nothing to tell: the tensors' own shapes
        layout = (
            "row_major" if ordered is None else _inputs.detect_layout(ordered, sig.arguments, names)
        )
    else:
        layout = opt.layout
    transpose = layout == "column_major" and not opt.already_permuted
    shapes = _declared_shapes(opt.shapes, sig.arguments, "arguments")
    arguments: list[Argument] = []
    arrays: dict[str, dict[str, tuple[np.ndarray, Any]]] = {}
    for i, (t, name, path) in enumerate(zip(sig.arguments, names, paths, strict=True)):
        role = roles.get(name, "input")
        value = None
        item = None if ordered is None else ordered[i]
        if item is not None:
            array = _inputs.check(item, t, name=name, path=path, column_major=transpose)
            file = TENSOR_FILES[role]
            arrays.setdefault(file, {})[name] = (array, t.dtype)
            value = TensorRef(file=file, key=name)
        arguments.append(
            Argument(
                name=name,
                path=path,
                shape=shapes[i],
                dtype=t.dtype.name,
                layout=layout,
                role=role,
                value=value,
                **sharding_fields(sig.sharding, "arguments", i),
            )
        )
    result_shapes = _declared_shapes(opt.result_shapes, sig.results, "results")
    results = [
        Result(
            name=rn,
            shape=result_shapes[k],
            dtype=t.dtype.name,
            layout=layout,
            aliases=sig.aliases.get(k),
            **sharding_fields(sig.sharding, "results", k),
        )
        for k, (t, rn) in enumerate(
            zip(
                sig.results,
                _names(
                    opt.result_names or _jax_names(sig.result_info, "result"),
                    positional_result_names(len(sig.results)),
                    "result_names",
                ),
                strict=True,
            )
        )
    ]
    if opt.shapes is not None and ordered is not None:
        _check_symbolic_examples(arguments, ordered, opt)
    manifest = Manifest.model_construct(
        format=FORMAT,
        format_version=FORMAT_VERSION,
        constraints=list(opt.constraints) or None,
        function=opt.function or _default_function_name(sig),
        arguments=arguments,
        results=results,
        mesh=manifest_mesh(sig.sharding),
        input_tree=opt.input_tree,
        output_tree=opt.output_tree,
        provenance=_provenance(opt.producer, opt.timestamp),
        files={},
    )
    return manifest, arrays


def _declared_shapes(
    given: Sequence[Sequence[int | str]] | None,
    types: Sequence[_main_signature.TensorType],
    what: str,
) -> list[list[int | str]]:
    """Each value's manifest shape: the module's, or the given symbolic one, which must agree
    with it (an expression exactly where the module's dimension is `?`)."""
    if given is None:
        return [list(t.shape) for t in types]
    if len(given) != len(types):
        raise InputError(f"{what}: {len(given)} symbolic shapes for {len(types)} values")
    for k, (shape, t) in enumerate(zip(given, types, strict=True)):
        if not fits(list(shape), t.shape):
            shown = ["?" if d is None else d for d in t.shape]
            raise InputError(
                f"{what}[{k}]: the symbolic shape {list(shape)} does not fit the module's {shown}"
            )
    return [list(shape) for shape in given]


def _check_symbolic_examples(
    arguments: list[Argument], ordered: Sequence[_inputs.Keyed | None], opt: PackOptions
) -> None:
    """The example values are one instance of the symbolic shapes, within `opt.constraints`
    (SPEC.md 2.8)."""
    given = [(a, item) for a, item in zip(arguments, ordered, strict=True) if item is not None]
    try:
        _symbolic.bind_shapes(
            [(a.name, a.shape) for a, _ in given],
            [np.shape(item.array) for _, item in given],
            opt.constraints,
        )
    except _symbolic.ShapeError as e:
        raise InputError(
            f"the example values do not fit the symbolic shapes: {e}",
            argument=e.where.split(".")[0],
        ) from None


_GLOB = re.compile(r"[*?\[]")  # what fnmatch reads as other than itself


def _expand_roles(given: dict[str, str], names: list[str]) -> dict[str, Role]:
    """Roles by argument name; a key may be a glob (`params_*`). A later key wins. A role is
    checked here, where the caller's mapping is read: past here it picks a tensor file."""
    roles: dict[str, Role] = {}
    known = set(names)
    for pattern, role in given.items():
        if not _is_role(role):
            raise InputError(
                f"role {role!r} given for {pattern!r} is not a role; roles are "
                f"{', '.join(TENSOR_FILES)}",
                argument=pattern,
            )
        if _GLOB.search(pattern) is None:  # a name (export gives one per leaf): no scan
            matched = [pattern] if pattern in known else []
        else:
            matched = [n for n in names if fnmatch.fnmatchcase(n, pattern)]
        if not matched:
            raise InputError(
                f"role {role!r} given for {pattern!r}, which names no argument; the arguments "
                f"are {names[:12]}",
                argument=pattern,
            )
        roles.update(dict.fromkeys(matched, role))
    return roles


def _is_role(role: str) -> TypeGuard[Role]:
    return role in TENSOR_FILES


def _names(given: Sequence[str] | None, defaults: list[str], what: str) -> list[str]:
    names = _sized(given, len(defaults), what) or defaults
    seen: set[str] = set()
    for name in names:
        if not name.isidentifier() or keyword.iskeyword(name):
            raise InputError(f"{what}: {name!r} is not a Python identifier", argument=name)
        if name in seen:
            raise InputError(f"{what}: {name!r} is given twice", argument=name)
        seen.add(name)
    return names


# A key path as JAX records it: `x`, `params['w']`, `result[0]` (quoted keys are identifiers).
_KEY_PATH = re.compile(
    r"[A-Za-z_][A-Za-z0-9_]{0,99}(?:\[(?:'[A-Za-z0-9_]{1,100}'|[0-9]{1,9})\]){0,16}"
)


def _jax_names(recorded: Sequence[str | None], prefix: str) -> list[str] | None:
    """Names from JAX's `jax.arg_info` / `jax.result_info` (untrusted text), by SPEC.md 2.1's
    rule: `params['w']` -> `params_w`, `args[0]['w']` -> `arg0_w`, `result` -> `result`,
    `result[1]` -> `result_1`, `result['y']` -> `y`. An argument whose text is only a position
    (`args[1]`), a text that is no plain key path, or a keyword keeps the default name. None
    (every default name) when nothing is recorded or the names would clash."""
    if not any(recorded):
        return None
    n = len(recorded)
    defaults = [f"arg{i}" for i in range(n)] if prefix == "arg" else positional_result_names(n)
    names = [_jax_name(text, prefix) or d for text, d in zip(recorded, defaults, strict=True)]
    return names if len(set(names)) == len(names) else None


def _jax_name(text: str | None, prefix: str) -> str | None:
    if text is None or not _KEY_PATH.fullmatch(text):
        return None
    head, *keys = re.findall(r"[A-Za-z0-9_]+", text)
    if head == "result":
        return None if keyword.iskeyword("_".join(keys)) else result_name(keys)
    if head == "args" and all(k.isdigit() for k in keys):
        return None  # a position says no more than the default name
    if head == "args":
        head, *keys = [f"arg{keys[0]}", *keys[1:]] if keys[0].isdigit() else keys
    name = "_".join([head, *keys])
    name = f"{prefix}_{name}" if name[0].isdigit() else name
    return None if keyword.iskeyword(name) else name


def _sized(given: Sequence[str] | None, n: int, what: str) -> list[str] | None:
    if given is None:
        return None
    if len(given) != n:
        raise InputError(f"{what}: expected {n} entries, one per @main value, got {len(given)}")
    return list(given)


def _default_function_name(sig: _main_signature.Signature) -> str:
    name = sig.module_name or "main"
    for prefix in ("jit_", "reactant_"):
        name = name.removeprefix(prefix)
    return name or "main"


def _provenance(producer: tuple[str, str] | None, timestamp: str | None) -> Provenance:
    from .._version import __version__

    name, version = producer or ("hlobundle", __version__)
    return Provenance(
        producer=name,
        producer_version=version,
        jax_version=_installed("jax"),
        jaxlib_version=_installed("jaxlib"),
        stablehlo_version=_mlir.current_version(),
        timestamp=timestamp,
    )


@functools.cache  # what this process runs: read once (each read scans sys.path, about 1 ms)
def _installed(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None

"""`pack_files()`: `pack()` with its example inputs, and expected results, read from `.npz`,
`.npy` and `.safetensors` files (the CLI's form); `pack_file_inputs` is the same for the
importers that gather their own `PackOptions` (Reactant.jl, jax.export)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from .._format import _signature
from .._format._manifest import Layout, Role
from .._read import _inputs
from ._writer import PackOptions, pack_planned


def pack_files(
    module: str | os.PathLike[str],
    input_files: Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    *,
    names: Sequence[str] | None = None,
    paths: Sequence[str] | None = None,
    roles: Mapping[str, Role] | None = None,
    result_names: Sequence[str] | None = None,
    layout: Layout | Literal["auto"] = "row_major",
    function: str | None = None,
    force: bool = False,
    target_version: str | None = None,
    producer: tuple[str, str] | None = None,
    timestamp: str | None = None,
    input_tree: Any = None,
    output_tree: Any = None,
    expected: Sequence[str | os.PathLike[str]] | Literal["compute"] | None = None,
    allow_custom_calls: Sequence[str] = (),
    with_vjp: bool | str | Callable[..., Any] = False,
    batched: str | Callable[..., Any] | None = None,
    batched_arguments: Sequence[str] = (),
    sign_key: str | os.PathLike[str] | _signature.SigningKey | None = None,
) -> Path:
    """`pack()` with the inputs read from files: the CLI's form.

    **Arguments:**

    - `module`, `out`: as for `pack()`.
    - `input_files`: `.npz`, `.npy` and `.safetensors` files holding one array per `@main`
      argument, keyed by argument name or `arr_<k>` (a `.npy` file: its name); empty stores
      no example values.
    - `expected`: files of expected results, keyed by result name or `arr_<k>`, or
      `"compute"` to run the module once on the inputs.
    - `sign_key`: a private key to sign the bundle with, as `sign()` takes it.
    - The other arguments are `pack()`'s.

    **Returns:** the path of the written bundle.
    """
    options = PackOptions(
        names=names, paths=paths, roles=roles, result_names=result_names, layout=layout,
        function=function, force=force, target_version=target_version, producer=producer,
        timestamp=timestamp, input_tree=input_tree, output_tree=output_tree,
        allow_custom_calls=tuple(allow_custom_calls), with_vjp=with_vjp, batched=batched,
        batched_arguments=tuple(batched_arguments),
        sign_key=None if sign_key is None else _signature.signing_key(sign_key),
    )  # fmt: skip
    return pack_file_inputs(module, input_files, out, options, expected=expected)


def pack_file_inputs(
    module: str | os.PathLike[str],
    input_files: Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    options: PackOptions,
    *,
    expected: Sequence[str | os.PathLike[str]] | Literal["compute"] | None = None,
) -> Path:
    """`pack_files()` with its options gathered already (`options.expected` is replaced)."""
    items = _inputs.read_files(input_files) if input_files else None
    read = (
        expected if expected is None or isinstance(expected, str) else _inputs.read_files(expected)
    )
    return pack_planned(module, items, Path(out), dataclasses.replace(options, expected=read))

"""`pack_files()`: `pack()` with its example inputs, and expected results, read from `.npz`,
`.npy` and `.safetensors` files (the CLI's form); `pack_file_inputs` is the same for the
importers that gather their own `PackOptions` (Reactant.jl, jax.export)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path

from .._read import _inputs
from ._options import PACK, PackOptions, takes
from ._writer import pack_planned


@takes(*PACK, "sign_key")
def pack_files(
    module: str | os.PathLike[str],
    input_files: Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    opt: PackOptions,
) -> Path:
    """`pack()` with the inputs read from files: the CLI's form.

    **Arguments:**

    - `module`, `out`: as for `pack()`.
    - `input_files`: `.npz`, `.npy` and `.safetensors` files holding one array per `@main`
      argument, keyed by argument name or `arr_<k>` (a `.npy` file: its name); empty stores
      no example values.

    **Returns:** the path of the written bundle.
    """
    return pack_file_inputs(module, input_files, out, opt)


def pack_file_inputs(
    module: str | os.PathLike[str],
    input_files: Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    options: PackOptions,
) -> Path:
    """`pack_files()` with its options gathered already: `options.expected` is files (read
    here), `"compute"` or None."""
    items = _inputs.read_files(input_files) if input_files else None
    expected = options.expected
    if expected is not None and not isinstance(expected, str):
        # file names (a mapping's keys, were one given, as a loop over it reads them)
        options = dataclasses.replace(options, expected=_inputs.read_files(list(expected)))
    return pack_planned(module, items, Path(out), options)

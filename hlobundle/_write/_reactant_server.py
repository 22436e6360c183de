"""`from_reactant_server()` (`pack --from-reactant-server DIR`): a ReactantServer.jl model bundle
packed as a bundle. What such a bundle is, and how it is read, is `_interop/_reactant_server.py`;
this is what the writer makes of it: one function, or one `bN` per compiled batch size.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .._format._errors import HloBundleWarning, InputError
from .._format._manifest import identifier
from .._interop import _reactant_server as rs
from .._interop._reactant_server import ServerBundle, TensorSpec
from .._parse import _main_signature, _mlir
from ._options import PackOptions, takes


@takes(
    "batch_size",
    "force",
    "target_version",
    "timestamp",
    "allow_custom_calls",
    "sign_key",
    "metadata",
    "card",
)
def from_reactant_server(
    path: str | os.PathLike[str], out: str | os.PathLike[str], opt: PackOptions
) -> Path:
    """Pack a ReactantServer.jl model bundle: its module (for one compiled batch size: the
    smallest, or `batch_size`), its weights as stored parameters, its input and output names.
    The inputs have no stored values (a server takes them from requests). Without
    `batch_size`, a bundle compiled for several batch sizes (`model.b{N}.mlir`) becomes one
    function `bN` per size (format 2.0), the smallest the default, the weights stored once
    and the bundle signed (given `sign_key`) once every function is in.

    Names, roles, the layout and the values come from the bundle.

    **Arguments:**

    - `path`: the bundle's directory; `out`: the hlobundle to write.

    **Returns:** the path of the written bundle.
    """
    root = Path(path)
    if not root.is_dir():
        raise InputError(
            f"{str(root)!r} is not a directory (a ReactantServer.jl bundle is one)", path=root
        )
    server = rs.read_manifest(root)
    if (root / rs.JULIA_CODE).exists():
        warnings.warn(
            f"{root.name}/{rs.JULIA_CODE} (Julia pre- and post-processing) is not "
            "carried: the bundle holds the compiled function alone",
            HloBundleWarning,
            stacklevel=2,
        )
    sizes = sorted(rs.module_files(server))
    if opt.batch_size is not None or len(sizes) < 2:
        return _pack_size(server, Path(out), opt.batch_size, server.name, opt)
    return _pack_sizes(server, Path(out), sizes, opt)


def _pack_sizes(server: ServerBundle, out: Path, sizes: list[int], opt: PackOptions) -> Path:
    """One function `bN` per batch size, the bundle built whole beside `out` (the smallest
    first, each other packed beside it and added, signed once every function is in when
    `opt.sign_key` is given) and renamed into place only then: a size refused leaves `out` as
    it was, `force` or not."""
    from .._output._target import built_beside
    from ._functions import add_function

    # Each step writes a new path in the scratch directory, unsigned.
    steps = dataclasses.replace(opt, force=False, sign_key=None)
    with built_beside(out, force=opt.force) as bundle:
        _pack_size(server, bundle, sizes[0], f"b{sizes[0]}", steps)
        for i, size in enumerate(sizes[1:], start=1):
            part = bundle.with_name(f"{bundle.name}.b{size}")  # never the bundle's own name
            # the metadata and card are the bundle's: given with its first function
            _pack_size(
                server, part, size, f"b{size}", dataclasses.replace(steps, metadata=None, card=None)
            )
            add_function(bundle, part, sign_key=opt.sign_key if i == len(sizes) - 1 else None)
    return out


def _pack_size(
    server: ServerBundle, out: Path, batch_size: int | None, function: str, opt: PackOptions
) -> Path:
    from .._read import _inputs
    from . import _normalize
    from ._writer import pack_planned

    root = server.root
    text, batch = rs.module_text(server, batch_size)
    normalized = _normalize.normalize(
        text, path=rs.MODULE, allow_custom_calls=opt.allow_custom_calls
    )
    sig = _main_signature.signature(_mlir.parse(normalized.text))
    order, tf = rs.weights(root)
    specs = [*server.inputs]
    if len(sig.arguments) != len(specs) + len(order):
        raise InputError(
            f"@main takes {len(sig.arguments)} arguments; manifest.yaml names "
            f"{len(specs)} inputs and argument_order {len(order)} weights",
            path=root / rs.MANIFEST,
        )
    _check_types("executable_inputs", specs, sig.arguments[: len(specs)], batch)
    _check_types("executable_outputs", list(server.outputs), sig.results, batch)
    values: dict[str, np.ndarray] = {}
    for name, t in zip(order, sig.arguments[len(specs) :], strict=True):
        assert tf is not None, "weights() returns the file whose argument_order it read"
        values[_name(name)] = rs.weight(tf, name, t)
    names = [_name(s.name) for s in specs] + [_name(n) for n in order]
    if len(set(names)) != len(names):
        raise InputError(
            f"input and weight names collide once made Python identifiers: {names[:10]}", path=root
        )
    items = [_inputs.Keyed(key=k, array=v, source=rs.WEIGHTS) for k, v in values.items()]
    options = dataclasses.replace(
        opt,
        names=names,
        layout="column_major",
        already_permuted=True,
        without_values=names[: len(specs)],
        function=function,
        paths=[f"executable_inputs[{s.name!r}]" for s in specs]
        + [f"{rs.WEIGHTS}[{n!r}]" for n in order],
        roles={n: "parameter" for n in names[len(specs) :]},
        result_names=[_name(o.name) for o in server.outputs],
        producer=("ReactantServer.jl bundle", server.format_version),
    )
    return pack_planned(text, items, out, options)


def _name(text: str) -> str:
    return identifier(text, prefix="t_")


def _check_types(
    section: str,
    specs: list[TensorSpec],
    types: Sequence[_main_signature.TensorType],
    batch: int,
) -> None:
    if len(specs) != len(types):
        raise InputError(
            f"manifest.yaml lists {len(specs)} {section}; @main has {len(types)}", field=section
        )
    for spec, t in zip(specs, types, strict=True):
        want = (spec.dtype, spec.shape(batch))
        if (t.dtype.name, t.shape) != want:
            raise InputError(
                f"manifest.yaml: {section} {spec.name!r} is {want[0]}{list(want[1])} in the "
                f"module's orientation (Julia's axes reversed, batch {batch}), but @main has "
                f"{t.dtype.name}{list(t.shape)}",
                field=section,
            )

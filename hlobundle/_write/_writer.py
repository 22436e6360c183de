"""Writing bundles: `pack()` plans the manifest from a module and its arrays (SPEC.md, "Packing");
`_atomic` puts the files on disk.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .._format._errors import InputError
from .._format._manifest import (
    BatchedModule,
    Manifest,
    Module,
    PortableArtifact,
)
from .._parse import _main_signature, _mlir, _stored
from .._read import _inputs
from .._run import _compute
from . import _expected, _module_text, _normalize, _rows, _shards
from ._atomic import write_bundle
from ._card import with_card
from ._options import PACK, PackOptions, takes
from ._plan import plan

# The reference writer's file names (SPEC.md section 1): module forms from the stored-forms table.
MODULE_TEXT, MODULE_PORTABLE = (
    _stored.BY_KEY["module"].text_file,
    _stored.BY_KEY["module"].portable_file,
)
VJP_TEXT, VJP_PORTABLE = _stored.BY_KEY["vjp"].text_file, _stored.BY_KEY["vjp"].portable_file
BATCHED_TEXT, BATCHED_PORTABLE = (
    _stored.BY_KEY["batched"].text_file,
    _stored.BY_KEY["batched"].portable_file,
)


@takes(*PACK)
def pack(
    module: str | os.PathLike[str],
    inputs: Sequence[Any] | Mapping[str, Any] | None,
    out: str | os.PathLike[str],
    opt: PackOptions,
) -> Path:
    """Write a bundle for an MLIR module and example values of its arguments.

    **Arguments:**

    - `module`: StableHLO/MLIR text, or the path of a `.mlir` file.
    - `inputs`: one array per `@main` argument, as a sequence (in order) or a mapping
      (by argument name, or `arr_<k>` keys); `None` stores no example values.
    - `out`: the bundle directory to create. It must not exist unless `force=True`,
      and `force` only ever replaces an existing bundle.

    **Returns:** the path of the written bundle.
    """
    if opt.expected is not None and not isinstance(opt.expected, str):
        opt = dataclasses.replace(opt, expected=_inputs.from_python(opt.expected))
    items = None if inputs is None else _inputs.from_python(inputs)
    return _pack(module, items, Path(out), opt)


def pack_planned(
    module: Any, items: list[_inputs.Keyed] | None, out: Path, opt: PackOptions
) -> Path:
    """`pack()` with its options already gathered (the producers' entry: `export()`...)."""
    return _pack(module, items, out, opt)


def _pack(module: Any, items: list[_inputs.Keyed] | None, out: Path, opt: PackOptions) -> Path:
    try:
        return _pack_checked(module, items, out, opt)
    except ValidationError as e:  # an option the manifest model refuses
        err = e.errors()[0]
        where = ".".join(map(str, err["loc"]))
        raise InputError(f"the manifest would be invalid: {where}: {err['msg']}") from None


def _pack_checked(
    module: Any, items: list[_inputs.Keyed] | None, out: Path, opt: PackOptions
) -> Path:
    text, source = _module_text.read(module)
    normalized = _normalize.normalize(text, path=source, allow_custom_calls=opt.allow_custom_calls)
    text = _module_text.without_locations(normalized.text, path=source)
    parsed = _mlir.parse(text, path=source)
    sig = _main_signature.signature(parsed, path=source, dynamic=opt.shapes is not None)
    if opt.platforms:  # @main takes the platform's index first (SPEC.md 2.14)
        sig = _main_signature.without_platform_index(sig, source)
    manifest, arrays = plan(sig, items, opt)
    if opt.platforms:  # validated with the rest, when the manifest is whole
        manifest = manifest.model_copy(update={"platforms": list(opt.platforms)})
    portable, target = _mlir.write_portable(parsed, opt.target_version, path=source)
    manifest = manifest.model_copy(
        update={
            "module": Module(
                text=MODULE_TEXT,
                portable=PortableArtifact(file=MODULE_PORTABLE, target_version=target),
                normalizations=list(normalized.changes),
                allowed_custom_calls=sorted(
                    set(opt.allow_custom_calls) & set(normalized.custom_calls)
                ),
            )
        }
    )
    files = {MODULE_TEXT: text.encode(), MODULE_PORTABLE: portable}
    if opt.with_vjp:
        manifest = _add_backward(manifest, text, opt, files)
    if opt.batched is not None:
        manifest = _add_batched(manifest, opt.batched, opt.batched_arguments, opt, files)
    if opt.expected is not None:
        manifest = _expected.add_expected(
            manifest,
            arrays,
            portable,
            opt.expected,
            already_permuted=opt.already_permuted,
            here=opt.expected_here,
        )
    if opt.independent_rows is not None:
        declared = _rows.axes(
            opt.independent_rows,
            [a.name for a in manifest.arguments],
            [a.shape for a in manifest.arguments],
            [r.name for r in manifest.results],
            [r.shape for r in manifest.results],
        )
        manifest = _rows.declare(manifest, declared, opt.rows_checked)
    manifest = with_card(manifest, files, opt.metadata, opt.card)
    stored, arrays = _shards.split(manifest, arrays, opt.max_shard_size)
    return write_bundle(out, stored, files, arrays, force=opt.force, signing_key=opt.signing_key)


def _add_backward(
    manifest: Manifest, text: str, opt: PackOptions, files: dict[str, bytes]
) -> Manifest:
    """Lower the backward module and add its two forms to `files` and the manifest."""
    from ._lowering import lower_backward

    if isinstance(opt.with_vjp, str):  # lowered already (from an Exported's VJP, in a child)
        backward = opt.with_vjp
    else:
        primal = opt.with_vjp if callable(opt.with_vjp) else _compute.primal(manifest, text)
        backward = lower_backward(manifest, primal)
    vjp = Module(text=VJP_TEXT, portable=_unwritten(VJP_PORTABLE))
    manifest = manifest.model_copy(update={"vjp": vjp})
    return _store_form("vjp", backward, manifest, opt.target_version, files)


def _add_batched(
    manifest: Manifest,
    source: str | Callable[..., Any],
    arguments: Sequence[str],
    opt: PackOptions,
    files: dict[str, bytes],
) -> Manifest:
    """Take (MLIR text) or lower (a function) the batched module, check it, add its two forms."""
    from ._lowering import lower_batched

    batched = BatchedModule(
        text=BATCHED_TEXT,
        arguments=list(arguments),
        portable=_unwritten(BATCHED_PORTABLE),
    )
    # Validating first refuses unknown or repeated argument names before anything is lowered.
    manifest = Manifest.model_validate(manifest.model_dump() | {"batched": batched})
    text = source if isinstance(source, str) else lower_batched(manifest, source, arguments)
    return _store_form("batched", text, manifest, opt.target_version, files)


def _unwritten(file: str) -> PortableArtifact:
    """A form's artifact entry before `_store_form` writes it and knows its target."""
    return PortableArtifact(file=file, target_version=_mlir.default_target())


def _store_form(
    key: str, text: str, manifest: Manifest, target: str | None, files: dict[str, bytes]
) -> Manifest:
    """Check a form's text as the reader will (`_stored`), add its text and artifact (at
    `target`, else the oldest default that expresses it), and record the artifact's target."""
    form = _stored.BY_KEY[key]
    text = _module_text.without_locations(text, path=form.text_file)
    parsed = _mlir.parse(text, path=form.text_file)
    _stored.check(form, parsed, manifest, form.text_file)
    files[form.text_file] = text.encode()
    files[form.portable_file], written = _mlir.write_portable(parsed, target, path=form.text_file)
    entry = form.listed(manifest)  # in the manifest before its artifact
    artifact = PortableArtifact(file=form.portable_file, target_version=written)
    return manifest.model_copy(update={key: entry.model_copy(update={"portable": artifact})})

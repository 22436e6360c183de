"""Several functions in one bundle (format 2.0, SPEC.md 2.8): `add_function` writes a bundle
holding an existing bundle's functions and one more, over one store of weights.

Every function's own files move under `NAME/` (`NAME/module.mlir`, `NAME/inputs.safetensors`,
`NAME/expected.safetensors`, `NAME/compiled/...`); parameters and state go to one shared
`weights.safetensors`, each stored once: two functions that give one argument name the same
bytes share the tensor, and different bytes under one name are a `TensorConflictError`. Both
bundles are verified first, and what is written comes from the bytes verified.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from .._format import _dtypes
from .._format._bundle_manifest import combine
from .._format._errors import InputError, TensorConflictError
from .._format._manifest import (
    Argument,
    BatchedModule,
    Executable,
    Manifest,
    Module,
    PortableArtifact,
    Result,
    TensorRef,
    identifier,
)
from .._parse import _stored
from .._read._reader import Bundle, load
from . import _shards
from ._atomic import write_bundle
from ._options import PackOptions, takes
from ._plan import EXPECTED_FILE, TENSOR_FILES
from ._sign import check_resignable

SHARED_WEIGHTS = TENSOR_FILES["parameter"]  # weights.safetensors, at the bundle's top
Arrays = dict[str, dict[str, tuple[np.ndarray, Any]]]


@takes("default", "max_shard_size", "sign_key", "public_key", "replace_signature")
def add_function(
    out: str | os.PathLike[str], new: str | os.PathLike[str], opt: PackOptions
) -> Path:
    """Rewrite the bundle `out` atomically with the function of the bundle `new` added. A
    signed bundle is signed again, under `refresh()`'s rules: never laundering a bundle changed
    since it was signed.

    **Returns:** the bundle's path.
    """
    existing, incoming = load(out), load(new)
    if len(incoming.functions) != 1:
        raise InputError(
            f"{new} has {len(incoming.functions)} functions; add them one by one", argument="new"
        )
    name = identifier(incoming.functions[0])
    if name in map(identifier, existing.functions):
        raise InputError(
            f"{out} already has a function named {name!r}; name the new one differently "
            "(name=..., --function NAME)",
            argument="name",
        )
    check_resignable(
        existing,
        opt.signing_key,
        doing="adding a function",
        public_key=opt.public_key,
        replace_signature=opt.replace_signature,
    )
    existing.verify()
    incoming.verify()
    files: dict[str, bytes] = {}
    arrays: Arrays = {}
    views = [_relocate(existing.select(n), files, arrays) for n in existing.functions]
    views.append(_relocate(incoming, files, arrays))
    for b in (existing, incoming):
        _carry_unreferenced(b, files)
    first = existing.default_function or existing.functions[0]
    manifest = combine(views, name if opt.default else first, {})
    stored, arrays = _shards.split(manifest, arrays, opt.max_shard_size)
    return write_bundle(Path(out), stored, files, arrays, force=True, signing_key=opt.signing_key)


def _relocate(b: Bundle, files: dict[str, bytes], arrays: Arrays) -> Manifest:
    """Function `b` (selected) with its files under `NAME/`, its parameters in the shared
    weights; adds its files' bytes and its tensors."""
    m = b.manifest.model_copy(update={"function": identifier(b.manifest.function)})
    prefix = f"{m.function}/"
    updates: dict[str, Any] = {}
    for key, stored in b.modules.items():
        form = _stored.BY_KEY[key]
        text, portable = prefix + form.text_file, prefix + form.portable_file
        files[text], files[portable] = stored.text.encode(), stored.portable
        artifact = PortableArtifact(file=portable, target_version=stored.target_version)
        entry = form.entry(m)
        assert entry is not None, "b.modules holds the forms the manifest has"
        if isinstance(entry, BatchedModule):
            updates[key] = BatchedModule(text=text, portable=artifact, arguments=entry.arguments)
        else:
            updates[key] = Module(
                text=text,
                portable=artifact,
                normalizations=entry.normalizations,
                allowed_custom_calls=entry.allowed_custom_calls,
            )
    updates["executables"] = [_executable(b, e, prefix, files) for e in m.executables or []] or None
    updates["arguments"] = [_argument(b, a, prefix, arrays) for a in m.arguments]
    updates["results"] = [_result(b, r, prefix, arrays) for r in m.results]
    return m.model_copy(update=updates)


def _executable(b: Bundle, e: Executable, prefix: str, files: dict[str, bytes]) -> Executable:
    name = prefix + "compiled/" + e.file.rsplit("/", 1)[-1]
    files[name] = b.executable(e.target, e.sizes) or b""
    return e.model_copy(update={"file": name})


def _argument(b: Bundle, a: Argument, prefix: str, arrays: Arrays) -> Argument:
    if a.value is None:
        return a
    shared = a.role != "input"
    file = SHARED_WEIGHTS if shared else prefix + TENSOR_FILES["input"]
    array = b._array(a.value, a.dtype, a.shape)
    _store(arrays, file, a.name, array, a.dtype, b.manifest.function if shared else None)
    return a.model_copy(update={"value": TensorRef(file=file, key=a.name)})


def _result(b: Bundle, r: Result, prefix: str, arrays: Arrays) -> Result:
    if r.expected is None:
        return r
    file = prefix + EXPECTED_FILE
    _store(arrays, file, r.name, b._array(r.expected, r.dtype, r.shape), r.dtype, None)
    return r.model_copy(update={"expected": TensorRef(file=file, key=r.name)})


def _store(
    arrays: Arrays, file: str, key: str, array: np.ndarray, dtype: str, function: str | None
) -> None:
    """Add a tensor; a shared one already stored must be the same dtype, shape and bytes."""
    row = _dtypes.BY_NAME[dtype]
    held = arrays.setdefault(file, {})
    if key not in held:
        held[key] = (np.asarray(array), row)
        return
    other, other_row = held[key]
    same = other_row == row and other.shape == array.shape and other.tobytes() == array.tobytes()
    if not same:
        raise TensorConflictError(
            f"function {function!r} gives the shared tensor {key!r} other values than a function "
            f"already in the bundle ({row.name}{list(array.shape)} against "
            f"{other_row.name}{list(other.shape)}, or other bytes): store them under different "
            "argument names (SPEC.md 2.8)",
            argument=key,
        )


def _carry_unreferenced(b: Bundle, files: dict[str, bytes]) -> None:
    """Listed files no field names (a LICENSE), as verified; one name must mean one content."""
    for name, held in b._unreferenced.items():
        data = held.read()
        if name in files and files[name] != data:
            raise TensorConflictError(
                f"both bundles list {name!r}, with different contents", argument=name
            )
        files[name] = data

"""A bundle's tensor files against its manifest (SPEC.md section 8): each opened once, its
safetensors header bounded and checked entry by entry against the fields that name it, and the
stored values of a function with symbolic dimensions shown to be one instance of its shapes."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from .._bundle_io import _opening, _tensors
from .._format import _chunks, _dtypes, _limits, _symbolic
from .._format._errors import TensorMismatchError
from .._format._fields import static_shape
from . import _cache
from ._files import each_function

if TYPE_CHECKING:
    import numpy as np

    from .._format._manifest import Argument, Manifest, Result, TensorRef
    from ._files import AnyManifest


def stored_tensors(manifest: AnyManifest) -> list[tuple[str, TensorRef, str, list[int | str]]]:
    """(field, reference, dtype, shape) of every stored tensor any function names."""
    found: list[tuple[str, TensorRef, str, list[int | str]]] = []
    for prefix, view in each_function(manifest):
        found += [
            (f"{prefix}arguments[{i}]", a.value, a.dtype, a.shape)
            for i, a in enumerate(view.arguments)
            if a.value
        ]
        found += [
            (f"{prefix}results[{i}]", r.expected, r.dtype, r.shape)
            for i, r in enumerate(view.results)
            if r.expected
        ]
    return found


def open_tensor_files(
    root: Path,
    manifest: AnyManifest,
    *,
    with_safetensors: bool = True,
    only: set[str] | None = None,
) -> dict[str, _tensors.TensorFile]:
    """Every tensor file, open, its header checked against the manifest (`with_safetensors`:
    validated by safetensors too; `inspect` leaves that out, to not import numpy). `only`:
    just these files (a bundle loaded one function at a time), each checked against every
    function's references to it."""
    stored = [s for s in stored_tensors(manifest) if only is None or s[1].file in only]
    keys: dict[str, list[str]] = {}
    for _, ref, _, _ in stored:
        keys.setdefault(ref.file, []).append(ref.key)
    files = {
        name: _tensors.TensorFile(
            _opening.resolve(root, name),
            name=name,
            header_limit=header_budget(keys[name]),
            with_safetensors=False,
        )
        for name in sorted(keys)
    }
    if with_safetensors:
        for tf in files.values():
            _validated_by_safetensors(tf)
    used: dict[str, set[str]] = {name: set() for name in files}
    for field, ref, dtype, shape in stored:
        _check_header_entry(files[ref.file], ref, _dtypes.BY_NAME[dtype], tuple(shape), field)
        used[ref.file].add(ref.key)
    for prefix, view in each_function(manifest):
        if view.symbolic and all(ref.file in files for ref in _refs(view)):
            _check_symbolic_values(view, files, prefix)
    for name, tf in files.items():
        extra = sorted(set(tf.entries) - used[name])
        if extra:
            raise TensorMismatchError(
                f"{name} holds tensor(s) {extra[:5]} that no argument or result names",
                path=name,
            )
    return files


def _refs(view: Manifest) -> list[TensorRef]:
    return [
        *(a.value for a in view.arguments if a.value),
        *(r.expected for r in view.results if r.expected),
    ]


def chunks_for(tf: _tensors.TensorFile, keys: set[str], chunk: int) -> set[int]:
    """The chunks of a tensor file (of `chunk` bytes) that hold its header and tensors `keys`:
    what a function reads of it."""
    size = tf.size
    needed = set(_chunks.covering(size, chunk, 0, tf.header_span()))
    for key in keys:
        needed.update(_chunks.covering(size, chunk, *tf.span_of(key)))
    return needed


def keys_of(manifest: AnyManifest, functions: list[str]) -> dict[str, set[str]]:
    """The tensors (file -> keys) that these functions name."""
    found: dict[str, set[str]] = {}
    for _, view in each_function(manifest):
        if view.function in functions:
            for ref in _refs(view):
                found.setdefault(ref.file, set()).add(ref.key)
    return found


def _check_symbolic_values(
    view: Manifest, files: dict[str, _tensors.TensorFile], prefix: str
) -> None:
    """The stored values of a function with symbolic dimensions are one instance of its
    shapes: the arguments' shapes bind its symbols, which the expected results then fit."""
    stored: list[tuple[Argument | Result, TensorRef]] = [
        *((a, a.value) for a in view.arguments if a.value),
        *((r, r.expected) for r in view.results if r.expected),
    ]
    declared = [(x.name, x.shape) for x, _ in stored]
    actual = [
        _dtypes.BY_NAME[x.dtype].logical_shape(files[v.file].entries[v.key].shape)
        for x, v in stored
    ]
    try:
        _symbolic.bind_shapes(declared, actual, view.constraints or ())
    except _symbolic.ShapeError as e:
        raise TensorMismatchError(
            f"{prefix}the stored values do not fit the symbolic shapes: {e} (SPEC.md 2.8)",
            field=f"{prefix}arguments",
        ) from None


def header_budget(keys: list[str]) -> int:
    """The largest safetensors header a file holding these tensors needs (SPEC.md 8)."""
    per_key = _limits.TENSOR_HEADER_PER_KEY
    return _limits.TENSOR_HEADER_BASE + sum(per_key + len(k.encode()) for k in keys)


def _check_header_entry(
    tf: _tensors.TensorFile,
    ref: TensorRef,
    row: _dtypes.DType,
    shape: tuple[int | str, ...],
    field: str,
) -> None:
    entry = tf.entries.get(ref.key)
    if entry is None:
        raise TensorMismatchError(
            f"{field}: {ref.file} has no tensor {ref.key!r}",
            path=ref.file,
            field=field,
        )
    if any(isinstance(d, str) for d in shape):  # symbolic: the function's values bind them
        want = (row.safetensors, entry.shape)
        shape = row.logical_shape(entry.shape)
    else:
        want = (row.safetensors, row.storage_shape(static_shape(shape)))
    if (entry.code, entry.shape) != want:
        raise TensorMismatchError(
            f"{field}: {ref.file}[{ref.key!r}] is {entry.code}{list(entry.shape)}, the manifest's "
            f"{row.name}{list(shape)} is stored as {want[0]}{list(want[1])} (SPEC.md, 'Dtypes')",
            path=ref.file,
            field=field,
        )


def check_narrow_values(
    manifest: AnyManifest,
    read: Callable[[TensorRef, list[int | str]], np.ndarray],
    only: dict[str, set[str]] | None = None,
) -> None:
    """Every stored bool holds 0 or 1, and every sub-byte integer fits its bits: `read` gives a
    stored tensor's bytes (SPEC.md, 'Dtypes'). `only`: just these tensors (file -> keys)."""
    for field, ref, dtype, shape in stored_tensors(manifest):
        if only is not None and ref.key not in only.get(ref.file, ()):
            continue
        bits = 1 if dtype == "bool" else _dtypes.SUB_BYTE_BITS.get(dtype)
        if bits is not None and (read(ref, shape) >> bits).any():
            allowed = "0 and 1" if dtype == "bool" else f"values below {1 << bits}"
            raise TensorMismatchError(
                f"{field}: {ref.file}[{ref.key!r}] holds bytes other than {allowed} in a "
                f"{dtype} tensor (SPEC.md, 'Dtypes')",
                path=ref.file,
                field=field,
            )


def _validated_by_safetensors(tf: _tensors.TensorFile) -> None:
    """safetensors' own parse of the file's header, or its remembered verdict on exactly these
    header bytes and this file size (it reads nothing else; SPEC.md 8, "Caches"): a verdict
    saves importing numpy, most of a light command's start-up."""
    import safetensors

    header = tf.header_bytes()
    parts = [safetensors.__version__, str(tf.size), hashlib.sha256(header).hexdigest()]
    key = hashlib.sha256("\n".join(parts).encode()).hexdigest()
    where = _cache.directory(_HEADERS)
    if where is not None and _cache.read(where, key, _SUFFIX) == _ACCEPTED:
        return
    tf.validate_with_safetensors()
    if where is not None:
        _cache.write(where, key, _ACCEPTED, _SUFFIX)


_HEADERS = _cache.HEADERS  # the cache's subdirectory of safetensors' verdicts
_SUFFIX = ".ok"
_ACCEPTED = b"accepted"

"""The files of a bundle against its manifest (SPEC.md section 8): the file set and sizes, the
names every field refers to, and the safetensors headers of the stored tensors."""

from __future__ import annotations

from pathlib import Path

from .._format import _dtypes, _limits, _paths, _tensors
from .._format._errors import (
    FileMissingError,
    FileUnlistedError,
    ManifestError,
    SizeMismatchError,
    TensorMismatchError,
)
from .._format._manifest import MANIFEST_NAME, Manifest, TensorRef


def check_file_set(root: Path, manifest: Manifest) -> None:
    """Every file is listed, every listed file exists with its size, every reference is listed."""
    for name in manifest.files:
        _paths.check_name(name, field=f"files[{name!r}]")
    on_disk = set(_paths.walk(root)) - {MANIFEST_NAME}
    listed = set(manifest.files)
    for name in sorted(listed - on_disk):
        raise FileMissingError(f"{name} is listed in the manifest but missing", path=name)
    for name in sorted(on_disk - listed):
        raise FileUnlistedError(
            f"{name} is in the bundle but not listed in the manifest's files",
            path=name,
        )
    for field, name in _references(manifest):
        _paths.check_name(name, field=field)
        if name not in listed:
            raise ManifestError(f"{field} names {name!r}, which is not in files", field=field)
    for name, entry in manifest.files.items():
        size = (root / name).stat().st_size
        if size != entry.size:
            raise SizeMismatchError(
                f"{name} is {size} bytes, the manifest says {entry.size}",
                path=name,
                field=f"files[{name!r}].size",
            )


def _references(manifest: Manifest) -> list[tuple[str, str]]:
    refs = [
        ("module.text", manifest.module.text),
        ("module.portable.file", manifest.module.portable.file),
    ]
    if manifest.vjp is not None:
        refs += [("vjp.text", manifest.vjp.text), ("vjp.portable.file", manifest.vjp.portable.file)]
    if manifest.batched is not None:
        b = manifest.batched
        refs += [("batched.text", b.text), ("batched.portable.file", b.portable.file)]
    refs += [
        (f"arguments[{i}].value.file", a.value.file)
        for i, a in enumerate(manifest.arguments)
        if a.value
    ]
    refs += [
        (f"results[{i}].expected.file", r.expected.file)
        for i, r in enumerate(manifest.results)
        if r.expected
    ]
    return refs


def stored_tensors(manifest: Manifest) -> list[tuple[str, TensorRef, str, list[int]]]:
    """(field, reference, dtype, shape) of every stored tensor the manifest names."""
    found = [
        (f"arguments[{i}]", a.value, a.dtype, a.shape)
        for i, a in enumerate(manifest.arguments)
        if a.value
    ]
    found += [
        (f"results[{i}]", r.expected, r.dtype, r.shape)
        for i, r in enumerate(manifest.results)
        if r.expected
    ]
    return found  # type: ignore[return-value]


def open_tensor_files(root: Path, manifest: Manifest) -> dict[str, _tensors.TensorFile]:
    stored = stored_tensors(manifest)
    keys: dict[str, list[str]] = {}
    for _, ref, _, _ in stored:
        keys.setdefault(ref.file, []).append(ref.key)
    files = {
        name: _tensors.TensorFile(_paths.resolve(root, name), name=name,
                                  header_limit=_header_budget(keys[name]))
        for name in sorted(keys)
    }  # fmt: skip
    used: dict[str, set[str]] = {name: set() for name in files}
    for field, ref, dtype, shape in stored:
        _check_header_entry(files[ref.file], ref, _dtypes.BY_NAME[dtype], tuple(shape), field)
        used[ref.file].add(ref.key)
    for name, tf in files.items():
        extra = sorted(set(tf.entries) - used[name])
        if extra:
            raise TensorMismatchError(
                f"{name} holds tensor(s) {extra[:5]} that no argument or result names",
                path=name,
            )
    return files


def _header_budget(keys: list[str]) -> int:
    """The largest safetensors header a file holding these tensors needs (SPEC.md 8)."""
    per_key = _limits.TENSOR_HEADER_PER_KEY
    return _limits.TENSOR_HEADER_BASE + sum(per_key + len(k.encode()) for k in keys)


def _check_header_entry(
    tf: _tensors.TensorFile, ref: TensorRef, row: _dtypes.DType, shape: tuple[int, ...], field: str
) -> None:
    entry = tf.entries.get(ref.key)
    if entry is None:
        raise TensorMismatchError(
            f"{field}: {ref.file} has no tensor {ref.key!r}",
            path=ref.file,
            field=field,
        )
    want = (row.safetensors, row.storage_shape(shape))
    if (entry.code, entry.shape) != want:
        raise TensorMismatchError(
            f"{field}: {ref.file}[{ref.key!r}] is {entry.code}{list(entry.shape)}, the manifest's "
            f"{row.name}{list(shape)} is stored as {want[0]}{list(want[1])} (SPEC.md, 'Dtypes')",
            path=ref.file,
            field=field,
        )

"""The files of a bundle against its manifest (SPEC.md section 8): the manifest itself, the file
set and sizes, the names every field refers to, the safetensors headers of the stored tensors,
and module files read once with their sha256 checked. Needs neither numpy nor MLIR."""

from __future__ import annotations

import hashlib
from pathlib import Path

from .._format import _dtypes, _limits, _paths, _prechecks, _tensors
from .._format._errors import (
    FileMissingError,
    FileUnlistedError,
    HashMismatchError,
    LimitError,
    ManifestError,
    ModuleError,
    NotABundleError,
    SizeMismatchError,
    TensorMismatchError,
    UnsafePathError,
)
from .._format._manifest import MANIFEST_NAME, FileEntry, Manifest, TensorRef
from .._format._manifest_json import parse_manifest, read_manifest_bytes
from .._format._signature import SIGNATURE_NAME


def check_file_set(root: Path, manifest: Manifest) -> None:
    """Every file is listed, every listed file exists with its size, every reference is listed."""
    for name in manifest.files:
        _paths.check_name(name, field=f"files[{name!r}]")
    if SIGNATURE_NAME in manifest.files:
        raise ManifestError(
            f"files lists {SIGNATURE_NAME}, the name reserved for the bundle's signature "
            "(SPEC.md, 'Signature')",
            field=f"files[{SIGNATURE_NAME!r}]",
        )
    on_disk = set(_paths.walk(root)) - {MANIFEST_NAME, SIGNATURE_NAME}
    listed = set(manifest.files)
    for name in sorted(listed - on_disk):
        raise FileMissingError(f"{name} is listed in the manifest but missing", path=name)
    for name in sorted(on_disk - listed):
        raise FileUnlistedError(
            f"{name} is in the bundle but not listed in the manifest's files",
            path=name,
        )
    for field, name in references(manifest):
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


def references(manifest: Manifest) -> list[tuple[str, str]]:
    refs = [
        ("module.text", manifest.module.text),
        ("module.portable.file", manifest.module.portable.file),
    ]
    if manifest.vjp is not None:
        refs += [("vjp.text", manifest.vjp.text), ("vjp.portable.file", manifest.vjp.portable.file)]
    if manifest.batched is not None:
        b = manifest.batched
        refs += [("batched.text", b.text), ("batched.portable.file", b.portable.file)]
    refs += [(f"executables[{i}].file", e.file) for i, e in enumerate(manifest.executables or [])]
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


def open_tensor_files(
    root: Path, manifest: Manifest, *, with_safetensors: bool = True
) -> dict[str, _tensors.TensorFile]:
    """Every tensor file, open, its header checked against the manifest (`with_safetensors`:
    validated by safetensors too; `inspect` leaves that out, to not import numpy)."""
    stored = stored_tensors(manifest)
    keys: dict[str, list[str]] = {}
    for _, ref, _, _ in stored:
        keys.setdefault(ref.file, []).append(ref.key)
    files = {
        name: _tensors.TensorFile(_paths.resolve(root, name), name=name,
                                  header_limit=_header_budget(keys[name]),
                                  with_safetensors=with_safetensors)
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


def check_digest(name: str, size: int, digest: str, listed: FileEntry) -> None:
    if size != listed.size:
        raise SizeMismatchError(
            f"{name} is {size} bytes, the manifest says {listed.size}",
            path=name,
            field=f"files[{name!r}].size",
        )
    if digest != listed.sha256:
        raise HashMismatchError(
            f"{name}: sha256 is {digest}, the manifest says {listed.sha256}",
            path=name,
            field=f"files[{name!r}].sha256",
        )


def read_manifest(root: Path) -> tuple[Manifest, str]:
    """The bundle's manifest, parsed and checked, and the sha256 of the bytes it was parsed from."""
    if not root.exists():
        raise NotABundleError(f"{str(root)!r} does not exist", path=root)
    if not root.is_dir():
        raise NotABundleError(f"{str(root)!r} is not a directory; a bundle is one", path=root)
    path = root / MANIFEST_NAME
    if path.is_symlink():
        raise UnsafePathError(f"{MANIFEST_NAME} is a symlink", path=MANIFEST_NAME)
    if not path.is_file():
        raise NotABundleError(
            f"{str(root)!r} has no {MANIFEST_NAME}; it is not a bundle", path=MANIFEST_NAME
        )
    data = read_manifest_bytes(path)
    return parse_manifest(data, path=MANIFEST_NAME), hashlib.sha256(data).hexdigest()


def read_module_file(root: Path, manifest: Manifest, name: str) -> tuple[bytes, str]:
    """A module file's bytes, read once (size-limited), and their sha256, checked."""
    _prechecks.check_module_size(manifest.files[name].size, path=name)
    return _read_checked(root, manifest, name)


def read_executable_file(root: Path, manifest: Manifest, name: str) -> bytes:
    """An executable's bytes, read once (size-limited), their sha256 checked."""
    size = manifest.files[name].size
    if size > _limits.MAX_EXECUTABLE_BYTES:
        raise LimitError(
            f"{name} is {size} bytes; executables are limited to "
            f"{_limits.MAX_EXECUTABLE_BYTES} (SPEC.md, 'Limits')",
            path=name,
        )
    return _read_checked(root, manifest, name)[0]


def _read_checked(root: Path, manifest: Manifest, name: str) -> tuple[bytes, str]:
    listed = manifest.files[name]
    with open(_paths.resolve(root, name), "rb") as f:
        data = f.read(listed.size + 1)
    digest = hashlib.sha256(data).hexdigest()
    check_digest(name, len(data), digest, listed)
    return data, digest


def module_text(data: bytes, name: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ModuleError(f"{name} is not UTF-8 text: {e}", path=name) from None

"""The files of a bundle against its manifest (SPEC.md section 8): the manifest itself, the file
set and sizes, the names every field refers to, and module files read once with their sha256
checked (the tensor files: `_tensor_files`). Needs neither numpy nor MLIR."""

from __future__ import annotations

import hashlib
import os
import stat
import weakref
from pathlib import Path

from .._bundle_io import _opening
from .._file_io._bounded import read_at_most
from .._format import _chunks, _limits, _paths, _prechecks
from .._format._bundle_manifest import BundleManifest
from .._format._errors import (
    FileMissingError,
    FileUnlistedError,
    HashMismatchError,
    LimitError,
    ManifestError,
    ModuleError,
    NotABundleError,
    SizeMismatchError,
    UnsafePathError,
)
from .._format._fields import MANIFEST_NAME, MAX_MANIFEST_BYTES
from .._format._manifest import FileEntry, Manifest
from .._format._manifest_json import parse_manifest
from .._format._signature import SIGNATURE_NAME

AnyManifest = Manifest | BundleManifest


def each_function(manifest: AnyManifest) -> list[tuple[str, Manifest]]:
    """(field prefix, the function's manifest) for each function: "" for a 1.x manifest,
    `functions[NAME].` for a function of a 2.0 one."""
    if isinstance(manifest, Manifest):
        return [("", manifest)]
    return [(f"functions[{name}].", view) for name, view in manifest.views.items()]


def check_file_set(root: Path, manifest: AnyManifest, present: set[str] | None = None) -> None:
    """Every file is listed, every listed file exists with its size, every reference is listed.
    `present`: only these listed files need exist (a bundle loaded one function at a time)."""
    for name in manifest.files:
        _paths.check_name(name, field=f"files[{name!r}]")
    if SIGNATURE_NAME in manifest.files:
        raise ManifestError(
            f"files lists {SIGNATURE_NAME}, the name reserved for the bundle's signature "
            "(SPEC.md, 'Signature')",
            field=f"files[{SIGNATURE_NAME!r}]",
        )
    on_disk = set(_opening.walk(root)) - {MANIFEST_NAME, SIGNATURE_NAME}
    listed = set(manifest.files)
    for name in sorted((listed if present is None else present) - on_disk):
        raise FileMissingError(f"{name} is listed in the manifest but missing", path=name)
    for name in sorted(on_disk - listed):
        raise FileUnlistedError(
            f"{name} is in the bundle but not listed in the manifest's files",
            path=name,
        )
    checked: set[str] = set()  # thousands of references name a few files: each checked once
    for field, name in references(manifest):
        if name in checked:
            continue
        _paths.check_name(name, field=field)
        if name not in listed:
            raise ManifestError(f"{field} names {name!r}, which is not in files", field=field)
        checked.add(name)
    for name, entry in manifest.files.items():
        if present is not None and name not in present:
            continue
        st = _opening.resolve(root, name).lstat()
        _paths.check_single_link(st, name)
        size = st.st_size
        if size != entry.size:
            raise SizeMismatchError(
                f"{name} is {size} bytes, the manifest says {entry.size}",
                path=name,
                field=f"files[{name!r}].size",
            )


def references(manifest: AnyManifest) -> list[tuple[str, str]]:
    """(field, file name) of every file a field of any function names."""
    return [
        (prefix + field, name)
        for prefix, view in each_function(manifest)
        for field, name in function_references(view)
    ]


def files_of(manifest: AnyManifest, functions: list[str]) -> set[str]:
    """Every file the fields of these functions name: what loading only them reads."""
    views = dict(each_function(manifest))
    prefixes = {p for p, view in views.items() if view.function in functions}
    return {name for p in prefixes for _, name in function_references(views[p])}


def function_references(manifest: Manifest) -> list[tuple[str, str]]:
    """(field, file name) of every file one function's fields name."""
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


def check_chunks(name: str, digests: list[str], listed: FileEntry) -> None:
    """The chunk digests computed from a file's bytes are the manifest's (format 2.1)."""
    if listed.chunks is None:
        return
    for i, (got, want) in enumerate(zip(digests, listed.chunks.sha256, strict=False)):
        if got != want:
            raise HashMismatchError(
                f"{name}: chunk {i} has sha256 {got}, the manifest says {want}",
                path=name,
                field=f"files[{name!r}].chunks.sha256[{i}]",
            )
    if len(digests) != len(listed.chunks.sha256):  # the whole file's check comes first
        raise SizeMismatchError(
            f"{name} has {len(digests)} chunks, the manifest lists {len(listed.chunks.sha256)}",
            path=name,
            field=f"files[{name!r}].chunks",
        )


def check_chunk(name: str, index: int, data: bytes, want: str) -> None:
    """One chunk's bytes, read on their own, against its listed digest (SPEC.md 2.9)."""
    got = hashlib.sha256(data).hexdigest()
    if got != want:
        raise HashMismatchError(
            f"{name}: chunk {index} has sha256 {got}, the manifest says {want}",
            path=name,
            field=f"files[{name!r}].chunks.sha256[{index}]",
        )


def chunk_hasher(listed: FileEntry) -> _chunks.ChunkHasher | None:
    return None if listed.chunks is None else _chunks.ChunkHasher(listed.chunks.size)


def check_bytes(name: str, data: bytes, listed: FileEntry) -> str:
    """A whole file's bytes against its entry: size, sha256 and chunk digests; the sha256."""
    digest = hashlib.sha256(data).hexdigest()
    check_digest(name, len(data), digest, listed)
    if listed.chunks is not None:
        check_chunks(name, _chunks.digests_of([data], listed.chunks.size), listed)
    return digest


def read_manifest(root: Path) -> tuple[AnyManifest, str]:
    """The bundle's manifest, parsed and checked, and the sha256 of the bytes it was parsed from."""
    if not root.exists():
        raise NotABundleError(f"{str(root)!r} does not exist", path=root)
    if not root.is_dir():
        raise NotABundleError(
            f"{str(root)!r} is not a directory; a bundle is one{_parent_bundle(root)}", path=root
        )
    path = root / MANIFEST_NAME
    if path.is_symlink():
        raise UnsafePathError(f"{MANIFEST_NAME} is a symlink", path=MANIFEST_NAME)
    if not path.is_file():
        raise NotABundleError(
            f"{str(root)!r} has no {MANIFEST_NAME}; it is not a bundle{_packed_how(root)}",
            path=MANIFEST_NAME,
        )
    data = read_at_most(path, MAX_MANIFEST_BYTES)
    return parse_manifest(data, path=MANIFEST_NAME), hashlib.sha256(data).hexdigest()


def _parent_bundle(path: Path) -> str:
    """The bundle a file given as one lies in (`inspect B/manifest.json`): its directory."""
    if not (path.parent / MANIFEST_NAME).is_file():
        return ""
    what = f"a bundle's {MANIFEST_NAME}" if path.name == MANIFEST_NAME else "a file of a bundle"
    return f": it is {what}: give the bundle's directory, {path.parent}"


def _packed_how(root: Path) -> str:
    """How to make a bundle of a directory that a producer wrote instead: a Reactant export
    (`export_to_enzymejax`'s `.py`, `.mlir` and `_inputs.npz`) is what users try to run."""
    if all(any(root.glob(pattern)) for pattern in ("*_inputs.npz", "*.mlir", "*.py")):
        return (
            ". It looks like a Reactant export (export_to_enzymejax): make a bundle of it with "
            f"`hlobundle pack --from-reactant {root} -o OUT` (hlobundle.from_reactant in Python)"
        )
    return ""


def read_module_file(root: Path, manifest: AnyManifest, name: str) -> tuple[bytes, str]:
    """A module file's bytes, read once (size-limited), and their sha256, checked."""
    _prechecks.check_module_size(manifest.files[name].size, path=name)
    return _read_checked(root, manifest, name)


def read_executable_file(root: Path, manifest: AnyManifest, name: str) -> bytes:
    """An executable's bytes, read once (size-limited), their sha256 checked."""
    size = manifest.files[name].size
    if size > _limits.MAX_EXECUTABLE_BYTES:
        raise LimitError(
            f"{name} is {size} bytes; executables are limited to "
            f"{_limits.MAX_EXECUTABLE_BYTES} (SPEC.md, 'Limits')",
            path=name,
        )
    return _read_checked(root, manifest, name)[0]


def _read_checked(root: Path, manifest: AnyManifest, name: str) -> tuple[bytes, str]:
    listed = manifest.files[name]
    with os.fdopen(open_listed(root, name), "rb") as f:
        data = f.read(listed.size + 1)
    return data, check_bytes(name, data, listed)


def open_listed(root: Path, name: str) -> int:
    """A listed file, opened without following a symlink, checked to be a regular file with
    one hard link (checked on what was opened, not on the name, which may change meanwhile)."""
    fd = _opening.open_no_follow(_opening.resolve(root, name), name)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePathError(f"{name!r} is not a regular file", path=name)
        _paths.check_single_link(st, name)
    except BaseException:
        os.close(fd)
        raise
    return fd


class HeldFile:
    """A listed file that no field refers to (a LICENSE, a README), held open from load, so
    that `verify` hashes the file that was opened and checked, in bounded memory."""

    def __init__(self, root: Path, name: str, listed: FileEntry) -> None:
        self.name = name
        self.listed = listed
        self._fd = open_listed(root, name)
        weakref.finalize(self, os.close, self._fd)  # held for the Bundle's lifetime

    def read(self) -> bytes:
        """The held file's bytes (at most one past its listed size), checked against the manifest."""
        data = os.pread(self._fd, self.listed.size + 1, 0)
        check_bytes(self.name, data, self.listed)
        return data

    def check(self) -> None:
        """Hash the held file (at most one byte past its listed size) against the manifest."""
        h, offset, limit = hashlib.sha256(), 0, self.listed.size + 1
        chunks = chunk_hasher(self.listed)
        while offset < limit:
            chunk = os.pread(self._fd, min(_CHUNK, limit - offset), offset)
            if not chunk:
                break
            h.update(chunk)
            if chunks is not None:
                chunks.update(chunk)
            offset += len(chunk)
        check_digest(self.name, offset, h.hexdigest(), self.listed)
        if chunks is not None:
            check_chunks(self.name, chunks.finish(), self.listed)


_CHUNK = 1 << 20


def open_unreferenced_files(root: Path, manifest: AnyManifest) -> dict[str, HeldFile]:
    """Every listed file that no module, tensor or executable field names, held open."""
    referenced = {name for _, name in references(manifest)}
    return {
        name: HeldFile(root, name, entry)
        for name, entry in sorted(manifest.files.items())
        if name not in referenced
    }


def module_text(data: bytes, name: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ModuleError(f"{name} is not UTF-8 text: {e}", path=name) from None

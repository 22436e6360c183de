"""Writing a bundle directory atomically (SPEC.md, "Packing").

The bundle is built in `.<name>.partial-<pid>-<random>` beside the target, fsynced, and renamed
into place: the output name never holds a half bundle. A killed writer's temporaries are removed
by the next write to the same name, once their process is gone. A bundle made in several steps
(a function each) is built whole in one such directory first (`_output._target.built_beside`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from .._bundle_io import _opening, _signing, _tensor_writing
from .._file_io import _durable
from .._format import _chunks, _signature
from .._format._bundle_manifest import BundleManifest, combine, functions_of, minimum_version
from .._format._errors import HashMismatchError
from .._format._manifest import MANIFEST_NAME, Chunks, FileEntry, Manifest
from .._format._signature import SigningKey
from .._output import _target

SIGNATURE_VERSION = "1.2"  # model.sig is reserved since 1.2: a signed bundle is at least that


def final_manifest(
    manifest: Manifest | BundleManifest, table: dict[str, FileEntry], *, signed: bool
) -> Manifest | BundleManifest:
    """The manifest a writer stores, with this file table, validated: in the oldest format
    version that can express it (SPEC.md 5): one static function is 1.x, and the format
    version is the oldest with every field it uses; several functions, or symbolic
    dimensions, are 2.0. A 2.0 bundle of one function has it as its `default_function`, so that
    a caller (`serve`'s plain NAME) gets it without naming it."""
    views, default = functions_of(manifest)
    if len(views) == 1:
        (m,) = views.values()
        version = minimum_version(m)
        if signed and _version(version) < _version(SIGNATURE_VERSION):
            version = SIGNATURE_VERSION
        if _version(version) < (2, 0):
            data = m.model_copy(update={"files": table, "format_version": version}).model_dump()
            return Manifest.model_validate(data)
    return combine(list(views.values()), default if len(views) > 1 else next(iter(views)), table)


def _chunks_of(hasher: _chunks.ChunkHasher | None) -> Chunks | None:
    """The chunk digests of a file of more than one chunk (one chunk's is the file's sha256)."""
    digests = [] if hasher is None else hasher.finish()
    return None if hasher is None or len(digests) < 2 else Chunks(size=hasher.chunk, sha256=digests)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split("."))


def sha256_file(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def write_bundle(
    out: Path,
    manifest: Manifest | BundleManifest,
    files: dict[str, bytes],
    arrays: dict[str, dict[str, tuple[np.ndarray, Any]]],
    *,
    force: bool,
    signing_key: SigningKey | None = None,
) -> Path:
    _target.check_target(out, force)
    out.parent.mkdir(parents=True, exist_ok=True)
    _target.remove_stale_partials(out)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-{os.getpid()}-", dir=out.parent))
    try:
        for name in [*files, *arrays]:
            tmp.joinpath(*name.split("/")).parent.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            (tmp / name).write_bytes(data)
        # Hashed from the bytes given, and the tensors as they are written: nothing is read back.
        digests = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}
        # Chunk digests where a reader may want part of a file (SPEC.md 2.9): the tensor files
        # of a bundle of several functions. One function reads every tensor it has.
        several = len(functions_of(manifest)[0]) > 1
        chunked = {n: _chunks.ChunkHasher(_chunks.DEFAULT_CHUNK) for n in arrays if several}
        synced = set()
        for name, tensors in sorted(arrays.items()):  # each fsynced as its hash finishes
            digests[name] = _tensor_writing.write(
                tmp / name, tensors, fsync=True, chunks=chunked.get(name)
            )
            synced.add(tmp / name)
        _durable.set_modes(tmp)
        table = {
            name: FileEntry(
                size=(tmp / name).stat().st_size,
                sha256=digests[name],
                chunks=_chunks_of(chunked.get(name)),
            )
            for name in sorted([*files, *arrays])
        }
        _finish(tmp, out.name, manifest, table, signing_key)
        _durable.fsync_tree(tmp, synced=synced)
        _target.move_into_place(tmp, out, force)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _finish(
    tmp: Path,
    name: str,
    manifest: Manifest | BundleManifest,
    table: dict[str, FileEntry],
    key: SigningKey | None,
) -> None:
    """Write the final manifest with this file table into the bundle being built, and, with a
    key, its signature as the last step (every file is written and hashed by then)."""
    manifest_bytes = final_manifest(manifest, table, signed=key is not None).to_json()
    (tmp / MANIFEST_NAME).write_bytes(manifest_bytes)
    if key is not None:
        digests = {file: entry.sha256 for file, entry in table.items()}
        digests[MANIFEST_NAME] = hashlib.sha256(manifest_bytes).hexdigest()
        (tmp / _signature.SIGNATURE_NAME).write_bytes(_signing.sign(tmp, digests, key, name=name))


def rewrite_bundle(
    out: Path,
    manifest: Manifest | BundleManifest,
    replaced: dict[str, bytes],
    *,
    sign_key: SigningKey | None,
) -> Path:
    """Replace some files of the bundle `out`, and its manifest, atomically: the new bundle is
    built beside it, every other listed file copied over with its sha256 checked (never
    hard-linked: a bundle's file has one name), signed with `sign_key` when given, and swapped
    into place. The old `model.sig` is never carried over: it no longer covers the files."""
    _target.remove_stale_partials(out)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-{os.getpid()}-", dir=out.parent))
    try:
        table = dict(manifest.files)
        for name in sorted(manifest.files):
            if name not in replaced:
                _copy_checked(out, name, tmp.joinpath(*name.split("/")), manifest.files[name])
        for name, data in replaced.items():
            target = tmp.joinpath(*name.split("/"))
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            table[name] = FileEntry(size=len(data), sha256=hashlib.sha256(data).hexdigest())
        _finish(tmp, out.name, manifest, table, sign_key)
        _durable.set_modes(tmp)
        _durable.fsync_tree(tmp)
        _target.move_into_place(tmp, out, force=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _copy_checked(bundle: Path, name: str, target: Path, listed: FileEntry) -> None:
    """Copy a listed file, hashing the bytes copied: what the new manifest (and signature)
    says of it is then true of the copy."""
    target.parent.mkdir(parents=True, exist_ok=True)
    h = hashlib.sha256()
    chunks = None if listed.chunks is None else _chunks.ChunkHasher(listed.chunks.size)
    with open(_opening.resolve(bundle, name), "rb") as src, open(target, "xb") as dst:
        while chunk := src.read(1 << 20):
            h.update(chunk)
            if chunks is not None:
                chunks.update(chunk)
            dst.write(chunk)
        size = dst.tell()
    if (size, h.hexdigest()) != (listed.size, listed.sha256) or (
        chunks is not None and listed.chunks is not None and chunks.finish() != listed.chunks.sha256
    ):
        raise HashMismatchError(
            f"{name}: sha256 is {h.hexdigest()} ({size} bytes), the manifest says "
            f"{listed.sha256} ({listed.size} bytes), or its chunk digests differ; it changed "
            "while being carried over",
            path=name,
            field=f"files[{name!r}].sha256",
        )

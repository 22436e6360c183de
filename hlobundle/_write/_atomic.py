"""Writing a bundle directory atomically (SPEC.md, "Packing").

The bundle is built in `.<name>.partial-<pid>-<random>` beside the target, fsynced, and renamed
into place: the output name never holds a half bundle. A killed writer's temporaries are removed
by the next write to the same name, once their process is gone.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import os
import shutil
import stat
import tempfile
from collections.abc import Collection
from pathlib import Path
from typing import Any

import numpy as np

from .._format import _libc, _paths, _signature, _tensors
from .._format._bundle_manifest import BundleManifest, combine, functions_of, minimum_version
from .._format._errors import HashMismatchError, InputError, OutputExistsError
from .._format._manifest import MANIFEST_NAME, FileEntry, Manifest

SIGNATURE_VERSION = "1.2"  # model.sig is reserved since 1.2: a signed bundle is at least that


def final_manifest(
    manifest: Manifest | BundleManifest, table: dict[str, FileEntry], *, signed: bool
) -> Manifest | BundleManifest:
    """The manifest a writer stores, with this file table, validated: in the oldest format
    version that can express it (SPEC.md 5): one static function is 1.x, and the format
    version is the oldest with every field it uses; several functions, or symbolic
    dimensions, are 2.0."""
    views, default = functions_of(manifest)
    if len(views) == 1:
        (m,) = views.values()
        version = minimum_version(m)
        if signed and _version(version) < _version(SIGNATURE_VERSION):
            version = SIGNATURE_VERSION
        if _version(version) < (2, 0):
            data = m.model_copy(update={"files": table, "format_version": version}).model_dump()
            return Manifest.model_validate(data)
    return combine(list(views.values()), default if len(views) > 1 else None, table)


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
    signing_key: _signature.SigningKey | None = None,
) -> Path:
    _check_target(out, force)
    out.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_partials(out)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-{os.getpid()}-", dir=out.parent))
    try:
        for name in [*files, *arrays]:
            tmp.joinpath(*name.split("/")).parent.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            (tmp / name).write_bytes(data)
        # Hashed from the bytes given, and the tensors as they are written: nothing is read back.
        digests = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}
        synced = set()
        for name, tensors in sorted(arrays.items()):  # each fsynced as its hash finishes
            digests[name] = _tensors.write(tmp / name, tensors, fsync=True)
            synced.add(tmp / name)
        set_modes(tmp)
        table = {
            name: FileEntry(size=(tmp / name).stat().st_size, sha256=digests[name])
            for name in sorted([*files, *arrays])
        }
        _finish(tmp, out.name, manifest, table, signing_key)
        _fsync_tree(tmp, synced=synced)
        _move_into_place(tmp, out, force)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _finish(
    tmp: Path,
    name: str,
    manifest: Manifest | BundleManifest,
    table: dict[str, FileEntry],
    key: _signature.SigningKey | None,
) -> None:
    """Write the final manifest with this file table into the bundle being built, and, with a
    key, its signature as the last step (every file is written and hashed by then)."""
    manifest_bytes = final_manifest(manifest, table, signed=key is not None).to_json()
    (tmp / MANIFEST_NAME).write_bytes(manifest_bytes)
    if key is not None:
        digests = {file: entry.sha256 for file, entry in table.items()}
        digests[MANIFEST_NAME] = hashlib.sha256(manifest_bytes).hexdigest()
        (tmp / _signature.SIGNATURE_NAME).write_bytes(_signature.sign(tmp, digests, key, name=name))


def rewrite_bundle(
    out: Path,
    manifest: Manifest | BundleManifest,
    replaced: dict[str, bytes],
    *,
    sign_key: _signature.SigningKey | None = None,
) -> Path:
    """Replace some files of the bundle `out`, and its manifest, atomically: the new bundle is
    built beside it, every other listed file copied over with its sha256 checked (never
    hard-linked: a bundle's file has one name), signed with `sign_key` when given, and swapped
    into place. The old `model.sig` is never carried over: it no longer covers the files."""
    _remove_stale_partials(out)
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
        set_modes(tmp)
        _fsync_tree(tmp)
        _move_into_place(tmp, out, force=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _copy_checked(bundle: Path, name: str, target: Path, listed: FileEntry) -> None:
    """Copy a listed file, hashing the bytes copied: what the new manifest (and signature)
    says of it is then true of the copy."""
    target.parent.mkdir(parents=True, exist_ok=True)
    h = hashlib.sha256()
    with open(_paths.resolve(bundle, name), "rb") as src, open(target, "xb") as dst:
        while chunk := src.read(1 << 20):
            h.update(chunk)
            dst.write(chunk)
        size = dst.tell()
    if (size, h.hexdigest()) != (listed.size, listed.sha256):
        raise HashMismatchError(
            f"{name}: sha256 is {h.hexdigest()} ({size} bytes), the manifest says "
            f"{listed.sha256} ({listed.size} bytes); it changed while being carried over",
            path=name,
            field=f"files[{name!r}].sha256",
        )


def write_file_atomically(
    path: Path, data: bytes, mode: int = 0o644, *, scratch: Path | None = None
) -> None:
    """Write one file through a temporary in `scratch` (default: beside it; give another
    directory on the same file system when no stray file may appear beside it, as in a bundle),
    fsynced and renamed into place."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.partial-", dir=scratch or path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def refuse_inside_a_bundle(out: Path) -> None:
    """An InputError when `out` would land inside a bundle (an ancestor directory is one): the
    bundle would then hold an unlisted file (FILE_UNLISTED), and a signed one no longer verify."""
    for parent in Path(os.path.abspath(out)).parents:
        if _is_bundle(parent):
            raise InputError(
                f"{str(out)!r} is inside the bundle {str(parent)!r}; write outside it (a bundle "
                "holds exactly the files its manifest lists)",
                path=out,
            )


def _check_target(out: Path, force: bool) -> None:
    refuse_inside_a_bundle(out)
    if not (out.exists() or out.is_symlink()):
        return
    if not force:
        raise OutputExistsError(
            f"{str(out)!r} already exists; pass --force (force=True) to replace it", path=out
        )
    if not _is_bundle(out):
        raise OutputExistsError(
            f"{str(out)!r} exists and is not a bundle; --force only replaces bundles (a "
            "directory whose manifest.json parses as one)",
            path=out,
        )


def _is_bundle(path: Path) -> bool:
    """A real directory whose manifest.json parses as a bundle manifest: what --force may replace."""
    from .._format._errors import HloBundleError
    from .._format._manifest_json import parse_manifest, read_manifest_bytes

    manifest = path / MANIFEST_NAME
    if path.is_symlink() or not path.is_dir() or manifest.is_symlink() or not manifest.is_file():
        return False
    try:
        parse_manifest(read_manifest_bytes(manifest))
    except (HloBundleError, OSError):
        return False
    return True


def _move_into_place(tmp: Path, out: Path, force: bool) -> None:
    """Rename `tmp` to `out`, never over anything but the bundle `--force` was given for.

    The rename itself refuses an existing target (renameat2 RENAME_NOREPLACE), so of several
    writers racing for one path exactly one wins; the others get OUTPUT_EXISTS. With `force`, the
    old bundle is first renamed aside and checked again there: what is not a bundle goes back.
    """
    aside = _set_aside(out) if force else None
    try:
        _rename_no_replace(tmp, out)
    except FileExistsError:
        if aside is not None:
            _restore(aside, out)
        raise OutputExistsError(
            f"{str(out)!r} was created by someone else while this pack ran; it is left as it is",
            path=out,
        ) from None
    if aside is not None:
        shutil.rmtree(aside.parent, ignore_errors=True)


def _set_aside(out: Path) -> Path | None:
    old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-{os.getpid()}-", dir=out.parent))
    try:
        os.rename(out, old / "bundle")
    except FileNotFoundError:  # gone meanwhile: nothing to replace
        old.rmdir()
        return None
    if not _is_bundle(old / "bundle"):  # replaced by something else since it was checked
        _restore(old / "bundle", out)
        raise OutputExistsError(
            f"{str(out)!r} is no longer a bundle; --force only replaces bundles", path=out
        )
    return old / "bundle"


def _restore(aside: Path, out: Path) -> None:
    try:
        _rename_no_replace(aside, out)
        aside.parent.rmdir()
    except OSError:  # the path is taken again: leave ours beside it, under its .old- name
        pass


def _rename_no_replace(src: Path, dst: Path) -> None:
    """rename(2) that fails with FileExistsError when `dst` exists (Linux renameat2)."""
    c = ctypes
    renameat2 = _libc.function("renameat2", c.c_int, c.c_char_p, c.c_int, c.c_char_p, c.c_uint)
    if renameat2 is not None:
        at_fdcwd, rename_noreplace = -100, 1
        if renameat2(at_fdcwd, os.fsencode(src), at_fdcwd, os.fsencode(dst), rename_noreplace) == 0:
            return
        err = ctypes.get_errno()
        if err not in (errno.ENOSYS, errno.EINVAL):  # EINVAL: a file system without the flag
            raise OSError(err, os.strerror(err), str(dst))
    if dst.exists() or dst.is_symlink():
        raise FileExistsError(errno.EEXIST, "exists", str(dst))
    os.rename(src, dst)  # a non-empty directory at dst still makes this fail


def _remove_stale_partials(out: Path) -> None:
    """Clear what killed packs of the same target left (their process is gone): half-written
    bundles are deleted; a bundle that a `--force` pack had set aside is put back when nothing
    took its place (the pack that was to replace it never finished), else deleted (it was
    replaced, as asked)."""
    for prefix in (f".{out.name}.partial-", f".{out.name}.old-"):
        for leftover in out.parent.glob(prefix + "*"):
            pid = leftover.name[len(prefix) :].split("-", 1)[0]
            if not pid.isdigit() or _alive(int(pid)):
                continue
            if prefix.endswith(".old-") and (leftover / "bundle").is_dir():
                _restore(leftover / "bundle", out)
            shutil.rmtree(leftover, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def set_modes(root: Path) -> None:
    """mkdtemp makes the directory private; give it and its files the usual umask modes. A path
    that has its mode already is left alone (a chmod would dirty an inode fsynced already)."""
    umask = os.umask(0)
    os.umask(umask)
    for path in [root, *root.rglob("*")]:
        st = path.lstat()
        mode = (0o777 if stat.S_ISDIR(st.st_mode) else 0o666) & ~umask
        if stat.S_IMODE(st.st_mode) != mode:
            os.chmod(path, mode)


def _fsync_tree(root: Path, *, synced: Collection[Path] = ()) -> None:
    """fsync every file and directory under `root`, then `root`, but the files in `synced`."""
    for path in [*sorted(root.rglob("*"), key=lambda p: -len(p.parts)), root]:
        if path in synced:
            continue
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

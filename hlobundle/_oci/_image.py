"""A bundle as an OCI image (docs/deploy.md, "KServe"): what KServe's `oci+native://` mounts
(an image volume, whose `/models` it shows at `/mnt/models`) and what a modelcar copies from.

One uncompressed tar layer holds the bundle's files under `models/`: its listed files, its
`manifest.json` and `model.sig` when it is signed. The tar is the same for the same bundle, so
the image's digest is too: entries sorted by name (a directory before what it holds), owner
0:0 without names, time 0, mode 0644 for a file and 0755 for a directory, no link, no absolute
name. The config is an image config (`linux`/`amd64`, no command: nothing in it runs) whose
`rootfs.diff_ids` is the layer's digest, an uncompressed layer's being its DiffID.

A listed file's bytes are hashed as they go into the tar and checked against the manifest,
and `manifest.json`'s against the bytes the bundle was loaded from: the registry checks a
blob's digest only against what it was sent, and here that is the tar.

The layer format gives meaning to names a bundle treats as ordinary: a path component that
begins `.wh.` is a whiteout (`.wh.X` deletes X; `.wh..wh..opq` empties its directory), which an
unpacker (a container runtime, umoci) never extracts. A bundle listing one is refused before
the tar is written (`check_names`): its image would lack the file, and fail to verify.
"""

from __future__ import annotations

import hashlib
import os
import tarfile
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

from .._format._errors import HashMismatchError, UnsafePathError
from .._format._manifest import MANIFEST_NAME
from .._format._signature import SIGNATURE_NAME
from .._read._files import check_digest, open_listed
from .._read._reader import Bundle
from ._artifact import FORMAT_VERSION, IMAGE_CONFIG_TYPE, canonical
from ._client import MANIFEST

CONFIG_TYPE = IMAGE_CONFIG_TYPE
LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar"
ROOT = "models"  # KServe's modelcar convention: the model's files under /models
PLATFORM = {"architecture": "amd64", "os": "linux"}
FILE_MODE, DIRECTORY_MODE = 0o644, 0o755
WHITEOUT_PREFIX = ".wh."  # the OCI image spec's layer format, "Whiteouts"


def write_layer(opened: Bundle, signature: bytes | None, target: Path) -> str:
    """Write the tar of the bundle's files under `models/` to the new file `target`; its
    digest (`sha256:...`). A listed file, or `manifest.json`, whose bytes are not what was
    loaded raises (SizeMismatchError, HashMismatchError) and leaves `target` for the caller
    to remove."""
    small = {MANIFEST_NAME: _loaded_manifest(opened)}
    if signature is not None:
        small[SIGNATURE_NAME] = signature
    listed = opened.bundle_manifest.files
    names = sorted([*listed, *small])
    check_names(names)
    with open(target, "xb") as f:
        hashed = _Hashed(f)
        with tarfile.open(fileobj=hashed, mode="w|", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
            for directory in _directories(names):
                tar.addfile(_entry(directory, tarfile.DIRTYPE, 0))
            for name in names:
                if name in small:
                    _add_bytes(tar, name, small[name])
                else:
                    _add_listed(tar, opened.path, name, listed[name])
    return "sha256:" + hashed.h.hexdigest()


def check_names(names: list[str]) -> None:
    """An UnsafePathError for the first name with a component the layer format reads as a
    whiteout (`.wh.`): an unpacker would delete, not extract, what it names."""
    for name in names:
        if any(part.startswith(WHITEOUT_PREFIX) for part in name.split("/")):
            raise UnsafePathError(
                f"{name!r} cannot go into an image: in an OCI layer a name beginning "
                f"{WHITEOUT_PREFIX!r} is a whiteout, which an unpacker deletes rather than "
                "extracts (the image would lack the file); rename it, or push the ModelPack "
                "artifact (push without --image) (SPEC.md section 8, 'The network')",
                path=name,
            )


def _loaded_manifest(opened: Bundle) -> bytes:
    """`manifest.json`'s bytes, read again: they must be the ones the bundle was loaded from."""
    from .._file_io._bounded import read_at_most
    from .._format._fields import MAX_MANIFEST_BYTES

    raw = read_at_most(opened.path / MANIFEST_NAME, MAX_MANIFEST_BYTES)
    digest = hashlib.sha256(raw).hexdigest()
    if digest != opened.manifest_sha256:
        raise HashMismatchError(
            f"{MANIFEST_NAME}: sha256 is {digest}; it was {opened.manifest_sha256} when the "
            "bundle was loaded (it changed since)",
            path=MANIFEST_NAME,
        )
    return raw


def _directories(names: list[str]) -> list[str]:
    """`models` and every directory above a file, each before what it holds."""
    found = {ROOT}
    for name in names:
        found.update(f"{ROOT}/{parent}" for parent in map(str, PurePosixPath(name).parents))
    found.discard(f"{ROOT}/.")
    return sorted(found)


def _entry(name: str, kind: bytes, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.size, info.mtime = kind, size, 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mode = DIRECTORY_MODE if kind == tarfile.DIRTYPE else FILE_MODE
    return info


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    import io

    tar.addfile(_entry(f"{ROOT}/{name}", tarfile.REGTYPE, len(data)), io.BytesIO(data))


def _add_listed(tar: tarfile.TarFile, root: Path, name: str, listed: Any) -> None:
    """A listed file, opened as a reader opens it (no symlink, one link), hashed as it is
    copied into the tar: its size and sha256 must be the manifest's."""
    with os.fdopen(open_listed(root, name), "rb") as f:
        checked = _Checked(f, name, listed)
        tar.addfile(_entry(f"{ROOT}/{name}", tarfile.REGTYPE, listed.size), checked)
        checked.finish()


class _Checked:
    """A listed file's bytes as tarfile reads them, hashed; a short file raises before tarfile
    sees it short, and `finish` checks that nothing follows and that the sha256 is listed."""

    def __init__(self, f: BinaryIO, name: str, listed: Any) -> None:
        self.f, self.name, self.listed = f, name, listed
        self.h, self.read_so_far = hashlib.sha256(), 0

    def read(self, n: int = -1, /) -> bytes:
        chunk = self.f.read(n)
        self.h.update(chunk)
        self.read_so_far += len(chunk)
        if len(chunk) < n:
            check_digest(self.name, self.read_so_far, self.h.hexdigest(), self.listed)
        return chunk

    def finish(self) -> None:
        beyond = len(self.f.read(1))
        check_digest(self.name, self.read_so_far + beyond, self.h.hexdigest(), self.listed)


class _Hashed:
    """A file that hashes what is written to it (the tar, as tarfile writes it)."""

    def __init__(self, f: BinaryIO) -> None:
        self.f, self.h = f, hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.h.update(data)
        return self.f.write(data)


def config(layer_digest: str, format_version: str) -> bytes:
    """The image config: the platform, a label with the bundle's format version, the layer's
    DiffID. No time stamp and no command."""
    document = {
        **PLATFORM,
        "config": {"Labels": {FORMAT_VERSION: format_version}},
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        "history": [{"created_by": "hlobundle push --image", "comment": "the bundle in /models"}],
    }
    return canonical(document)


def manifest(config_blob: bytes, layer_digest: str, layer_size: int, format_version: str) -> bytes:
    document = {
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": {
            "mediaType": CONFIG_TYPE,
            "digest": "sha256:" + hashlib.sha256(config_blob).hexdigest(),
            "size": len(config_blob),
        },
        "layers": [{"mediaType": LAYER_TYPE, "digest": layer_digest, "size": layer_size}],
        "annotations": {FORMAT_VERSION: format_version},
    }
    return canonical(document)

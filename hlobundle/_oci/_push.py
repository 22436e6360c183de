"""`push`: a bundle into an OCI registry as a ModelPack artifact, its signature as a referrer."""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .._bundle_io import _signature_file
from .._format._errors import RegistryRefError
from .._format._manifest import MANIFEST_NAME
from .._read._reader import Bundle
from . import _artifact, _image, _ref, _referrers
from ._client import MANIFEST, TIMEOUT_S, Client


@dataclass(frozen=True)
class Pushed:
    """What `push` did. `ref`: the artifact pinned by digest (`oci://HOST/REPO@sha256:...`);
    `tag`: the tag it was pushed under, if any; `digest`: its manifest's digest; `signature`:
    the digest of the signature's referrer, when the bundle is signed."""

    ref: str
    tag: str | None
    digest: str
    signature: str | None


def push(
    bundle: str | os.PathLike[str],
    ref: str,
    *,
    image: bool = False,
    insecure: bool = False,
    timeout: float = TIMEOUT_S,
) -> Pushed:
    """Push the bundle at `bundle` to `ref` (`oci://HOST[:PORT]/REPO[:TAG|@sha256:DIGEST]`).

    The bundle is loaded first (structure, sizes, module checksums); each listed file and
    `manifest.json` becomes a layer whose digest is the file's sha256 as the manifest lists it
    (the registry checks it on upload), then the config, then the manifest, under the tag (or
    only by its digest, which must then be the reference's). A signed bundle's `model.sig` is
    pushed last, as a referrer (docs/distribution.md).

    With `image`, an OCI image is pushed instead: one tar layer holding the bundle's files
    (and `model.sig`) under `/models`, for KServe's `oci+native://` and modelcars
    (docs/deploy.md); each file's sha256 is checked as it goes into the tar.

    **Arguments:**

    - `image`: push the image (`/models`), not the ModelPack artifact.
    - `insecure`: talk plain HTTP (loopback hosts always may).
    - `timeout`: seconds to wait for a connection, and between two reads of an answer.

    **Returns:** a `Pushed` (its `ref` is the digest-pinned reference to pull).
    """
    target = _ref.parse(ref)
    opened = Bundle(Path(bundle))
    client = Client(target, insecure=insecure, timeout=timeout)
    try:
        with tempfile.TemporaryDirectory(prefix="hlobundle-push-") as scratch:
            send = _push_image if image else _push_artifact
            digest, referrer = send(client, opened, target, Path(scratch))
        return Pushed(
            str(target.at(digest)), None if target.digest else target.tag, digest, referrer
        )
    finally:
        client.close()  # its connections, now, not when collected


def _push_artifact(
    client: Client, opened: Bundle, target: _ref.Reference, scratch: Path
) -> tuple[str, str | None]:
    """The ModelPack artifact, then the signature's referrer: the digests of both."""
    layers, config, manifest = _artifact_of(opened)
    digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
    _check_pin(target, digest, "artifact")  # known before anything is uploaded
    for entry in layers:
        title = entry["annotations"][_artifact.TITLE]
        client.upload(str(opened.path.joinpath(*title.split("/"))), entry, title)
    _upload_config(client, config, _artifact.CONFIG_TYPE, scratch)
    client.put_manifest(manifest, MANIFEST, target.digest or target.reference)
    signature = _signature_file.read(opened.path)
    if signature is None:
        return digest, None
    subject = _artifact.subject(digest, manifest)
    return digest, _referrers.push_signature(client, subject, signature, scratch)


def _push_image(
    client: Client, opened: Bundle, target: _ref.Reference, scratch: Path
) -> tuple[str, None]:
    """The image: its layer written (and every file checked) before anything is uploaded."""
    layer = scratch / "layer.tar"
    layer_digest = _image.write_layer(opened, _signature_file.read(opened.path), layer)
    version = opened.bundle_manifest.format_version
    config = _image.config(layer_digest, version)
    manifest = _image.manifest(config, layer_digest, layer.stat().st_size, version)
    digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
    _check_pin(target, digest, "image")
    descriptor = {
        "mediaType": _image.LAYER_TYPE,
        "digest": layer_digest,
        "size": layer.stat().st_size,
    }
    client.upload(str(layer), descriptor, "the image's layer")
    _upload_config(client, config, _image.CONFIG_TYPE, scratch)
    client.put_manifest(manifest, MANIFEST, target.digest or target.reference)
    return digest, None


def _check_pin(target: _ref.Reference, digest: str, what: str) -> None:
    if target.digest and target.digest != digest:
        raise RegistryRefError(
            f"the bundle's {what} has the digest {digest}, not the "
            f"{target.digest} the reference names; push to a tag, or to its own digest",
            ref=str(target),
            digest=digest,
        )


def _upload_config(client: Client, config: bytes, media_type: str, scratch: Path) -> None:
    (scratch / "config.json").write_bytes(config)
    descriptor = {
        "mediaType": media_type,
        "digest": "sha256:" + hashlib.sha256(config).hexdigest(),
        "size": len(config),
    }
    client.upload(str(scratch / "config.json"), descriptor, "the config")


def _artifact_of(opened: Bundle) -> tuple[list[dict], bytes, bytes]:
    """The bundle's layers (its listed files, then `manifest.json`), config and manifest."""
    from .._file_io._bounded import read_at_most
    from .._format._fields import MAX_MANIFEST_BYTES

    listed = opened.bundle_manifest.files
    layers = [
        _artifact.layer(name, entry.size, entry.sha256) for name, entry in sorted(listed.items())
    ]
    raw_manifest = read_at_most(opened.path / MANIFEST_NAME, MAX_MANIFEST_BYTES)
    layers.append(_artifact.layer(MANIFEST_NAME, len(raw_manifest), opened.manifest_sha256))
    version = opened.bundle_manifest.format_version
    config = _artifact.config(
        opened.path.name.removesuffix(".hlobundle"),
        version,
        layers,
        opened.bundle_manifest.metadata,
    )
    config_digest = "sha256:" + hashlib.sha256(config).hexdigest()
    return layers, config, _artifact.manifest(config, config_digest, layers, version)

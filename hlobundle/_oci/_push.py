"""`push`: a bundle into an OCI registry as a ModelPack artifact, its signature as a referrer."""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .._format import _signature
from .._format._errors import RegistryRefError
from .._format._manifest import MANIFEST_NAME
from .._read._reader import Bundle
from . import _artifact, _ref, _referrers
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
    insecure: bool = False,
    timeout: float = TIMEOUT_S,
) -> Pushed:
    """Push the bundle at `bundle` to `ref` (`oci://HOST[:PORT]/REPO[:TAG|@sha256:DIGEST]`).

    The bundle is loaded first (structure, sizes, module checksums); each listed file and
    `manifest.json` becomes a layer whose digest is the file's sha256 as the manifest lists it
    (the registry checks it on upload), then the config, then the manifest, under the tag (or
    only by its digest, which must then be the reference's). A signed bundle's `model.sig` is
    pushed last, as a referrer (docs/distribution.md).

    **Arguments:**

    - `insecure`: talk plain HTTP (loopback hosts always may).
    - `timeout`: seconds to wait for a connection, and between two reads of an answer.

    **Returns:** a `Pushed` (its `ref` is the digest-pinned reference to pull).
    """
    target = _ref.parse(ref)
    opened = Bundle(Path(bundle))
    client = Client(target, insecure=insecure, timeout=timeout)
    try:
        layers, config, manifest = _artifact_of(opened)
        config_digest = "sha256:" + hashlib.sha256(config).hexdigest()
        digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
        if target.digest and target.digest != digest:  # known before anything is uploaded
            raise RegistryRefError(
                f"the bundle's artifact has the digest {digest}, not the {target.digest} the "
                "reference names; push to a tag, or to its own digest",
                ref=ref,
                digest=digest,
            )
        for entry in layers:
            title = entry["annotations"][_artifact.TITLE]
            client.upload(str(opened.path.joinpath(*title.split("/"))), entry, title)
        with tempfile.TemporaryDirectory(prefix="hlobundle-push-") as scratch:
            (Path(scratch) / "config.json").write_bytes(config)
            config_descriptor = {
                "mediaType": _artifact.CONFIG_TYPE,
                "digest": config_digest,
                "size": len(config),
            }
            client.upload(str(Path(scratch) / "config.json"), config_descriptor, "the config")
            client.put_manifest(manifest, MANIFEST, target.digest or target.reference)
            signature = _signature.read(opened.path)
            referrer = None
            if signature is not None:
                subject = _artifact.subject(digest, manifest)
                referrer = _referrers.push_signature(client, subject, signature, Path(scratch))
        return Pushed(
            str(target.at(digest)), None if target.digest else target.tag, digest, referrer
        )
    finally:
        client.close()  # its connections, now, not when collected


def _artifact_of(opened: Bundle) -> tuple[list[dict], bytes, bytes]:
    """The bundle's layers (its listed files, then `manifest.json`), config and manifest."""
    from .._read._manifest_records import read_manifest_bytes

    listed = opened.bundle_manifest.files
    layers = [
        _artifact.layer(name, entry.size, entry.sha256) for name, entry in sorted(listed.items())
    ]
    raw_manifest = read_manifest_bytes(opened.path / MANIFEST_NAME)
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

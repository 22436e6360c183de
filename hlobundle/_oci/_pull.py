"""`pull`: a bundle's artifact from an OCI registry into a directory, every byte checked before
the directory appears (docs/distribution.md, "Pulling")."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .._bundle_io import _signing
from .._file_io._durable import set_modes
from .._format import _paths, _signature
from .._format._errors import (
    FileMissingError,
    FileUnlistedError,
    HashMismatchError,
    SignatureInvalidError,
    SizeMismatchError,
    UnsignedError,
)
from .._format._manifest import MANIFEST_NAME
from .._format._manifest_json import parse_manifest
from .._output._target import built_beside
from .._read._reader import Bundle
from .._read._store import Store
from . import _artifact, _blobs, _ref, _referrers
from ._artifact import Artifact, Layer
from ._client import INDEX, MANIFEST, TIMEOUT_S, Client


@dataclass(frozen=True)
class Pulled:
    """What `pull` did. `path`: the bundle written; `ref`: the artifact pinned by digest (pull
    that to get these bytes again); `digest`: its manifest's digest; `signer`: who signed it,
    when a public key or certificate chain verified its signature (else None)."""

    path: Path
    ref: str
    digest: str
    signer: str | None
    reused: int = 0  # bytes copied from the store (a version pulled before), not fetched


def pull(
    ref: str,
    out: str | os.PathLike[str],
    *,
    force: bool = False,
    insecure: bool = False,
    public_key: str | os.PathLike[str] | None = None,
    certificate_chain: Sequence[str | os.PathLike[str]] | None = None,
    timeout: float = TIMEOUT_S,
) -> Pulled:
    """Pull the bundle `ref` names into the directory `out`.

    A tag is resolved once, to the manifest's digest; everything after is fetched by digest.
    Each blob is hashed as it streams (and resumed by a Range request where an answer breaks
    off); each file must be the bundle manifest's, with its size and sha256; the result must
    pass `Bundle.verify()`. A file the store holds, or that a pull before put somewhere that
    still holds it (a version pulled before shares it), is copied from there, hashed again,
    instead of fetched; the store remembers where this pull put its files (docs/distribution.md,
    "The store"). With `public_key` or `certificate_chain`, a signature referrer must verify
    against the pulled files too (it is written as `model.sig`). All of it happens in
    a scratch directory beside `out`, renamed to `out` only when every check passed.

    **Arguments:**

    - `force`: replace `out` if it is a bundle.
    - `insecure`: talk plain HTTP (loopback hosts always may).
    - `timeout`: seconds to wait for a connection, and between two reads of an answer.

    **Returns:** a `Pulled`; its `ref` pins the digest (`oci://HOST/REPO@sha256:...`).
    """
    target = _ref.parse(ref)
    client = Client(target, insecure=insecure, timeout=timeout)
    try:
        raw, media_type, digest = client.get_manifest(target.reference, [MANIFEST, INDEX])
        pinned = target.at(digest)
        client.ref = pinned  # errors from here on name the digest
        artifact = _artifact.parse(raw, media_type, str(pinned), digest)
        trust = (
            _signature.Verifier(
                Path(public_key) if public_key else None, _signature.paths(certificate_chain)
            )
            if public_key is not None or certificate_chain
            else None
        )
        with built_beside(Path(out), force=force) as built:
            built.mkdir()
            if artifact.config is not None:
                config = _blobs.fetch_small(
                    client,
                    artifact.config["digest"],
                    artifact.config["size"],
                    _artifact.MAX_CONFIG_BYTES,
                    "config",
                )
                _artifact.check_config(config, artifact, str(pinned), digest)
            listed = _manifest_first(client, artifact, built)
            store, reused = Store(), 0
            for name, entry in listed.items():
                file = built.joinpath(*name.split("/"))
                file.parent.mkdir(parents=True, exist_ok=True)
                digest_of = f"sha256:{entry.sha256}"
                if _blobs.from_store(store, digest_of, entry.size, file):
                    reused += entry.size
                else:
                    _blobs.download(client, digest_of, entry.size, file, name)
            bundle = Bundle(built)
            signer = None
            if trust is not None:
                signer = _signed(client, artifact, digest, bundle, trust)
            bundle.verify(in_memory=False)
            set_modes(built)
        for name, entry in listed.items():
            store.remember(entry.sha256, Path(out).joinpath(*name.split("/")))
        return Pulled(Path(out), str(pinned), digest, signer, reused)
    finally:
        client.close()  # its connections, now, not when collected


def _manifest_first(client: Client, artifact: Artifact, built: Path) -> dict:
    """The bundle's manifest, fetched and parsed, and its file list checked against the layers."""
    layer = artifact.manifest_layer
    from .._format._limits import MAX_MANIFEST_BYTES

    if layer.size > MAX_MANIFEST_BYTES:
        from .._format._errors import ManifestTooLargeError

        raise ManifestTooLargeError(
            f"{client.ref}: the layer {MANIFEST_NAME} is {layer.size} bytes; the limit is "
            f"{MAX_MANIFEST_BYTES}",
            path=MANIFEST_NAME,
        )
    _blobs.download(client, layer.digest, layer.size, built / MANIFEST_NAME, MANIFEST_NAME)
    manifest = parse_manifest((built / MANIFEST_NAME).read_bytes())
    files = manifest.files
    _paths.check_tree(files, (MANIFEST_NAME, _signature.SIGNATURE_NAME))  # before one is written
    others = set(artifact.layers) - {MANIFEST_NAME, _signature.SIGNATURE_NAME}
    for name in sorted(others - set(files)):
        raise FileUnlistedError(
            f"{client.ref}: the layer {name!r} is not a file the bundle's manifest lists",
            path=name,
        )
    for name in sorted(set(files) - others):
        raise FileMissingError(
            f"{client.ref}: the bundle's manifest lists {name!r}, and no layer is titled so",
            path=name,
        )
    for name, entry in files.items():
        layer_of = artifact.layers[name]
        if layer_of.size != entry.size:
            raise SizeMismatchError(
                f"{client.ref}: the layer {name!r} is {layer_of.size} bytes, the bundle's "
                f"manifest says {entry.size}",
                path=name,
            )
        if layer_of.digest != f"sha256:{entry.sha256}":
            raise HashMismatchError(
                f"{client.ref}: the layer {name!r} is {layer_of.digest}, the bundle's manifest "
                f"says sha256:{entry.sha256}",
                path=name,
                field=f"files[{name!r}].sha256",
            )
    return dict(sorted(files.items()))


def _signed(
    client: Client, artifact: Artifact, digest: str, bundle: Bundle, trust: _signature.Verifier
) -> str:
    """Who signed: the first signature (a referrer, or a `model.sig` layer) that verifies
    against the pulled files, then written as the bundle's `model.sig`."""
    candidates = _referrers.signatures(client, digest)
    layer: Layer | None = artifact.layers.get(_signature.SIGNATURE_NAME)
    if layer is not None:
        candidates.append(
            _blobs.fetch_small(
                client, layer.digest, layer.size, _signature.MAX_SIGNATURE_BYTES, "model.sig"
            )
        )
    if not candidates:
        raise UnsignedError(
            f"{client.ref} has no signature: no referrer of type {_referrers.SIGSTORE_BUNDLE} "
            f"(nor a {_signature.SIGNATURE_NAME} layer)",
            path=_signature.SIGNATURE_NAME,
        )
    path = bundle.path / _signature.SIGNATURE_NAME
    failed: SignatureInvalidError | None = None
    for candidate in candidates:
        path.write_bytes(candidate)
        try:
            return _signing.verify(bundle.path, bundle.digests(), trust)
        except SignatureInvalidError as e:
            failed = e
            path.unlink()
    assert failed is not None
    raise SignatureInvalidError(
        f"{client.ref}: no signature of the {len(candidates)} found verifies ({failed.message})",
        path=_signature.SIGNATURE_NAME,
    )

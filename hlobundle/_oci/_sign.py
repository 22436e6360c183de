"""`hlobundle sign oci://...`: sign a bundle where a registry holds it, by its digests, without
pulling its layers (docs/distribution.md, "Signatures"). A layer's digest is the sha256 of its
bytes, which the registry checked on upload and every puller checks again; the bundle's manifest
is fetched (bounded, by its digest) and its files checked against the layers' digests and sizes,
so the signature covers exactly the bytes a pull of this digest gets. It is pushed as a referrer
of the bundle's manifest, as `push` pushes a signed bundle's."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .._bundle_io import _signing
from .._format import _signature
from .._format._manifest import MANIFEST_NAME
from .._format._manifest_json import parse_manifest
from .._format._signature import SigningKey
from . import _artifact, _ref, _referrers
from ._client import INDEX, MANIFEST, TIMEOUT_S, Client
from ._pull import _manifest_first


@dataclass(frozen=True)
class SignedInRegistry:
    """`ref`: the bundle's artifact, pinned by digest; `signer`: who signed, as a verifier
    reports it; `referrer`: the digest of the signature's referrer."""

    ref: str
    signer: str
    referrer: str


def sign_in_registry(
    ref: str,
    private_key: str | os.PathLike[str],
    *,
    signing_certificate: str | os.PathLike[str] | None = None,
    certificate_chain: Sequence[str | os.PathLike[str]] = (),
    insecure: bool = False,
    timeout: float = TIMEOUT_S,
) -> SignedInRegistry:
    key = SigningKey(
        _signature.paths([private_key])[0],
        _signature.paths([signing_certificate])[0] if signing_certificate else None,
        _signature.paths(certificate_chain),
    )
    target = _ref.parse(ref)
    client = Client(target, insecure=insecure, timeout=timeout)
    try:
        raw, media_type, digest = client.get_manifest(target.reference, [MANIFEST, INDEX])
        client.ref = target.at(digest)
        artifact = _artifact.parse(raw, media_type, str(client.ref), digest)
        with tempfile.TemporaryDirectory(prefix="hlobundle-sign-") as scratch:
            root = Path(scratch) / (target.repository.rsplit("/", 1)[-1] + ".hlobundle")
            root.mkdir()
            listed = _manifest_first(client, artifact, root)  # files == layers, checked
            manifest_bytes = (root / MANIFEST_NAME).read_bytes()
            parse_manifest(manifest_bytes)  # a bundle's manifest, or a coded error
            digests = {name: entry.sha256 for name, entry in listed.items()}
            digests[MANIFEST_NAME] = hashlib.sha256(manifest_bytes).hexdigest()
            signature = _signing.sign(root, digests, key)
            (root / _signature.SIGNATURE_NAME).write_bytes(signature)
            with _signing.own_trust(key) as trust:  # what a puller with the key checks
                signer = _signing.verify(root, digests, trust)
            subject = _artifact.subject(digest, raw)
            referrer = _referrers.push_signature(client, subject, signature, Path(scratch))
        return SignedInRegistry(str(client.ref), signer, referrer)
    finally:
        client.close()

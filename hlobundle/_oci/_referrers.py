"""A bundle's signature as an OCI referrer of its artifact (docs/distribution.md, "Signatures"):
an artifact manifest of the sigstore bundle type whose `subject` is the bundle's manifest.

A registry with the referrers API lists them itself (it answers a push with `OCI-Subject`);
for one without (CNCF distribution 2.8), the distribution spec's fallback is kept: the tag
`sha256-<hex of the subject's digest>` names an image index of the referrers, read, added to
and written back at each push. Reading them back is bounded: MAX_REFERRERS in an index, the
first MAX_SIGNATURES signatures tried, each at most MAX_SIGNATURE_BYTES.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from .._format._errors import ArtifactInvalidError, RegistryLimitError, RegistryNotFoundError
from .._format._signature import MAX_SIGNATURE_BYTES
from . import _blobs
from ._artifact import canonical
from ._client import INDEX, MANIFEST, Client

SIGSTORE_BUNDLE = "application/vnd.dev.sigstore.bundle.v0.3+json"
EMPTY = "application/vnd.oci.empty.v1+json"
EMPTY_BLOB = b"{}"
MAX_REFERRERS = 256
MAX_SIGNATURES = 16


def fallback_tag(subject_digest: str) -> str:
    return subject_digest.replace(":", "-", 1)


def push_signature(client: Client, subject: dict[str, Any], signature: bytes, scratch: Any) -> str:
    """Push `signature` (a model.sig) as a referrer of `subject` (the bundle manifest's
    descriptor); keep the fallback index when the registry has no referrers API. Its digest."""
    sig_path, empty_path = scratch / "model.sig", scratch / "empty.json"
    sig_path.write_bytes(signature)
    empty_path.write_bytes(EMPTY_BLOB)
    empty = _descriptor(EMPTY, EMPTY_BLOB)
    layer = _descriptor(SIGSTORE_BUNDLE, signature)
    client.upload(str(empty_path), empty, "the empty config")
    client.upload(str(sig_path), layer, "model.sig")
    raw = canonical(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST,
            "artifactType": SIGSTORE_BUNDLE,
            "config": empty,
            "layers": [layer],
            "subject": subject,
        }
    )
    digest = "sha256:" + hashlib.sha256(raw).hexdigest()
    answer = client.put_manifest(raw, MANIFEST, digest)
    if answer.headers.get("OCI-Subject") != subject["digest"]:
        _add_to_fallback(
            client,
            subject["digest"],
            {
                "mediaType": MANIFEST,
                "digest": digest,
                "size": len(raw),
                "artifactType": SIGSTORE_BUNDLE,
            },
        )
    return digest


def _descriptor(media_type: str, data: bytes) -> dict[str, Any]:
    return {
        "mediaType": media_type,
        "digest": "sha256:" + hashlib.sha256(data).hexdigest(),
        "size": len(data),
    }


def _add_to_fallback(client: Client, subject_digest: str, entry: dict[str, Any]) -> None:
    tag = fallback_tag(subject_digest)
    listed = _fallback(client, subject_digest)
    if any(m.get("digest") == entry["digest"] for m in listed):
        return
    index = {"schemaVersion": 2, "mediaType": INDEX, "manifests": [*listed, entry]}
    client.put_manifest(canonical(index), INDEX, tag)


def _fallback(client: Client, subject_digest: str) -> list[dict[str, Any]]:
    try:
        raw, _, digest = client.get_manifest(fallback_tag(subject_digest), [INDEX])
    except RegistryNotFoundError:
        return []
    return _manifests(raw, client, digest)


def referrers(client: Client, subject_digest: str) -> list[dict[str, Any]]:
    """The referrers of `subject_digest`: the referrers API's answer, else the fallback tag's."""
    response = client.request(
        "GET", client.url("referrers", subject_digest), headers={"Accept": INDEX}, stream=True
    )
    with response:
        if response.status_code == 404:
            return _fallback(client, subject_digest)
        client.check(response, f"referrers of {subject_digest}", ok=(200,))
        from ._client import MAX_MANIFEST_BYTES
        from ._network import read_bounded

        raw = read_bounded(response, MAX_MANIFEST_BYTES, "referrers index", str(client.ref))
    return _manifests(raw, client, subject_digest)


def _manifests(raw: bytes, client: Client, digest: str) -> list[dict[str, Any]]:
    ref = str(client.ref)
    try:
        document = json.loads(raw)
        listed = document["manifests"]
        if not isinstance(listed, list) or not all(isinstance(m, dict) for m in listed):
            raise TypeError
    except (ValueError, RecursionError, KeyError, TypeError):
        raise ArtifactInvalidError(
            f"the referrers of {digest} are not an image index", ref=ref, digest=digest
        ) from None
    if len(listed) > MAX_REFERRERS:
        raise RegistryLimitError(
            f"{digest} has {len(listed)} referrers; the limit is {MAX_REFERRERS}",
            ref=ref,
            digest=digest,
        )
    return listed


def signatures(client: Client, subject_digest: str) -> list[bytes]:
    """The signatures (model.sig's bytes) among the referrers of `subject_digest`, each
    fetched by digest and checked to be a sigstore bundle referring to it; others are skipped."""
    ref = str(client.ref)
    found = []
    listed = [
        m for m in referrers(client, subject_digest) if m.get("artifactType") == SIGSTORE_BUNDLE
    ]
    for entry in listed[:MAX_SIGNATURES]:
        digest = entry.get("digest")
        if not isinstance(digest, str) or not digest.startswith("sha256:"):
            raise ArtifactInvalidError(
                f"a referrer of {subject_digest} has the digest {str(digest)[:80]!r}",
                ref=ref,
                digest=subject_digest,
            )
        raw, _, _ = client.get_manifest(digest, [MANIFEST])
        found.append(_signature_of(client, raw, digest, subject_digest))
    return found


def _signature_of(client: Client, raw: bytes, digest: str, subject_digest: str) -> bytes:
    ref = str(client.ref)

    def invalid(why: str) -> ArtifactInvalidError:
        return ArtifactInvalidError(
            f"the referrer {digest} of {subject_digest} is listed as a signature but {why}",
            ref=ref,
            digest=digest,
        )

    try:
        document = json.loads(raw)
        subject, layers = document.get("subject") or {}, document.get("layers")
        kind = document.get("artifactType")
    except (ValueError, RecursionError, AttributeError):
        raise invalid("is not a JSON manifest") from None
    if kind != SIGSTORE_BUNDLE:
        raise invalid(f"its artifactType is {str(kind)[:100]!r}")
    if not isinstance(subject, dict) or subject.get("digest") != subject_digest:
        raise invalid("its subject is another manifest")
    if not (
        isinstance(layers, list)
        and len(layers) == 1
        and isinstance(layers[0], dict)
        and layers[0].get("mediaType") == SIGSTORE_BUNDLE
    ):
        raise invalid(f"it does not hold one layer of type {SIGSTORE_BUNDLE}")
    blob, size = layers[0].get("digest"), layers[0].get("size")
    if not isinstance(blob, str) or not isinstance(size, int):
        raise invalid("its layer has no digest or size")
    return _blobs.fetch_small(client, blob, size, MAX_SIGNATURE_BYTES, "signature")

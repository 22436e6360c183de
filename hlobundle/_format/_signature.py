"""Signatures (SPEC.md, "Signature"; format 1.2): what a bundle's signature file is. An OpenSSF
Model Signing signature of every file of a bundle, stored at the reserved name `model.sig`: a
DSSE envelope over an in-toto statement listing each file's sha256. Here: its name and size
limit, who it says signed it, and what signs (`SigningKey`) and what it must verify against
(`Verifier`). Its bytes are read in `_bundle_io/_signature_file.py`; it is made and checked by
the `model-signing` package (`_bundle_io/_signing.py`, the one place that imports it).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from . import _limits

SIGNATURE_NAME = "model.sig"  # reserved: never listed in the manifest, never an unlisted file
MAX_SIGNATURE_BYTES = _limits.MAX_SIGNATURE_BYTES


@dataclass(frozen=True)
class SigningKey:
    """What signs: an elliptic-curve private key (a PEM file), alone or with its certificate
    and the chain that issued it. The writers' `sign_key=` takes one, or a private key's path."""

    private_key: Path
    certificate: Path | None = None
    certificate_chain: tuple[Path, ...] = ()

    def __post_init__(self) -> None:  # paths as str or os.PathLike, kept as Path
        set_field = object.__setattr__
        set_field(self, "private_key", Path(self.private_key))
        set_field(self, "certificate", None if self.certificate is None else Path(self.certificate))
        set_field(self, "certificate_chain", tuple(Path(p) for p in self.certificate_chain))


def signing_key(private_key: str | os.PathLike[str] | SigningKey) -> SigningKey:
    """A key that signs with this private key file (PEM) alone; a `SigningKey` as it is. The
    writers' `sign_key=` takes either, as `sign()` takes `private_key`."""
    return private_key if isinstance(private_key, SigningKey) else SigningKey(Path(private_key))


@dataclass(frozen=True)
class Verifier:
    """What a signature must verify against: a public key, or a certificate chain."""

    public_key: Path | None = None
    certificate_chain: tuple[Path, ...] = ()

    def __post_init__(self) -> None:
        if (self.public_key is None) == (not self.certificate_chain):
            raise ValueError("give a public key or a certificate chain (one of them)")


def signer(data: bytes) -> str:
    """Who a signature says signed it (untrusted until verified): a key's hint or a
    certificate's subject."""
    try:
        material = json.loads(data).get("verificationMaterial", {})
        hint = material.get("publicKey", {}).get("hint")
        if isinstance(hint, str):
            return f"key {hint[:64]}"
        chain = material.get("x509CertificateChain", {}).get("certificates", [])
        if chain:
            return f"certificate {_subject(chain[0].get('rawBytes', ''))}"
    except (ValueError, AttributeError, TypeError, RecursionError):  # not a signature we know
        pass
    return "an unknown signer"


def _subject(raw: str) -> str:
    import base64

    try:
        from cryptography import x509

        return x509.load_der_x509_certificate(base64.b64decode(raw)).subject.rfc4514_string()[:200]
    except Exception:  # an untrusted, unparsable certificate
        return "(unreadable)"


def paths(values: Sequence[str | os.PathLike[str]] | None) -> tuple[Path, ...]:
    return tuple(Path(v) for v in values or ())

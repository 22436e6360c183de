"""Signatures made and checked through the `model-signing` package (the `sign` extra), so that
its own CLI verifies what hlobundle signs, and the reverse: the one place that imports it. What
a signature file is (its name, who it says signed) is `_format/_signature.py`'s; its bytes are
read in `_signature_file.py`.

hlobundle never hashes a file twice for a signature: the digests it signs or checks are the
ones the reader has just verified (the manifest's, for the listed files) and the sha256 of the
manifest's bytes as read.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .._extras import pip_line
from .._format._errors import (
    BackendUnavailableError,
    InputError,
    SignatureInvalidError,
    UnsignedError,
)
from .._format._signature import SIGNATURE_NAME, SigningKey, Verifier, signer
from ._signature_file import read


def _model_signing() -> Any:
    try:
        import model_signing.hashing
        import model_signing.manifest
        import model_signing.signing
        import model_signing.verifying
    except ImportError as e:
        raise BackendUnavailableError(
            f"signatures need the sign extra (model-signing): {pip_line('sign')} ({e})"
        ) from None
    return model_signing


def _statement(digests: dict[str, str], name: str) -> Any:
    """model-signing's manifest of the files with these sha256 digests (hex), by file name."""
    ms = _model_signing()
    from model_signing._hashing.hashing import Digest  # not re-exported by model-signing 1.1

    serialization = ms.manifest.SerializationType.from_args(
        {
            "method": "files",
            "hash_type": "sha256",
            "allow_symlinks": False,
            "ignore_paths": [SIGNATURE_NAME],
        }
    )
    items = [
        ms.manifest.FileManifestItem(path=Path(file), digest=Digest("sha256", bytes.fromhex(hex_)))
        for file, hex_ in sorted(digests.items())
    ]
    return ms.manifest.Manifest(name, items, serialization)


def _hashing_from(digests: dict[str, str], name: str, asked: list[bool] | None = None) -> Any:
    """A hashing configuration that returns the already-verified digests instead of hashing.
    model-signing asks it for them only once the envelope's signature has verified: that is
    recorded in `asked`."""
    ms = _model_signing()

    class Verified(ms.hashing.Config):  # type: ignore[name-defined]
        def hash(self, model_path: Any, *, files_to_hash: Any = None) -> Any:
            if asked is not None:
                asked.append(True)
            return _statement(digests, name)

        def add_ignored_paths(self, *, model_path: Any, paths: Any) -> None:
            pass  # the reserved name is the only file not signed, and is not in `digests`

    return Verified()


@contextlib.contextmanager
def _scratch() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="hlobundle-signature-") as d:
        yield Path(d)


# The names model-signing's verify never hashes (its hashing.Config ignores git files by default).
STANDARD_TOOL_SKIPS = (".git", ".gitattributes", ".github", ".gitignore")


def sign(root: Path, digests: dict[str, str], key: SigningKey, *, name: str | None = None) -> bytes:
    """The signature of the bundle at `root` (named `name`, default its directory's name), whose
    files have these (verified) sha256 digests."""
    for file in sorted(digests):
        if file.split("/")[0] in STANDARD_TOOL_SKIPS:
            raise InputError(
                f"{file} cannot be signed: the standard model_signing tool skips git files "
                f"({', '.join(STANDARD_TOOL_SKIPS)}), so its verify would reject the signature; "
                "rename it or leave it out of the bundle",
                path=file,
            )
    ms = _model_signing()
    config = ms.signing.Config().set_hashing_config(_hashing_from(digests, name or root.name))
    try:
        if key.certificate is not None:
            config.use_certificate_signer(
                private_key=key.private_key,
                signing_certificate=key.certificate,
                certificate_chain=list(key.certificate_chain),
            )
        else:
            config.use_elliptic_key_signer(private_key=key.private_key)
        with _scratch() as d:
            config.sign(root, d / SIGNATURE_NAME)
            return (d / SIGNATURE_NAME).read_bytes()
    except (ValueError, TypeError, OSError) as e:  # unreadable or unsupported key or certificate
        raise InputError(
            f"cannot sign with {key.private_key}: {_reason(e)}", argument="private_key"
        ) from None


@contextlib.contextmanager
def own_trust(key: SigningKey) -> Iterator[Verifier]:
    """What a signature made with `key` verifies against: its certificate chain when it has
    one, else the public key derived from the private key (in a scratch file while open)."""
    if key.certificate is not None and key.certificate_chain:
        yield Verifier(certificate_chain=key.certificate_chain)
        return
    from cryptography.hazmat.primitives import serialization

    try:
        private = serialization.load_pem_private_key(key.private_key.read_bytes(), password=None)
        public = private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    except (ValueError, TypeError, OSError) as e:
        raise InputError(
            f"cannot sign with {key.private_key}: {_reason(e)}", argument="private_key"
        ) from None
    with _scratch() as d:
        (d / "public.pem").write_bytes(public)
        yield Verifier(public_key=d / "public.pem")


def verify(root: Path, digests: dict[str, str], trust: Verifier) -> str:
    """Check the bundle's signature against `trust` and the (verified) digests of its files.

    **Returns:** who signed, as `signer()` says.
    """
    data = read(root)
    if data is None:
        raise UnsignedError(
            f"the bundle is not signed: it has no {SIGNATURE_NAME}", path=SIGNATURE_NAME
        )
    ms = _model_signing()
    envelope_verified: list[bool] = []
    config = ms.verifying.Config().set_hashing_config(
        _hashing_from(digests, root.name, envelope_verified)
    )
    try:
        if trust.public_key is not None:
            config.use_elliptic_key_verifier(public_key=trust.public_key)
        else:
            config.use_certificate_verifier(certificate_chain=list(trust.certificate_chain))
    except (ValueError, TypeError, OSError) as e:  # the user's key or certificates
        which = "public_key" if trust.public_key is not None else "certificate_chain"
        raise InputError(
            f"cannot verify with the given {which}: {_reason(e)}", argument=which
        ) from None
    with _scratch() as d:
        (d / SIGNATURE_NAME).write_bytes(data)  # the bytes read once, checked where they are
        try:
            config.verify(root, d / SIGNATURE_NAME)
        except Exception as e:  # model-signing and its crypto raise many kinds
            changes = _changes(data, digests) if envelope_verified else None
            if changes:
                raise SignatureInvalidError(
                    f"{SIGNATURE_NAME} verifies, but files changed since signing: {changes}",
                    path=SIGNATURE_NAME,
                ) from None
            raise SignatureInvalidError(
                f"{SIGNATURE_NAME} does not verify: {_reason(e)}", path=SIGNATURE_NAME
            ) from None
    return signer(data)


def _changes(data: bytes, digests: dict[str, str]) -> str | None:
    """What differs between the files a signature lists and `digests`, as "changed: a, b;
    added: c; removed: d"; None when its statement cannot be read. Call it only once the
    signature's envelope has verified: the statement it reads is then the signer's."""
    import base64

    from model_signing._signing.signing import dsse_payload_to_manifest  # not re-exported

    try:
        payload = json.loads(base64.b64decode(json.loads(data)["dsseEnvelope"]["payload"]))
        signed = {
            str(rd.identifier): rd.digest.digest_hex
            for rd in dsse_payload_to_manifest(payload).resource_descriptors()
        }
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None
    parts = {
        "changed": [f for f in sorted(signed.keys() & digests.keys()) if signed[f] != digests[f]],
        "added": sorted(digests.keys() - signed.keys()),
        "removed": sorted(signed.keys() - digests.keys()),
    }
    return "; ".join(f"{kind}: {_names(files)}" for kind, files in parts.items() if files) or None


def _names(files: list[str], most: int = 20) -> str:
    shown = ", ".join(files[:most])
    return shown if len(files) <= most else f"{shown} and {len(files) - most} more"


def _reason(e: Exception) -> str:
    text = str(e).strip() or type(e).__name__
    return text if len(text) <= 500 else text[:500] + "..."

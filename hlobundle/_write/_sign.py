"""`sign()`: add a signature to a bundle (SPEC.md, "Signature"), made over what `verify` checked."""

from __future__ import annotations

import os
from collections.abc import Sequence

from .._format import _signature
from .._format._errors import InputError, OutputExistsError
from .._format._manifest import Manifest
from .._read._reader import Bundle, load
from ._atomic import rewrite_bundle, write_file_atomically


def sign(
    bundle: Bundle | str | os.PathLike[str],
    private_key: str | os.PathLike[str],
    *,
    signing_certificate: str | os.PathLike[str] | None = None,
    certificate_chain: Sequence[str | os.PathLike[str]] = (),
    force: bool = False,
) -> str:
    """Sign a bundle with an elliptic-curve private key (a PEM file), alone or with its
    certificate and chain, writing `model.sig` into it. The bundle is verified first (every
    file hashed): the signature covers exactly the checked files and manifest.

    **Arguments:**

    - `force`: replace an existing signature (otherwise `OutputExistsError`).

    **Returns:** who signed, as a verifier will report it (`key <hint>` or `certificate <subject>`).
    """
    b = bundle if isinstance(bundle, Bundle) else load(bundle)
    if _signature.present(b.path) and not force:
        raise OutputExistsError(
            f"{b.path} is already signed; pass --force (force=True) to replace its signature",
            path=b.path / _signature.SIGNATURE_NAME,
        )
    b.verify()
    key = _signature.SigningKey(
        _signature.paths([private_key])[0],
        _signature.paths([signing_certificate])[0] if signing_certificate else None,
        _signature.paths(certificate_chain),
    )
    data = _signature.sign(b.path, b.digests(), key)
    # The temporary lives beside the bundle, not in it: a crash leaves no unlisted file inside.
    write_file_atomically(b.path / _signature.SIGNATURE_NAME, data, scratch=b.path.parent)
    return _signature.signer(data)


def check_resignable(b: Bundle, sign_key: _signature.SigningKey | None, *, doing: str) -> None:
    """Refuse, before any work, to change a signed bundle without a key to sign it again."""
    if b.signed and sign_key is None:
        raise InputError(
            f"{b.path} is signed, and {doing} changes files its signature covers: give a key to "
            "sign the new bundle (--sign-key)",
            argument="sign_key",
        )


def rewrite_and_resign(
    b: Bundle,
    manifest: Manifest,
    replaced: dict[str, bytes],
    sign_key: _signature.SigningKey | None,
) -> None:
    """`rewrite_bundle`, then (with `sign_key`) a signature over the new files."""
    rewrite_bundle(b.path, manifest, replaced)
    if sign_key is not None:
        sign(b.path, sign_key.private_key, signing_certificate=sign_key.certificate,
             certificate_chain=sign_key.certificate_chain, force=True)  # fmt: skip

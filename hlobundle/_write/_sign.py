"""`sign()`: add a signature to a bundle (SPEC.md, "Signature"), made over what `verify` checked."""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

from .._bundle_io import _signature_file, _signing
from .._file_io._durable import write_file_atomically
from .._format import _signature
from .._format._bundle_manifest import BundleManifest
from .._format._errors import InputError, OutputExistsError, SignatureInvalidError
from .._format._manifest import MANIFEST_NAME, Manifest
from .._format._signature import SigningKey
from .._read._reader import Bundle, load
from ._atomic import SIGNATURE_VERSION, _version, final_manifest, rewrite_bundle
from ._options import PackOptions, takes


@takes("force")
def sign(
    bundle: Bundle | str | os.PathLike[str],
    private_key: str | os.PathLike[str],
    *,
    signing_certificate: str | os.PathLike[str] | None = None,
    certificate_chain: Sequence[str | os.PathLike[str]] = (),
    opt: PackOptions,
) -> str:
    """Sign a bundle with an elliptic-curve private key (a PEM file), alone or with its
    certificate and chain, writing `model.sig` into it. The bundle is verified first (every
    file hashed): the signature covers exactly the checked files and manifest.

    **Arguments:**

    - `signing_certificate`, `certificate_chain`: the key's certificate, and the certificates
      from it up to a root, to sign with a certificate.

    **Returns:** who signed, as a verifier will report it (`key <hint>` or `certificate <subject>`).
    """
    b = bundle if isinstance(bundle, Bundle) else load(bundle)
    if _signature_file.present(b.path) and not opt.force:
        raise OutputExistsError(
            f"{b.path} is already signed; pass --force (force=True) to replace its signature",
            path=b.path / _signature.SIGNATURE_NAME,
        )
    b.verify(in_memory=False)  # signs the digests it checked; runs nothing
    key = SigningKey(
        _signature.paths([private_key])[0],
        _signature.paths([signing_certificate])[0] if signing_certificate else None,
        _signature.paths(certificate_chain),
    )
    manifest = _manifest_to_sign(b)
    digests = b.digests()
    if manifest is not None:
        digests[MANIFEST_NAME] = hashlib.sha256(manifest).hexdigest()
    data = _signing.sign(b.path, digests, key)
    # The temporaries live beside the bundle, not in it: a crash leaves no unlisted file inside.
    # One that falls between the two writes leaves a valid, unsigned 1.2 bundle.
    if manifest is not None:
        write_file_atomically(b.path / MANIFEST_NAME, manifest, scratch=b.path.parent)
    write_file_atomically(b.path / _signature.SIGNATURE_NAME, data, scratch=b.path.parent)
    return _signature.signer(data)


def _manifest_to_sign(b: Bundle) -> bytes | None:
    """The manifest a signed `b` needs, when its own will not do: `model.sig` is reserved since
    1.2 (SPEC.md 5), and a 1.0 or 1.1 reader refuses it as an unlisted file, so a signed bundle
    is at least 1.2. None when the manifest already says 1.2 or newer."""
    m = b.bundle_manifest
    if not isinstance(m, Manifest) or _version(m.format_version) >= _version(SIGNATURE_VERSION):
        return None
    return final_manifest(m, dict(m.files), signed=True).to_json()


def check_resignable(
    b: Bundle,
    sign_key: SigningKey | None,
    *,
    doing: str,
    public_key: str | os.PathLike[str] | None,
    replace_signature: bool,
    verified: bool = False,
) -> None:
    """Refuse, before any work or write, to change a bundle unless it can be signed again
    without laundering: a signed bundle needs `sign_key`, the key must sign, and the existing
    signature must verify against `public_key` (default: `sign_key`'s own) unless
    `replace_signature` takes the bundle over. `verified`: `b.verify()` has already run."""
    if sign_key is None:
        if b.signed:
            raise InputError(
                f"{b.path} is signed, and {doing} changes files its signature covers: give a "
                "key to sign the new bundle (--sign-key)",
                argument="sign_key",
            )
        if public_key is not None or replace_signature:
            raise InputError(
                "public_key and replace_signature are about signing again: give sign_key",
                argument="public_key" if public_key is not None else "replace_signature",
            )
        return
    _signing.sign(b.path, b.digests(), sign_key)  # the key signs: thrown away, nothing written
    if b.signed and not replace_signature:
        if not verified:
            b.verify(in_memory=False)
        _check_existing_signature(b, sign_key, public_key, doing)


def _check_existing_signature(
    b: Bundle,
    sign_key: SigningKey,
    public_key: str | os.PathLike[str] | None,
    doing: str,
) -> None:
    given = _signature.Verifier(public_key=Path(public_key)) if public_key is not None else None
    with contextlib.ExitStack() as stack:
        trust = given or stack.enter_context(_signing.own_trust(sign_key))
        try:
            _signing.verify(b.path, b.digests(), trust)
        except SignatureInvalidError as e:
            whose = "the given public key" if given else "the signing key's own"
            raise SignatureInvalidError(
                f"{e.message}; checked with {whose}. {doing.capitalize()} signs a bundle again only "
                "when its signature verifies: give the key it was signed with (--public-key "
                "PUB.pem), or take the bundle over (--replace-signature)",
                path=_signature.SIGNATURE_NAME,
            ) from None


def rewrite_and_resign(
    b: Bundle,
    manifest: Manifest | BundleManifest,
    replaced: dict[str, bytes],
    sign_key: SigningKey | None,
) -> None:
    """`rewrite_bundle`, with (given `sign_key`) a signature over the new files made inside the
    same atomic rewrite: the new files and their signature land together, or not at all."""
    rewrite_bundle(b.path, manifest, replaced, sign_key=sign_key)

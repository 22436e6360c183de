"""`refresh()`: rewrite a bundle's portable artifacts from its module texts for another StableHLO
target (SPEC.md, "Versions"), so that a bundle outlives the artifacts' compatibility window."""

from __future__ import annotations

import os
from pathlib import Path

from .._format import _mlir, _portable
from .._format._manifest import PortableArtifact
from .._read._reader import Bundle
from ._options import PackOptions, takes
from ._sign import check_resignable, rewrite_and_resign


@takes("target_version", "sign_key", "public_key", "replace_signature")
def refresh(bundle: Bundle | str | os.PathLike[str], *, opt: PackOptions) -> str:
    """Rewrite every portable artifact (module, backward, batched) of `bundle` from its checked
    text, for `target_version`, atomically. The manifest records each artifact's new target.

    A signed bundle is refused unless `sign_key` is given: the refreshed bundle is then signed
    again (its old signature would no longer verify), in the same atomic rewrite. Before any
    write, the key must sign and the old signature must verify against `public_key` (default:
    `sign_key`'s own public key), unless `replace_signature` (`SignatureInvalidError`,
    `InputError`): re-signing never launders a bundle changed since it was signed.

    **Returns:** the target written.
    """
    # The artifacts are replaced from the texts: they need not be readable here (too old).
    b = bundle if isinstance(bundle, Bundle) else Bundle(Path(bundle), check_artifacts=False)
    target = opt.target_version or _mlir.default_target()
    _portable.check_target(target, what="--target-version")
    check_resignable(
        b,
        opt.signing_key,
        doing="refreshing",
        public_key=opt.public_key,
        replace_signature=opt.replace_signature,
    )
    replaced: dict[str, bytes] = {}
    manifest = b.manifest
    for key, stored in b.modules.items():
        replaced[stored.portable_file] = _mlir.to_portable(
            stored.parsed, target, path=stored.text_file
        )
        entry = stored.form.entry(manifest)
        assert entry is not None, "b.modules holds the forms the manifest has"
        moved = entry.model_copy(
            update={"portable": PortableArtifact(file=stored.portable_file, target_version=target)}
        )
        manifest = manifest.model_copy(update={key: moved})
    rewrite_and_resign(b, manifest, replaced, opt.signing_key)
    return target

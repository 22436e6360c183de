"""`refresh()`: rewrite a bundle's portable artifacts from its module texts for another StableHLO
target (SPEC.md, "Versions"), so that a bundle outlives the artifacts' compatibility window."""

from __future__ import annotations

import os
from pathlib import Path

from .._format._manifest import BatchedModule, Manifest, Module, PortableArtifact
from .._parse import _mlir
from .._read._reader import Bundle
from ._options import PackOptions, takes
from ._sign import check_resignable, rewrite_and_resign


@takes("target_version", "sign_key", "public_key", "replace_signature")
def refresh(bundle: Bundle | str | os.PathLike[str], *, opt: PackOptions) -> str:
    """Rewrite every portable artifact (module, backward, batched) of `bundle` from its checked
    text, for `target_version`, atomically; without it, each at the oldest default target that
    expresses it (SPEC.md 5, "Versions"). The manifest records each artifact's new target.

    A signed bundle is refused unless `sign_key` is given: the refreshed bundle is then signed
    again (its old signature would no longer verify), in the same atomic rewrite. Before any
    write, the key must sign and the old signature must verify against `public_key` (default:
    `sign_key`'s own public key), unless `replace_signature` (`SignatureInvalidError`,
    `InputError`): re-signing never launders a bundle changed since it was signed.

    **Returns:** the newest target written (the one a reader of every artifact must read).
    """
    # The artifacts are replaced from the texts: they need not be readable here (too old).
    b = bundle if isinstance(bundle, Bundle) else Bundle(Path(bundle), check_artifacts=False)
    if opt.target_version is not None:
        _mlir.check_writable(opt.target_version)
    check_resignable(
        b,
        opt.signing_key,
        doing="refreshing",
        public_key=opt.public_key,
        replace_signature=opt.replace_signature,
    )
    replaced: dict[str, bytes] = {}
    targets: list[str] = []
    forms = {n: _forms(b.select(n), opt.target_version, replaced, targets) for n in b.functions}
    top = b.bundle_manifest
    if isinstance(top, Manifest):  # one function, the whole manifest (1.x)
        manifest = top.model_copy(update=forms[b.functions[0]])
    else:
        functions = [f.model_copy(update=forms[f.name]) for f in top.functions]
        manifest = top.model_copy(update={"functions": functions})
    rewrite_and_resign(b, manifest, replaced, opt.signing_key)
    return max(targets, key=_mlir.version_key)


def _forms(
    view: Bundle, target: str | None, replaced: dict[str, bytes], targets: list[str]
) -> dict[str, Module | BatchedModule]:
    """Function `view`'s form entries with artifacts written again from their texts (their
    bytes into `replaced`, their targets onto `targets`)."""
    forms: dict[str, Module | BatchedModule] = {}
    for key, stored in view.modules.items():
        replaced[stored.portable_file], written = _mlir.write_portable(
            stored.parsed, target, path=stored.text_file
        )
        targets.append(written)
        entry = stored.form.listed(view.manifest)
        artifact = PortableArtifact(file=stored.portable_file, target_version=written)
        forms[key] = entry.model_copy(update={"portable": artifact})
    return forms

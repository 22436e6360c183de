"""`compile()`: store ahead-of-time IREE executables in a bundle (SPEC.md, "Executables"), so that
a trusted bundle runs on IREE's runtime without a compiler and without compiling at start-up."""

from __future__ import annotations

import os
from collections.abc import Sequence

from .._format import _signature
from .._format._errors import InputError
from .._format._manifest import Executable, Manifest
from .._read._files import references
from .._read._reader import Bundle, load
from .._run._backends import _iree_compile
from ._sign import check_resignable, rewrite_and_resign

EXECUTABLES_VERSION = (1, 3)  # the format version that added `executables`


def compile(  # noqa: A001  (hlobundle.compile, as the command is named)
    bundle: Bundle | str | os.PathLike[str],
    targets: Sequence[str] = ("llvm-cpu",),
    *,
    cpu: str = "generic",
    sign_key: _signature.SigningKey | None = None,
    public_key: str | os.PathLike[str] | None = None,
    replace_signature: bool = False,
) -> list[Executable]:
    """Compile the bundle's checked portable artifact with IREE for each target and store the
    executables as `compiled/<target>.vmfb`, listed and hashed in the manifest with the compiler
    version, flags, CPU and architecture; atomically. An executable already stored for a target
    is replaced.

    **Arguments:**

    - `targets`: IREE target backends, from `("llvm-cpu", "vmvx")`.
    - `cpu`: llvm-cpu's target CPU: `"generic"` (default) runs on any CPU of this architecture;
      `"host"` or a name (`"znver3"`) gives faster code that faults on CPUs without its features.
    - `sign_key`: a signed bundle is refused unless given; the new bundle is then signed again,
      in the same atomic rewrite, once the key is shown to sign and the old signature to verify
      against `public_key` (default: `sign_key`'s own), before anything is compiled.
    - `replace_signature`: sign again even though the old signature does not verify.

    **Returns:** the manifest entries written.
    """
    if not targets or len(set(targets)) != len(targets):
        raise InputError(f"give each target once, got {list(targets)}", argument="targets")
    for target in targets:
        _iree_compile.flags(target, cpu)  # an unknown target, before any work
    b = bundle if isinstance(bundle, Bundle) else load(bundle)
    b.verify()
    check_resignable(b, sign_key, doing="compiling", public_key=public_key,
                     replace_signature=replace_signature, verified=True)  # fmt: skip
    source = b.modules["module"].portable_sha256
    written: dict[str, bytes] = {}
    entries = []
    for target in targets:
        done = _iree_compile.compile_portable(b.portable_artifact, b.manifest, target=target,
                                              cpu=cpu)  # fmt: skip
        entry = Executable(target=target, file=f"compiled/{target}.vmfb", compiler="iree",
                           compiler_version=done.compiler_version, architecture=done.architecture,
                           cpu=done.cpu, flags=list(done.flags), source_sha256=source)  # fmt: skip
        written[entry.file] = done.vmfb
        entries.append(entry)
    rewrite_and_resign(b, _with_executables(b.manifest, entries), written, sign_key)
    return entries


def _with_executables(manifest: Manifest, entries: list[Executable]) -> Manifest:
    """The manifest with `entries` replacing any for the same targets (and their files)."""
    new = {e.target for e in entries}
    kept = [e for e in manifest.executables or [] if e.target not in new]
    major, minor = (int(p) for p in manifest.format_version.split("."))
    version = max((major, minor), EXECUTABLES_VERSION)
    updated = manifest.model_copy(update={
        "executables": sorted([*kept, *entries], key=lambda e: e.target),
        "format_version": f"{version[0]}.{version[1]}",
    })  # fmt: skip
    others = {name for _, name in references(manifest.model_copy(update={"executables": kept}))}
    taken = sorted(others & {e.file for e in entries})
    if taken:
        raise InputError(f"compile would write {taken[0]!r}, a file another manifest field "
                         "references; it overwrites no such file", path=taken[0])  # fmt: skip
    # An old executable's file goes only when nothing in the new manifest names it any more.
    still = {name for _, name in references(updated)}
    dropped = {e.file for e in manifest.executables or [] if e.target in new} - still
    files = {k: v for k, v in manifest.files.items() if k not in dropped}
    return updated.model_copy(update={"files": files})

"""`compile()`: store ahead-of-time executables in a bundle (SPEC.md, "Executables"), IREE's or
XLA's, so that a trusted bundle runs without compiling at start-up (on IREE's runtime, without
a compiler)."""

from __future__ import annotations

import os
from collections.abc import Sequence

from .._format._bundle_manifest import BundleManifest, combine
from .._format._errors import BackendUnavailableError, InputError
from .._format._fields import COMPILERS
from .._format._manifest import Executable, Manifest
from .._read._files import references
from .._read._reader import Bundle, load
from .._run import _backends
from ._options import PackOptions, takes
from ._sign import check_resignable, rewrite_and_resign


@takes("sign_key", "public_key", "replace_signature")
def compile(  # noqa: A001  (hlobundle.compile, as the command is named)
    bundle: Bundle | str | os.PathLike[str],
    targets: Sequence[str] = ("llvm-cpu",),
    *,
    function: str | None = None,
    cpu: str = "generic",
    opt: PackOptions,
) -> list[Executable]:
    """Compile each function's checked portable artifact for each target and store the
    executables as `compiled/<target>.vmfb` (IREE's) or `compiled/<target>.pjrt` (XLA's;
    `NAME/compiled/...` for function NAME of a 2.0 bundle), listed and hashed in the manifest
    with the compiler version, flags, CPU and architecture (and XLA's key: device kind,
    topology, libtpu version); atomically. An executable already stored for a target is replaced.
    A signed bundle is refused unless `sign_key` is given; the new bundle is then signed again,
    in the same atomic rewrite, once the key is shown to sign and the old signature to verify
    against `public_key`, before anything is compiled.

    **Arguments:**

    - `targets`: IREE target backends, from `("llvm-cpu", "vmvx")` (the default, llvm-cpu,
      needs IREE's compiler: `hlobundle[iree]`), or `"xla-PLATFORM"` for the platform JAX
      runs on here (`"xla-cpu"`, `"xla-tpu"`, `"xla-cuda"`, `"xla-rocm"`): XLA's executable of
      one device, run by the xla backend's eager calls (SPEC.md 2.7). A target this machine
      cannot compile for is refused before any work, naming those it can.
    - `function`: compile only this function (`Bundle.functions`); default: every function.
    - `cpu`: llvm-cpu's target CPU: `"generic"` (default) runs on any CPU of this architecture;
      `"host"` or a name (`"znver3"`) gives faster code that faults on CPUs without its features.

    **Returns:** the manifest entries written.
    """
    sign_key = opt.signing_key
    if not targets or len(set(targets)) != len(targets):
        raise InputError(f"give each target once, got {list(targets)}", argument="targets")
    compilers = {target: _backends.compiler(target) for target in targets}
    for target, compiler in compilers.items():
        if compiler.check_target is not None:
            compiler.check_target(target, cpu)  # an unknown target, before any work
        _refuse_uncompilable(target, compiler)
    b = bundle if isinstance(bundle, Bundle) else load(bundle)
    chosen = b.functions if function is None else [b.select(function).manifest.function]
    for name in chosen:  # IREE passes no platform index (SPEC.md 2.14), before any work
        for compiler in compilers.values():
            _backends.refuse_platforms(compiler, b.select(name).manifest)
    b.verify(in_memory=False)  # compiles the module bytes load() checked
    check_resignable(
        b,
        sign_key,
        doing="compiling",
        public_key=opt.public_key,
        replace_signature=opt.replace_signature,
        verified=True,
    )
    several = not isinstance(b.bundle_manifest, Manifest)
    written: dict[str, bytes] = {}
    added: dict[str, list[Executable]] = {}
    for name in chosen:
        view = b.select(name)
        prefix = f"{name}/" if several else ""
        added[name] = [
            _compiled(compilers[target], view, target, cpu, prefix, written) for target in targets
        ]
    views = {n: b.select(n).manifest for n in b.functions}
    rewrite_and_resign(
        b, _with_executables(b.bundle_manifest, views, added, b.default_function), written, sign_key
    )
    return [e for entries in added.values() for e in entries]


def _refuse_uncompilable(target: str, compiler: _backends.Backend) -> None:
    """A `BackendUnavailableError` naming what this machine compiles for, before any work,
    when `target`'s compiler is not installed here."""
    here = _backends.targets_here()
    if target not in here:
        raise BackendUnavailableError(
            f"target {target}: {compiler.unavailable}. This machine compiles for "
            f"{', '.join(here)} (--target {here[0]})",
            argument="targets",
        )


def _compiled(
    compiler: _backends.Backend,
    view: Bundle,
    target: str,
    cpu: str,
    prefix: str,
    written: dict[str, bytes],
) -> Executable:
    """Function `view` compiled for `target`: its manifest entry, its bytes in `written`."""
    assert compiler.compile_executable is not None
    done = compiler.compile_executable(view, target=target, cpu=cpu)
    entry = Executable(
        target=target,
        file=f"{prefix}compiled/{target}{done.suffix}",
        compiler=done.compiler,
        compiler_version=done.compiler_version,
        architecture=done.architecture,
        cpu=done.cpu,
        flags=list(done.flags),
        source_sha256=view.modules["module"].portable_sha256,
        device_kind=done.device_kind,
        topology=done.topology,
        libtpu_version=done.libtpu_version,
    )
    written[entry.file] = done.data
    return entry


def _with_executables(
    old: Manifest | BundleManifest,
    views: dict[str, Manifest],
    added: dict[str, list[Executable]],
    default: str | None,
) -> Manifest | BundleManifest:
    """The manifest with each function's `added` entries replacing any for the same targets
    (and their files, when nothing else names them)."""
    kept = {
        n: [e for e in v.executables or [] if e.target not in {a.target for a in added.get(n, [])}]
        for n, v in views.items()
    }
    others = {
        name
        for n, v in views.items()
        for _, name in references(v.model_copy(update={"executables": kept[n]}))
    }
    taken = sorted(others & {e.file for entries in added.values() for e in entries})
    if taken:
        raise InputError(
            f"compile would write {taken[0]!r}, a file another manifest field "
            "references; it overwrites no such file",
            path=taken[0],
        )
    updated = {n: _updated(v, kept[n] + added.get(n, [])) for n, v in views.items()}
    # An old executable's file goes only when nothing in the new manifest names it any more.
    still = {name for v in updated.values() for _, name in references(v)}
    replaced = {e.file for n, v in views.items() for e in v.executables or [] if e not in kept[n]}
    files = {k: v for k, v in old.files.items() if k not in replaced - still}
    if isinstance(old, Manifest):
        (only,) = updated.values()
        return only.model_copy(update={"files": files})
    return combine(list(updated.values()), default, files)


def _updated(view: Manifest, executables: list[Executable]) -> Manifest:
    """One function's manifest with these executables (format 1.3 at least)."""
    major, minor = (int(p) for p in view.format_version.split("."))
    version = max([(major, minor), *(COMPILERS[e.compiler].version for e in executables)])
    return view.model_copy(
        update={
            "executables": sorted(executables, key=lambda e: e.target) or None,
            "format_version": f"{version[0]}.{version[1]}",
        }
    )

"""`compile()`: store ahead-of-time executables in a bundle (SPEC.md, "Executables"), IREE's or
XLA's, so that a trusted bundle runs without compiling at start-up (on IREE's runtime, without
a compiler)."""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Mapping, Sequence

from .._format._bundle_manifest import BundleManifest, combine
from .._format._errors import BackendUnavailableError, InputError
from .._format._fields import COMPILERS, compiler_of
from .._format._manifest import Executable, Manifest
from .._format._symbolic import evaluate, parse, solved
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
    sizes: Mapping[str, Sequence[int]] | None = None,
    opt: PackOptions,
) -> list[Executable]:
    """Compile each function's checked portable artifact for each target and store the
    executables as `compiled/<target>.vmfb` (IREE's) or `compiled/<target>.pjrt` (XLA's; of a
    function with symbolic dimensions, one per size, `compiled/<target>.b=8.pjrt`;
    `NAME/compiled/...` for function NAME of a 2.0 bundle), listed and hashed in the manifest
    with the compiler version, flags, CPU and architecture (and XLA's key: device kind,
    topology, libtpu version; `sizes`); atomically. The executables already stored for a target
    are replaced.
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
    - `sizes`: XLA's executables of a function with symbolic dimensions are stored one per
      combination of its symbols' values (the cartesian product), each symbol's from `sizes`
      (`{"b": [1, 8, 32]}`) or, for a symbol it does not name, the value the function's
      stored arguments bind; at most 64 combinations a function, each proven against the
      module. An IREE module of such a function stays dynamic: one runs every size.

    **Returns:** the manifest entries written.
    """
    sign_key = opt.signing_key
    if not targets or len(set(targets)) != len(targets):
        raise InputError(f"give each target once, got {list(targets)}", argument="targets")
    compilers = {target: _backends.compiler(target) for target in targets}
    for target, (compiler, executables) in compilers.items():
        executables.check_target(target, cpu)  # an unknown target, before any work
        _refuse_uncompilable(target, compiler)
    b = bundle if isinstance(bundle, Bundle) else load(bundle)
    chosen = b.functions if function is None else [b.select(function).manifest.function]
    pinned = _checked_sizes(b, chosen, sizes or {}, targets)
    for name in chosen:  # IREE passes no platform index (SPEC.md 2.14), before any work
        for compiler, _ in compilers.values():
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
            _compiled(compilers[target][1], view, target, cpu, prefix, written, at)
            for target in targets
            for at in (pinned[name] if _per_size(target) else [None])
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
    executables: _backends.Executables,
    view: Bundle,
    target: str,
    cpu: str,
    prefix: str,
    written: dict[str, bytes],
    sizes: dict[str, int] | None,
) -> Executable:
    """Function `view` compiled for `target` (XLA's of a symbolic function: at `sizes`): its
    manifest entry, its bytes in `written`."""
    at = {"sizes": sizes} if sizes else {}
    done = executables.compile_for(view, target=target, cpu=cpu, **at)
    named = "".join(f".{k}={v}" for k, v in sorted((sizes or {}).items()))
    entry = Executable(
        target=target,
        file=f"{prefix}compiled/{target}{named}{done.suffix}",
        compiler=done.compiler,
        compiler_version=done.compiler_version,
        architecture=done.architecture,
        cpu=done.cpu,
        flags=list(done.flags),
        source_sha256=view.modules["module"].portable_sha256,
        device_kind=done.device_kind,
        topology=done.topology,
        libtpu_version=done.libtpu_version,
        sizes=sizes,
    )
    written[entry.file] = done.data
    return entry


def _per_size(target: str) -> bool:
    """Whether `target`'s compiler compiles a symbolic function once per size (XLA's)."""
    return COMPILERS[compiler_of(target)].per_size


MAX_SIZE_SETS = 64  # the combinations of sizes one function's XLA executables are stored for


def _checked_sizes(
    b: Bundle,
    chosen: list[str],
    sizes: Mapping[str, Sequence[int]],
    targets: Sequence[str],
) -> dict[str, list[dict[str, int] | None]]:
    """For each chosen function, the symbols' values its XLA executables are compiled for (a
    static function's one executable: `[None]`), each proven against its module; an
    `InputError` for a symbol no chosen function has, or none its XLA executable can take."""
    xla = any(_per_size(t) for t in targets)
    if sizes and not xla:
        raise InputError(
            "sizes are for XLA's executables (--target xla-PLATFORM): an IREE module of a "
            "function with symbolic dimensions runs every size",
            argument="sizes",
        )
    for symbol, values in sizes.items():
        _check_values(symbol, values)
    symbols = {n: _symbols(b.select(n).manifest) for n in chosen}
    if sizes and not any(symbols.values()):
        raise InputError(
            f"sizes (--sizes) are for symbolic dimensions, and the function(s) {chosen} have "
            "fixed shapes: their one executable runs them; compile without sizes",
            argument="sizes",
        )
    unknown = sorted(set(sizes) - {s for of in symbols.values() for s in of})
    if unknown:
        raise InputError(
            f"sizes names symbol(s) {unknown} that no function compiled has; theirs are "
            f"{sorted({s for of in symbols.values() for s in of})}",
            argument="sizes",
        )
    return {
        n: _size_sets(b.select(n), symbols[n], sizes) if symbols[n] and xla else [None]
        for n in chosen
    }


def _check_values(symbol: str, values: object) -> None:
    """A symbol's values: a list or tuple of whole numbers (no bools), each at least 1."""
    if not isinstance(values, list | tuple) or not all(type(v) is int and v >= 1 for v in values):
        raise InputError(
            f"sizes[{symbol!r}] must be a list of whole numbers of at least 1, got {values!r:.80}",
            argument="sizes",
        )


def _symbols(m: Manifest) -> list[str]:
    return sorted({s for a in m.arguments for s in _symbols_in(a.shape)})


def _symbols_in(shape: Sequence[int | str]) -> set[str]:
    return {s for d in shape if isinstance(d, str) for s in parse(d).symbols}


def _size_sets(
    view: Bundle, symbols: list[str], sizes: Mapping[str, Sequence[int]]
) -> list[dict[str, int] | None]:
    """Every combination of the function's symbols' values (from `sizes`, else the value its
    stored arguments bind), each proven against the module at the shapes it gives."""
    from .._run._shapes import prove

    m = view.manifest
    stored = [a for a in m.arguments if a.value is not None and _symbols_in(a.shape)]
    own = solved([(a.name, a.shape) for a in stored], [view.tensor(a.name).shape for a in stored])
    missing = [s for s in symbols if s not in sizes and s not in own]
    if missing:
        raise InputError(
            f"function {m.function!r}: give the values of symbol {missing[0]!r} its XLA "
            f"executables are compiled for (--sizes {missing[0]}=N[,N...]); no stored "
            "argument binds it",
            argument="sizes",
        )
    values = [sorted(set(sizes[s])) if s in sizes else [own[s]] for s in symbols]
    count = math.prod(len(v) for v in values)  # counted before any is made
    if count > MAX_SIZE_SETS:
        raise InputError(
            f"function {m.function!r}: the sizes give {count} combinations of "
            f"{symbols}, more than {MAX_SIZE_SETS}",
            argument="sizes",
        )
    combos = [dict(zip(symbols, c, strict=True)) for c in itertools.product(*values)]
    for combo in combos:  # an InputError names the symbol
        prove(view, tuple(evaluate(a.shape, combo) for a in m.arguments))
    return list(combos)


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

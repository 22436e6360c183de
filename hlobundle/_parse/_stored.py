"""The stored modules of a bundle, one record per form (SPEC.md 2.2, 2.4, 2.6).

Every form (the module, the backward module, the batched module) is a text file and a portable
artifact of one program, held to the same rules: the allow-list of `_format/_policy.py`
(`_unportable`) and a required `@main` signature. The reader and the writer loop over `FORMS` instead of writing a branch per form.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._format._errors import MainSignatureError, ManifestError
from .._format._fields import static_shape
from . import _main_signature, _sharding
from ._unportable import refuse_unportable

if TYPE_CHECKING:
    from .._format._manifest import Argument, BatchedModule, Manifest, Module, Result


@dataclass(frozen=True)
class Form:
    key: str  # the manifest field holding the form's entry
    title: str
    text_file: str  # the file names the reference writer uses
    portable_file: str
    # (parsed module, manifest, file) -> `@main`'s signature when the rule read it, else None
    check_signature: Callable[[Any, Manifest, str], _main_signature.Signature | None]

    def entry(self, manifest: Manifest) -> Module | BatchedModule | None:
        entry: Module | BatchedModule | None = getattr(manifest, self.key)
        return entry

    def listed(self, manifest: Manifest) -> Module | BatchedModule:
        """The form's entry, which the caller knows the manifest has (a ManifestError if not)."""
        entry = self.entry(manifest)
        if entry is None:
            raise ManifestError(f"{self.key}: the manifest lists no {self.text_file}")
        return entry


def check(
    form: Form, parsed: Any, manifest: Manifest, path: str
) -> tuple[_main_signature.Signature | None, tuple[str, ...]]:
    """A parsed form is portable (6.1, 8) and has the signature its section requires.

    **Returns:** the `@main` signature the check read, if it read one (the module's does), and
    every custom call target in the form (what a runner may have to prepare, such as LAPACK).
    """
    calls = refuse_unportable(parsed, manifest.module.allowed_custom_calls, path)
    return form.check_signature(parsed, manifest, path), calls


def check_main(parsed: Any, manifest: Manifest, source: str) -> _main_signature.Signature:
    """The manifest's arguments and results must have exactly `@main`'s types and aliasing."""
    sig = _main_signature.signature(parsed, path=source, dynamic=manifest.symbolic)
    if manifest.platforms:
        sig = _main_signature.without_platform_index(sig, source)
    check_signature(sig, manifest, source)
    return sig


def fits(declared: Sequence[int | str], module: Sequence[int | None]) -> bool:
    """A manifest shape agrees with a module's: equal, a symbolic dimension where the module's
    is dynamic (`?`), an integer where it is static (SPEC.md 2.8)."""
    return len(declared) == len(module) and all(
        (m is None) if isinstance(d, str) else d == m for d, m in zip(declared, module, strict=True)
    )


_Side = tuple[str, Sequence["Argument | Result"], Sequence[_main_signature.TensorType]]


def check_signature(sig: _main_signature.Signature, manifest: Manifest, source: str) -> None:
    sides: tuple[_Side, ...] = (
        ("arguments", manifest.arguments, sig.arguments),
        ("results", manifest.results, sig.results),
    )
    for what, entries, types in sides:
        if len(entries) != len(types):
            raise MainSignatureError(
                f"the manifest has {len(entries)} {what}, @main in {source} has {len(types)}",
                path=source,
                field=what,
            )
        for i, (entry, t) in enumerate(zip(entries, types, strict=True)):
            got = (entry.dtype, tuple(entry.shape))
            if entry.dtype != t.dtype.name or not fits(entry.shape, t.shape):
                raise MainSignatureError(
                    f"{what}[{i}] ({entry.name}): the manifest says {got[0]}{list(got[1])}, "
                    f"@main in {source} says {t.dtype.name}{_shown(t.shape)}",
                    path=source,
                    field=f"{what}[{i}]",
                )
    _check_sharding(sig, manifest, source)
    declared = {k: r.aliases for k, r in enumerate(manifest.results) if r.aliases is not None}
    if declared != sig.aliases:
        raise MainSignatureError(
            f"result aliasing in the manifest {declared} differs from @main's "
            f"tf.aliasing_output {sig.aliases} in {source}",
            path=source,
            field="results",
        )


def _check_sharding(sig: _main_signature.Signature, manifest: Manifest, source: str) -> None:
    sides: tuple[tuple[str, Sequence[Argument | Result]], ...] = (
        ("arguments", manifest.arguments),
        ("results", manifest.results),
    )
    for what, entries in sides:
        for i, entry in enumerate(entries):
            want = _sharding.sharding_fields(sig.sharding, what, i)
            got = {"sharding": entry.sharding, "hlo_sharding": entry.hlo_sharding} if want else {}
            if want and got != want or not want and (entry.sharding or entry.hlo_sharding):
                raise MainSignatureError(
                    f"{what}[{i}] ({entry.name}): the manifest's sharding {got or None} differs from "
                    f"@main's in {source}: {want or None}",
                    path=source,
                    field=f"{what}[{i}].sharding",
                )
    if manifest.mesh != _sharding.manifest_mesh(sig.sharding):
        raise MainSignatureError(
            f"the manifest's mesh differs from the module's sdy.mesh in {source}",
            path=source,
            field="mesh",
        )


def _shown(shape: Sequence[int | None]) -> list[int | str]:
    return ["?" if d is None else d for d in shape]


def check_backward(parsed: Any, manifest: Manifest, source: str) -> None:
    """A backward module maps (*arguments, *result cotangents) to argument cotangents."""
    sig = _main_signature.signature(parsed, path=source, dynamic=manifest.symbolic)
    if manifest.platforms:
        sig = _main_signature.without_platform_index(sig, source)
    want_in = [(a.dtype, tuple(a.shape)) for a in manifest.arguments]
    want_in += [(cotangent_dtype(r.dtype), tuple(r.shape)) for r in manifest.results]
    want_out = [(cotangent_dtype(a.dtype), tuple(a.shape)) for a in manifest.arguments]
    got_in = [(t.dtype.name, t.shape) for t in sig.arguments]
    got_out = [(t.dtype.name, t.shape) for t in sig.results]

    def agree(want: list[Any], got: list[Any]) -> bool:
        return len(want) == len(got) and all(
            wd == gd and fits(ws, gs) for (wd, ws), (gd, gs) in zip(want, got, strict=True)
        )

    if not (agree(want_in, got_in) and agree(want_out, got_out)):
        raise MainSignatureError(
            f"the backward module {source} has signature {got_in} -> {got_out}; the manifest "
            f"requires {want_in} -> {want_out} (SPEC.md, 'Backward module')",
            path=source,
            field="vjp",
        )


def check_batched(parsed: Any, manifest: Manifest, source: str) -> None:
    if manifest.batched is None:
        raise MainSignatureError("no batched module in the manifest", path=source, field="batched")
    types = _main_signature.main_types(parsed, path=source)
    want_in, want_out = expected_types(manifest, manifest.batched.arguments)
    got_in = [(t.dtype.name, t.shape) for t in types[0]]
    got_out = [(t.dtype.name, t.shape) for t in types[1]]
    if (got_in, got_out) != (want_in, want_out):
        show = lambda ts: [f"{d}{list(s)}".replace("None", "?") for d, s in ts]  # noqa: E731
        raise MainSignatureError(
            f"the batched module {source} has signature {show(got_in)} -> {show(got_out)}; the "
            f"manifest requires {show(want_in)} -> {show(want_out)} (SPEC.md, 'Batched module')",
            path=source,
            field="batched",
        )


BATCH_DIMENSION = "b"  # the batch size's name in a lowered batched module


def expected_types(
    manifest: Manifest, batched_arguments: Sequence[str]
) -> tuple[list[tuple[str, tuple[int | None, ...]]], list[tuple[str, tuple[int | None, ...]]]]:
    """(dtype, shape) of a batched `@main`'s arguments and results; None is the batch size."""
    batched = set(batched_arguments)  # beside a batched module, no symbolic dimension (2.8)
    args = [
        (a.dtype, (None, *static_shape(a.shape)) if a.name in batched else static_shape(a.shape))
        for a in manifest.arguments
    ]
    return args, [(r.dtype, (None, *static_shape(r.shape))) for r in manifest.results]


def differentiable(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat", "complex"))


def cotangent_dtype(dtype: str) -> str:
    """The dtype of a value's cotangent in a backward module: itself, or bool for float0."""
    return dtype if differentiable(dtype) else "bool"


FORMS = (
    Form("module", "module", "module.mlir", "module.mlirbc", check_main),
    Form("vjp", "backward module", "vjp.mlir", "vjp.mlirbc", check_backward),
    Form("batched", "batched module", "batched.mlir", "batched.mlirbc", check_batched),
)
BY_KEY = {f.key: f for f in FORMS}

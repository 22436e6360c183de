"""Reading and verifying bundles: `load()` and `Bundle` (SPEC.md, "Reading" and "Reader safety")."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from . import _dtypes, _mlir, _paths, _tensors
from ._errors import (
    FileSetError,
    IntegrityError,
    ManifestError,
    ModuleError,
    NotABundleError,
    SignatureError,
    TensorFileError,
    UnsafePathError,
)
from ._manifest import (
    MANIFEST_NAME,
    MAX_MANIFEST_BYTES,
    Argument,
    Manifest,
    Result,
    TensorRef,
    parse_manifest,
)
from ._normalize import refuse_unportable

if TYPE_CHECKING:
    from ._function import BundleFunction
    from ._prepare import Prepared
    from ._transforms import EnzymeBlockers


def load(path: str | os.PathLike[str]) -> Bundle:
    """Open a bundle and check everything but the checksums (`Bundle.verify()` adds those).

    Loading checks the structure, the format version, the path rules, every file's size, and
    that the manifest, `@main`'s signature and the safetensors headers agree. Tensor data is
    not read: `Bundle.tensor()` maps it lazily.
    """
    return Bundle(Path(path))


class Bundle:
    """An opened, structurally valid bundle."""

    def __init__(self, root: Path) -> None:
        self.path = root
        self.manifest = _read_manifest(root)
        _check_file_set(root, self.manifest)
        text_file = self.manifest.module.text
        module = _mlir.parse(self.module_text, path=text_file)
        self.signature = _mlir.signature(module, path=text_file)
        _check_signature(self.signature, self.manifest, text_file)
        with _mlir.context():
            refuse_unportable(module, set(self.manifest.module.allowed_custom_calls), text_file)
        if self.manifest.vjp is not None:
            vjp_file = self.manifest.vjp.text
            vjp_text = self._text(vjp_file)
            _check_backward(
                _mlir.signature(_mlir.parse(vjp_text, path=vjp_file), path=vjp_file),
                self.manifest,
                vjp_file,
            )
        if (batched := self.manifest.batched) is not None:
            module = _mlir.parse(self._text(batched.text), path=batched.text)
            _check_batched(module, self.manifest, batched.arguments, batched.text)
        self._tensor_files = _open_tensor_files(root, self.manifest)

    def __repr__(self) -> str:
        m = self.manifest
        return (
            f"Bundle({str(self.path)!r}, function={m.function!r}, "
            f"arguments={len(m.arguments)}, results={len(m.results)})"
        )

    @property
    def arguments(self) -> list[Argument]:
        return self.manifest.arguments

    @property
    def results(self) -> list[Result]:
        return self.manifest.results

    @cached_property
    def module_text(self) -> str:
        return self._text(self.manifest.module.text)

    def _text(self, name: str) -> str:
        """An MLIR text file of the bundle."""
        try:
            return self._file(name).read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise ModuleError(f"{name} is not UTF-8 text: {e}", path=name) from None

    @property
    def portable_artifact(self) -> bytes:
        return self._file(self.manifest.module.portable.file).read_bytes()

    @property
    def backward_artifact(self) -> bytes | None:
        """The stored backward module's portable artifact, if the bundle has one."""
        vjp = self.manifest.vjp
        return None if vjp is None else self._file(vjp.portable.file).read_bytes()

    @property
    def batched_artifact(self) -> bytes | None:
        """The stored batched module's portable artifact, if the bundle has one."""
        batched = self.manifest.batched
        return None if batched is None else self._file(batched.portable.file).read_bytes()

    @cached_property
    def enzyme_blockers(self) -> EnzymeBlockers:
        """Ops whose derivatives enzyme-ad 0.0.16 cannot compute, found once per Bundle."""
        from ._transforms import EnzymeBlockers

        values = [*self.manifest.arguments, *self.manifest.results]
        return EnzymeBlockers.of(_mlir.parse(self.module_text), [(v.name, v.dtype) for v in values])

    @property
    def has_example_inputs(self) -> bool:
        return all(a.value is not None for a in self.arguments)

    def tensor(self, name: str, *, layout: Literal["stored", "producer"] = "stored") -> np.ndarray:
        """An argument's stored example value, memory-mapped and read-only.

        With `layout="producer"`, a column-major argument comes back axis-reversed (Julia's
        orientation) as a view, without a copy.
        """
        arg = self.manifest.argument(name)
        if arg.value is None:
            raise KeyError(f"argument {name!r} has no stored example value")
        array = self._array(arg.value, arg.dtype, arg.shape)
        return array.T if layout == "producer" and arg.layout == "column_major" else array

    def example_inputs(self) -> dict[str, np.ndarray]:
        """Every stored argument value by name, in `@main` order (stored orientation)."""
        return {a.name: self.tensor(a.name) for a in self.arguments if a.value is not None}

    def expected_outputs(self) -> dict[str, np.ndarray]:
        """Every stored expected result by name (stored orientation)."""
        return {
            r.name: self._array(r.expected, r.dtype, r.shape) for r in self.results if r.expected
        }

    def function(
        self,
        backend: Literal["auto", "enzyme", "xla"] = "auto",
        *,
        donate: Sequence[str] | str = (),
        devices: int | None = None,
    ) -> BundleFunction:
        """The bundle's `@main` as a JAX function (see `hlobundle._function`).

        **Arguments:**

        - `backend`: `"enzyme"` (enzyme_ad's `hlo_call`), `"xla"` (a `jax.export.Exported`
          of the stored portable artifact; needs only jax) or `"auto"` (enzyme when it imports).
        - `donate`: argument names whose buffers the call may reuse (`jax.jit` donation), or
          `"aliased"` for every argument that a result writes back (`results[k].aliases`).
        - `devices`: for a bundle with a device mesh, run on that many devices (default: the
          mesh's size, placing each argument by its recorded sharding), or 1 to run unsharded.

        **Returns:** a callable taking the arguments positionally in manifest order, by name,
        or as the exported pytrees, and returning the results (see README, "Calling a bundle").
        """
        from ._function import BundleFunction

        return BundleFunction(self, backend, donate, devices)

    @cached_property
    def prepared_for_hlo_call(self) -> Prepared:
        """The module rewritten for enzyme_ad's `hlo_call` (computed once per Bundle)."""
        from ._prepare import for_hlo_call, symbol_prefix

        files, batched = self.manifest.files, self.manifest.batched
        digest = files[self.manifest.module.text].sha256
        if batched is None:
            return for_hlo_call(self.module_text, prefix=symbol_prefix(digest))
        # The runner finds a batched module by the prepared text (`_batched.lookup`): name it
        # after both modules, in full, so that no other bundle's module text is the same.
        both = hashlib.sha256(f"{digest} {files[batched.portable.file].sha256}".encode())
        return for_hlo_call(self.module_text, prefix=symbol_prefix(both.hexdigest(), length=64))

    def verify(self) -> None:
        """Check every file's sha256 and that the portable artifact has the manifest's signature.

        Raises the first problem found as an `HloBundleError`; returns None when the bundle is valid.
        """
        from ._atomic import sha256_file

        for name, entry in sorted(self.manifest.files.items()):
            got = sha256_file(self._file(name))
            if got != entry.sha256:
                raise IntegrityError(
                    f"{name}: sha256 is {got}, the manifest says {entry.sha256}",
                    path=name,
                    field=f"files[{name!r}].sha256",
                )
        portable = self.manifest.module.portable.file
        module = _mlir.from_portable(self.portable_artifact, path=portable)
        _check_signature(_mlir.signature(module, path=portable), self.manifest, portable)
        if self.manifest.vjp is not None:
            name = self.manifest.vjp.portable.file
            backward = _mlir.from_portable(self._file(name).read_bytes(), path=name)
            _check_backward(_mlir.signature(backward, path=name), self.manifest, name)
        if (batched := self.manifest.batched) is not None:
            name = batched.portable.file
            module = _mlir.from_portable(self._file(name).read_bytes(), path=name)
            _check_batched(module, self.manifest, batched.arguments, name)

    def _file(self, name: str) -> Path:
        return _paths.resolve(self.path, name)

    def _array(self, ref: TensorRef, dtype: str, shape: list[int]) -> np.ndarray:
        return self._tensor_files[ref.file].array(ref.key, _dtypes.BY_NAME[dtype], tuple(shape))


def _read_manifest(root: Path) -> Manifest:
    if not root.is_dir():
        raise NotABundleError(f"{str(root)!r} is not a directory; a bundle is one", path=root)
    path = root / MANIFEST_NAME
    if path.is_symlink():
        raise UnsafePathError(f"{MANIFEST_NAME} is a symlink", path=MANIFEST_NAME)
    if not path.is_file():
        raise NotABundleError(
            f"{str(root)!r} has no {MANIFEST_NAME}; it is not a bundle", path=MANIFEST_NAME
        )
    with open(path, "rb") as f:
        raw = f.read(MAX_MANIFEST_BYTES + 1)
    return parse_manifest(raw, path=MANIFEST_NAME)


def _check_file_set(root: Path, manifest: Manifest) -> None:
    """Every file is listed, every listed file exists with its size, every reference is listed."""
    for name in manifest.files:
        _paths.check_name(name, field=f"files[{name!r}]")
    on_disk = set(_paths.walk(root)) - {MANIFEST_NAME}
    listed = set(manifest.files)
    for name in sorted(listed - on_disk):
        raise FileSetError(f"{name} is listed in the manifest but missing", path=name)
    for name in sorted(on_disk - listed):
        raise FileSetError(
            f"{name} is in the bundle but not listed in the manifest's files",
            code="FILE_UNLISTED",
            path=name,
        )
    for field, name in _references(manifest):
        _paths.check_name(name, field=field)
        if name not in listed:
            raise ManifestError(f"{field} names {name!r}, which is not in files", field=field)
    for name, entry in manifest.files.items():
        size = (root / name).stat().st_size
        if size != entry.size:
            raise IntegrityError(
                f"{name} is {size} bytes, the manifest says {entry.size}",
                code="SIZE_MISMATCH",
                path=name,
                field=f"files[{name!r}].size",
            )


def _references(manifest: Manifest) -> list[tuple[str, str]]:
    refs = [
        ("module.text", manifest.module.text),
        ("module.portable.file", manifest.module.portable.file),
    ]
    if manifest.vjp is not None:
        refs += [("vjp.text", manifest.vjp.text), ("vjp.portable.file", manifest.vjp.portable.file)]
    if manifest.batched is not None:
        b = manifest.batched
        refs += [("batched.text", b.text), ("batched.portable.file", b.portable.file)]
    refs += [
        (f"arguments[{i}].value.file", a.value.file)
        for i, a in enumerate(manifest.arguments)
        if a.value
    ]
    refs += [
        (f"results[{i}].expected.file", r.expected.file)
        for i, r in enumerate(manifest.results)
        if r.expected
    ]
    return refs


def _stored(manifest: Manifest) -> list[tuple[str, TensorRef, str, list[int]]]:
    """(field, reference, dtype, shape) of every stored tensor the manifest names."""
    found = [
        (f"arguments[{i}]", a.value, a.dtype, a.shape)
        for i, a in enumerate(manifest.arguments)
        if a.value
    ]
    found += [
        (f"results[{i}]", r.expected, r.dtype, r.shape)
        for i, r in enumerate(manifest.results)
        if r.expected
    ]
    return found  # type: ignore[return-value]


def _open_tensor_files(root: Path, manifest: Manifest) -> dict[str, _tensors.TensorFile]:
    stored = _stored(manifest)
    files = {
        name: _tensors.TensorFile(_paths.resolve(root, name), name=name)
        for name in sorted({ref.file for _, ref, _, _ in stored})
    }
    used: dict[str, set[str]] = {name: set() for name in files}
    for field, ref, dtype, shape in stored:
        _check_header_entry(files[ref.file], ref, _dtypes.BY_NAME[dtype], tuple(shape), field)
        used[ref.file].add(ref.key)
    for name, tf in files.items():
        extra = sorted(set(tf.entries) - used[name])
        if extra:
            raise TensorFileError(
                f"{name} holds tensor(s) {extra[:5]} that no argument or result names",
                code="TENSOR_MISMATCH",
                path=name,
            )
    return files


def _check_header_entry(
    tf: _tensors.TensorFile, ref: TensorRef, row: _dtypes.DType, shape: tuple[int, ...], field: str
) -> None:
    entry = tf.entries.get(ref.key)
    if entry is None:
        raise TensorFileError(
            f"{field}: {ref.file} has no tensor {ref.key!r}",
            code="TENSOR_MISMATCH",
            path=ref.file,
            field=field,
        )
    want = (row.safetensors, row.storage_shape(shape))
    if (entry.code, entry.shape) != want:
        raise TensorFileError(
            f"{field}: {ref.file}[{ref.key!r}] is {entry.code}{list(entry.shape)}, the manifest's "
            f"{row.name}{list(shape)} is stored as {want[0]}{list(want[1])} (SPEC.md, 'Dtypes')",
            code="TENSOR_MISMATCH",
            path=ref.file,
            field=field,
        )


def _check_signature(sig: _mlir.Signature, manifest: Manifest, source: str) -> None:
    """The manifest's arguments and results must have exactly `@main`'s types and aliasing."""
    for what, entries, types in (
        ("arguments", manifest.arguments, sig.arguments),
        ("results", manifest.results, sig.results),
    ):
        if len(entries) != len(types):
            raise SignatureError(
                f"the manifest has {len(entries)} {what}, @main in {source} has {len(types)}",
                path=source,
                field=what,
            )
        for i, (entry, t) in enumerate(zip(entries, types, strict=True)):
            got = (entry.dtype, tuple(entry.shape))
            if got != (t.dtype.name, t.shape):
                raise SignatureError(
                    f"{what}[{i}] ({entry.name}): the manifest says {got[0]}{list(got[1])}, "
                    f"@main in {source} says {t.dtype.name}{list(t.shape)}",
                    path=source,
                    field=f"{what}[{i}]",
                )
    from ._sharding import manifest_mesh, sharding_fields

    for what, entries in (("arguments", manifest.arguments), ("results", manifest.results)):
        for i, entry in enumerate(entries):
            want = sharding_fields(sig.sharding, what, i)
            got = {"sharding": entry.sharding, "hlo_sharding": entry.hlo_sharding} if want else {}
            if want and got != want or not want and (entry.sharding or entry.hlo_sharding):
                raise SignatureError(
                    f"{what}[{i}] ({entry.name}): the manifest's sharding {got or None} differs from "
                    f"@main's in {source}: {want or None}",
                    path=source,
                    field=f"{what}[{i}].sharding",
                )
    if manifest.mesh != manifest_mesh(sig.sharding):
        raise SignatureError(
            f"the manifest's mesh differs from the module's sdy.mesh in {source}",
            path=source,
            field="mesh",
        )
    declared = {k: r.aliases for k, r in enumerate(manifest.results) if r.aliases is not None}
    if declared != sig.aliases:
        raise SignatureError(
            f"result aliasing in the manifest {declared} differs from @main's "
            f"tf.aliasing_output {sig.aliases} in {source}",
            path=source,
            field="results",
        )


def _check_batched(module: Any, manifest: Manifest, arguments: list[str], source: str) -> None:
    from . import _batched

    _batched.check(module, manifest, arguments, source)


def _check_backward(sig: _mlir.Signature, manifest: Manifest, source: str) -> None:
    """A backward module maps (*arguments, *result cotangents) to argument cotangents."""
    from ._vjp import cotangent_dtype

    want_in = [(a.dtype, tuple(a.shape)) for a in manifest.arguments]
    want_in += [(cotangent_dtype(r.dtype), tuple(r.shape)) for r in manifest.results]
    want_out = [(cotangent_dtype(a.dtype), tuple(a.shape)) for a in manifest.arguments]
    got_in = [(t.dtype.name, t.shape) for t in sig.arguments]
    got_out = [(t.dtype.name, t.shape) for t in sig.results]
    if (got_in, got_out) != (want_in, want_out):
        raise SignatureError(
            f"the backward module {source} has signature {got_in} -> {got_out}; the manifest "
            f"requires {want_in} -> {want_out} (SPEC.md, 'Backward module')",
            path=source,
            field="vjp",
        )

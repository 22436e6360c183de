"""Reading and verifying bundles: `load()` and `Bundle` (SPEC.md, "Reading" and "Reader safety")."""

from __future__ import annotations

import copy
import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from .._bundle_io import _opening, _signature_file, _signing, _tensor_reading, _tensor_streaming
from .._format import _signature
from .._format._bundle_manifest import functions_of
from .._format._errors import (
    InputError,
    ModuleError,
)
from .._format._fields import MANIFEST_NAME
from .._parse import _main_signature, _stored
from . import _device_values, _file_digests, _files, _modules, _tensor_files
from ._gc import collector_paused
from ._modules import StoredModule
from ._trust import Trust, trust_from
from ._values import StoredValues

if TYPE_CHECKING:
    from concurrent.futures import Executor

    from .._format._manifest import Manifest
    from .._format._metadata import Metadata
    from .._run._backends import BackendName
    from .._run._function import Function


def load(
    path: str | os.PathLike[str],
    *,
    verify: bool = False,
    public_key: str | os.PathLike[str] | None = None,
    certificate_chain: Sequence[str | os.PathLike[str]] | None = None,
    device: Any = None,
) -> Bundle:
    """Open a bundle and check everything but the tensor checksums (`Bundle.verify()` adds those).

    Loading checks the structure, the format version, the path rules, every file's size, and
    that the manifest, `@main`'s signature and the safetensors headers agree. Every module file
    is read once into memory, its sha256 checked and parsed from those bytes, which are the
    ones that run; each form's text and portable artifact must be one program. Tensor data is not read: `Bundle.tensor()` maps it lazily from the files
    opened here.

    **Arguments:**

    - `verify`: also run `Bundle.verify()`, reading every tensor file into private memory first,
      so that the tensors used are exactly the bytes whose sha256 was checked.
    - `public_key`, `certificate_chain`: require the bundle to be signed (SPEC.md, "Signature")
      by this key (a PEM file), or by a certificate this chain trusts. Implies `verify`: what
      runs is exactly what was signed.
    - `device`: with `verify` (or a key), a `jax.Device` (`True`: JAX's default device) that
      the stored tensors go to as they are hashed, each run of a file put there from the
      buffer it was hashed in, instead of a private copy on the host: `tensor()`,
      `parameters()`, `example_args()` and the stored parameters of `function()` are then
      arrays on it, exactly the bytes whose sha256 was checked (see `Bundle.verify`).
    """
    bundle = Bundle(Path(path))
    if verify or public_key is not None or certificate_chain:
        bundle.verify(
            in_memory=True,
            public_key=public_key,
            certificate_chain=certificate_chain,
            device=device,
        )
    return bundle


@dataclass
class _Shared:
    """What every function of one opened bundle shares, and what checks found out."""

    executables: dict[tuple[str, str], bytes] = dataclasses.field(
        default_factory=dict
    )  # (function, file)
    signer: str | None = None


_PARALLEL_BYTES = 64 << 20  # tensor files this large in all are hashed side by side


class Bundle(StoredValues):
    """An opened, structurally valid bundle, and one of its functions (SPEC.md 2.8): the
    default one, or the one `select()` names. `manifest`, `arguments`, `results`, `modules`
    and `signature` are that function's; everything else is the bundle's. `remote`: the
    reference a remote bundle was loaded from (`path` is then where the store keeps it)."""

    remote: str | None = None

    def __init__(
        self,
        root: Path,
        *,
        check_artifacts: bool = True,
        functions: Sequence[str] | None = None,
    ) -> None:
        """Open and check the bundle at `root`. `check_artifacts=False` is for `refresh()`
        alone, which replaces every artifact from its checked text (an artifact too old for
        this reader cannot be shown to be that text).

        `functions`: open only these functions (a remote load, docs/distribution.md): only
        their files need be present, and of each tensor file only the chunks that hold its
        header and their tensors (SPEC.md 2.9), which are read into private memory now, each
        checked against its chunk digest (a file without chunk digests: whole, against its
        sha256). Other functions cannot be selected."""
        with collector_paused():  # tens of thousands of objects for a large manifest (_gc.py)
            self._open(root, check_artifacts, functions)

    def _open(self, root: Path, check_artifacts: bool, functions: Sequence[str] | None) -> None:
        self.path = root
        self.bundle_manifest, self.manifest_sha256 = _files.read_manifest(root)
        self._views, self.default_function = functions_of(self.bundle_manifest)
        self.loaded = list(self._views) if functions is None else list(dict.fromkeys(functions))
        if not self.loaded:
            raise InputError("functions=[] names no function to open", argument="functions")
        for name in self.loaded:
            self._known(name)
        present = None if functions is None else _files.files_of(self.bundle_manifest, self.loaded)
        _files.check_file_set(root, self.bundle_manifest, present)
        self._modules = {
            name: {
                form.key: _modules.read_form(root, view, form)
                for form in _stored.FORMS
                if form.entry(view) is not None
            }
            for name, view in self._views.items()
            if name in self.loaded
        }
        self._tensor_files = _tensor_files.open_tensor_files(
            root, self.bundle_manifest, only=present
        )
        self._keys = (
            None if functions is None else _tensor_files.keys_of(self.bundle_manifest, self.loaded)
        )
        self._unreferenced = (
            _files.open_unreferenced_files(root, self.bundle_manifest) if functions is None else {}
        )
        if self._keys is not None:
            self._hold_used_bytes(self._keys)
        self._shared = _Shared()
        self._device_values = {}  # (file, key) -> its verified array on a device (views share it)
        self._chosen: str | None = None  # the function `select()` chose, if it was asked
        first = self.default_function or next(iter(self._views))
        self._select(first if first in self.loaded else self.loaded[0])
        for modules in self._modules.values() if check_artifacts else ():
            for stored in modules.values():  # one program per form, whichever form a backend runs
                stored.check_artifact()
                _modules.remember(stored)

    def _known(self, name: str) -> None:
        if name not in self._views:
            raise InputError(
                f"no function named {name!r}; the bundle's functions are {self.functions[:20]}",
                argument="name",
            )

    def _hold_used_bytes(self, keys: dict[str, set[str]]) -> None:
        """What the loaded functions use (`keys`: file -> tensors) of each tensor file, in
        private memory and checked: the chunks that hold it, or the whole file where it has
        no chunk digests."""
        for name, tf in sorted(self._tensor_files.items()):
            listed = self.bundle_manifest.files[name]
            if listed.chunks is None:
                _files.check_digest(name, listed.size, _tensor_reading.read_into_memory(tf), listed)
                continue
            chunk, digests = listed.chunks.size, listed.chunks.sha256

            def check(i: int, data: bytes, name: str = name, digests: list[str] = digests) -> None:
                _files.check_chunk(name, i, data, digests[i])

            tf.hold_chunks(chunk, _tensor_files.chunks_for(tf, keys[name], chunk), check)

    def _select(self, name: str) -> None:
        if name not in self._modules:
            raise InputError(
                f"function {name!r} was not loaded: this bundle was loaded with functions "
                f"{self.loaded[:20]} only (load(..., functions=[...]) names the ones to fetch)",
                argument="name",
            )
        self.manifest: Manifest = self._views[name]
        self.modules: dict[str, StoredModule] = self._modules[name]
        signature = self.modules["module"].signature
        if signature is None:  # the module form's check always reads it
            raise ModuleError("@main's signature was not read", path=self.manifest.module.text)
        self.signature: _main_signature.Signature = signature

    @property
    def functions(self) -> list[str]:
        """The bundle's function names, in manifest order (one for a 1.x bundle)."""
        return list(self._views)

    def select(self, name: str | None = None) -> Bundle:
        """The bundle with function `name` selected (a view sharing everything opened); `None`
        keeps the function already selected, or selects the only function, or the default."""
        if name is None and self._chosen is not None:
            return self
        if name is None:
            if len(self.loaded) == 1:  # one function, or the only one loaded
                name = self.loaded[0]
            elif self.default_function is None:
                raise InputError(
                    f"this bundle has functions {self.functions[:20]} and no default function: "
                    "name one (name=..., or --function NAME)",
                    argument="name",
                )
            else:
                name = self.default_function
        self._known(name)
        view = copy.copy(self)
        view._select(name)
        view._chosen = name
        return view

    @property
    def metadata(self) -> Metadata | None:
        """What a model card says of the bundle (SPEC.md 2.12): license, authors..., and
        `card`, the name of its `README.md` when it has one; None before format 2.1."""
        return self.bundle_manifest.metadata

    @property
    def signer(self) -> str | None:
        """Who signed, once `verify(public_key=...)` has checked it (None until then)."""
        return self._shared.signer

    @signer.setter
    def signer(self, value: str | None) -> None:
        self._shared.signer = value

    def __repr__(self) -> str:
        m = self.manifest
        return (
            f"Bundle({str(self.path)!r}, function={m.function!r}, "
            f"arguments={len(m.arguments)}, results={len(m.results)})"
        )

    @property
    def module_text(self) -> str:
        return self.modules["module"].text

    def artifact(self, key: str) -> bytes | None:
        """A form's portable artifact (`"module"`, `"vjp"`, `"batched"`), once it is shown to be
        the same program as the form's text; None when the bundle has no such form."""
        stored = self.modules.get(key)
        if stored is None:
            return None
        stored.check_artifact()
        return stored.portable

    @property
    def portable_artifact(self) -> bytes:
        artifact = self.artifact("module")
        assert artifact is not None, "every bundle has a module (the reader checked it)"
        return artifact

    @property
    def backward_artifact(self) -> bytes | None:
        """The stored backward module's portable artifact, if the bundle has one."""
        return self.artifact("vjp")

    @property
    def batched_artifact(self) -> bytes | None:
        """The stored batched module's portable artifact, if the bundle has one."""
        return self.artifact("batched")

    def executable(self, target: str, sizes: Mapping[str, int] | None = None) -> bytes | None:
        """The stored ahead-of-time executable for `target` (SPEC.md, "Executables"; XLA's of
        a symbolic function, for the symbols' values `sizes`), read once with its sha256
        checked; None when the bundle has none for it. It is native code: whether to run it is
        the runner's decision (`trusted`)."""
        entry = next(
            (
                e
                for e in self.manifest.executables or []
                if e.target == target and (e.sizes or None) == (dict(sizes or {}) or None)
            ),
            None,
        )
        if entry is None:
            return None
        held = self._shared.executables
        if (self.manifest.function, entry.file) not in held:
            data = _files.read_executable_file(self.path, self.manifest, entry.file)
            held[(self.manifest.function, entry.file)] = data
        return held[(self.manifest.function, entry.file)]

    @property
    def trusted(self) -> bool:
        """Whether the bundle's signature was verified with a key or chain the caller gave
        (`verify(public_key=...)`): only then does the runner use stored executables unasked."""
        return self.signer is not None

    def function(
        self,
        backend: BackendName = "auto",
        *,
        name: str | None = None,
        donate: Sequence[str] | str = (),
        devices: int | None = None,
        trust: Trust = Trust.NOTHING,
        max_shapes: int = 16,
        trust_executables: bool | None = None,
        layout: Literal["stored", "producer"] = "stored",
        precision: str | None = None,
    ) -> Function:
        """One of the bundle's functions as a JAX function (see `hlobundle._run._function`),
        or on IREE.

        **Arguments:**

        - `name`: which function (`Bundle.functions`); may be omitted when the bundle has one
          function or a default one.
        - `backend`: `"enzyme"` (enzyme_ad's `hlo_call`), `"xla"` (a `jax.export.Exported`
          of the stored portable artifact; needs only jax), `"auto"` (enzyme when it imports),
          or `"iree"` (IREE's CPU runtime, extra `iree`: NumPy arrays in and out, no jax; not
          a JAX function, so no jit, grad or vmap).
        - `donate`: argument names whose buffers the call may reuse (`jax.jit` donation), or
          `"aliased"` for every argument that a result writes back (`results[k].aliases`).
        - `devices`: for a bundle with a device mesh, run on that many devices (default: the
          mesh's size, placing each argument by its recorded sharding), or 1 to run unsharded.
        - `trust`: what to run though the bundle's signature was not verified with your key:
          `hlobundle.Trust.EXECUTABLES` runs a stored executable (native code, SPEC.md
          "Executables") on iree, and XLA's in the xla backend's eager calls.
          (`trust_executables=True`, its name before 2.1, goes in 3.0.)
        - `max_shapes`: for a function with symbolic dimensions, how many distinct call shapes
          it keeps proven against the module and compiled at once (least recently used first
          out; SPEC.md 2.8). Each new shape is proven (a few ms) and, on xla and enzyme,
          compiled again.
        - `layout`: `"producer"` takes and returns column-major values (a Julia producer's)
          in the producer's orientation, their axes reversed, as `run --layout producer`
          does; `"stored"` (default) in the tensors' own.
        - `precision`: `"highest"` runs every dot and convolution op at HIGHEST precision
          (SPEC.md 2.15: a TPU's DEFAULT for float32 is one bfloat16 pass), on a rewritten
          copy of the modules, never the stored files; None (default) runs them as they ask.
          IREE runs float32 at float32 and takes the modules as stored.

        **Returns:** a callable taking the arguments positionally in manifest order, by name,
        or as the exported pytrees, and returning the results (see docs/jax.md, "Calling a
        bundle from JAX").
        """
        from .._run._function import function

        trust = trust_from(trust, trust_executables, "Bundle.function")
        return function(
            self.select(name), backend, donate, devices, trust, max_shapes, layout, precision
        )

    def to_exported(self) -> Any:
        """The bundle as a `jax.export.Exported` (its portable artifact; the pytrees it was
        exported with, when recorded; the backward module as its VJP). It serializes with
        `Exported.serialize()` (jax's serialization, through `flatbuffers`, a dependency)."""
        from .._run._backends import exported

        return exported(self)

    def verify(
        self,
        *,
        in_memory: bool = True,
        public_key: str | os.PathLike[str] | None = None,
        certificate_chain: Sequence[str | os.PathLike[str]] | None = None,
        device: Any = None,
    ) -> None:
        """Check every file's sha256, that each portable artifact is the same program as its
        text, and that bool tensors hold only 0 and 1; with `public_key` or
        `certificate_chain`, also that the bundle's signature verifies and covers exactly these
        files (`UnsignedError`, `SignatureInvalidError`).

        Module files were checked when the bundle was loaded, from the bytes that run. Tensor
        files are copied into private memory and hashed there, and tensors are read from those
        copies from then on: what was verified is what runs, even if a file changes in place
        later. `in_memory=False` hashes them through the files opened at load instead, without
        a copy: for checking alone, when nothing runs after.

        `device` (a `jax.Device`, `True` for JAX's default one) streams each tensor file onto
        it instead, without a private copy: read in runs, each hashed and put on the device
        from the one buffer it was read into, then joined there tensor by tensor; the arrays
        are used (by `tensor()` and the rest) only once the whole file's digests are the
        manifest's. A file whose tensors cannot go that way (a bool or sub-byte tensor, a
        dtype JAX would convert) is copied as without `device`. A bundle loaded in part holds
        its checked chunks already, and ignores `device`.

        Raises the first problem found as an `HloBundleError`; returns None when the bundle is valid.
        """
        if self._keys is not None:  # loaded in part: check again what is held
            self._hold_used_bytes(self._keys)
        if self._keys is None:
            self._check_tensor_files(in_memory, _device_values.chosen(device))
        for held in self._unreferenced.values():
            held.check()
        for name in self.loaded:
            view = self.select(name)
            for key in view.modules:
                view.artifact(key)
            for entry in view.manifest.executables or []:
                view.executable(entry.target, entry.sizes)
        _tensor_files.check_narrow_values(
            self.bundle_manifest, lambda ref, shape: self._array(ref, "uint8", shape), self._keys
        )
        if public_key is not None or certificate_chain:
            trust = _signature.Verifier(
                Path(public_key) if public_key is not None else None,
                _signature.paths(certificate_chain),
            )
            self.signer = _signing.verify(self.path, self.digests(), trust)

    def _check_tensor_files(self, in_memory: bool, device: Any = None) -> None:
        """Hash every tensor file (into its private copy with `in_memory`), several at once on
        a machine of several cores when there are many bytes, and check each against the
        manifest, in name order. A file with chunk digests (format 2.1) is read and hashed by a
        pool of a thread per core, its sha256 following in its own thread, or recalled from
        its chunk digests (`_file_digests`); another is hashed as it is read (`_hashing_reader`).
        With `device`, a file that can goes to it as it is hashed (`_tensor_streaming`)."""
        from concurrent.futures import ThreadPoolExecutor

        names = sorted(self._tensor_files)
        buffers = None if device is None else _tensor_streaming.RunBuffers(device)
        cores = os.cpu_count() or 1
        if sum(self.manifest.files[n].size for n in names) < _PARALLEL_BYTES:
            cores = 1  # a small bundle: starting threads would cost more than they save
        if cores > 1:
            streaming = device is not None and _device_values.streams(device)
            workers = _tensor_streaming.threads(cores) if streaming else cores
            with (
                ThreadPoolExecutor(workers, thread_name_prefix="hlobundle-chunks") as chunk_pool,
                ThreadPoolExecutor(min(len(names), cores), "hlobundle-verify") as pool,
            ):
                results = list(
                    pool.map(
                        lambda n: self._hash_tensor_file(n, in_memory, chunk_pool, device, buffers),
                        names,
                    )
                )
        else:
            results = [
                self._hash_tensor_file(name, in_memory, None, device, buffers) for name in names
            ]
        for name, (got, digests, arrays) in zip(names, results, strict=True):
            listed = self.manifest.files[name]
            if got is not None:
                _files.check_digest(name, listed.size, got, listed)
            if digests is not None:
                _files.check_chunks(name, digests, listed)
                if got is not None:  # both computed from the same bytes, and both as listed
                    _file_digests.record(listed)
            self._device_values.update({(name, key): a for key, a in arrays.items()})

    def _hash_tensor_file(
        self,
        name: str,
        in_memory: bool,
        chunk_pool: Executor | None,
        device: Any = None,
        buffers: _tensor_streaming.RunBuffers | None = None,
    ) -> tuple[str | None, list[str] | None, dict[str, Any]]:
        """(the sha256, or None where recalled; the chunk digests, or None where unlisted; its
        tensors on `device` where it streamed there, through `buffers`, the load's) of a
        tensor file's bytes: those tensors come from from now on."""
        tf, listed = self._tensor_files[name], self.manifest.files[name]
        tensors = None if device is None else _device_values.planned(self.bundle_manifest, name, tf)
        if tensors is not None and _device_values.streams(device):
            chunk = None if listed.chunks is None else listed.chunks.size
            whole = chunk is None or not _file_digests.recalled(listed)
            return _tensor_streaming.to_device(
                tf, tensors, device, chunk, whole, chunk_pool, buffers
            )
        got, digests = self._hashed(name, in_memory or tensors is not None, chunk_pool)
        arrays = {} if tensors is None else _device_values.from_copy(tf, tensors, device)
        return got, digests, arrays

    def _hashed(
        self, name: str, in_memory: bool, chunk_pool: Executor | None
    ) -> tuple[str | None, list[str] | None]:
        tf, listed = self._tensor_files[name], self.manifest.files[name]
        if listed.chunks is not None and chunk_pool is not None:
            whole = not _file_digests.recalled(listed)
            if in_memory or (tf.untouched and not whole):
                size = listed.chunks.size
                return _tensor_reading.chunk_digests(
                    tf, size, chunk_pool, in_memory=in_memory, whole=whole
                )
        chunks = _files.chunk_hasher(listed)
        read = _tensor_reading.read_into_memory if in_memory else _tensor_reading.sha256
        got = read(tf, chunks)
        return got, None if chunks is None else chunks.finish()

    def checked_sha256(self, name: str) -> str:
        """The sha256 of a module or tensor file of the bundle, computed from the bytes it is
        used from (a module file's as read at load, a tensor file's now) and checked against
        the manifest (`HASH_MISMATCH`)."""
        for stored in (m for modules in self._modules.values() for m in modules.values()):
            if name in (stored.text_file, stored.portable_file):
                return stored.text_sha256 if name == stored.text_file else stored.portable_sha256
        if name not in self._tensor_files:
            raise InputError(f"{name!r} is not a module or tensor file of {self.path}", path=name)
        listed = self.manifest.files[name]
        _files.check_digest(
            name, listed.size, _tensor_reading.sha256(self._tensor_files[name]), listed
        )
        return listed.sha256

    def tensor_sha256(self, name: str) -> str:
        """The sha256 of argument `name`'s stored value: its bytes as its tensor file holds
        them (SPEC.md, "Fingerprint")."""
        import hashlib

        try:
            value = self.manifest.argument(name).value
        except KeyError:  # no such argument (or an unhashable name): the same refusal
            value = None
        if value is None:
            raise InputError(f"argument {name!r} has no stored value", argument=name)
        data = self._tensor_files[value.file].stored_bytes(value.key)
        return hashlib.sha256(data.data).hexdigest()

    def fingerprint(self, name: str | None = None) -> str:
        """A digest of what function `name` computes (`sha256:...`; SPEC.md, "Fingerprint"):
        its signature, its module forms (their portable artifacts) and the bytes of the weights
        it uses, not provenance, file names, chunking or shards. With `name` None, the
        bundle's: every function's, by name, and the default function."""
        from ._fingerprint import fingerprint

        return fingerprint(self, name)

    def digests(self) -> dict[str, str]:
        """The sha256 of every file a signature covers: the listed files (as the manifest says,
        which `verify()` checks) and the manifest (as read)."""
        return {
            **{name: entry.sha256 for name, entry in self.manifest.files.items()},
            MANIFEST_NAME: self.manifest_sha256,
        }

    @property
    def signed(self) -> bool:
        """Whether the bundle has a signature file (unverified: `verify(public_key=...)` checks it)."""
        return _signature_file.present(self.path)

    def _file(self, name: str) -> Path:
        return _opening.resolve(self.path, name)

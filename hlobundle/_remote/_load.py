"""`load()` of a local path or a remote reference (docs/distribution.md, "Loading remotely"):
for `oci://` and `https://`, first the manifest, then only what the chosen functions use: their
module files, whole, and of each tensor file the chunks (SPEC.md 2.9) that hold its header and
their tensors. Every chunk is checked against its digest before it is kept, and checked again
by the reader from the copy it runs from. Fetched bytes are kept once, in the remote bundle's
directory, and the store (`_store`) records where they lie, for a later load of other bundles
that share them."""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import tempfile
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._bundle_io import _signing
from .._bundle_io._tensors import MAX_HEADER_BYTES, TensorFile
from .._format import _chunks, _limits, _paths, _prechecks, _signature
from .._format._bundle_manifest import functions_of
from .._format._errors import (
    HashMismatchError,
    InputError,
    LimitError,
    ManifestError,
    SizeMismatchError,
    UnsafePathError,
)
from .._format._fields import MANIFEST_NAME
from .._format._manifest_json import parse_manifest
from .._read import _files, _reader, _store, _tensor_files
from .._read._reader import Bundle
from . import _sources
from ._sources import TIMEOUT_S, Source

if TYPE_CHECKING:
    from .._format._manifest import Chunks, FileEntry
    from .._read._files import AnyManifest

MAX_RUN = 64  # chunks fetched by one range request at most


EVERY: Sequence[str] = ("every function",)  # `functions=EVERY`: all (what inspect, diff... read)


def load(
    path: str | os.PathLike[str],
    *,
    functions: Sequence[str] | None = None,
    verify: bool = False,
    public_key: str | os.PathLike[str] | None = None,
    certificate_chain: Sequence[str | os.PathLike[str]] | None = None,
    insecure: bool = False,
    timeout: float = TIMEOUT_S,
    device: Any = None,
) -> Bundle:
    """Open a bundle, local or remote, and check everything but the tensor checksums
    (`Bundle.verify()` adds those; a remote bundle's used bytes are always checked).

    Loading checks the structure, the format version, the path rules, every file's size, and
    that the manifest, `@main`'s signature and the safetensors headers agree. Every module file
    is read once into memory, its sha256 checked and parsed from those bytes, which are the
    ones that run; each form's text and portable artifact must be one program. Tensor data is
    not read: `Bundle.tensor()` maps it lazily from the files opened here.

    `path` may be a reference: `oci://HOST[:PORT]/REPO[:TAG|@sha256:DIGEST]` (an artifact that
    `push` wrote) or `https://HOST/PATH/B.hlobundle/` (any server that honours Range). Then only
    the manifest and what `functions` use is fetched (docs/distribution.md, "Loading
    remotely"), each byte checked against the manifest before it is kept, and held in private
    memory; over https, the manifest is the server's word unless `public_key` or
    `certificate_chain` verifies the bundle's signature.

    **Arguments:**

    - `functions`: the functions to open (default: the default function, or the only one);
      others cannot be selected. For a local bundle, default all.
    - `verify`: also run `Bundle.verify()`, reading every tensor file into private memory first,
      so that the tensors used are exactly the bytes whose sha256 was checked.
    - `public_key`, `certificate_chain`: require the bundle to be signed (SPEC.md, "Signature")
      by this key (a PEM file), or by a certificate this chain trusts. Implies `verify`: what
      runs is exactly what was signed.
    - `device`: with `verify` (or a key), a `jax.Device` (`True`: JAX's default device) that
      a local bundle's stored tensors go to as they are hashed, each run of a tensor file put
      there from the buffer it was hashed in, instead of a private copy on the host:
      `tensor()`, `parameters()`, `example_args()` and the stored parameters of `function()`
      are then arrays on it, exactly the bytes whose sha256 was checked (`Bundle.verify`). A
      bundle loaded in part holds its checked bytes already, and ignores it.
    - `insecure`, `timeout`: for a remote bundle, plain HTTP to a host that is not loopback,
      and the seconds to wait for a connection or between two reads.
    """
    text = os.fspath(path)
    if isinstance(text, str) and _paths.is_remote(text):
        with _sources.open_source(text, insecure=insecure, timeout=timeout) as source:
            bundle = _load_remote(source, functions, public_key, certificate_chain)
        if verify:
            bundle.verify()
        return bundle
    if functions is None or functions is EVERY:
        return _reader.load(
            path,
            verify=verify,
            public_key=public_key,
            certificate_chain=certificate_chain,
            device=device,
        )
    bundle = Bundle(Path(path), functions=list(functions))
    if verify or public_key is not None or certificate_chain:
        bundle.verify(public_key=public_key, certificate_chain=certificate_chain)
    return bundle


def _load_remote(
    source: Source,
    functions: Sequence[str] | None,
    public_key: str | os.PathLike[str] | None,
    certificate_chain: Sequence[str | os.PathLike[str]] | None,
) -> Bundle:
    raw = source.manifest()
    manifest = parse_manifest(raw, path=MANIFEST_NAME)
    digest = hashlib.sha256(raw).hexdigest()
    names = _chosen(manifest, functions)
    _check_names(manifest.files)
    needed = _files.files_of(manifest, names)
    for name in needed:
        if name not in manifest.files:
            raise ManifestError(f"a field names {name!r}, which is not in files", field="files")
    _check_sizes(manifest, names)
    root = _root(digest)
    _write_whole(root, root / MANIFEST_NAME, raw)
    store = _store.Store()
    keys = _tensor_files.keys_of(manifest, names)
    for name in sorted(needed):
        entry = manifest.files[name]
        source.check_listed(name, entry.size, entry.sha256)
        if name in keys and entry.chunks is not None:
            _fetch_chunks(source, store, root, name, entry, entry.chunks, keys[name], manifest)
        else:
            _fetch_whole(source, store, root, name, entry)
    trust = None
    if public_key is not None or certificate_chain:
        trust = _signature.Verifier(
            Path(public_key) if public_key is not None else None,
            _signature.paths(certificate_chain),
        )
        candidates = source.signatures()  # before anything is opened: nothing fetched later
    bundle = Bundle(root, functions=names)
    if bundle.manifest_sha256 != digest:
        raise HashMismatchError(
            f"{root / MANIFEST_NAME} changed after it was fetched", path=MANIFEST_NAME
        )
    if trust is not None:
        bundle.signer = _signed(root, bundle, trust, candidates, source.ref)
    bundle.remote = source.ref
    return bundle


def _check_names(files: Mapping[str, FileEntry]) -> None:
    """Every listed name is safe, and none is a directory another listed name (or the
    manifest, or its signature) needs: both could not be written into one directory."""
    reserved = (MANIFEST_NAME, _signature.SIGNATURE_NAME)
    for name in sorted(set(files) & set(reserved)):
        raise ManifestError(
            f"files lists {name}, a name the bundle's directory reserves",
            field=f"files[{name!r}]",
        )
    _paths.check_tree(files, reserved)


def _check_sizes(manifest: Any, names: list[str]) -> None:
    """The limits on module and executable files (SPEC.md, "Limits"), before any is fetched:
    what the reader would refuse is not downloaded first."""
    for prefix, view in _files.each_function(manifest):
        if view.function not in names:
            continue
        for field, name in _files.function_references(view):
            size = manifest.files[name].size
            if field.startswith("executables["):
                if size > _limits.MAX_EXECUTABLE_BYTES:
                    raise LimitError(
                        f"{prefix}{field}: {name} is {size} bytes; executables are limited to "
                        f"{_limits.MAX_EXECUTABLE_BYTES} (SPEC.md, 'Limits')",
                        path=name,
                    )
            elif field.startswith(("module.", "vjp.", "batched.")):
                _prechecks.check_module_size(size, path=name)


def _chosen(manifest: AnyManifest, functions: Sequence[str] | None) -> list[str]:
    views, default = functions_of(manifest)
    if functions is EVERY:
        return list(views)
    if functions is None:
        if len(views) > 1 and default is None:
            raise InputError(
                f"this bundle has functions {list(views)[:20]} and no default function: name "
                "the ones to load (functions=[...], or --function NAME)",
                argument="functions",
            )
        return [default or next(iter(views))]
    names = list(dict.fromkeys(functions))
    if not names:
        raise InputError("functions=[] names no function to load", argument="functions")
    for name in names:
        if name not in views:
            raise InputError(
                f"no function named {name!r}; the bundle's functions are {list(views)[:20]}",
                argument="functions",
            )
    return names


def _root(digest: str) -> Path:
    root = _store.view_directory(digest)
    if root is None:  # no cache: a directory of its own, removed when the process ends
        root = Path(tempfile.mkdtemp(prefix="hlobundle-remote-"))
        weakref.finalize(root, shutil.rmtree, str(root), True)
        _TEMPORARY.append(root)
    return root


_TEMPORARY: list[Path] = []  # kept alive to the end of the process (their finalizers then run)


def _write_whole(root: Path, target: Path, data: bytes) -> None:
    """`target` holds exactly `data` (written to a new file and renamed over it)."""
    try:
        if _read_at_most(target, len(data)) == data:
            return
    except OSError:
        pass
    _write_new(root, target, [data])


def _write_new(
    root: Path, target: Path, pieces: Iterable[bytes], check: Callable[[], None] | None = None
) -> None:
    """Write `pieces` to a new file, then (once `check` passes) rename it to `target`. The new
    file is made beside `root`, not in it: a load of the same bundle running meanwhile, which
    lists `root`, never finds a file it does not know there; one that fails is removed."""
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, temporary = tempfile.mkstemp(dir=root.parent, prefix=f".partial-{root.name[:16]}-")
    try:
        with os.fdopen(fd, "wb") as f:
            for piece in pieces:
                f.write(piece)
        if check is not None:
            check()
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)  # ours: made just now
        raise


def _fetch_whole(
    source: Source, store: _store.Store, root: Path, name: str, entry: FileEntry
) -> None:
    """A listed file, whole, checked against its size, sha256 (and chunk digests) as it is
    written to disk, a piece at a time: never whole in memory."""
    target = root.joinpath(*name.split("/"))
    try:
        with open(target, "rb") as f:
            _Hashed(name, entry, iter(lambda: f.read(_sources.PIECE), b"")).drain()
        return  # already here, checked
    except (OSError, HashMismatchError, SizeMismatchError):
        pass
    stored = store.pieces(entry.sha256, entry.size)
    if stored is not None:
        try:
            hashed = _Hashed(name, entry, stored)
            _write_new(root, target, hashed, hashed.check)
            store.remember(entry.sha256, target)
            return
        except (HashMismatchError, SizeMismatchError):
            pass  # changed where the store found it: fetched again
    pieces = iter(()) if entry.size == 0 else _range(source, name, entry.size, 0, entry.size)
    hashed = _Hashed(name, entry, pieces)
    _write_new(root, target, hashed, hashed.check)
    store.remember(entry.sha256, target)


class _Hashed:
    """`pieces` passed on, hashed as they pass (sha256 and chunk digests); `check()` then
    compares them with the file's entry. Refused as soon as they run past its size."""

    def __init__(self, name: str, entry: FileEntry, pieces: Iterable[bytes]) -> None:
        self.name, self.entry, self.pieces = name, entry, pieces
        self.h, self.got = hashlib.sha256(), 0
        self.chunks = _files.chunk_hasher(entry)

    def __iter__(self) -> Iterator[bytes]:
        for piece in self.pieces:
            self.got += len(piece)
            if self.got > self.entry.size:
                raise SizeMismatchError(
                    f"{self.name} is over the {self.entry.size} bytes the manifest says",
                    path=self.name,
                    field=f"files[{self.name!r}].size",
                )
            self.h.update(piece)
            if self.chunks is not None:
                self.chunks.update(piece)
            yield piece

    def check(self) -> None:
        _files.check_digest(self.name, self.got, self.h.hexdigest(), self.entry)
        if self.chunks is not None:
            _files.check_chunks(self.name, self.chunks.finish(), self.entry)

    def drain(self) -> None:
        for _ in self:
            pass
        self.check()


def _read_at_most(path: Path, size: int) -> bytes:
    with open(path, "rb") as f:
        return f.read(size + 1)


def _fetch_chunks(
    source: Source,
    store: _store.Store,
    root: Path,
    name: str,
    entry: FileEntry,
    chunks: Chunks,
    keys: set[str],
    manifest: Any,
) -> None:
    """Of a tensor file with chunk digests, the chunks holding its header and tensors `keys`,
    written into a sparse file of its listed size (the rest of it never written)."""
    target = root.joinpath(*name.split("/"))
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        fd = os.open(target, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except OSError as e:
        raise UnsafePathError(f"{target} cannot be opened: {e.strerror}", path=name) from None
    try:
        if os.fstat(fd).st_size != entry.size:
            try:
                os.ftruncate(fd, entry.size)
            except OSError as e:  # EFBIG, ENOSPC
                raise LimitError(
                    f"{name}: a file of {entry.size} bytes cannot be made in {root} ({e.strerror})",
                    path=name,
                ) from None
        fill = _Filler(source, store, (fd, target), name, entry, chunks)
        fill(_chunks.covering(entry.size, chunks.size, 0, 8))
        (n,) = struct.unpack("<Q", os.pread(fd, 8, 0).ljust(8, b"\0"))
        # The reader's limit on this header (for every tensor the manifest lists in the
        # file): a larger one it refuses, so it is not fetched.
        limit = _tensor_files.header_budget(
            [ref.key for _, ref, _, _ in _tensor_files.stored_tensors(manifest) if ref.file == name]
        )
        if n <= min(limit, MAX_HEADER_BYTES):
            fill(_chunks.covering(entry.size, chunks.size, 0, min(entry.size, 8 + n)))
        tf = TensorFile(target, name=name, header_limit=limit, with_safetensors=False)
        # a key the header lacks: fetched for nothing (the reader refuses it, naming its field)
        fill(sorted(_tensor_files.chunks_for(tf, keys & set(tf.entries), chunks.size)))
    finally:
        os.close(fd)


class _Filler:
    """Writes missing chunks of one tensor file (`file`: its descriptor and path): from where
    the store finds them, else from the source (runs of consecutive chunks in one range
    request), each checked against its digest first; the store records where each now lies."""

    def __init__(
        self,
        source: Source,
        store: _store.Store,
        file: tuple[int, Path],
        name: str,
        entry: FileEntry,
        chunks: Chunks,
    ):
        self.source, self.store, self.name, self.entry = source, store, name, entry
        self.fd, self.path = file
        self.chunk, self.digests = chunks.size, chunks.sha256

    def __call__(self, indices: Sequence[int] | range) -> None:
        missing = []
        for i in indices:
            begin, end = _chunks.span(self.entry.size, self.chunk, i)
            if hashlib.sha256(os.pread(self.fd, end - begin, begin)).hexdigest() == self.digests[i]:
                continue  # already here
            data = self.store.get(self.digests[i], end - begin)
            if data is not None:
                self._keep(i, data, begin)
            else:
                missing.append(i)
        for run in _runs(missing):
            self._fetch(run)

    def _fetch(self, run: list[int]) -> None:
        size = self.entry.size
        begin, end = (
            _chunks.span(size, self.chunk, run[0])[0],
            _chunks.span(size, self.chunk, run[-1])[1],
        )
        buffer, i = bytearray(), run[0]
        for piece in _range(self.source, self.name, size, begin, end):
            buffer += piece
            while i <= run[-1]:
                b, e = _chunks.span(size, self.chunk, i)
                if len(buffer) < e - b:
                    break
                data = bytes(buffer[: e - b])
                del buffer[: e - b]
                _files.check_chunk(self.name, i, data, self.digests[i])
                self._keep(i, data, b)
                i += 1

    def _keep(self, i: int, data: bytes, begin: int) -> None:
        """Chunk `i`, checked, written at `begin`; the store's record of it now names this
        place (the newest, last to be pruned)."""
        os.pwrite(self.fd, data, begin)
        self.store.remember(self.digests[i], self.path, begin)


def _runs(indices: list[int]) -> list[list[int]]:
    runs: list[list[int]] = []
    for i in sorted(indices):
        if runs and runs[-1][-1] == i - 1 and len(runs[-1]) < MAX_RUN:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


def _range(source: Source, name: str, size: int, begin: int, end: int) -> Iterator[bytes]:
    """Bytes `[begin, end)` of a listed file, in pieces; from a whole-file answer (a server that
    ignores Range), only those bytes are kept, and the answer is closed past them."""
    at, pieces = source.pieces(name, size, begin, end)  # `begin`, or 0 for a whole file
    try:
        for piece in pieces:
            lo, hi = max(begin - at, 0), min(end - at, len(piece))
            if lo < hi:
                yield piece[lo:hi]
            at += len(piece)
    finally:
        pieces.close()


def _signed(
    root: Path, bundle: Bundle, trust: _signature.Verifier, candidates: list[bytes], ref: str
) -> str:
    """Who signed: the first candidate signature that verifies against the bundle's digests
    (which cover every listed file and the manifest as fetched); written as its model.sig."""
    from .._format._errors import SignatureInvalidError, UnsignedError

    path = root / _signature.SIGNATURE_NAME
    if not candidates:
        path.unlink(missing_ok=True)  # one an earlier load of ours wrote
        raise UnsignedError(f"{ref} has no signature", path=_signature.SIGNATURE_NAME)
    failed: SignatureInvalidError | None = None
    for candidate in candidates:
        _write_whole(root, path, candidate)
        try:
            return _signing.verify(root, bundle.digests(), trust)
        except SignatureInvalidError as e:
            failed = e
    path.unlink(missing_ok=True)
    why = failed.message if failed is not None else "none was tried"
    raise SignatureInvalidError(
        f"{ref}: no signature of the {len(candidates)} found verifies ({why})",
        path=_signature.SIGNATURE_NAME,
    )

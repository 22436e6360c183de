"""Remote loading against a hostile server and manifest (docs/distribution.md, "Loading
remotely"): every attack here gets a coded error, fetches no more than the reader would use,
and holds no more in memory than the chunks used."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from helpers import functions_over_weights
from http_static import Sparse, StaticServer

import hlobundle
from hlobundle._format import _chunks, _limits
from hlobundle.errors import (
    FileUnlistedError,
    InputError,
    LimitError,
    ManifestError,
    RegistryProtocolError,
    RegistryUnreachableError,
    TensorMismatchError,
    UnsafePathError,
)

WEIGHTS = "weights.safetensors"


@pytest.fixture(scope="module")
def original(tmp_path_factory) -> Path:
    """Two functions `f0`, `f1`, each `tanh(x @ wK) * K` over its own weight of 1.5 MB, both
    in one chunked weights.safetensors."""
    return functions_over_weights(tmp_path_factory.mktemp("attacks") / "two.hlobundle", 2)


@pytest.fixture
def site(original, tmp_path, monkeypatch):
    """A copy of the bundle to make hostile, served as /b.hlobundle/; its own store."""
    monkeypatch.setenv("HLOBUNDLE_CACHE_DIR", str(tmp_path / "cache"))
    shutil.copytree(original, tmp_path / "site" / "b.hlobundle")
    server = StaticServer(tmp_path / "site")
    yield tmp_path / "site" / "b.hlobundle", server
    server.close()


def edit(bundle: Path, change) -> None:  # noqa: ANN001
    m = json.loads((bundle / "manifest.json").read_bytes())
    change(m)
    (bundle / "manifest.json").write_text(json.dumps(m))


def ref(server: StaticServer) -> str:
    return server.url + "b.hlobundle/"


def fetched(server: StaticServer) -> list[str]:
    return sorted({path.removeprefix("/b.hlobundle/") for path, _ in server.requests})


def sparse_weights(original: Path, total: int, chunk: int) -> tuple[bytes, int, str]:
    """A weights file of `total` bytes: f0's weight as it is, then f1's, of `total` bytes
    less (zeros, never held): its first bytes, f1's element count, its first chunk's digest."""
    data = (original / WEIGHTS).read_bytes()
    n = int.from_bytes(data[:8], "little")
    begin, end = json.loads(data[8 : 8 + n])["p_w0"]["data_offsets"]
    w0 = data[8 + n + begin : 8 + n + end]
    width = 256  # the header, padded to this many bytes
    count = (total - 8 - width - len(w0)) // 4
    header = {
        "p_w0": {"dtype": "F32", "shape": [8, 48_000], "data_offsets": [0, len(w0)]},
        "p_w1": {"dtype": "F32", "shape": [count], "data_offsets": [len(w0), len(w0) + 4 * count]},
    }
    raw = json.dumps(header).encode()
    raw += b" " * (width - len(raw) + (total - 8 - width - len(w0)) % 4)
    prefix = struct.pack("<Q", len(raw)) + raw + w0
    assert 8 + len(raw) + len(w0) + 4 * count == total
    first = hashlib.sha256(prefix + bytes(min(chunk, total) - len(prefix))).hexdigest()
    return prefix, count, first


def serve_sparse(bundle: Path, server: StaticServer, original: Path, total: int, chunk: int):
    """The bundle's weights file replaced by one of `total` bytes, of which f0 uses its first
    chunk (listed with its true digest; the others' digests are never checked)."""
    prefix, count, first = sparse_weights(original, total, chunk)

    def change(m: dict) -> None:
        m["files"][WEIGHTS] = {
            "size": total,
            "sha256": "0" * 64,
            "chunks": {"size": chunk, "sha256": [first] + ["1" * 64] * (-(-total // chunk) - 1)},
        }
        m["functions"][1]["arguments"][0]["shape"] = [count]

    edit(bundle, change)
    server.files["/b.hlobundle/" + WEIGHTS] = Sparse(total, prefix)


def test_no_function_named_is_an_input_error(site, original):
    """`functions=[]`, remote or local: was an IndexError from the reader."""
    _, server = site
    with pytest.raises(InputError):
        hlobundle.load(ref(server), functions=[])
    with pytest.raises(InputError):
        hlobundle.load(original, functions=[])


def test_a_key_the_tensor_file_lacks_is_a_coded_error(site):
    """A manifest naming a tensor the chunked file's header does not hold: was a KeyError
    from the loader, before the reader could name the field."""
    bundle, server = site
    edit(bundle, lambda m: m["functions"][0]["arguments"][0]["value"].update(key="nope"))
    with pytest.raises(TensorMismatchError, match="nope"):
        hlobundle.load(ref(server), functions=["f0"])


@pytest.mark.parametrize("outer", ["a", "manifest.json", "model.sig"])
def test_a_file_listed_inside_another_is_refused_before_anything_is_fetched(site, outer):
    """`a` and `a/b` both listed (or a file under the manifest's own name): one directory
    cannot hold both; was a FileExistsError once the first was written."""
    bundle, server = site
    text, portable = (bundle / "f0/module.mlir"), (bundle / "f0/module.mlirbc")

    def change(m: dict) -> None:
        module = m["functions"][0]["module"]
        m["files"][outer] = m["files"].pop("f0/module.mlir")
        m["files"][f"{outer}/b"] = m["files"].pop("f0/module.mlirbc")
        module["text"], module["portable"]["file"] = outer, f"{outer}/b"

    edit(bundle, change)
    server.files["/b.hlobundle/a"] = text.read_bytes()
    server.files["/b.hlobundle/a/b"] = portable.read_bytes()
    with pytest.raises((UnsafePathError, ManifestError)):
        hlobundle.load(ref(server), functions=["f0"])
    assert fetched(server) == ["manifest.json"]


def test_a_module_over_the_limit_is_refused_before_it_is_fetched(site):
    """The reader refuses a module file over MAX_MODULE_BYTES: the loader fetched it first,
    whole, into memory (twice over), however large the manifest said it was."""
    bundle, server = site
    size = _limits.MAX_MODULE_BYTES + 1
    edit(bundle, lambda m: m["files"]["f0/module.mlir"].update(size=size))
    server.files["/b.hlobundle/f0/module.mlir"] = Sparse(size, b"")
    with pytest.raises(LimitError):
        hlobundle.load(ref(server), functions=["f0"])
    assert fetched(server) == ["manifest.json"] and server.sent < 1 << 20


def test_a_server_that_ignores_range_is_not_read_past_what_was_asked(site, original):
    """A server that answers a range request with the whole file (Python's http.server
    does): for a range from byte 0, the loader read, and held, the whole file."""
    bundle, server = site
    total = 64 << 20
    serve_sparse(bundle, server, original, total, 4 << 20)
    server.mode = "ignore-range"
    b = hlobundle.load(ref(server), functions=["f0"])
    assert server.sent < 16 << 20
    assert b.tensor("p_w0").shape == (8, 48_000)


@pytest.mark.slow  # a sparse file of 1 TiB, served and read by chunk
def test_a_tensor_file_larger_than_memory_holds_only_its_chunks(site, original):
    """A remote load holds the chunks used in an anonymous mapping the size of the file: of a
    1 TiB file, the kernel refused that mapping (ENOMEM, a raw OSError) where memory and
    swap are smaller, though only one 16 MiB chunk is used."""
    import resource

    bundle, server = site
    total, chunk = 1 << 40, 16 << 20
    cap = resource.getrlimit(resource.RLIMIT_AS)[0]
    if cap != resource.RLIM_INFINITY and cap < 2 * total:  # limit_memory() ran in this process
        pytest.skip(f"this process's address space is capped at {cap} bytes")
    serve_sparse(bundle, server, original, total, chunk)
    try:
        b = hlobundle.load(ref(server), functions=["f0"])
    except LimitError as e:
        if "cannot be made" in e.message:
            pytest.skip(f"this file system holds no sparse file of 1 TiB: {e.message}")
        raise
    manifest = (bundle / "manifest.json").stat().st_size
    assert server.sent < chunk + manifest + (1 << 20)
    assert b.tensor("p_w0")[0, 0] == -1.0
    b.verify()


def test_a_header_over_the_readers_budget_is_not_fetched(site):
    """The reader allows a safetensors header a budget per listed tensor (64 KiB and 1 KiB
    each); the loader fetched headers up to safetensors' own 100 MiB first."""
    bundle, server = site
    data = (bundle / WEIGHTS).read_bytes()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + n])
    header["__metadata__"] = {"pad": "x" * (5 << 20)}
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    new = struct.pack("<Q", len(raw)) + raw + data[8 + n :]
    (bundle / WEIGHTS).write_bytes(new)

    def change(m: dict) -> None:
        chunks = {"size": 1 << 20, "sha256": _chunks.digests_of([new], 1 << 20)}
        m["files"][WEIGHTS] = {
            "size": len(new),
            "sha256": hashlib.sha256(new).hexdigest(),
            "chunks": chunks,
        }

    edit(bundle, change)
    with pytest.raises(LimitError, match="header"):
        hlobundle.load(ref(server), functions=["f0"])
    assert server.sent < 2 << 20  # the first chunk; not the header's five


def test_no_load_leaves_a_file_in_the_bundles_directory_that_another_would_find(site, monkeypatch):
    """A file being written went first to a temporary name in the bundle's directory: a load
    of the same bundle running meanwhile (or any later one, where that write failed and left
    it) found a file the manifest does not list (FILE_UNLISTED)."""
    from hlobundle._read._reader import Bundle

    bundle, server = site
    hlobundle.load(ref(server), functions=["f0"])
    views = list((bundle.parents[1] / "cache" / "remote").iterdir())
    (view,) = (v for v in views if v.is_dir())
    seen: list[BaseException] = []
    real = os.replace

    def meanwhile(a, b):  # noqa: ANN001
        try:
            Bundle(view, functions=["f0"])  # another load of f0, while f1 is being written
        except FileUnlistedError as e:
            seen.append(e)
        return real(a, b)

    monkeypatch.setattr(os, "replace", meanwhile)
    hlobundle.load(ref(server), functions=["f1"])
    assert seen == []

    def failing(a, b):  # noqa: ANN001
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", failing)
    for path in view.rglob("f1/*"):
        path.unlink()
    with pytest.raises(OSError):
        hlobundle.load(ref(server), functions=["f1"])
    monkeypatch.setattr(os, "replace", real)
    assert not [p for p in view.parent.rglob(".partial-*")]
    hlobundle.load(ref(server), functions=["f0"])  # and the bundle still opens


def test_a_large_file_without_chunk_digests_is_not_whole_in_memory_twice(site):
    """A file fetched whole (a module, an executable, a tensor file without chunk digests)
    was joined in memory from its pieces: twice its size held at once, before the reader
    held its own copy."""
    bundle, server = site
    from hlobundle._bundle_io import _tensor_writing
    from hlobundle._format import _dtypes

    rows = 1 << 20  # x: 1M x 8 float32, 32 MiB
    path = bundle / "f0" / "inputs.safetensors"
    x = np.zeros((rows, 8), np.float32)
    digest = _tensor_writing.write(path, {"x": (x, _dtypes.BY_NAME["float32"])})
    del x

    def change(m: dict) -> None:
        m["files"]["f0/inputs.safetensors"] = {"size": path.stat().st_size, "sha256": digest}
        m["functions"][0]["results"][0].pop("expected")
        m["files"].pop("f0/expected.safetensors")

    edit(bundle, change)
    tracemalloc.start()
    try:
        b = hlobundle.load(ref(server), functions=["f0"])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert b.tensor("x").shape == (rows, 8)
    assert peak < 1.5 * (32 << 20)  # the reader's one copy, and pieces


@pytest.mark.slow  # a drip for half a second, by design
def test_a_server_that_drips_its_bytes_is_cut_off(site, monkeypatch):
    """A byte every 50 ms keeps every read inside its timeout, for ever; the rate over a window
    does not (here 0.5 s instead of 30, for a fast test)."""
    from hlobundle._oci import _network

    monkeypatch.setattr(_network, "RATE_WINDOW_S", 0.5)
    _, server = site
    server.mode = "drip"
    started = time.monotonic()
    with pytest.raises(RegistryUnreachableError, match="slower than 1024 bytes/s"):
        hlobundle.load(ref(server), timeout=1)
    took = time.monotonic() - started  # within a few windows, not at some multiple of one
    assert took < 5 * 0.5, f"cut off after {took:.2f} s, the window 0.5 s"


def test_an_encoded_answer_is_refused_not_decompressed(site):
    """A body sent with a Content-Encoding, though identity was asked (a gzip bomb here), is
    refused before a byte of it is decompressed."""
    from http_static import gzip_bomb

    _, server = site
    server.mode = "gzip"
    gzip_bomb()  # made before memory is traced: the server's, not the client's
    tracemalloc.start()
    try:
        with pytest.raises(RegistryProtocolError, match="Content-Encoding 'gzip'"):
            hlobundle.load(ref(server))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20


def test_a_field_naming_a_file_not_in_files_is_refused_before_any_file_is_fetched(site):
    """A module field naming a file the manifest does not list: the reader's file-set check
    would refuse it, but a remote load fetches what the fields name before that runs."""
    bundle, server = site
    edit(bundle, lambda m: m["functions"][0]["module"].update(text="nope.mlir"))
    with pytest.raises(
        hlobundle.errors.ManifestError, match="names 'nope.mlir', which is not in files"
    ) as e:
        hlobundle.load(ref(server), functions=["f0"])
    assert e.value.code == "MANIFEST_INVALID" and e.value.field == "files"
    assert fetched(server) == ["manifest.json"]


@pytest.mark.parametrize("reserved", ["manifest.json", "model.sig"])
def test_files_listing_a_name_the_directory_reserves_is_refused_before_any_file_is_fetched(
    site, reserved
):
    """A remote bundle is written into a directory of the store: a listed manifest.json would
    overwrite the manifest it was checked against, a listed model.sig stand in for a signature."""
    bundle, server = site
    edit(bundle, lambda m: m["files"].update({reserved: {"size": 2, "sha256": "0" * 64}}))
    with pytest.raises(
        hlobundle.errors.ManifestError, match="a name the bundle's directory reserves"
    ) as e:
        hlobundle.load(ref(server), functions=["f0"])
    assert e.value.field == f"files[{reserved!r}]"
    assert fetched(server) == ["manifest.json"]


def test_an_executable_over_the_limit_is_refused_before_it_is_fetched(site):
    """An executable the manifest lists at over MAX_EXECUTABLE_BYTES: refused by its listed
    size, before a byte of it is asked for (the reader would refuse it only once it was here)."""
    bundle, server = site
    size = _limits.MAX_EXECUTABLE_BYTES + 1
    name = "f0/module.llvm-cpu.vmfb"

    def listed(m):
        f0 = m["functions"][0]
        f0["executables"] = [
            {
                "target": "llvm-cpu",
                "file": name,
                "compiler": "iree",
                "compiler_version": "3.13.0",
                "architecture": "x86_64",
                "cpu": "generic",
                "source_sha256": m["files"][f0["module"]["portable"]["file"]]["sha256"],
            }
        ]
        m["files"][name] = {"size": size, "sha256": "0" * 64}

    edit(bundle, listed)
    server.files[f"/b.hlobundle/{name}"] = Sparse(size, b"")
    with pytest.raises(LimitError, match=f"{name} is {size} bytes; executables are limited to"):
        hlobundle.load(ref(server), functions=["f0"])
    assert fetched(server) == ["manifest.json"]


def test_a_manifest_changed_in_the_store_after_its_fetch_is_refused(site, monkeypatch):
    """Another process rewriting the fetched manifest.json in the store between its fetch and
    the reader's open (the same JSON, other bytes): what the reader checked is not what was
    fetched, so the load is refused."""
    from hlobundle._remote import _load

    bundle, server = site
    real = _load.Bundle

    def rewritten(root, **kwargs):
        manifest = root / "manifest.json"
        manifest.chmod(0o600)
        manifest.write_bytes(manifest.read_bytes() + b"\n")
        return real(root, **kwargs)

    monkeypatch.setattr(_load, "Bundle", rewritten)
    with pytest.raises(hlobundle.errors.HashMismatchError, match="changed after it was fetched"):
        hlobundle.load(ref(server), functions=["f0"])

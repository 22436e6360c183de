"""Remote loading (docs/distribution.md, "Loading remotely"): `load("https://...")` and
`load("oci://...")` fetch the manifest, then only what the chosen function uses (its module
files, and the chunks of the shared weights file that hold its tensors), each checked against
the manifest before it is kept; the store keeps what was fetched. A hostile server gets a
coded error."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from helpers import assert_close, functions_over_weights, new_key
from http_static import StaticServer

import hlobundle
from hlobundle._format import _chunks
from hlobundle.errors import (
    HashMismatchError,
    InputError,
    ManifestTooLargeError,
    RegistryLimitError,
    RegistryNotFoundError,
    RegistryProtocolError,
    RegistryUnreachableError,
)

FUNCTIONS = 4
WIDTH = 48_000  # each function's weight: 8 x 48,000 float32, 1.5 MB, spread over 2 or 3 chunks


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    """Four functions `f0`..`f3`, each `tanh(x @ wK) * K`, over its own weight `wK`, all in
    one weights.safetensors of about 6 MB (chunked); `f0` is the default."""
    return functions_over_weights(tmp_path_factory.mktemp("remote") / "four.hlobundle", FUNCTIONS)


@pytest.fixture
def server(bundle):
    s = StaticServer(bundle.parent)
    yield s
    s.close()


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """Each test its own store: what one fetched is not another's."""
    monkeypatch.setenv("HLOBUNDLE_CACHE_DIR", str(tmp_path / "cache"))


def url(server: StaticServer, bundle: Path) -> str:
    return server.url + bundle.name + "/"


def used_bytes(bundle: Path, function: str) -> int:
    """What a remote load of `function` must fetch: the manifest, its module and example files
    whole, and of the weights file the chunks that hold its header and the function's weight."""
    manifest = json.loads((bundle / "manifest.json").read_bytes())
    f = next(f for f in manifest["functions"] if f["name"] == function)
    files = {f["module"]["text"], f["module"]["portable"]["file"]}
    files |= {a["value"]["file"] for a in f["arguments"] if a.get("value")}
    files |= {r["expected"]["file"] for r in f["results"] if r.get("expected")}
    total = (bundle / "manifest.json").stat().st_size
    weights = "weights.safetensors"
    for name in files - {weights}:
        total += manifest["files"][name]["size"]
    data = (bundle / weights).read_bytes()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + n])
    key = next(a["value"]["key"] for a in f["arguments"] if a["role"] == "parameter")
    begin, end = (8 + n + o for o in header[key]["data_offsets"])
    chunk = manifest["files"][weights]["chunks"]["size"]
    chunks = set(_chunks.covering(len(data), chunk, 0, 8 + n))
    chunks |= set(_chunks.covering(len(data), chunk, begin, end))
    return total + sum(e - b for b, e in (_chunks.span(len(data), chunk, i) for i in chunks))


@pytest.mark.slow
def test_the_bundle_is_one_chunked_weights_file(bundle):
    manifest = json.loads((bundle / "manifest.json").read_bytes())
    assert manifest["format_version"] == "2.1"
    assert len(manifest["files"]["weights.safetensors"]["chunks"]["sha256"]) >= 6


def test_loading_one_function_over_https_fetches_only_what_it_uses(bundle, server):
    b = hlobundle.load(url(server, bundle), functions=["f2"])
    assert (
        server.sent
        == used_bytes(bundle, "f2")
        < 0.6 * sum(p.stat().st_size for p in bundle.rglob("*") if p.is_file())
    )
    assert b.remote == url(server, bundle) and b.functions == ["f0", "f1", "f2", "f3"]
    local = hlobundle.load(bundle).select("f2")
    x = np.linspace(0, 1, 24, dtype=np.float32).reshape(3, 8)
    params = {"w2": b.select("f2").tensor("p_w2")}
    got = b.select("f2").function("xla")(params, x)
    assert_close(got, local.function("xla")({"w2": local.tensor("p_w2")}, x))
    assert_close(
        b.select("f2").function("xla")(*b.select("f2").example_args()),
        local.expected_outputs()["result"],
    )
    b.verify()  # what it holds, checked again


def test_another_function_cannot_be_selected_from_a_partial_load(bundle, server):
    b = hlobundle.load(url(server, bundle))  # the default, f0
    assert b.manifest.function == "f0"
    with pytest.raises(InputError, match="was not loaded"):
        b.select("f1")


def test_the_store_keeps_what_was_fetched(bundle, server):
    hlobundle.load(url(server, bundle), functions=["f1"])
    first = server.sent
    hlobundle.load(url(server, bundle), functions=["f1"])
    assert server.sent - first == (bundle / "manifest.json").stat().st_size  # the manifest only


def _another_version(bundle: Path) -> Path:
    """Another bundle (another manifest) with the same module files and weights."""
    import shutil

    copy = bundle.parent / "copy.hlobundle"
    if not copy.exists():
        shutil.copytree(bundle, copy)
        m = json.loads((copy / "manifest.json").read_bytes())
        m["provenance"]["producer"] = "another"
        (copy / "manifest.json").write_text(json.dumps(m, indent=2, sort_keys=True) + "\n")
    return copy


def test_a_new_version_fetches_only_what_changed(bundle, server, tmp_path):
    """Another bundle (another manifest) with the same module files and weights: nothing but
    its manifest is fetched again, from another URL."""
    copy = _another_version(bundle)
    hlobundle.load(url(server, bundle), functions=["f3"])
    first = server.sent
    hlobundle.load(url(server, copy), functions=["f3"])
    assert server.sent - first == (copy / "manifest.json").stat().st_size


def _records(tmp_path: Path) -> dict[str, tuple[Path, int]]:
    """The store's records of where fetched bytes lie: {sha256: (file, offset)}."""
    from hlobundle._read import _store

    located = tmp_path / "cache" / _store.LOCATED
    found = {r.name: _store._read_record(r) for r in located.iterdir()} if located.is_dir() else {}
    return {k: v for k, v in found.items() if v is not None}


def _sizes(bundle: Path) -> dict[str, int]:
    """The size of every file and chunk of the bundle, by its sha256."""
    sizes = {}
    for entry in json.loads((bundle / "manifest.json").read_bytes())["files"].values():
        sizes[entry["sha256"]] = entry["size"]
        if entry.get("chunks"):
            chunk, digests = entry["chunks"]["size"], entry["chunks"]["sha256"]
            for i, digest in enumerate(digests):
                b, e = _chunks.span(entry["size"], chunk, i)
                sizes[digest] = e - b
    return sizes


def test_a_corrupted_chunk_is_refused_naming_it(bundle, server, tmp_path):
    from hlobundle._read import _store

    server.mode = "corrupt"
    with pytest.raises(HashMismatchError) as e:
        hlobundle.load(url(server, bundle), functions=["f1"])
    assert ".chunks.sha256[" in e.value.field
    # nothing was recorded of the corrupted bytes: each record names the bytes of its digest
    sizes, store = _sizes(bundle), _store.Store()
    for digest in _records(tmp_path):
        assert store.get(digest, sizes[digest]) is not None, digest


def test_fetched_chunks_are_stored_once(bundle, server, tmp_path):
    """Each fetched chunk and file lies once on the disk, in the remote bundle's directory: the
    store records where (the same inode), and keeps no copy of it."""
    hlobundle.load(url(server, bundle), functions=["f1"])
    cache = tmp_path / "cache"
    (view,) = (cache / "remote").iterdir()
    records = _records(tmp_path)
    weights = json.loads((bundle / "manifest.json").read_bytes())["files"]["weights.safetensors"]
    fetched = [d for d in weights["chunks"]["sha256"] if d in records]
    assert len(fetched) >= 2, "the load recorded none of the weights' chunks"
    inode = (view / "weights.safetensors").stat().st_ino
    assert {records[d][0].stat().st_ino for d in fetched} == {inode}
    allocated = sum(p.stat().st_blocks * 512 for p in cache.rglob("*") if p.is_file())
    used = used_bytes(bundle, "f1")
    assert allocated < 1.25 * used, f"{allocated} bytes on disk for {used} fetched"


def test_a_record_naming_other_bytes_is_not_used(bundle, server, tmp_path):
    """A record of the store rewritten to name another file of the user's, or an offset past the
    end of the file it names: the bytes it names are not used, the chunk is fetched again."""
    hlobundle.load(url(server, bundle), functions=["f1"])
    records = _records(tmp_path)
    other = tmp_path / "other"
    other.write_bytes(b"\1" * (4 << 20))
    located = tmp_path / "cache" / "located"
    for i, (digest, (where, offset)) in enumerate(sorted(records.items())):
        record = b"%d\n%s" % ((offset, bytes(other)) if i % 2 else (1 << 40, bytes(where)))
        (located / digest).write_bytes(record)
    copy = _another_version(bundle)
    first = server.sent
    b = hlobundle.load(url(server, copy), functions=["f1"])
    assert server.sent - first == used_bytes(copy, "f1")  # nothing taken from the records
    b.verify()


def test_a_stored_file_that_cannot_be_read_is_fetched_again(bundle, server, monkeypatch):
    """A file the store finds (a module file fetched before) whose read fails (EIO: the disk's
    error, in a cache): the load fetches it again, as a pull does, rather than failing with the
    cache's OSError."""
    import errno
    import os
    import types

    from hlobundle._read import _store

    hlobundle.load(url(server, bundle), functions=["f1"])

    class Unreadable:
        def __init__(self, fd: int, *args: object) -> None:
            os.close(fd)

        def __enter__(self) -> Unreadable:
            return self

        def __exit__(self, *args: object) -> None:
            pass

        def seek(self, offset: int) -> None:
            pass

        def read(self, size: int) -> bytes:
            raise OSError(errno.EIO, os.strerror(errno.EIO))

    failing = types.SimpleNamespace(
        **{k: getattr(os, k) for k in dir(os) if not k.startswith("__")}
    )
    failing.fdopen = Unreadable
    monkeypatch.setattr(_store, "os", failing)
    copy = _another_version(bundle)
    first = server.sent
    b = hlobundle.load(url(server, copy), functions=["f1"])
    manifest = json.loads((copy / "manifest.json").read_bytes())
    f = next(f for f in manifest["functions"] if f["name"] == "f1")
    module = manifest["files"][f["module"]["text"]]["size"]
    assert server.sent - first >= (copy / "manifest.json").stat().st_size + module
    b.verify()


def test_a_corrupted_chunk_in_the_store_is_fetched_again(bundle, server, tmp_path):
    hlobundle.load(url(server, bundle), functions=["f1"])
    views = tmp_path / "cache" / "remote"
    for weights in views.glob("*/weights.safetensors"):
        weights.write_bytes(b"\0" * weights.stat().st_size)
    first = server.sent
    b = hlobundle.load(url(server, bundle), functions=["f1"])
    assert server.sent - first > 1 << 20  # fetched again, not taken from the store
    b.verify()


def test_a_server_that_ignores_range_still_gives_checked_bytes(bundle, server):
    server.mode = "ignore-range"
    b = hlobundle.load(url(server, bundle), functions=["f1"])
    b.verify()


@pytest.mark.parametrize(
    "mode, error",
    [
        ("redirect", RegistryProtocolError),
        ("endless", RegistryLimitError),
        ("wrong-range", RegistryProtocolError),
    ],
)
def test_a_hostile_server_gets_a_coded_error(bundle, server, mode, error):
    hlobundle.load(url(server, bundle), functions=["f0"])  # the manifest is fine; then:
    server.mode = mode
    with pytest.raises(error):
        hlobundle.load(url(server, bundle), functions=["f1"])


def test_an_oversized_manifest_is_refused_before_it_is_read(tmp_path):
    big = tmp_path / "big.hlobundle"
    big.mkdir()
    (big / "manifest.json").write_bytes(b" " * (17 << 20))
    s = StaticServer(tmp_path)
    try:
        with pytest.raises(ManifestTooLargeError):
            hlobundle.load(s.url + "big.hlobundle/")
        assert s.sent < 17 << 20
    finally:
        s.close()


def test_a_missing_bundle_and_plain_http_elsewhere(server):
    with pytest.raises(RegistryNotFoundError):
        hlobundle.load(server.url + "nothing.hlobundle/")
    with pytest.raises(RegistryUnreachableError, match="plain HTTP"):
        hlobundle.load("http://example.com/b.hlobundle/")


def test_a_manifest_naming_a_file_outside_the_bundle_fetches_nothing_of_it(bundle, tmp_path):
    import shutil

    evil = tmp_path / "evil.hlobundle"
    shutil.copytree(bundle, evil)
    m = json.loads((evil / "manifest.json").read_bytes())
    f0 = m["functions"][0]
    entry = m["files"].pop(f0["module"]["text"])
    f0["module"]["text"] = "../../secret.mlir"
    m["files"]["../../secret.mlir"] = entry
    (evil / "manifest.json").write_text(json.dumps(m))
    s = StaticServer(tmp_path)
    try:
        with pytest.raises(hlobundle.errors.BundleError):
            hlobundle.load(s.url + "evil.hlobundle/")
        assert all("secret" not in path for path, _ in s.requests)
    finally:
        s.close()


@pytest.mark.slow
def test_a_signed_bundle_over_https_needs_its_key(bundle, tmp_path):
    import shutil

    private, public = new_key(tmp_path)
    signed = tmp_path / "signed.hlobundle"
    shutil.copytree(bundle, signed)
    hlobundle.sign(signed, private)
    s = StaticServer(tmp_path)
    try:
        b = hlobundle.load(s.url + "signed.hlobundle/", functions=["f1"], public_key=public)
        assert b.signer is not None and b.trusted
        m = json.loads((signed / "manifest.json").read_bytes())
        m["provenance"]["producer"] = "someone else"  # the manifest changed: the signature fails
        (signed / "manifest.json").write_text(json.dumps(m, indent=2, sort_keys=True) + "\n")
        with pytest.raises(hlobundle.errors.SignatureInvalidError):
            hlobundle.load(s.url + "signed.hlobundle/", functions=["f1"], public_key=public)
        (signed / "model.sig").unlink()
        with pytest.raises(hlobundle.errors.UnsignedError):
            hlobundle.load(s.url + "signed.hlobundle/", functions=["f1"], public_key=public)
    finally:
        s.close()


def test_a_local_bundle_loads_one_function_too(bundle):
    b = hlobundle.load(bundle, functions=["f3"])
    assert b.manifest.function == "f3" and b.remote is None
    w, x = b.example_args()
    assert np.asarray(b.function("xla")(w, x)).shape == (2, WIDTH)


def test_the_chunks_a_function_needs_are_hashed_as_listed(bundle):
    """The digests the loader checks against are the writer's: sha256 of each 1 MiB chunk."""
    data = (bundle / "weights.safetensors").read_bytes()
    listed = json.loads((bundle / "manifest.json").read_bytes())["files"]["weights.safetensors"]
    assert listed["chunks"]["sha256"][0] == hashlib.sha256(data[: 1 << 20]).hexdigest()


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    pytest.importorskip("oras", reason="the oci extra (oras) is not installed")
    from oci_registry import serve

    with serve(tmp_path_factory.mktemp("registry")) as running:
        yield running


@pytest.mark.slow
def test_loading_one_function_from_a_registry_fetches_only_what_it_uses(bundle, registry):
    """Through a proxy that counts what the registry sends: the function's files and chunks,
    and beyond them only the registry's answers' headers and its artifact manifest."""
    from http_static import CountingProxy

    pushed = hlobundle.push(bundle, registry.ref("four"))
    proxy = CountingProxy(registry.host)
    try:
        ref = pushed.ref.replace(registry.host, proxy.host)
        b = hlobundle.load(ref, functions=["f1"])
        used = used_bytes(bundle, "f1")
        assert used <= proxy.received < used + (64 << 10)
    finally:
        proxy.close()
    assert b.remote == ref
    local = hlobundle.load(bundle).select("f1")
    assert_close(b.function("xla")(*b.example_args()), local.expected_outputs()["result"])
    b.verify()


@pytest.mark.slow
def test_a_registry_bundle_is_pinned_and_signed_with_its_referrer(bundle, registry, tmp_path):
    import shutil

    private, public = new_key(tmp_path)
    signed = tmp_path / "signed.hlobundle"
    shutil.copytree(bundle, signed)
    hlobundle.sign(signed, private)
    hlobundle.push(signed, registry.ref("signed"))
    b = hlobundle.load(registry.ref("signed"), functions=["f3"], public_key=public)
    assert b.trusted and "@sha256:" in b.remote
    unsigned = hlobundle.push(bundle, registry.ref("unsigned"))
    with pytest.raises(hlobundle.errors.UnsignedError):
        hlobundle.load(unsigned.ref, public_key=public)


def test_run_and_serve_take_a_remote_bundle(bundle, server):
    from helpers import cli

    from hlobundle._serve._models import load_models

    done = cli("run", url(server, bundle), "--function", "f2")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(url(server, bundle) + ": 1 output(s)")
    assert done.stdout.rstrip().endswith("ok")
    fetched = server.sent
    assert fetched == used_bytes(bundle, "f2")
    served = load_models([("four", url(server, bundle))], backend="xla")
    assert sorted(served) == ["four", "four.f0"]  # its default function
    assert served["four"].bundle.remote == url(server, bundle)
    bad = cli("run", server.url + "nothing.hlobundle/")
    assert bad.returncode == 1 and "REGISTRY_NOT_FOUND" in bad.stderr


@pytest.mark.slow
def test_the_reading_commands_take_a_remote_bundle(bundle, server, registry):
    """diff, inspect, fingerprint and verify take oci:// and http(s):// as run does (an
    oci:// reference was read as a path, one slash lost)."""
    from helpers import cli

    pushed = hlobundle.push(bundle, registry.ref("readers")).ref
    want = hlobundle.load(bundle).fingerprint()
    for remote in (url(server, bundle), pushed):
        done = cli("fingerprint", remote, "--json")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["bundle"] == want
        done = cli("diff", remote, bundle)
        assert done.returncode == 0 and "same fingerprint" in done.stdout, done.stderr
        done = cli("verify", remote)
        assert done.returncode == 0 and done.stdout.startswith(f"ok: {remote}"), done.stderr
        done = cli("inspect", remote)
        assert done.returncode == 0 and "f2" in done.stdout, done.stderr


def test_cache_ls_and_prune_bound_the_store_and_touch_nothing_else(bundle, server, tmp_path):
    from helpers import cli

    hlobundle.load(url(server, bundle), functions=["f1"])
    listed = json.loads(cli("cache", "ls", "--json").stdout)
    assert listed["located"] > 0 and listed["views"] == 1 and listed["view_bytes"] > 1 << 20
    other = tmp_path / "cache" / "located" / "notes.txt"  # not a name the store writes
    other.write_text("mine")
    (tmp_path / "cache" / "jax").mkdir()
    done = cli("cache", "prune", "--max-size", "0", "--json")
    assert done.returncode == 0, done.stderr
    after = json.loads(done.stdout)
    assert (after["located"], after["views"], after["view_bytes"]) == (0, 0, 0)
    assert other.read_text() == "mine" and (tmp_path / "cache" / "jax").is_dir()
    first = server.sent
    hlobundle.load(url(server, bundle), functions=["f1"])
    assert server.sent - first == used_bytes(bundle, "f1")  # fetched again, all of it
    assert cli("cache", "prune", "--max-size", "lots").returncode == 2


def test_emit_of_a_remote_bundle_says_to_pull_it_first(bundle, server, tmp_path):
    """A script reads a bundle's files from a directory; a remote bundle's are fetched in part
    (its view in the store is sparse), so a script of it could only fail its own checks."""
    from helpers import cli

    b = hlobundle.load(url(server, bundle), functions=["f1"])
    with pytest.raises(hlobundle.errors.InputError, match="pull it first") as caught:
        hlobundle.emit_script(b)
    assert caught.value.code == "INPUT_INVALID"
    done = cli("emit", url(server, bundle), "-o", tmp_path / "run.py")
    assert done.returncode == 1 and "pull it first" in done.stderr, done.stderr
    assert not (tmp_path / "run.py").exists()


def _cli_in(cache, *args: str, timeout: float = 60):
    import os
    import subprocess
    import sys

    env = {**os.environ, "HLOBUNDLE_CACHE_DIR": str(cache)}
    return subprocess.run(
        [sys.executable, "-m", "hlobundle", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.subprocess
def test_prune_touches_nothing_through_a_symlinked_directory_or_an_open_cache(tmp_path):
    """`remote` and `located` made symlinks to someone's directory holding entries named as
    the store names its own: prune removes none of them; nor anything in a cache root others
    may write."""
    import os

    victim = tmp_path / "victim"
    (victim / ("b" * 64)).mkdir(parents=True)
    (victim / ("b" * 64) / "precious.txt").write_text("mine")
    (victim / ("c" * 64)).write_text("also mine")
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    os.symlink(victim, cache / "remote")
    os.symlink(victim, cache / "located")
    done = _cli_in(cache, "cache", "prune", "--max-size", "0")
    assert done.returncode == 0, done.stderr
    assert (victim / ("b" * 64) / "precious.txt").exists() and (victim / ("c" * 64)).exists()
    open_cache = tmp_path / "open"
    (open_cache / "located").mkdir(parents=True)
    (open_cache / "located" / ("d" * 64)).write_text("not the store's")
    open_cache.chmod(0o777)
    done = _cli_in(open_cache, "cache", "prune", "--max-size", "0")
    assert (open_cache / "located" / ("d" * 64)).exists(), done.stderr


@pytest.mark.subprocess
def test_prune_does_not_block_on_a_fifo_pointer(tmp_path):
    import os

    cache = tmp_path / "cache"
    (cache / "located").mkdir(parents=True, mode=0o700)
    cache.chmod(0o700)
    os.mkfifo(cache / "located" / ("a" * 64))
    done = _cli_in(cache, "cache", "prune", "--max-size", "1G", timeout=30)
    assert done.returncode == 0, done.stderr

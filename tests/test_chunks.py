"""Chunk digests (format 2.1, SPEC.md 2.9): the tensor files of a bundle of several functions
list a sha256 per 1 MiB chunk, so that a reader of a byte range checks what it reads. A chunk
digest is checked wherever the file's sha256 is, and a wrong one is refused with its field."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from helpers import edit_manifest, new_key, two_functions

import hlobundle
from hlobundle._format import _chunks
from hlobundle.errors import HashMismatchError, ManifestError

WIDTH = 48_000  # w is 8 x 48,000 float32: 1.5 MB, two chunks of 1 MiB


def wide_functions(tmp_path: Path, name: str = "wide") -> Path:
    """`predict(w, x)` and `loss(w, x, y)` over one weight of two chunks, batch `b` symbolic."""
    w = np.linspace(-1, 1, 8 * WIDTH, dtype=np.float32).reshape(8, WIDTH)
    x, y = np.ones((2, 8), np.float32), np.zeros((2, WIDTH), np.float32)
    out, roles = tmp_path / name, {"w": "parameter"}
    hlobundle.export(
        lambda w, x: jnp.tanh(x @ w),
        w,
        x,
        out=out,
        name="predict",
        roles=roles,
        shapes_specs=(None, "b, 8"),
    )
    hlobundle.export(
        lambda w, x, y: ((x @ w - y) ** 2).mean(),
        w,
        x,
        y,
        out=out,
        name="loss",
        roles=roles,
        shapes_specs=(None, "b, 8", f"b, {WIDTH}"),
        add=True,
    )
    return out


@pytest.fixture(scope="module")
def wide_original(tmp_path_factory) -> Path:
    """`wide_functions`, packed once for this file's tests (two exports, about 0.3 s)."""
    return wide_functions(tmp_path_factory.mktemp("wide"))


@pytest.fixture
def wide(wide_original, tmp_path) -> Path:
    """A private copy of `wide_original`, which a test may edit."""
    out = tmp_path / "wide"
    shutil.copytree(wide_original, out)
    return out


def tensor_file(bundle: Path) -> str:
    files = json.loads((bundle / "manifest.json").read_bytes())["files"]
    (name,) = [n for n in files if n.endswith(".safetensors") and files[n]["size"] > 1 << 20]
    return name


@pytest.mark.slow
def test_a_bundle_of_several_functions_lists_the_chunk_digests_of_its_large_tensor_files(wide):
    bundle = wide
    manifest = json.loads((bundle / "manifest.json").read_bytes())
    assert manifest["format_version"] == "2.1"
    name = tensor_file(bundle)
    entry = manifest["files"][name]
    data = (bundle / name).read_bytes()
    assert entry["chunks"]["size"] == _chunks.DEFAULT_CHUNK == 1 << 20
    assert entry["chunks"]["sha256"] == _chunks.digests_of([data[:1000], data[1000:]], 1 << 20)
    assert len(entry["chunks"]["sha256"]) == 2
    # small files (one chunk: its digest is the file's) and module files have none
    assert [n for n, e in manifest["files"].items() if "chunks" in e] == [name]
    b = hlobundle.load(bundle, verify=True)
    predict = b.select("predict")
    w, _ = predict.example_args()
    assert predict.function("xla")(w, np.ones((3, 8), np.float32)).shape == (3, WIDTH)


def test_small_bundles_stay_at_the_oldest_version_that_expresses_them(tmp_path):
    manifest = json.loads((two_functions(tmp_path) / "manifest.json").read_bytes())
    assert manifest["format_version"] == "2.0"
    assert not any("chunks" in e for e in manifest["files"].values())


def test_a_wrong_chunk_digest_is_refused_by_verify_and_load(wide):
    """The file's sha256 still matches: only the chunk check can find it."""
    bundle = wide
    name = tensor_file(bundle)
    edit_manifest(bundle, lambda m: m["files"][name]["chunks"]["sha256"].__setitem__(1, "0" * 64))
    for check in (
        lambda: hlobundle.load(bundle).verify(),
        lambda: hlobundle.load(bundle, verify=True),
    ):
        with pytest.raises(HashMismatchError) as e:
            check()
        assert e.value.field == f"files[{name!r}].chunks.sha256[1]"


def test_a_wrong_chunk_digest_of_a_file_no_field_names_is_refused_by_verify_and_load(tmp_path):
    """A listed file that no module, tensor or executable field names (a LICENSE): verify
    hashes it whole (`HeldFile.check`), and checks its chunk digests as well as its sha256."""
    import hashlib

    bundle = two_functions(tmp_path)
    data = bytes(range(256)) * (3 << 8)  # 196,608 bytes: three chunks of 64 KiB
    (bundle / "LICENSE").write_bytes(data)
    size = 1 << 16
    digests = [hashlib.sha256(data[k : k + size]).hexdigest() for k in range(0, len(data), size)]
    digests[1] = "0" * 64  # the file's sha256 is right: only the chunk check can find it

    def listed(m):
        m["format_version"] = "2.1"
        m["files"]["LICENSE"] = {
            "size": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
            "chunks": {"size": size, "sha256": digests},
        }

    edit_manifest(bundle, listed)
    hlobundle.load(bundle)  # not hashed at load: verify's work
    for check in (
        lambda: hlobundle.load(bundle).verify(),
        lambda: hlobundle.load(bundle, verify=True),
    ):
        with pytest.raises(HashMismatchError) as e:
            check()
        assert e.value.field == "files['LICENSE'].chunks.sha256[1]"


@pytest.mark.parametrize(
    "edit, says",
    [
        (lambda c: c.update(size=3 << 18), "power of two"),
        (lambda c: c.update(size=1 << 12), "power of two"),
        (lambda c: c.update(size=1 << 27), "power of two"),
        (lambda c: c["sha256"].pop(), "chunks"),
        (lambda c: c["sha256"].append("0" * 64), "chunks"),
        (lambda c: c["sha256"].__setitem__(0, "not a digest"), "sha256"),
    ],
    ids=["not-a-power", "too-small", "too-large", "one-missing", "one-extra", "not-hex"],
)
def test_malformed_chunk_digests_are_a_manifest_error(wide, edit, says):
    bundle = wide
    name = tensor_file(bundle)
    edit_manifest(bundle, lambda m: edit(m["files"][name]["chunks"]))
    with pytest.raises(ManifestError, match=says):
        hlobundle.load(bundle)


def test_chunk_digests_in_a_2_0_manifest_are_refused(wide):
    bundle = wide
    edit_manifest(bundle, lambda m: m.update(format_version="2.0"))
    with pytest.raises(ManifestError, match="needs format_version 2.1"):
        hlobundle.load(bundle)


def test_signing_a_bundle_with_a_wrong_chunk_digest_is_refused(tmp_path, wide):
    bundle = wide
    name = tensor_file(bundle)
    edit_manifest(bundle, lambda m: m["files"][name]["chunks"]["sha256"].__setitem__(0, "0" * 64))
    private, _ = new_key(tmp_path)
    with pytest.raises(HashMismatchError):
        hlobundle.sign(bundle, private)


@pytest.mark.parametrize("size", [0, 1, (1 << 16) - 1, 1 << 16, (1 << 16) + 1, 5 << 16])
def test_chunk_arithmetic(size):
    chunk = 1 << 16
    data = np.random.default_rng(size).integers(0, 256, size, np.uint8).tobytes()
    digests = _chunks.digests_of([data[i : i + 777] for i in range(0, size, 777)], chunk)
    assert len(digests) == _chunks.count(size, chunk)
    for i, d in enumerate(digests):
        begin, end = _chunks.span(size, chunk, i)
        assert d == _chunks.digest(data[begin:end])
    assert list(_chunks.covering(size, chunk, 0, size)) == list(range(len(digests)))
    if size > chunk:
        assert list(_chunks.covering(size, chunk, chunk - 1, chunk + 1)) == [0, 1]


def test_a_file_carried_over_into_a_rewritten_bundle_is_checked_chunk_by_chunk(tmp_path, wide):
    """What `sign` and `refresh` copy is hashed as it is copied: a chunk that differs from its
    listed digest (the file changed after it was checked) stops the copy."""
    from hlobundle._format._manifest import FileEntry
    from hlobundle._write import _atomic

    bundle = wide
    name = tensor_file(bundle)
    listed = json.loads((bundle / "manifest.json").read_bytes())["files"][name]
    listed["chunks"]["sha256"][1] = "0" * 64
    with pytest.raises(HashMismatchError, match="chunk digests differ"):
        _atomic._copy_checked(bundle, name, tmp_path / "copy", FileEntry.model_validate(listed))

"""A bundle's files against its manifest (`_read/_files`, SPEC.md section 8): the manifest file
itself, the file set and sizes, the names the fields refer to, listed files opened safely, and
sizes and digests checked.

The bundles here are written by hand (a text module and its "portable" bytes), without JAX:
these checks read files and the manifest, never a module's contents."""

from __future__ import annotations

import hashlib
import json
import os
import re

import pytest

from hlobundle._format import _limits
from hlobundle._format._manifest_json import parse_manifest
from hlobundle._read import _files
from hlobundle.errors import (
    FileMissingError,
    FileUnlistedError,
    HashMismatchError,
    LimitError,
    ManifestError,
    ModuleError,
    NotABundleError,
    SizeMismatchError,
    UnsafePathError,
)

TEXT = b"module @m {\n}\n"
PORTABLE = b"ML\xefR portable"


def write_bundle(root, files=None, edit=None):
    """A bundle directory of `files` ({name: bytes}; the two modules by default), listed with
    their sizes and digests; `edit` changes the manifest's data before it is written."""
    files = {"module.mlir": TEXT, "module.mlirbc": PORTABLE} if files is None else files
    root.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    data = {
        "format": "hlobundle",
        "format_version": "1.3",
        "function": "f",
        "arguments": [{"name": "x", "path": "args[0]", "shape": [2], "dtype": "float32"}],
        "results": [{"name": "y", "shape": [2], "dtype": "float32"}],
        "module": {
            "text": "module.mlir",
            "portable": {"file": "module.mlirbc", "target_version": "1.0.0"},
        },
        "provenance": {"producer": "test", "producer_version": "0"},
        "files": {
            n: {"size": len(b), "sha256": hashlib.sha256(b).hexdigest()} for n, b in files.items()
        },
    }
    if edit:
        edit(data)
    (root / "manifest.json").write_text(json.dumps(data))
    return root


def manifest_of(root):
    return _files.read_manifest(root)[0]


def test_a_valid_bundle_passes(tmp_path):
    root = write_bundle(
        tmp_path / "b", {"module.mlir": TEXT, "module.mlirbc": PORTABLE, "docs/LICENSE": b"MIT"}
    )
    m, digest = _files.read_manifest(root)
    assert digest == hashlib.sha256((root / "manifest.json").read_bytes()).hexdigest()
    _files.check_file_set(root, m)
    assert _files.read_module_file(root, m, "module.mlir") == (
        TEXT,
        hashlib.sha256(TEXT).hexdigest(),
    )
    assert _files.module_text(TEXT, "module.mlir") == TEXT.decode()
    held = _files.open_unreferenced_files(root, m)
    assert list(held) == ["docs/LICENSE"] and held["docs/LICENSE"].read() == b"MIT"
    held["docs/LICENSE"].check()


# ---- read_manifest


def test_a_path_that_does_not_exist_is_not_a_bundle(tmp_path):
    with pytest.raises(NotABundleError, match="does not exist") as e:
        _files.read_manifest(tmp_path / "gone")
    assert e.value.code == "NOT_A_BUNDLE"


def test_a_file_is_not_a_bundle(tmp_path):
    (tmp_path / "f").write_bytes(b"")
    with pytest.raises(NotABundleError, match="is not a directory; a bundle is one"):
        _files.read_manifest(tmp_path / "f")


def test_a_directory_without_a_manifest_is_not_a_bundle(tmp_path):
    with pytest.raises(NotABundleError, match="has no manifest.json; it is not a bundle$"):
        _files.read_manifest(tmp_path)


def test_a_reactant_export_is_told_how_to_become_a_bundle(tmp_path):
    for name in ("f_inputs.npz", "f.mlir", "f.py"):
        (tmp_path / name).write_bytes(b"")
    with pytest.raises(NotABundleError, match="looks like a Reactant export"):
        _files.read_manifest(tmp_path)


def test_a_symlinked_manifest_is_refused(tmp_path):
    root = write_bundle(tmp_path / "b")
    (root / "manifest.json").rename(tmp_path / "elsewhere.json")
    (root / "manifest.json").symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(UnsafePathError, match="manifest.json is a symlink") as e:
        _files.read_manifest(root)
    assert e.value.code == "PATH_UNSAFE"


# ---- check_file_set


def test_the_signatures_name_may_not_be_listed(tmp_path):
    root = write_bundle(
        tmp_path / "b", {"module.mlir": TEXT, "module.mlirbc": PORTABLE, "model.sig": b"sig"}
    )
    with pytest.raises(ManifestError, match="files lists model.sig, the name reserved") as e:
        _files.check_file_set(root, manifest_of(root))
    assert e.value.field == "files['model.sig']"


def test_an_unsafe_listed_name_is_refused(tmp_path):
    root = write_bundle(
        tmp_path / "b",
        edit=lambda m: m["files"].update({"../outside": {"size": 0, "sha256": "0" * 64}}),
    )
    with pytest.raises(UnsafePathError, match="contains '..'") as e:
        _files.check_file_set(root, manifest_of(root))
    assert e.value.field == "files['../outside']"


def test_a_listed_file_that_is_missing_is_refused(tmp_path):
    root = write_bundle(tmp_path / "b")
    (root / "module.mlirbc").unlink()
    with pytest.raises(FileMissingError, match="module.mlirbc is listed in the manifest but"):
        _files.check_file_set(root, manifest_of(root))


def test_an_unlisted_file_is_refused(tmp_path):
    root = write_bundle(tmp_path / "b")
    (root / "extra.bin").write_bytes(b"smuggled")
    with pytest.raises(FileUnlistedError, match="extra.bin is in the bundle but not listed") as e:
        _files.check_file_set(root, manifest_of(root))
    assert e.value.code == "FILE_UNLISTED"


def test_an_unsigned_bundles_signature_file_is_neither_listed_nor_unlisted(tmp_path):
    root = write_bundle(tmp_path / "b")
    (root / "model.sig").write_bytes(b"sig")
    _files.check_file_set(root, manifest_of(root))


def test_a_field_naming_an_unlisted_file_is_refused(tmp_path):
    root = write_bundle(
        tmp_path / "b",
        {"module.mlir": TEXT, "module.mlirbc": PORTABLE, "other.mlir": TEXT},
        edit=lambda m: m["files"].pop("other.mlir") and m["module"].update(text="other.mlir"),
    )
    (root / "other.mlir").unlink()
    with pytest.raises(ManifestError, match="module.text names 'other.mlir', which is not in") as e:
        _files.check_file_set(root, manifest_of(root))
    assert e.value.field == "module.text"


def test_a_field_naming_an_unsafe_path_is_refused(tmp_path):
    root = write_bundle(
        tmp_path / "b", edit=lambda m: m["module"]["portable"].update(file="/etc/passwd")
    )
    with pytest.raises(UnsafePathError, match="is absolute") as e:
        _files.check_file_set(root, manifest_of(root))
    assert e.value.field == "module.portable.file"


def test_a_listed_file_of_another_size_is_refused(tmp_path):
    root = write_bundle(tmp_path / "b")
    (root / "module.mlir").write_bytes(TEXT + b"// more\n")
    with pytest.raises(SizeMismatchError, match=f"module.mlir is {len(TEXT) + 8} bytes, the") as e:
        _files.check_file_set(root, manifest_of(root))
    assert e.value.field == "files['module.mlir'].size"


def test_a_listed_file_reached_through_a_symlinked_directory_is_refused(tmp_path):
    root = write_bundle(
        tmp_path / "b", {"module.mlir": TEXT, "module.mlirbc": PORTABLE, "d/w.bin": b"w"}
    )
    (root / "d").rename(tmp_path / "d")
    (root / "d").symlink_to(tmp_path / "d", target_is_directory=True)
    with pytest.raises(UnsafePathError, match="'d' is a symlink"):
        _files.check_file_set(root, manifest_of(root))


def test_a_hard_linked_listed_file_is_refused(tmp_path):
    root = write_bundle(tmp_path / "b")
    os.link(root / "module.mlir", tmp_path / "outside.mlir")
    with pytest.raises(UnsafePathError, match="'module.mlir' has 2 hard links"):
        _files.check_file_set(root, manifest_of(root))


# ---- check_digest, module and executable files, open_listed


def test_a_digest_of_another_size_or_hash_is_refused():
    listed = parse_manifest(json.dumps(_data_with_files()).encode()).files["module.mlir"]
    with pytest.raises(SizeMismatchError, match="m is 4 bytes, the manifest says 1") as e:
        _files.check_digest("m", 4, "0" * 64, listed)
    assert e.value.field == "files['m'].size"
    with pytest.raises(HashMismatchError, match=f"m: sha256 is {'1' * 64}, the manifest") as e:
        _files.check_digest("m", 1, "1" * 64, listed)
    assert e.value.code == "HASH_MISMATCH" and e.value.field == "files['m'].sha256"
    _files.check_digest("m", 1, "0" * 64, listed)


def _data_with_files():
    return {
        "format": "hlobundle",
        "format_version": "1.3",
        "function": "f",
        "arguments": [],
        "results": [],
        "provenance": {"producer": "t", "producer_version": "0"},
        "module": {
            "text": "module.mlir",
            "portable": {"file": "module.mlir", "target_version": "1.0.0"},
        },
        "files": {"module.mlir": {"size": 1, "sha256": "0" * 64}},
    }


def test_a_module_file_whose_bytes_changed_is_refused(tmp_path):
    root = write_bundle(tmp_path / "b")
    m = manifest_of(root)
    (root / "module.mlir").write_bytes(TEXT.upper())  # the same size
    with pytest.raises(HashMismatchError, match="module.mlir: sha256 is"):
        _files.read_module_file(root, m, "module.mlir")


def test_a_module_file_that_grew_is_refused_without_reading_it_all(tmp_path):
    root = write_bundle(tmp_path / "b")
    m = manifest_of(root)
    (root / "module.mlir").write_bytes(TEXT * 1000)
    with pytest.raises(SizeMismatchError, match=f"is {len(TEXT) + 1} bytes, the manifest says"):
        _files.read_module_file(root, m, "module.mlir")


def test_a_module_listed_over_the_size_limit_is_refused_before_reading(tmp_path):
    size = _limits.MAX_MODULE_BYTES + 1
    root = write_bundle(tmp_path / "b", edit=lambda m: m["files"]["module.mlir"].update(size=size))
    with pytest.raises(LimitError, match=f"module.mlir is {size} bytes; a module file may"):
        _files.read_module_file(root, manifest_of(root), "module.mlir")


def test_an_executable_listed_over_the_size_limit_is_refused_before_reading(tmp_path):
    size = _limits.MAX_EXECUTABLE_BYTES + 1
    root = write_bundle(
        tmp_path / "b",
        {"module.mlir": TEXT, "module.mlirbc": PORTABLE, "x.vmfb": b"native"},
        edit=lambda m: m["files"]["x.vmfb"].update(size=size),
    )
    with pytest.raises(LimitError, match=f"x.vmfb is {size} bytes; executables are limited") as e:
        _files.read_executable_file(root, manifest_of(root), "x.vmfb")
    assert e.value.code == "LIMIT_EXCEEDED" and e.value.path == "x.vmfb"


def test_an_executable_within_the_limit_is_read_and_checked(tmp_path):
    root = write_bundle(
        tmp_path / "b", {"module.mlir": TEXT, "module.mlirbc": PORTABLE, "x.vmfb": b"native"}
    )
    assert _files.read_executable_file(root, manifest_of(root), "x.vmfb") == b"native"


def test_opening_a_listed_file_that_is_gone_is_refused(tmp_path):
    root = write_bundle(tmp_path / "b")
    (root / "module.mlir").unlink()
    with pytest.raises(FileMissingError, match="module.mlir is listed in the manifest but"):
        _files.open_listed(root, "module.mlir")


def test_opening_a_listed_file_through_a_symlink_is_refused(tmp_path):
    root = write_bundle(tmp_path / "b")
    (root / "module.mlir").rename(tmp_path / "m.mlir")
    (root / "module.mlir").symlink_to(tmp_path / "m.mlir")
    with pytest.raises(UnsafePathError, match="reached through a symlink"):
        _files.open_listed(root, "module.mlir")


def test_opening_a_listed_file_that_cannot_be_opened_is_refused(tmp_path):
    # A regular file where the name needs a directory: os.open fails with ENOTDIR (the same
    # branch as ELOOP, a symlink put in place after the name was checked).
    root = write_bundle(tmp_path / "b")
    with pytest.raises(UnsafePathError, match="'module.mlir/x' cannot be opened: Not a directory"):
        _files.open_listed(root, "module.mlir/x")


def test_opening_a_listed_directory_is_refused(tmp_path):
    root = write_bundle(tmp_path / "b")
    (root / "d").mkdir()
    with pytest.raises(UnsafePathError, match="'d' is not a regular file"):
        _files.open_listed(root, "d")


def test_opening_a_hard_linked_file_is_refused(tmp_path):
    root = write_bundle(tmp_path / "b")
    os.link(root / "module.mlir", tmp_path / "outside.mlir")
    with pytest.raises(UnsafePathError, match="'module.mlir' has 2 hard links"):
        _files.open_listed(root, "module.mlir")


def test_a_held_file_changed_after_it_was_opened_is_refused(tmp_path):
    root = write_bundle(
        tmp_path / "b", {"module.mlir": TEXT, "module.mlirbc": PORTABLE, "LICENSE": b"MIT"}
    )
    held = _files.open_unreferenced_files(root, manifest_of(root))["LICENSE"]
    (root / "LICENSE").write_bytes(b"GPL")  # in place: the held file is the same file
    with pytest.raises(HashMismatchError, match="LICENSE: sha256 is"):
        held.check()
    with pytest.raises(HashMismatchError, match="LICENSE: sha256 is"):
        held.read()


def test_module_text_that_is_not_utf8_is_refused():
    with pytest.raises(ModuleError, match=re.escape("module.mlir is not UTF-8 text: ")) as e:
        _files.module_text(b"module \xff", "module.mlir")
    assert e.value.code == "MLIR_INVALID" and e.value.path == "module.mlir"


@pytest.mark.parametrize("name", ["module.mlir", "inputs.safetensors"])
def test_a_file_swapped_for_a_symlink_after_its_name_was_checked_is_refused(
    tmp_path, monkeypatch, name
):
    """The race between checking a listed name (`_opening.resolve`, `check_file_set`) and opening
    the file: a symlink put in its place in between, to an identical copy outside the bundle.
    The open does not follow it (O_NOFOLLOW), and says so with a coded error, for a module file
    (`open_listed`) and a tensor file (`TensorFile`) alike."""
    import shutil
    import sys

    from helpers import small_bundle

    import hlobundle
    from hlobundle._bundle_io import _opening

    bundle = small_bundle(tmp_path)
    outside = tmp_path / "outside"
    shutil.copy(bundle / name, outside)
    resolve = _opening.resolve

    def racing(root, listed):
        path = resolve(root, listed)
        if listed == name and sys._getframe(1).f_code.co_name != "check_file_set":
            path.unlink()  # after the check, before the open
            path.symlink_to(outside)
        return path

    monkeypatch.setattr(_opening, "resolve", racing)
    with pytest.raises(UnsafePathError, match="cannot be opened") as e:
        hlobundle.load(bundle)
    assert e.value.code == "PATH_UNSAFE" and e.value.path == name

"""A bundle that was damaged or edited is refused with the right code and message."""

from __future__ import annotations

import json
import os

import pytest
from helpers import copy_of, edit_manifest, rehash, small_bundle

import hlobundle


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    return small_bundle(tmp_path_factory.mktemp("tamper"))


@pytest.fixture
def bundle(written, tmp_path):
    """The module's bundle, each test's own copy to damage."""
    return copy_of(written, tmp_path)


def load_and_verify(path):
    hlobundle.load(path).verify()


@pytest.mark.parametrize("name", ["inputs.safetensors", "module.mlir", "module.mlirbc"])
@pytest.mark.parametrize("where", [0.1, 0.5, 0.99])
def test_flipped_byte_in_data_files_fails_verify(bundle, name, where):
    path = bundle / name
    data = bytearray(path.read_bytes())
    data[int(len(data) * where)] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(hlobundle.HloBundleError) as e:
        load_and_verify(bundle)
    # A flip may break the file's syntax before its hash is checked; either way it is caught.
    assert e.value.code in {
        "HASH_MISMATCH",
        "MLIR_INVALID",
        "SAFETENSORS_INVALID",
        "TENSOR_MISMATCH",
        "SIGNATURE_MISMATCH",
    }
    assert e.value.path == name


def test_flipped_byte_in_tensor_data_is_a_hash_mismatch(bundle):
    path = bundle / "inputs.safetensors"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01  # last byte of the last tensor's data, not the header
    path.write_bytes(bytes(data))
    hlobundle.load(bundle)  # sizes and structure are intact
    with pytest.raises(
        hlobundle.errors.IntegrityError,
        match=r"inputs.safetensors: sha256 is [0-9a-f]{64}, the manifest says",
    ):
        load_and_verify(bundle)


def test_flipped_byte_in_manifest_is_refused(bundle):
    path = bundle / "manifest.json"
    raw = path.read_bytes()
    for i in range(0, len(raw), max(1, len(raw) // 40)):
        damaged = bytearray(raw)
        damaged[i] ^= 0x01
        path.write_bytes(bytes(damaged))
        try:
            load_and_verify(bundle)
        except hlobundle.HloBundleError:
            continue
        # A flip inside free text (a path string) can leave a valid bundle; nothing else may pass.
        assert json.loads(bytes(damaged))["files"] == json.loads(raw)["files"]


@pytest.mark.parametrize("name", ["inputs.safetensors", "module.mlir", "module.mlirbc"])
def test_deleted_file(bundle, name):
    (bundle / name).unlink()
    with pytest.raises(
        hlobundle.errors.FileSetError, match=f"{name} is listed in the manifest but missing"
    ) as e:
        load_and_verify(bundle)
    assert e.value.code == "FILE_MISSING" and e.value.path == name


def test_unlisted_file(bundle):
    (bundle / "extra.bin").write_bytes(b"x")
    with pytest.raises(
        hlobundle.errors.FileSetError, match="extra.bin is in the bundle but not listed"
    ) as e:
        hlobundle.load(bundle)
    assert e.value.code == "FILE_UNLISTED"


def test_edited_shape_is_a_signature_mismatch(bundle):
    edit_manifest(bundle, lambda m: m["arguments"][0].update(shape=[4, 4]))
    with pytest.raises(
        hlobundle.errors.MainSignatureError,
        match=r"arguments\[0\] \(x\): the manifest says float32\[4, 4\], @main in module.mlir says float32\[4, 3\]",
    ) as e:
        hlobundle.load(bundle)
    assert e.value.code == "SIGNATURE_MISMATCH" and e.value.field == "arguments[0]"


def test_edited_result_dtype_is_a_signature_mismatch(bundle):
    edit_manifest(bundle, lambda m: m["results"][0].update(dtype="float64"))
    with pytest.raises(hlobundle.errors.MainSignatureError, match=r"results\[0\] \(result\)"):
        hlobundle.load(bundle)


def test_removed_argument_is_a_signature_mismatch(bundle):
    edit_manifest(bundle, lambda m: (m["arguments"].pop(), m.pop("input_tree")))
    with pytest.raises(
        hlobundle.errors.MainSignatureError,
        match="the manifest has 1 arguments, @main in module.mlir has 2",
    ):
        hlobundle.load(bundle)


def test_size_mismatch(bundle):
    with open(bundle / "module.mlir", "a") as f:
        f.write("\n")
    with pytest.raises(
        hlobundle.errors.IntegrityError, match=r"module.mlir is \d+ bytes, the manifest says \d+"
    ) as e:
        hlobundle.load(bundle)
    assert e.value.code == "SIZE_MISMATCH"


def test_safetensors_header_disagreeing_with_manifest(tmp_path):
    import numpy as np
    from safetensors.numpy import save_file

    bundle = small_bundle(tmp_path)
    path = bundle / "inputs.safetensors"
    save_file({"x": np.zeros((4, 3), np.float64), "w": np.zeros((3, 2), np.float32)}, str(path))
    rehash(bundle, "inputs.safetensors")
    with pytest.raises(
        hlobundle.errors.TensorFileError,
        match=r"inputs.safetensors\['x'\] is F64\[4, 3\], the manifest's float32\[4, 3\] is stored as F32\[4, 3\]",
    ) as e:
        hlobundle.load(bundle)
    assert e.value.code == "TENSOR_MISMATCH"


def test_truncated_safetensors(bundle):
    path = bundle / "inputs.safetensors"
    path.write_bytes(path.read_bytes()[:-8])
    edit_manifest(
        bundle, lambda m: m["files"]["inputs.safetensors"].update(size=path.stat().st_size)
    )
    with pytest.raises(hlobundle.errors.TensorFileError, match="not a valid safetensors file") as e:
        hlobundle.load(bundle)
    assert e.value.code == "SAFETENSORS_INVALID"


def test_header_length_bomb(bundle):
    path = bundle / "inputs.safetensors"
    path.write_bytes((2**62).to_bytes(8, "little") + path.read_bytes()[8:])
    with pytest.raises(hlobundle.errors.TensorFileError, match="not a valid safetensors file"):
        hlobundle.load(bundle)


@pytest.mark.parametrize(
    "name", ["../outside.safetensors", "/etc/passwd", "a/../b", "C:\\x", "./x"]
)
def test_unsafe_paths_in_manifest(bundle, name):
    def edit(m):
        m["files"][name] = m["files"].pop("inputs.safetensors")

    edit_manifest(bundle, edit)
    with pytest.raises(hlobundle.errors.UnsafePathError, match="SPEC.md, 'Reader safety'") as e:
        hlobundle.load(bundle)
    assert e.value.code == "PATH_UNSAFE"


def test_symlink_in_bundle(bundle, tmp_path):
    target = tmp_path / "secret.txt"
    target.write_text("secret")
    (bundle / "inputs.safetensors").unlink()
    os.symlink(target, bundle / "inputs.safetensors")
    with pytest.raises(
        hlobundle.errors.UnsafePathError, match="'inputs.safetensors' is a symlink"
    ) as e:
        hlobundle.load(bundle)
    assert e.value.code == "PATH_UNSAFE"


def test_reference_to_unlisted_file(bundle):
    edit_manifest(bundle, lambda m: m["arguments"][0]["value"].update(file="other.safetensors"))
    with pytest.raises(
        hlobundle.errors.ManifestError,
        match=r"arguments\[0\].value.file names 'other.safetensors', which is not in files",
    ):
        hlobundle.load(bundle)


def test_not_a_bundle(tmp_path):
    with pytest.raises(hlobundle.errors.NotABundleError, match="has no manifest.json"):
        hlobundle.load(tmp_path)
    with pytest.raises(hlobundle.errors.NotABundleError, match="nothing' does not exist"):
        hlobundle.load(tmp_path / "nothing")
    (tmp_path / "file").write_text("")
    with pytest.raises(hlobundle.errors.NotABundleError, match="is not a directory"):
        hlobundle.load(tmp_path / "file")


def test_portable_artifact_that_does_not_load(bundle):
    (bundle / "module.mlirbc").write_bytes(b"ML\xefR garbage")
    rehash(bundle, "module.mlirbc")
    with pytest.raises(
        hlobundle.errors.ModuleError, match="the StableHLO portable artifact does not load"
    ) as e:
        hlobundle.load(bundle)
    assert e.value.path == "module.mlirbc"


def test_portable_artifact_of_another_function(bundle, tmp_path):
    from helpers import pack_identity, sample

    other = pack_identity(tmp_path, sample((7,), "int8"), name="other")
    (bundle / "module.mlirbc").write_bytes((other / "module.mlirbc").read_bytes())
    rehash(bundle, "module.mlirbc")
    with pytest.raises(
        hlobundle.errors.ModuleMismatchError,
        match="module.mlirbc and module.mlir are not the same program",
    ) as e:
        load_and_verify(bundle)
    assert e.value.code == "MODULE_MISMATCH"


def test_module_text_not_utf8(bundle):
    (bundle / "module.mlir").write_bytes(b"\xff\xfe module")
    rehash(bundle, "module.mlir")
    with pytest.raises(hlobundle.errors.ModuleError, match="module.mlir is not UTF-8 text"):
        hlobundle.load(bundle)


def test_manifest_symlink(bundle, tmp_path):
    real = tmp_path / "elsewhere.json"
    real.write_bytes((bundle / "manifest.json").read_bytes())
    (bundle / "manifest.json").unlink()
    os.symlink(real, bundle / "manifest.json")
    with pytest.raises(hlobundle.errors.UnsafePathError, match="manifest.json is a symlink"):
        hlobundle.load(bundle)


def test_special_file_in_bundle(bundle):
    os.mkfifo(bundle / "pipe")
    with pytest.raises(hlobundle.errors.UnsafePathError, match="'pipe' is not a regular file"):
        hlobundle.load(bundle)


def test_extra_tensor_in_tensor_file(bundle):
    import numpy as np
    from safetensors.numpy import load_file, save_file

    path = bundle / "inputs.safetensors"
    tensors = load_file(str(path))
    save_file({**tensors, "smuggled": np.zeros(3, np.float32)}, str(path))
    rehash(bundle, "inputs.safetensors")
    with pytest.raises(
        hlobundle.errors.TensorFileError,
        match=r"holds tensor\(s\) \['smuggled'\] that no argument or result names",
    ):
        hlobundle.load(bundle)


def test_bundle_with_non_portable_custom_call_is_refused_on_load(tmp_path):
    text = (
        "func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {\n"
        "  %y = stablehlo.custom_call @my_kernel(%x) : (tensor<2xf32>) -> tensor<2xf32>\n"
        "  return %y : tensor<2xf32>\n}\n"
    )
    out = hlobundle.pack(text, None, tmp_path / "b", allow_custom_calls=["my_kernel"])
    hlobundle.load(out)  # allowed when packed, and recorded
    edit_manifest(out, lambda m: m["module"].update(allowed_custom_calls=[]))
    with pytest.raises(
        hlobundle.errors.ModuleError,
        match="the module is not portable: custom_call @my_kernel at line 2",
    ) as e:
        hlobundle.load(out)
    assert e.value.code == "MODULE_NOT_PORTABLE" and e.value.path == "module.mlir"


def _list_file(bundle, name, data):
    """A listed file that no module, tensor or executable refers to (a LICENSE, a README)."""
    (bundle / name).write_bytes(data)
    edit_manifest(bundle, lambda m: m["files"].update({name: {"size": 0, "sha256": "0" * 64}}))
    rehash(bundle, name)


def test_a_changed_unreferenced_listed_file_is_a_hash_mismatch(bundle):
    _list_file(bundle, "LICENSE", b"Apache-2.0\n")
    (bundle / "LICENSE").write_bytes(b"MIT-2.0!!\n\n")  # same size
    b = hlobundle.load(bundle)  # sizes agree: the hash is verify's to check
    with pytest.raises(
        hlobundle.errors.HashMismatchError,
        match=r"LICENSE: sha256 is [0-9a-f]{64}, the manifest says",
    ) as e:
        b.verify()
    assert e.value.code == "HASH_MISMATCH" and e.value.path == "LICENSE"


def test_unreferenced_listed_files_are_held_from_load(bundle):
    _list_file(bundle, "LICENSE", b"Apache-2.0\n")
    b = hlobundle.load(bundle)
    # Another name put in its place after load: verify checks the file load opened, as it does
    # for tensor files, and reports on what it holds.
    (bundle / "LICENSE.new").write_bytes(b"MIT-2.0!!\n\n")
    os.replace(bundle / "LICENSE.new", bundle / "LICENSE")
    b.verify()
    with pytest.raises(hlobundle.errors.HashMismatchError):
        hlobundle.load(bundle).verify()


@pytest.mark.parametrize("name", ["inputs.safetensors", "module.mlir", "module.mlirbc", "LICENSE"])
def test_a_hard_linked_listed_file_is_refused(bundle, tmp_path, name):
    _list_file(bundle, "LICENSE", b"Apache-2.0\n")
    os.link(bundle / name, tmp_path / "outside")  # changes there would change the bundle's file
    with pytest.raises(hlobundle.errors.UnsafePathError, match=f"{name!r} has 2 hard links") as e:
        hlobundle.load(bundle)
    assert e.value.code == "PATH_UNSAFE" and e.value.path == name


@pytest.mark.parametrize("name", ["inputs.safetensors", "module.mlir", "LICENSE"])
def test_a_hard_link_made_after_the_file_set_check_is_refused_when_opened(
    bundle, tmp_path, monkeypatch, name
):
    from hlobundle._read import _files, _reader

    _list_file(bundle, "LICENSE", b"Apache-2.0\n")
    checked = _files.check_file_set

    def then_link(root, manifest, present=None):
        checked(root, manifest, present)
        os.link(bundle / name, tmp_path / "outside")

    monkeypatch.setattr(_reader._files, "check_file_set", then_link)
    with pytest.raises(hlobundle.errors.UnsafePathError, match=f"{name!r} has 2 hard links"):
        hlobundle.load(bundle)

"""pack -> load -> values, for every dtype and the awkward shapes."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import ALL_DTYPES, identity_module, np_dtype, pack_identity, sample

import hlobundle


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_every_dtype_round_trips(tmp_path, dtype):
    x = sample((3, 2), dtype)
    bundle = hlobundle.load(pack_identity(tmp_path, x))
    bundle.verify()
    (arg,) = bundle.arguments
    assert arg.dtype == dtype and arg.shape == [3, 2]
    got = bundle.tensor(arg.name)
    assert got.dtype == np_dtype(dtype)
    np.testing.assert_array_equal(got.view(np.uint8), x.view(np.uint8))


@pytest.mark.parametrize("shape", [(), (0,), (3, 0, 2), (1, 1, 1, 1, 1, 2)])
@pytest.mark.parametrize("dtype", ["float32", "complex128", "bool"])
def test_zero_d_zero_size_and_rank_6(tmp_path, shape, dtype):
    x = sample(shape, dtype)
    bundle = hlobundle.load(pack_identity(tmp_path, x))
    bundle.verify()
    got = bundle.tensor("arg0")
    assert got.shape == shape and got.dtype == x.dtype
    np.testing.assert_array_equal(got, x)


def test_many_arguments(tmp_path):
    xs = [sample((i % 5 + 1,), "float32", i) for i in range(200)]
    bundle = hlobundle.load(pack_identity(tmp_path, *xs))
    bundle.verify()
    assert [a.name for a in bundle.arguments] == [f"arg{i}" for i in range(200)]
    for i, x in enumerate(xs):
        np.testing.assert_array_equal(bundle.tensor(f"arg{i}"), x)


@pytest.mark.parametrize("shape", [(5,), (2, 3), (2, 3, 4), (2, 3, 4, 5)])
def test_column_major_inputs_are_stored_transposed_and_flagged(tmp_path, shape):
    julia = sample(shape, "float32")  # Julia's orientation: the reverse of the tensor's shape
    module = identity_module(np.zeros(shape[::-1], np.float32))
    out = hlobundle.pack(module, [julia], tmp_path / "b", layout="column_major")
    bundle = hlobundle.load(out)
    assert bundle.arguments[0].layout == "column_major"
    assert bundle.results[0].layout == "column_major"
    stored = bundle.tensor("arg0")
    np.testing.assert_array_equal(stored, julia.T)
    producer = bundle.tensor("arg0", layout="producer")
    np.testing.assert_array_equal(producer, julia)
    # The Julia reading rule of SPEC.md: the stored bytes, read column-major with the
    # reversed shape, are the Julia array, with no copy.
    as_julia = np.ndarray(shape, stored.dtype, buffer=stored.tobytes(), order="F")
    np.testing.assert_array_equal(as_julia, julia)


def test_pack_is_deterministic(tmp_path):
    xs = [sample((4, 3), d, i) for i, d in enumerate(["float32", "int64", "bfloat16", "bool"])]
    a = pack_identity(tmp_path, *xs, name="a")
    b = pack_identity(tmp_path, *xs, name="b")
    files_a = sorted(p.name for p in a.iterdir())
    assert files_a == sorted(p.name for p in b.iterdir())
    for name in files_a:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_no_inputs_stores_signature_only(tmp_path):
    x = sample((2,), "float32")

    out = hlobundle.pack(identity_module(x), None, tmp_path / "b")
    bundle = hlobundle.load(out)
    bundle.verify()
    assert not bundle.has_example_inputs
    assert sorted(bundle.manifest.files) == ["module.mlir", "module.mlirbc"]
    with pytest.raises(hlobundle.InputError, match="no stored example value"):
        bundle.tensor("arg0")


def test_roles_split_inputs_and_weights(tmp_path):
    x, w = sample((2,), "float32"), sample((3,), "float32")
    out = pack_identity(tmp_path, x, w, names=["x", "w"], roles={"w": "parameter"})
    bundle = hlobundle.load(out)
    assert bundle.manifest.argument("w").value.file == "weights.safetensors"
    assert bundle.manifest.argument("x").value.file == "inputs.safetensors"
    np.testing.assert_array_equal(bundle.tensor("w"), w)


def test_tensors_are_read_only_maps(tmp_path):
    bundle = hlobundle.load(pack_identity(tmp_path, sample((8,), "float32")))
    t = bundle.tensor("arg0")
    assert not t.flags.writeable


def test_tensor_data_is_aligned_for_zero_copy(tmp_path):
    import struct

    import jax

    arrays = [sample((64, 16), "float32", i) for i in range(3)] + [sample((3,), "int8")]
    bundle = hlobundle.load(pack_identity(tmp_path, *arrays))
    raw = (bundle.path / "inputs.safetensors").read_bytes()
    assert (8 + struct.unpack("<Q", raw[:8])[0]) % 64 == 0
    for name in ("arg0", "arg1", "arg2"):  # 4 KiB each: every one starts 64-byte aligned
        t = bundle.tensor(name)
        assert t.ctypes.data % 64 == 0
        assert jax.device_put(t).unsafe_buffer_pointer() == t.ctypes.data  # used in place

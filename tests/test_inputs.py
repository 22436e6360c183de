"""Input files and how their keys map to @main's arguments."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import identity_module, sample
from safetensors.numpy import save_file

import hlobundle

X = sample((2, 3), "float32", 1)
Y = sample((4,), "int32", 2)


@pytest.fixture
def module(tmp_path):
    path = tmp_path / "m.mlir"
    path.write_text(identity_module(X, Y))
    return path


def values(bundle_path):
    b = hlobundle.load(bundle_path)
    return [np.asarray(b.tensor(a.name)) for a in b.arguments]


def assert_packed(out):
    got = values(out)
    np.testing.assert_array_equal(got[0], X)
    np.testing.assert_array_equal(got[1], Y)


def test_npz_by_name(tmp_path, module):
    np.savez(tmp_path / "in.npz", y=Y, x=X)
    assert_packed(
        hlobundle.pack_files(module, [tmp_path / "in.npz"], tmp_path / "b", names=["x", "y"])
    )


def test_npz_zero_based_from_np_savez(tmp_path, module):
    np.savez(tmp_path / "in.npz", X, Y)  # arr_0, arr_1
    assert_packed(hlobundle.pack_files(module, [tmp_path / "in.npz"], tmp_path / "b"))


def test_npz_one_based_from_julia(tmp_path, module):
    np.savez(tmp_path / "in.npz", arr_2=Y, arr_1=np.asfortranarray(X))
    assert_packed(hlobundle.pack_files(module, [tmp_path / "in.npz"], tmp_path / "b"))


def test_npz_numbering_that_fits_neither(tmp_path, module):
    np.savez(tmp_path / "in.npz", arr_0=X, arr_2=Y)
    with pytest.raises(
        hlobundle.InputError,
        match=r"the arr_<k> keys \[0, 2\] are not one full set for 2 argument\(s\): numbered keys "
        r"give every argument, as arr_0..arr_1 \(np.savez, 0-based\) or arr_1..arr_2",
    ) as e:
        hlobundle.pack_files(module, [tmp_path / "in.npz"], tmp_path / "b")
    assert e.value.code == "INPUT_AMBIGUOUS"
    assert not (tmp_path / "b").exists()


def test_unknown_keys_are_ambiguous(tmp_path, module):
    np.savez(tmp_path / "in.npz", a=X, b=Y)
    with pytest.raises(
        hlobundle.InputError,
        match=r"key\(s\) \['a', 'b'\] are neither argument names nor arr_<k>\. The arguments are "
        r"\['arg0', 'arg1'\]\.",
    ) as e:
        hlobundle.pack_files(module, [tmp_path / "in.npz"], tmp_path / "b")
    assert e.value.code == "INPUT_AMBIGUOUS"


def test_npy_files_by_position(tmp_path, module):
    np.save(tmp_path / "first.npy", X)
    np.save(tmp_path / "second.npy", Y)
    assert_packed(
        hlobundle.pack_files(
            module, [tmp_path / "first.npy", tmp_path / "second.npy"], tmp_path / "b"
        )
    )


def test_npy_files_by_name_in_any_order(tmp_path, module):
    np.save(tmp_path / "x.npy", X)
    np.save(tmp_path / "y.npy", Y)
    out = hlobundle.pack_files(
        module, [tmp_path / "y.npy", tmp_path / "x.npy"], tmp_path / "b", names=["x", "y"]
    )
    assert_packed(out)


def test_safetensors_and_split_files(tmp_path, module):
    save_file({"x": X}, str(tmp_path / "a.safetensors"))
    np.savez(tmp_path / "b.npz", y=Y)
    out = hlobundle.pack_files(
        module, [tmp_path / "a.safetensors", tmp_path / "b.npz"], tmp_path / "b", names=["x", "y"]
    )
    assert_packed(out)


def test_input_files_given_through_symlinks_are_read(tmp_path, module):
    """Input files are the user's: a symlink they name is followed (a bundle's own files never
    are), for safetensors as for npz."""
    data = tmp_path / "data"
    data.mkdir()
    save_file({"x": X}, str(data / "a.safetensors"))
    np.savez(data / "b.npz", y=Y)
    for name in ("a.safetensors", "b.npz"):
        (tmp_path / name).symlink_to(data / name)
    out = hlobundle.pack_files(
        module, [tmp_path / "a.safetensors", tmp_path / "b.npz"], tmp_path / "b", names=["x", "y"]
    )
    assert_packed(out)


def test_missing_argument(tmp_path, module):
    np.savez(tmp_path / "in.npz", x=X)
    with pytest.raises(
        hlobundle.InputError, match=r"no input given for argument\(s\) \['y'\]"
    ) as e:
        hlobundle.pack_files(module, [tmp_path / "in.npz"], tmp_path / "b", names=["x", "y"])
    assert e.value.argument == "y"


def test_duplicate_keys_across_files(tmp_path, module):
    np.savez(tmp_path / "a.npz", x=X)
    np.savez(tmp_path / "b.npz", x=X, y=Y)
    with pytest.raises(hlobundle.InputError, match=r"input key\(s\) \['x'\] appear more than once"):
        hlobundle.pack_files(
            module, [tmp_path / "a.npz", tmp_path / "b.npz"], tmp_path / "b", names=["x", "y"]
        )


def test_wrong_count(tmp_path, module):
    with pytest.raises(
        hlobundle.InputError, match=r"expected 2 input array\(s\), one per argument, got 1"
    ):
        hlobundle.pack(module, [X], tmp_path / "b")


def test_wrong_shape_names_argument_path_and_source(tmp_path, module):
    with pytest.raises(
        hlobundle.InputError,
        match=re_escape(
            "argument 'arg1' (path %arg1, from inputs[1]): expected shape (4,), got (5,)"
        ),
    ) as e:
        hlobundle.pack(module, [X, np.zeros(5, np.int32)], tmp_path / "b")
    assert e.value.argument == "arg1"


def test_wrong_dtype(tmp_path, module):
    with pytest.raises(
        hlobundle.InputError,
        match=re_escape(
            "argument 'arg0' (path %arg0, from inputs[0]): expected dtype float32, got float64"
        ),
    ):
        hlobundle.pack(module, [X.astype(np.float64), Y], tmp_path / "b")


def test_column_major_wrong_orientation(tmp_path, module):
    with pytest.raises(
        hlobundle.InputError,
        match=re_escape("expected shape (3, 2) (Julia orientation, reversed), got (2, 3)"),
    ):
        hlobundle.pack(module, [X, Y], tmp_path / "b", layout="column_major")


def test_missing_file_and_unknown_extension(tmp_path, module):
    with pytest.raises(hlobundle.InputError, match="does not exist"):
        hlobundle.pack_files(module, [tmp_path / "nope.npz"], tmp_path / "b")
    (tmp_path / "in.csv").write_text("1,2")
    with pytest.raises(
        hlobundle.InputError, match="unknown extension '.csv'; expected .npz, .npy or .safetensors"
    ):
        hlobundle.pack_files(module, [tmp_path / "in.csv"], tmp_path / "b")


def test_pickled_npy_is_refused(tmp_path, module):
    np.save(tmp_path / "x.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(hlobundle.InputError, match="cannot read input file .*pickle"):
        hlobundle.pack_files(module, [tmp_path / "x.npy"], tmp_path / "b")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"names": ["x"]}, "names: expected 2 entries, one per @main value, got 1"),
        ({"names": ["x", "x"]}, "names: 'x' is given twice"),
        ({"names": ["x", "for"]}, "names: 'for' is not a Python identifier"),
        ({"roles": {"z": "parameter"}}, "role 'parameter' given for 'z', which names no argument"),
        ({"result_names": ["a"]}, "result_names: expected 2 entries"),
    ],
)
def test_bad_options(tmp_path, module, kwargs, message):
    with pytest.raises(hlobundle.InputError, match=re_escape(message)):
        hlobundle.pack(module, [X, Y], tmp_path / "b", **kwargs)


def re_escape(text):
    import re

    return re.escape(text)


def test_float64_safetensors_input_is_float64(tmp_path):
    z = sample((3,), "float64")
    module = tmp_path / "m.mlir"
    module.write_text(identity_module(z))
    save_file({"arg0": z}, str(tmp_path / "z.safetensors"))
    out = hlobundle.pack_files(module, [tmp_path / "z.safetensors"], tmp_path / "b")
    np.testing.assert_array_equal(hlobundle.load(out).tensor("arg0"), z)

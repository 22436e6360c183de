"""A bundle's tensor files against its manifest (`_read/_tensor_files`, SPEC.md section 8): each
header entry against the field that names it, no tensor that no field names, a header within
the budget of the keys it holds, the stored values of a symbolic function one instance of its
shapes, and bools and sub-byte integers within their bits.

The bundles are written by hand (safetensors files and a manifest), without JAX."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from safetensors.numpy import save_file

from hlobundle._format import _dtypes, _limits
from hlobundle._format._manifest_json import parse_manifest
from hlobundle._read import _tensor_files
from hlobundle.errors import LimitError, TensorMismatchError

SHA = "0" * 64


def value(name, shape, dtype="float32", file="inputs.safetensors", key=None):
    return {
        "name": name,
        "path": name,
        "shape": list(shape),
        "dtype": dtype,
        "value": {"file": file, "key": key or name},
    }


def bundle(root, tensors, arguments, results=(), *, version="1.3", constraints=None):
    """A bundle directory of safetensors files `tensors` ({file: {key: array}}) and a manifest
    of these arguments and results (parsed, as the reader parses it)."""
    root.mkdir(parents=True, exist_ok=True)
    for file, arrays in tensors.items():
        save_file(arrays, str(root / file), metadata=None)
    function = {
        "arguments": list(arguments),
        "results": list(results),
        "module": {
            "text": "module.mlir",
            "portable": {"file": "module.mlirbc", "target_version": "1.0.0"},
        },
    }
    if constraints:
        function["constraints"] = constraints
    names = ["module.mlir", "module.mlirbc", *tensors]
    common = {
        "format": "hlobundle",
        "format_version": version,
        "provenance": {"producer": "test", "producer_version": "0"},
        "files": {n: {"size": 1, "sha256": SHA} for n in names},
    }
    if version.startswith("2"):
        data = {**common, "functions": [{"name": "f", **function}]}
    else:
        data = {**common, "function": "f", **function}
    return parse_manifest(json.dumps(data).encode())


def expected(name, shape, dtype="float32"):
    return {
        "name": name,
        "shape": list(shape),
        "dtype": dtype,
        "expected": {"file": "expected.safetensors", "key": name},
    }


F32 = np.float32


def test_matching_files_open(tmp_path):
    m = bundle(
        tmp_path,
        {
            "inputs.safetensors": {"x": np.ones((2, 3), F32)},
            "expected.safetensors": {"y": np.ones(2, F32)},
        },
        [value("x", (2, 3))],
        [expected("y", (2,))],
    )
    files = _tensor_files.open_tensor_files(tmp_path, m)
    assert sorted(files) == ["expected.safetensors", "inputs.safetensors"]
    assert [f for f, *_ in _tensor_files.stored_tensors(m)] == ["arguments[0]", "results[0]"]


def test_a_tensor_no_field_names_is_refused(tmp_path):
    stored = {"x": np.ones(2, F32), "smuggled": np.ones(1, F32)}
    m = bundle(tmp_path, {"inputs.safetensors": stored}, [value("x", (2,))])
    with pytest.raises(
        TensorMismatchError, match=re.escape("holds tensor(s) ['smuggled'] that no argument")
    ) as e:
        _tensor_files.open_tensor_files(tmp_path, m)
    assert e.value.code == "TENSOR_MISMATCH" and e.value.path == "inputs.safetensors"


def test_a_key_the_file_lacks_is_refused(tmp_path):
    m = bundle(
        tmp_path,
        {"inputs.safetensors": {"x": np.ones(2, F32)}},
        [value("x", (2,)), value("w", (2,))],
    )
    with pytest.raises(
        TensorMismatchError, match=re.escape("arguments[1]: inputs.safetensors has no tensor 'w'")
    ) as e:
        _tensor_files.open_tensor_files(tmp_path, m)
    assert e.value.field == "arguments[1]"


@pytest.mark.parametrize(
    ("stored", "fragment"),
    [
        (np.ones(2, np.float64), "is F64[2], the manifest's float32[2] is stored as F32[2]"),
        (np.ones(3, F32), "is F32[3], the manifest's float32[2] is stored as F32[2]"),
        (np.ones((2, 1), F32), "is F32[2, 1], the manifest's float32[2]"),
    ],
    ids=["dtype", "size", "rank"],
)
def test_a_stored_tensor_of_another_dtype_or_shape_is_refused(tmp_path, stored, fragment):
    m = bundle(tmp_path, {"inputs.safetensors": {"x": stored}}, [value("x", (2,))])
    with pytest.raises(TensorMismatchError, match=re.escape(fragment)) as e:
        _tensor_files.open_tensor_files(tmp_path, m)
    assert e.value.field == "arguments[0]" and e.value.path == "inputs.safetensors"


def test_a_symbolic_tensor_of_another_dtype_is_refused(tmp_path):
    m = bundle(
        tmp_path,
        {"inputs.safetensors": {"x": np.ones(3, np.int32)}},
        [value("x", ("b",))],
        version="2.0",
    )
    with pytest.raises(TensorMismatchError, match=re.escape("is I32[3], the manifest's float32")):
        _tensor_files.open_tensor_files(tmp_path, m)


def test_stored_values_that_fit_the_symbolic_shapes_open(tmp_path):
    m = bundle(
        tmp_path,
        {
            "inputs.safetensors": {"x": np.ones(3, F32)},
            "expected.safetensors": {"y": np.ones(6, F32)},
        },
        [value("x", ("b",))],
        [expected("y", ("2*b",))],
        version="2.0",
    )
    _tensor_files.open_tensor_files(tmp_path, m)


def test_stored_values_that_do_not_fit_the_symbolic_shapes_are_refused(tmp_path):
    m = bundle(
        tmp_path,
        {
            "inputs.safetensors": {"x": np.ones(3, F32)},
            "expected.safetensors": {"y": np.ones(5, F32)},
        },
        [value("x", ("b",))],
        [expected("y", ("2*b",))],
        version="2.0",
    )
    with pytest.raises(
        TensorMismatchError,
        match=re.escape(
            "functions[f].the stored values do not fit the symbolic shapes: y.shape[0] is 5, "
            "but 2*b = 6 with b=3"
        ),
    ) as e:
        _tensor_files.open_tensor_files(tmp_path, m)
    assert e.value.field == "functions[f].arguments"


def test_stored_values_that_break_a_constraint_are_refused(tmp_path):
    m = bundle(
        tmp_path,
        {"inputs.safetensors": {"x": np.ones(3, F32)}},
        [value("x", ("b",))],
        version="2.0",
        constraints=["b >= 4"],
    )
    with pytest.raises(TensorMismatchError, match="constraint b >= 4 does not hold"):
        _tensor_files.open_tensor_files(tmp_path, m)


def test_a_header_over_the_budget_of_its_keys_is_refused(tmp_path):
    padding = "x" * (_limits.TENSOR_HEADER_BASE + 2 * _limits.TENSOR_HEADER_PER_KEY)
    path = tmp_path / "inputs.safetensors"
    m = bundle(tmp_path, {}, [value("x", (2,))])
    save_file({"x": np.ones(2, F32)}, str(path), metadata={"pad": padding})
    with pytest.raises(LimitError, match="a safetensors header of .* bytes for the tensors"):
        _tensor_files.open_tensor_files(tmp_path, m)


def _read(files):
    u8 = _dtypes.BY_NAME["uint8"]
    return lambda ref, shape: files[ref.file].array(ref.key, u8, tuple(shape))


@pytest.mark.parametrize(
    ("dtype", "stored", "fragment"),
    [
        ("bool", np.array([0, 2], np.uint8), "holds bytes other than 0 and 1 in a bool tensor"),
        (
            "uint4",
            np.array([15, 16], np.uint8),
            "holds bytes other than values below 16 in a uint4",
        ),
        ("int2", np.array([3, 4], np.uint8), "other than values below 4 in a int2 tensor"),
    ],
    ids=["bool_of_2", "uint4_of_16", "int2_of_4"],
)
def test_a_narrow_tensor_holding_wider_bytes_is_refused(tmp_path, dtype, stored, fragment):
    row = _dtypes.BY_NAME[dtype]
    stored = stored.view(np.bool_) if dtype == "bool" else stored
    m = bundle(tmp_path, {"inputs.safetensors": {"x": stored}}, [value("x", (2,), dtype)])
    files = _tensor_files.open_tensor_files(tmp_path, m)
    assert files["inputs.safetensors"].entries["x"].code == row.safetensors
    with pytest.raises(TensorMismatchError, match=re.escape(fragment)) as e:
        _tensor_files.check_narrow_values(m, _read(files))
    assert e.value.field == "arguments[0]" and e.value.path == "inputs.safetensors"


def test_narrow_tensors_within_their_bits_pass(tmp_path):
    m = bundle(
        tmp_path,
        {
            "inputs.safetensors": {
                "b": np.array([0, 1], np.uint8).view(np.bool_),
                "u": np.array([0, 15], np.uint8),
            }
        },
        [value("b", (2,), "bool"), value("u", (2,), "uint4")],
    )
    _tensor_files.check_narrow_values(m, _read(_tensor_files.open_tensor_files(tmp_path, m)))


def _count_parses(monkeypatch) -> list[str]:
    """The names of the tensor files safetensors parses from now on, in order."""
    from hlobundle._bundle_io import _tensors

    parsed: list[str] = []
    real = _tensors.TensorFile.validate_with_safetensors
    monkeypatch.setattr(
        _tensors.TensorFile,
        "validate_with_safetensors",
        lambda self: parsed.append(self.name) or real(self),
    )
    return parsed


def test_safetensors_parses_a_header_once_and_its_verdict_is_remembered(tmp_path, monkeypatch):
    """safetensors' own parse of a header (the one step that imports numpy) runs once per
    header bytes and file size: a second load of the same file recalls its verdict; a file
    whose header differs is parsed again."""
    import shutil

    from helpers import ROOT

    import hlobundle

    monkeypatch.setenv("HLOBUNDLE_CACHE_DIR", str(tmp_path / "cache"))
    parsed = _count_parses(monkeypatch)
    lenet = ROOT / "examples" / "lenet5.hlobundle"
    hlobundle.load(lenet)
    first = sorted(parsed)
    assert first and len(first) == len(set(first))
    hlobundle.load(lenet)
    assert sorted(parsed) == first  # recalled, not parsed again
    other = shutil.copytree(lenet, tmp_path / "other.hlobundle")
    hlobundle.load(other)  # the same bytes elsewhere: the same verdict
    assert sorted(parsed) == first
    hlobundle.load(ROOT / "examples" / "lm.hlobundle")  # other headers: parsed
    assert len(parsed) > len(first)


def test_a_remembered_verdict_other_than_accepted_is_a_miss(tmp_path, monkeypatch):
    """A well-formed verdict entry for the right key that does not say `accepted` (an older or
    another writer's): a miss, and safetensors parses the header again."""
    from helpers import ROOT

    import hlobundle
    from hlobundle._read import _cache

    monkeypatch.setenv("HLOBUNDLE_CACHE_DIR", str(tmp_path / "cache"))
    lenet = ROOT / "examples" / "lenet5.hlobundle"
    written = []
    real_write = _cache.write
    monkeypatch.setattr(_cache, "write", lambda *a: written.append(a) or real_write(*a))
    hlobundle.load(lenet)
    verdicts = [(where, key) for where, key, data, suffix in written if suffix == ".ok"]
    assert verdicts
    for path in (tmp_path / "cache").glob("safetensors-headers/*/*.ok"):
        path.unlink()
    for where, key in verdicts:  # well formed, under the right name: it says something else
        real_write(where, key, b"rejected", ".ok")
    parsed = _count_parses(monkeypatch)
    hlobundle.load(lenet)
    assert len(parsed) == len(verdicts), parsed


@pytest.mark.slow
@pytest.mark.subprocess
def test_a_verify_of_bytes_checked_before_imports_no_numpy(tmp_path):
    import os
    import subprocess
    import sys

    from helpers import ROOT

    code = (
        "import sys\nfrom hlobundle._cli._main import main\n"
        f"main(['verify', {str(ROOT / 'examples' / 'lenet5.hlobundle')!r}])\n"
        "print('numpy' in sys.modules)"
    )
    env = {**os.environ, "HLOBUNDLE_CACHE_DIR": str(tmp_path / "cache")}
    runs = [
        subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        for _ in range(2)
    ]
    assert [r.stdout.splitlines()[-1] for r in runs] == ["True", "False"], runs[1].stderr


@pytest.mark.slow
@pytest.mark.subprocess
def test_a_full_verify_that_recalls_a_file_s_sha256_imports_no_numpy(tmp_path):
    """`hlobundle verify` of a chunked weights file whose sha256 it recalls from its chunk
    digests (`_file_digests`) hashes the chunks from the file, through buffers of its threads:
    no copy, so no numpy (about 0.07 s of a fresh process, more than the recall saves on a
    file of 80 MiB)."""
    import os
    import subprocess
    import sys

    from helpers import functions_over_weights

    bundle = functions_over_weights(tmp_path / "two.hlobundle", 2)
    code = (
        "import sys\nfrom hlobundle._read import _reader\n"
        "_reader._PARALLEL_BYTES = 0  # the chunks hashed side by side, as a large file's\n"
        "from hlobundle._cli._main import main\n"
        f"assert main(['verify', {str(bundle)!r}]) == 0\n"
        "print('numpy' in sys.modules)"
    )
    env = {**os.environ, "HLOBUNDLE_CACHE_DIR": str(tmp_path / "cache")}
    runs = [
        subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        for _ in range(3)
    ]
    assert list((tmp_path / "cache" / "file-digests").rglob("*.ok")), "no sha256 was recorded"
    assert [r.stdout.splitlines()[-1] for r in runs][1:] == ["False", "False"], runs[2].stderr

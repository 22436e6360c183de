"""Generate the conformance cases: `python conformance/generate.py [OUT]` (default: hlobundle/conformance_cases,
shipped with the package).

Every case is defined here; `tests/test_conformance.py` fails when the checked-in cases differ
from what this script writes. Modules are written by hand (not lowered by JAX) so that cases
do not change with JAX's lowering; expected outputs are computed once by the xla backend.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import sys
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

import ml_dtypes
import numpy as np

import hlobundle
from hlobundle._bundle_io import _tensor_writing
from hlobundle._format import _dtypes
from hlobundle._write._atomic import sha256_file

HERE = Path(__file__).resolve().parent
TARGET = "1.13.7"  # StableHLO target of every case's portable artifact
CASES: dict[str, Callable[[Path], dict]] = {}


def case(name: str, description: str, expect: str = "ok", rtol: float = 1e-6, atol: float = 1e-6):
    def register(build: Callable[[Path], dict | None]) -> Callable[[Path], dict | None]:
        def run(path: Path) -> dict:
            built = build(
                path
            )  # a dict adds to case.json: `public_key`, `needs`, `symlinks` (SPEC.md 9)
            extra = built if isinstance(built, dict) else {}
            return {
                "description": description,
                "expect": expect,
                "rtol": rtol,
                "atol": atol,
                **extra,
            }

        CASES[name] = run
        return build

    return register


# --- helpers ------------------------------------------------------------------------------------


def values(shape: tuple[int, ...], dtype: str, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dt = _dtypes.BY_NAME[dtype].numpy
    if dtype == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    if dtype in _dtypes.SUB_BYTE_BITS:  # every value the type has, negative ones too
        top = 5 if dtype.startswith("float") else 1 << _dtypes.SUB_BYTE_BITS[dtype]
        low = -top // 2 if dtype.startswith("int") else 0
        return rng.integers(low, low + top, shape).astype(np.float32).astype(dt)
    if dt.kind in "iu":
        return rng.integers(0, 100, shape).astype(dt)
    if dt.kind == "c":
        return (rng.integers(-8, 8, shape) + 1j * rng.integers(-8, 8, shape)).astype(dt)
    return rng.integers(1, 8, shape).astype(np.float32).astype(dt)


def tensor(shape: tuple[int, ...], dtype: str) -> str:
    dims = "".join(f"{d}x" for d in shape)
    return f"tensor<{dims}{_dtypes.BY_NAME[dtype].mlir}>"


def func(
    args: list[str],
    results: list[str],
    body: list[str],
    returns: list[str],
    arg_attrs: dict[int, str] | None = None,
) -> str:
    params = ", ".join(
        f"%a{i}: {t}" + (f" {{{arg_attrs[i]}}}" if arg_attrs and i in arg_attrs else "")
        for i, t in enumerate(args)
    )
    lines = [f"func.func @main({params}) -> ({', '.join(results)}) {{", *(f"  {b}" for b in body)]
    lines.append(f"  return {', '.join(returns)} : {', '.join(results)}" if returns else "  return")
    return "\n".join(lines + ["}", ""])


def pack(path: Path, text: str, inputs: list[np.ndarray] | None, **kwargs) -> Path:
    bundle = hlobundle.pack(
        text,
        inputs,
        path / "bundle",
        target_version=TARGET,
        producer=("conformance", "1"),
        **{"result_names": first_result_names(text), **kwargs},
    )
    _strip_environment(bundle)
    return bundle


def first_result_names(text: str) -> list[str]:
    """`result0`, `result1`...: the names the writer gave results by position when the cases
    were first written (since 2026-12-06 it writes `result`, or `result_0`, `result_1`...; SPEC.md
    2.1). The cases keep them, so that they stay as they were: a reader takes either."""
    from hlobundle._parse import _main_signature, _mlir

    n = len(_main_signature.signature(_mlir.parse(text), dynamic=True).results)
    return [f"result{k}" for k in range(n)]


def _strip_environment(bundle: Path) -> None:
    """Drop the jax/jaxlib/StableHLO versions, so that cases do not depend on the generator's machine."""
    edit(
        bundle,
        lambda m: m["provenance"].update(
            jax_version=None, jaxlib_version=None, stablehlo_version=None
        ),
    )
    edit(
        bundle,
        lambda m: [
            m["provenance"].pop(k) for k in list(m["provenance"]) if m["provenance"][k] is None
        ],
    )


def edit(bundle: Path, change: Callable[[dict], object], *, raw: bool = False) -> None:
    path = bundle / "manifest.json"
    data = json.loads(path.read_text())
    change(data)
    _overwrite(path, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode())


def _overwrite(path: Path, data: bytes) -> None:
    """`path.write_bytes(data)` without first truncating the file to nothing: on ext4 a file
    truncated to zero and written again is flushed to the disk as it is closed (its
    `auto_da_alloc`), about 2 ms of waiting for each of the cases' 300 edits."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))
    finally:
        os.close(fd)


def rehash(bundle: Path, name: str) -> None:
    path = bundle / name
    size, digest = path.stat().st_size, sha256_file(path)
    edit(bundle, lambda m: m["files"][name].update(size=size, sha256=digest))


def save_outputs(path: Path, bundle: Path, inputs: list[np.ndarray] | None = None) -> None:
    b = hlobundle.load(bundle)
    args = inputs if inputs is not None else [b.tensor(a.name) for a in b.arguments]
    results = b.function("xla").call_flat(*args)
    _tensor_writing.write(
        path / "outputs.safetensors",
        {
            r.name: (np.asarray(x), _dtypes.BY_NAME[r.dtype])
            for r, x in zip(b.results, results, strict=True)
        },
    )


def valid(path: Path, text: str, inputs: list[np.ndarray], **kwargs) -> Path:
    bundle = pack(path, text, inputs, **kwargs)
    save_outputs(path, bundle)
    return bundle


# --- valid cases --------------------------------------------------------------------------------

for _i, _dtype in enumerate(_dtypes.NAMES):

    def _dtype_case(path: Path, dtype: str = _dtype, seed: int = _i) -> None:
        t, tt = tensor((2, 3), dtype), tensor((3, 2), dtype)
        text = func(
            [t],
            [t, tt],
            ["%t = stablehlo.transpose %a0, dims = [1, 0] : (" + t + ") -> " + tt],
            ["%a0", "%t"],
        )
        valid(path, text, [values((2, 3), dtype, seed)])

    case(f"valid_dtype_{_dtype}", f"a {_dtype} argument, returned as is and transposed")(
        _dtype_case
    )


@case("valid_zero_d", "0-d arguments: a float32 and an int64 scalar")
def _(path: Path) -> None:
    f, i = tensor((), "float32"), tensor((), "int64")
    text = func(
        [f, i],
        [f, i],
        ["%x = stablehlo.add %a0, %a0 : " + f, "%y = stablehlo.multiply %a1, %a1 : " + i],
        ["%x", "%y"],
    )
    valid(path, text, [np.float32(2.5), np.int64(-7)])


@case(
    "valid_special_values",
    "IEEE's special values: 1/0, -1/0 and 0/0 computed, and inf, -inf and NaN negated; an "
    "infinity agrees only with the same infinity and NaN only with NaN (SPEC.md 2.15)",
)
def _(path: Path) -> None:
    t = tensor((4,), "float32")
    text = func(
        [t, t, t],
        [t, t],
        ["%q = stablehlo.divide %a0, %a1 : " + t, "%n = stablehlo.negate %a2 : " + t],
        ["%q", "%n"],
    )
    inputs = [np.float32([1, -1, 0, 2]), np.float32([0, 0, 0, 4])]
    valid(path, text, [*inputs, np.float32([np.inf, -np.inf, np.nan, 1])])


@case("valid_zero_size", "a zero-size argument and result")
def _(path: Path) -> None:
    t = tensor((0, 3), "float32")
    valid(
        path,
        func([t], [t], ["%x = stablehlo.negate %a0 : " + t], ["%x"]),
        [np.zeros((0, 3), np.float32)],
    )


@case("valid_rank_6", "a rank-6 argument")
def _(path: Path) -> None:
    shape = (1, 2, 1, 2, 1, 2)
    t = tensor(shape, "float32")
    valid(
        path,
        func([t], [t], ["%x = stablehlo.negate %a0 : " + t], ["%x"]),
        [values(shape, "float32")],
    )


@case("valid_many_arguments", "64 arguments summed")
def _(path: Path) -> None:
    t = tensor((4,), "float32")
    body = ["%s0 = stablehlo.add %a0, %a1 : " + t] + [
        f"%s{i - 1} = stablehlo.add %s{i - 2}, %a{i} : {t}" for i in range(2, 64)
    ]
    valid(
        path, func([t] * 64, [t], body, ["%s62"]), [values((4,), "float32", i) for i in range(64)]
    )


@case("valid_zero_arguments", "no arguments; a constant result")
def _(path: Path) -> None:
    t = tensor((3,), "float32")
    valid(
        path, func([], [t], ["%c = stablehlo.constant dense<[1.0, 2.0, 3.0]> : " + t], ["%c"]), []
    )


@case("valid_multiple_results", "three results of different dtypes")
def _(path: Path) -> None:
    f, i, b = tensor((3,), "float32"), tensor((3,), "int32"), tensor((3,), "bool")
    body = [
        "%x = stablehlo.multiply %a0, %a0 : " + f,
        "%y = stablehlo.convert %a0 : (" + f + ") -> " + i,
        "%z = stablehlo.compare GT, %a0, %x : (" + f + ", " + f + ") -> " + b,
    ]
    valid(
        path,
        func([f], [f, i, b], body, ["%x", "%y", "%z"]),
        [np.array([0.5, 2.0, -3.0], np.float32)],
    )


@case("valid_aliasing_results", "result 1 writes back argument 0 (tf.aliasing_output)")
def _(path: Path) -> None:
    t = tensor((4,), "int64")
    body = [
        "%c = stablehlo.constant dense<1> : " + t,
        "%x = stablehlo.add %a0, %c : " + t,
        "%s = stablehlo.multiply %x, %x : " + t,
    ]
    valid(
        path,
        func([t], [t, t], body, ["%s", "%x"], arg_attrs={0: "tf.aliasing_output = 1 : i32"}),
        [np.arange(4, dtype=np.int64)],
    )


@case("valid_column_major", "column-major arguments from Julia-orientation arrays")
def _(path: Path) -> None:
    t, r = tensor((4, 3, 2), "float32"), tensor((4, 3), "float32")
    body = [
        "%z = stablehlo.constant dense<0.0> : tensor<f32>",
        "%s = stablehlo.reduce(%a0 init: %z) applies stablehlo.add across dimensions = [2] : ("
        + t
        + ", tensor<f32>) -> "
        + r,
    ]
    julia = np.asfortranarray(values((2, 3, 4), "float32"))
    valid(path, func([t], [r], body, ["%s"]), [julia], layout="column_major")


@case(
    "valid_newer_minor_version",
    "format_version 1.99 with a field this version does not define: read with a warning",
)
def _(path: Path) -> None:
    t = tensor((2,), "float32")
    bundle = valid(
        path,
        func([t], [t], ["%x = stablehlo.negate %a0 : " + t], ["%x"]),
        [values((2,), "float32")],
    )
    edit(bundle, lambda m: m.update(format_version="1.99", added_in_1_99={"anything": True}))


@case("valid_no_example_inputs", "no stored inputs; the case gives them in inputs.npz")
def _(path: Path) -> None:
    t = tensor((3,), "float32")
    bundle = pack(
        path, func([t], [t], ["%x = stablehlo.exponential %a0 : " + t], ["%x"]), None, names=["x"]
    )
    inputs = [np.array([0.0, 1.0, -1.0], np.float32)]
    np.savez(path / "inputs.npz", x=inputs[0])
    save_outputs(path, bundle, inputs)


BATCHED_SCALE = """func.func @main(%a0: tensor<?x3xf32>, %a1: tensor<3xf32>) -> tensor<?x3xf32> {
  %n = stablehlo.get_dimension_size %a0, dim = 0 : (tensor<?x3xf32>) -> tensor<i32>
  %n1 = stablehlo.reshape %n : (tensor<i32>) -> tensor<1xi32>
  %c3 = stablehlo.constant dense<3> : tensor<1xi32>
  %shape = stablehlo.concatenate %n1, %c3, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
  %w = stablehlo.dynamic_broadcast_in_dim %a1, %shape, dims = [1] : (tensor<3xf32>, tensor<2xi32>) -> tensor<?x3xf32>
  %y = stablehlo.multiply %a0, %w : tensor<?x3xf32>
  return %y : tensor<?x3xf32>
}
"""


def scale(path: Path, batched_arguments: list[str]) -> Path:
    """x * w, with the module batched over x (SPEC 2.6)."""
    t = tensor((3,), "float32")
    return pack(
        path,
        func([t, t], [t], ["%y = stablehlo.multiply %a0, %a1 : " + t], ["%y"]),
        [values((3,), "float32", 1), values((3,), "float32", 2)],
        names=["x", "w"],
        batched=BATCHED_SCALE,
        batched_arguments=batched_arguments,
    )


@case("valid_batched", "a batched module over x (format 1.1), written by hand")
def _(path: Path) -> None:
    save_outputs(path, scale(path, ["x"]))


# --- signatures (SPEC.md 8, "Signature"; format 1.2) -------------------------------------------

# A test key, derived from a fixed number so that the generated public key never changes. ECDSA
# signatures are randomized, so `model.sig` differs on each generation: the staleness test
# checks it by verifying it with this key, not by comparing bytes.
TEST_KEY_SCALAR = 0x686C6F62756E646C65  # "hlobundle"


def sign_case(path: Path, bundle: Path) -> dict:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.derive_private_key(TEST_KEY_SCALAR, ec.SECP256R1())
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    (path / "public_key.pem").write_bytes(public)
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "key.pem").write_bytes(pem)
        hlobundle.sign(bundle, Path(d) / "key.pem")
    return {"public_key": "public_key.pem", "needs": ["signatures"]}


@case(
    "valid_signed",
    "signed (model.sig); verifies with public_key.pem, and a reader without a key ignores it",
)
def _(path: Path) -> dict:
    t = tensor((2,), "float32")
    bundle = valid(
        path,
        func([t], [t], ["%x = stablehlo.negate %a0 : " + t], ["%x"]),
        [values((2,), "float32", 3)],
    )
    return sign_case(path, bundle)


@case(
    "invalid_signature_rewritten_manifest",
    "signed, then the manifest rewritten; verified with public_key.pem",
    "SIGNATURE_INVALID",
)
def _(path: Path) -> dict:
    bundle = base(path)
    spec = sign_case(path, bundle)
    edit(bundle, lambda m: m["provenance"].update(producer="someone else"))
    return spec


@case(
    "invalid_signature_listed",
    "the manifest lists model.sig, the signature's reserved name",
    "MANIFEST_INVALID",
)
def _(path: Path) -> None:
    bundle = base(path)
    (bundle / "model.sig").write_text("{}")
    edit(bundle, lambda m: m["files"].update({"model.sig": {"size": 0, "sha256": "0" * 64}}))
    rehash(bundle, "model.sig")


# --- executables (SPEC.md 2.7, "Executables"; format 1.3) ---------------------------------------


def foreign_executable(bundle: Path) -> None:
    """Store an executable no reader here can use (another architecture and IREE version): a
    reader must ignore it and run the portable artifact. Its bytes are not an executable at all,
    so a reader that loaded it would fail."""
    (bundle / "compiled").mkdir()
    (bundle / "compiled" / "llvm-cpu.vmfb").write_bytes(b"not an executable\n")
    source = hashlib.sha256((bundle / "module.mlirbc").read_bytes()).hexdigest()
    entry = {
        "target": "llvm-cpu",
        "file": "compiled/llvm-cpu.vmfb",
        "compiler": "iree",
        "compiler_version": "0.0.1",
        "architecture": "riscv64",
        "cpu": "generic",
        "flags": ["--iree-hal-target-backends=llvm-cpu"],
        "source_sha256": source,
    }

    def change(m: dict) -> None:
        m.update(format_version="1.3", executables=[entry])
        m["files"]["compiled/llvm-cpu.vmfb"] = {"size": 0, "sha256": "0" * 64}

    edit(bundle, change)
    rehash(bundle, "compiled/llvm-cpu.vmfb")


@case(
    "valid_executable_foreign",
    "an executable for another architecture and IREE version (format 1.3): ignored, not loaded",
)
def _(path: Path) -> None:
    t = tensor((3,), "float32")
    bundle = valid(
        path,
        func([t], [t], ["%x = stablehlo.sine %a0 : " + t], ["%x"]),
        [values((3,), "float32", 4)],
    )
    foreign_executable(bundle)


@case(
    "invalid_executable_hash_mismatch", "a byte of the stored executable changed", "HASH_MISMATCH"
)
def _(path: Path) -> None:
    bundle = base(path)
    foreign_executable(bundle)
    _flip_last_byte(bundle / "compiled" / "llvm-cpu.vmfb")


@case(
    "invalid_executable_unlisted",
    "executables names a file that files does not list",
    "MANIFEST_INVALID",
)
def _(path: Path) -> None:
    bundle = base(path)
    foreign_executable(bundle)
    edit(bundle, lambda m: m["executables"][0].update(file="compiled/other.vmfb"))


def foreign_xla_executable(bundle: Path, **changes: object) -> None:
    """Store an XLA executable (format 2.2) for a device no reader has (another platform, device
    kind and jaxlib): a reader must ignore it and run the portable artifact. Its bytes are not
    an executable at all, so a reader that parsed them would fail. `changes` edit the entry."""
    (bundle / "compiled").mkdir()
    (bundle / "compiled" / "xla-tpu.pjrt").write_bytes(b"not an executable\n")
    source = hashlib.sha256((bundle / "module.mlirbc").read_bytes()).hexdigest()
    entry = {
        "target": "xla-tpu",
        "file": "compiled/xla-tpu.pjrt",
        "compiler": "xla",
        "compiler_version": "0.0.1",
        "architecture": "riscv64",
        "cpu": "generic",
        "source_sha256": source,
        "device_kind": "TPU v0",
        "topology": "1",
        "libtpu_version": "0.0.1",
        **changes,
    }

    def change(m: dict) -> None:  # one function as format 2.2 writes it (SPEC.md 2.8)
        from hlobundle._format._fields import FUNCTION_FIELDS

        function = {k: m.pop(k) for k in FUNCTION_FIELDS if k in m}
        name = m.pop("function")
        function.update(name=name, executables=[entry])
        m.update(format_version="2.2", functions=[function], default_function=name)
        m["files"]["compiled/xla-tpu.pjrt"] = {"size": 0, "sha256": "0" * 64}

    edit(bundle, change)
    rehash(bundle, "compiled/xla-tpu.pjrt")


@case(
    "valid_xla_executable_foreign",
    "an XLA executable for another platform, device kind and jaxlib (format 2.2): ignored, "
    "not parsed",
)
def _(path: Path) -> None:
    t = tensor((3,), "float32")
    bundle = valid(
        path,
        func([t], [t], ["%x = stablehlo.cosine %a0 : " + t], ["%x"]),
        [values((3,), "float32", 5)],
    )
    foreign_xla_executable(bundle)


@case(
    "invalid_xla_executable_without_key",
    "an XLA executable without its device_kind",
    "MANIFEST_INVALID",
)
def _(path: Path) -> None:
    bundle = base(path)
    foreign_xla_executable(bundle)
    edit(bundle, lambda m: m["functions"][0]["executables"][0].pop("device_kind"))


@case(
    "invalid_xla_executable_in_2_1",
    "an XLA executable in a format 2.1 manifest (they need 2.2)",
    "MANIFEST_INVALID",
)
def _(path: Path) -> None:
    bundle = base(path)
    foreign_xla_executable(bundle)
    edit(bundle, lambda m: m.update(format_version="2.1"))


@case(
    "invalid_xla_executable_hash_mismatch",
    "a byte of a stored XLA executable changed",
    "HASH_MISMATCH",
)
def _(path: Path) -> None:
    bundle = base(path)
    foreign_xla_executable(bundle)
    _flip_last_byte(bundle / "compiled" / "xla-tpu.pjrt")


# --- invalid cases ------------------------------------------------------------------------------


def base(path: Path) -> Path:
    t = tensor((2, 2), "float32")
    return pack(
        path,
        func([t, t], [t], ["%x = stablehlo.add %a0, %a1 : " + t], ["%x"]),
        [values((2, 2), "float32", 1), values((2, 2), "float32", 2)],
        names=["x", "y"],
    )


def broken(name: str, description: str, expect: str):
    def register(mutate: Callable[[Path], dict | None]) -> None:
        case(name, description, expect)(lambda path: mutate(base(path)))

    return register


broken("invalid_major_version", "format_version 3.0", "VERSION_UNSUPPORTED")(
    lambda b: edit(b, lambda m: m.update(format_version="3.0"))
)
broken(
    "invalid_portable_target_too_new",
    "module.mlirbc claims StableHLO target 99.0.0, newer than any reader's (SPEC.md 5)",
    "VERSION_UNSUPPORTED",
)(lambda b: edit(b, lambda m: m["module"]["portable"].update(target_version="99.0.0")))
broken("invalid_file_missing", "a listed file is missing", "FILE_MISSING")(
    lambda b: (b / "inputs.safetensors").unlink()
)
broken("invalid_file_unlisted", "a file the manifest does not list", "FILE_UNLISTED")(
    lambda b: (b / "notes.txt").write_text("hello\n")
)
broken("invalid_hash_mismatch", "a tensor byte changed", "HASH_MISMATCH")(
    lambda b: _flip_last_byte(b / "inputs.safetensors")
)


@case(
    "invalid_unreferenced_hash_mismatch",
    "a listed file no field refers to (LICENSE) replaced with other bytes of the same size",
    "HASH_MISMATCH",
)
def _(path: Path) -> None:
    bundle = base(path)
    (bundle / "LICENSE").write_bytes(b"Apache-2.0\n")
    edit(bundle, lambda m: m["files"].update({"LICENSE": {"size": 0, "sha256": "0" * 64}}))
    rehash(bundle, "LICENSE")
    (bundle / "LICENSE").write_bytes(b"MIT-2.0!!\n\n")


broken("invalid_size_mismatch", "module.mlir grew by one byte", "SIZE_MISMATCH")(
    lambda b: _append(b / "module.mlir", b"\n")
)
broken(
    "invalid_manifest_vs_mlir",
    "the manifest's shape of x disagrees with @main",
    "SIGNATURE_MISMATCH",
)(lambda b: edit(b, lambda m: m["arguments"][0].update(shape=[2, 3])))
broken("invalid_duplicate_names", "two arguments named x", "MANIFEST_INVALID")(
    lambda b: edit(b, lambda m: m["arguments"][1].update(name="x"))
)
broken("invalid_non_identifier_name", "an argument named 'x-1'", "MANIFEST_INVALID")(
    lambda b: edit(b, lambda m: m["arguments"][0].update(name="x-1"))
)
broken("invalid_unknown_dtype", "dtype float128", "MANIFEST_INVALID")(
    lambda b: edit(b, lambda m: m["arguments"][0].update(dtype="float128"))
)
broken("invalid_utf8", "manifest.json is not UTF-8", "MANIFEST_INVALID")(
    lambda b: (b / "manifest.json").write_bytes(b'{"format": "\xff\xfe"}')
)
broken(
    "invalid_lone_surrogate",
    "a string of manifest.json escapes half of a UTF-16 pair (\\ud800): no Unicode text",
    "MANIFEST_INVALID",
)(lambda b: edit(b, lambda m: m["provenance"].update(producer="jax\ud800")))
broken("invalid_json", "manifest.json is not JSON", "MANIFEST_INVALID")(
    lambda b: (b / "manifest.json").write_bytes(b'{"format": "hlobundle",')
)
broken("invalid_not_a_bundle", "no manifest.json", "NOT_A_BUNDLE")(
    lambda b: (b / "manifest.json").unlink()
)


def _flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))


def _append(path: Path, extra: bytes) -> None:
    path.write_bytes(path.read_bytes() + extra)


def _rename_file(b: Path, new: str) -> None:
    def change(m: dict) -> None:
        m["files"][new] = m["files"].pop("inputs.safetensors")
        for a in m["arguments"]:
            a["value"]["file"] = new

    edit(b, change)


broken("invalid_path_traversal", "a file named ../inputs.safetensors", "PATH_UNSAFE")(
    lambda b: _rename_file(b, "../inputs.safetensors")
)
broken("invalid_absolute_path", "a file named /etc/passwd", "PATH_UNSAFE")(
    lambda b: _rename_file(b, "/etc/passwd")
)


@broken("invalid_symlink", "inputs.safetensors is a symlink", "PATH_UNSAFE")
def _(b: Path) -> dict:
    # A wheel cannot hold a symlink: case.json names it, and the runner makes it in a copy of
    # the case (SPEC.md 9, `symlinks`).
    os.rename(b / "inputs.safetensors", b.parent / "elsewhere.safetensors")
    return {"symlinks": {"bundle/inputs.safetensors": "../elsewhere.safetensors"}}


def _raw_safetensors(b: Path, header: dict, data: bytes) -> None:
    raw = json.dumps(header).encode()
    (b / "inputs.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    rehash(b, "inputs.safetensors")


broken(
    "invalid_safetensors_truncated",
    "inputs.safetensors lost its last 8 bytes",
    "SAFETENSORS_INVALID",
)(
    lambda b: (
        (b / "inputs.safetensors").write_bytes((b / "inputs.safetensors").read_bytes()[:-8]),
        rehash(b, "inputs.safetensors"),
    )
)
broken("invalid_safetensors_overlap", "two tensors share bytes", "SAFETENSORS_INVALID")(
    lambda b: _raw_safetensors(
        b,
        {
            "x": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
            "y": {"dtype": "F32", "shape": [2, 2], "data_offsets": [8, 24]},
        },
        bytes(24),
    )
)
broken("invalid_safetensors_hole", "a gap between two tensors", "SAFETENSORS_INVALID")(
    lambda b: _raw_safetensors(
        b,
        {
            "x": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
            "y": {"dtype": "F32", "shape": [2, 2], "data_offsets": [24, 40]},
        },
        bytes(40),
    )
)
broken("invalid_safetensors_header_bomb", "a header length of 2**62", "SAFETENSORS_INVALID")(
    lambda b: (
        (b / "inputs.safetensors").write_bytes(
            struct.pack("<Q", 2**62) + (b / "inputs.safetensors").read_bytes()[8:]
        ),
        rehash(b, "inputs.safetensors"),
    )
)
broken("invalid_manifest_vs_safetensors", "x is stored as F64", "TENSOR_MISMATCH")(
    lambda b: _raw_safetensors(
        b,
        {
            "x": {"dtype": "F64", "shape": [2, 2], "data_offsets": [0, 32]},
            "y": {"dtype": "F32", "shape": [2, 2], "data_offsets": [32, 48]},
        },
        bytes(48),
    )
)


@case(
    "invalid_batched_signature",
    "batched.arguments says w is batched; the batched module batches x",
    "SIGNATURE_MISMATCH",
)
def _(path: Path) -> None:
    edit(scale(path, ["x"]), lambda m: m["batched"].update(arguments=["w"]))


@case("invalid_batched_unknown_argument", "batched.arguments names no argument", "MANIFEST_INVALID")
def _(path: Path) -> None:
    edit(scale(path, ["x"]), lambda m: m["batched"].update(arguments=["z"]))


@broken("invalid_mlir_does_not_parse", "module.mlir is not MLIR", "MLIR_INVALID")
def _(b: Path) -> None:
    (b / "module.mlir").write_text("func.func @main( this is not MLIR\n")
    rehash(b, "module.mlir")


@broken(
    "invalid_mlir_dtype",
    "@main returns an f6E2M3FN tensor, outside the dtype table",
    "DTYPE_UNSUPPORTED",
)
def _(b: Path) -> None:
    (b / "module.mlir").write_text(
        func(
            [tensor((2, 2), "float32")] * 2,
            ["tensor<2x2xf6E2M3FN>"],
            ["%x = stablehlo.convert %a0 : (tensor<2x2xf32>) -> tensor<2x2xf6E2M3FN>"],
            ["%x"],
        )
    )
    rehash(b, "module.mlir")


@broken(
    "invalid_non_portable_custom_call",
    "a custom call into Reactant's process",
    "MODULE_NOT_PORTABLE",
)
def _(b: Path) -> None:
    t = tensor((2, 2), "float32")
    (b / "module.mlir").write_text(
        func(
            [t, t],
            [t],
            [f"%x = stablehlo.custom_call @enzymexla_compile_cpu(%a0, %a1) : ({t}, {t}) -> {t}"],
            ["%x"],
        )
    )
    rehash(b, "module.mlir")


@broken("invalid_oversized_manifest", "manifest.json over 16 MiB", "MANIFEST_TOO_LARGE")
def _(b: Path) -> None:
    text = (b / "manifest.json").read_text()
    (b / "manifest.json").write_text(text + " " * (16 * 1024 * 1024))


# --- trust: one program per form, the allow-list, limits (SPEC.md section 8) ----------------------


def replace_module(b: Path, text: str, form: str = "module") -> None:
    """Write a form's text and the portable artifact serialized from it (what a producer that
    does not check the rules would write), both rehashed."""
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import stablehlo

    from hlobundle._mlir_context import new_context

    with new_context(), ir.Location.unknown():
        artifact = stablehlo.serialize_portable_artifact(ir.Module.parse(text), TARGET, True)
    (b / f"{form}.mlir").write_text(text)
    (b / f"{form}.mlirbc").write_bytes(bytes(artifact))
    rehash(b, f"{form}.mlir")
    rehash(b, f"{form}.mlirbc")


def _two_by_two(op: str) -> str:
    t = tensor((2, 2), "float32")
    return func([t, t], [t], [f"%x = {op}"], ["%x"])


@broken(
    "invalid_artifact_other_program",
    "module.mlir adds, module.mlirbc multiplies (each well-formed, each hashed)",
    "MODULE_MISMATCH",
)
def _(b: Path) -> None:
    t = tensor((2, 2), "float32")
    text = (b / "module.mlir").read_text()
    replace_module(b, _two_by_two(f"stablehlo.multiply %a0, %a1 : {t}"))
    (b / "module.mlir").write_text(text)
    rehash(b, "module.mlir")


@broken(
    "invalid_custom_call_not_allowed",
    "a custom call outside jax.export's stable targets, not opted in",
    "MODULE_NOT_PORTABLE",
)
def _(b: Path) -> None:
    t = tensor((2, 2), "float32")
    replace_module(
        b, _two_by_two(f"stablehlo.custom_call @my_kernel(%a0, %a1) : ({t}, {t}) -> {t}")
    )


@broken(
    "invalid_host_callback_opted_in",
    "a Python host callback, listed in allowed_custom_calls: never allowed",
    "MODULE_NOT_PORTABLE",
)
def _(b: Path) -> None:
    t = tensor((2, 2), "float32")
    target = "xla_ffi_python_cpu_callback"
    replace_module(b, _two_by_two(f"stablehlo.custom_call @{target}(%a0, %a1) : ({t}, {t}) -> {t}"))
    edit(b, lambda m: m["module"].update(allowed_custom_calls=[target]))


@broken("invalid_host_transfer", "@main waits for an infeed", "MODULE_NOT_PORTABLE")
def _(b: Path) -> None:
    t = tensor((2, 2), "float32")
    replace_module(
        b,
        func(
            [t, t],
            [t],
            [
                "%t = stablehlo.create_token : !stablehlo.token",
                f'%x, %t2 = "stablehlo.infeed"(%t) : (!stablehlo.token) -> ({t}, !stablehlo.token)',
            ],
            ["%x"],
        ),
    )


@case(
    "invalid_batched_not_portable",
    "the batched module calls a Python host callback",
    "MODULE_NOT_PORTABLE",
)
def _(path: Path) -> None:
    b = scale(path, ["x"])
    t = "tensor<?x3xf32>"
    callback = f"%c = stablehlo.custom_call @xla_ffi_python_cpu_callback(%y) : ({t}) -> {t}"
    replace_module(b, BATCHED_SCALE.replace("  return %y", f"  {callback}\n  return %c"), "batched")


@broken("invalid_main_without_body", "@main is declared, not defined", "MLIR_INVALID")
def _(b: Path) -> None:
    t = tensor((2, 2), "float32")
    replace_module(b, f"module {{\n  func.func private @main(%a0: {t}, %a1: {t}) -> {t}\n}}\n")


@broken(
    "invalid_nesting_too_deep",
    "an attribute nested 10,000 deep (MLIR's parser would overflow its stack)",
    "LIMIT_EXCEEDED",
)
def _(b: Path) -> None:
    deep = "[" * 10_000 + "]" * 10_000
    text = (b / "module.mlir").read_text()
    (b / "module.mlir").write_text(f"module attributes {{a = {deep}}} {{\n{text}}}\n")
    rehash(b, "module.mlir")


@broken(
    "invalid_utf8_symbol_name",
    'a function named @"\\C3\\28": its escapes decode to bytes that are not UTF-8',
    "MLIR_INVALID",
)
def _(b: Path) -> None:
    text = (b / "module.mlir").read_text()
    extra = 'func.func private @"\\C3\\28"() {\n    return\n  }\n  func.func'
    (b / "module.mlir").write_text(text.replace("func.func", extra, 1))
    rehash(b, "module.mlir")


@broken(
    "invalid_artifact_nested_too_deep",
    "module.mlirbc: 5,000 nested modules (a few KiB that print as 50 MB of indentation)",
    "LIMIT_EXCEEDED",
)
def _(b: Path) -> None:
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import stablehlo

    from hlobundle._mlir_context import new_context

    with new_context(), ir.Location.unknown():
        top = ir.Module.create()
        block = top.body
        for _ in range(5000):
            with ir.InsertionPoint(block):
                op = ir.Operation.create("builtin.module", regions=1)
            block = op.regions[0].blocks.append()
        # A portable artifact at the cases' target: the same bytes under every jaxlib.
        artifact = bytes(stablehlo.serialize_portable_artifact(top, TARGET, True))
    (b / "module.mlirbc").write_bytes(artifact)
    rehash(b, "module.mlirbc")


@broken("invalid_rank_too_high", "a rank-65 tensor type", "LIMIT_EXCEEDED")
def _(b: Path) -> None:
    high = "tensor<" + "1x" * 65 + "f32>"
    text = (b / "module.mlir").read_text()
    (b / "module.mlir").write_text(
        text.replace("return %x", f"%h = stablehlo.constant dense<0.0> : {high}\n  return %x")
    )
    rehash(b, "module.mlir")


@broken("invalid_json_too_deep", "output_tree nested 100 deep", "LIMIT_EXCEEDED")
def _(b: Path) -> None:
    edit(b, lambda m: m.update(output_tree=json.loads("[" * 100 + '"x"' + "]" * 100)))


@broken("invalid_integer_too_long", "a 30-digit file size", "LIMIT_EXCEEDED")
def _(b: Path) -> None:
    path = b / "manifest.json"
    data = json.loads(path.read_text())
    size = data["files"]["module.mlir"]["size"]
    text = path.read_text().replace(f'"size": {size}', '"size": ' + "9" * 30, 1)
    path.write_text(text)


@broken("invalid_tree_unknown_leaf", "output_tree names no result", "MANIFEST_INVALID")
def _(b: Path) -> None:
    edit(b, lambda m: m.update(output_tree=["nope"]))


@broken(
    "invalid_safetensors_header_too_large",
    "a 1 MiB safetensors header for two tensors",
    "LIMIT_EXCEEDED",
)
def _(b: Path) -> None:
    path = b / "inputs.safetensors"
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    padded = data[8 : 8 + n] + b" " * (1 << 20)
    path.write_bytes(struct.pack("<Q", len(padded)) + padded + data[8 + n :])
    rehash(b, "inputs.safetensors")


@case(
    "invalid_int4_high_bits",
    "an int4 tensor holding the byte 0x17 (a bit above its 4)",
    "TENSOR_MISMATCH",
)
def _(path: Path) -> None:
    t = tensor((3,), "int4")
    bundle = pack(path, func([t], [t], [], ["%a0"]), [values((3,), "int4", 5)])
    data = bytearray((bundle / "inputs.safetensors").read_bytes())
    data[-1] |= 0x10
    (bundle / "inputs.safetensors").write_bytes(bytes(data))
    rehash(bundle, "inputs.safetensors")


@case("invalid_bool_byte", "a bool tensor holding the byte 7", "TENSOR_MISMATCH")
def _(path: Path) -> None:
    t = tensor((3,), "bool")
    b = pack(path, func([t], [t], [], ["%a0"]), [np.array([True, False, True])], names=["m"])
    data = bytearray((b / "inputs.safetensors").read_bytes())
    data[-2] = 7
    (b / "inputs.safetensors").write_bytes(bytes(data))
    rehash(b, "inputs.safetensors")


# --- format 2.0: several functions, shared tensors, symbolic dimensions (SPEC.md 2.8) -----------


def two_functions(path: Path, *, second: str = "mul", w_shape: tuple[int, ...] = (3,)) -> Path:
    """`add(x, w)` (the default) and `mul(x, w)` over one shared parameter w."""
    from hlobundle._write._functions import add_function

    t, tw = tensor((3,), "float32"), tensor(w_shape, "float32")
    w, x = values((3,), "float32", 1), values((3,), "float32", 2)
    add = func([t, t], [t], [f"%x = stablehlo.add %a0, %a1 : {t}"], ["%x"])
    bundle = pack(path, add, [x, w], names=["x", "w"], roles={"w": "parameter"}, function="add")
    scratch = path / "scratch"
    if second == "mul":
        other = func([t, t], [t], [f"%x = stablehlo.multiply %a0, %a1 : {t}"], ["%x"])
        inputs, names = [x, w], ["x", "w"]
    else:  # a second parameter v of another shape
        other = func([t, tw], [t], ["%x = stablehlo.add %a0, %a0 : " + t], ["%x"])
        inputs, names = [x, values(w_shape, "float32", 3)], ["x", "v"]
    scratch.mkdir()
    second_bundle = hlobundle.pack(
        other,
        inputs,
        scratch / "b",
        names=names,
        function=second,
        roles={names[1]: "parameter"},
        result_names=first_result_names(other),
        target_version=TARGET,
        producer=("conformance", "1"),
    )
    add_function(bundle, second_bundle)
    shutil.rmtree(scratch)
    _strip_environment(bundle)
    return bundle


@case(
    "valid_functions_shared_weights",
    "two functions over one stored parameter; runs the default (add)",
)
def _(path: Path) -> None:
    bundle = two_functions(path)
    save_outputs(path, bundle)


@case("valid_functions_named", "two functions over one stored parameter; runs the one named mul")
def _(path: Path) -> dict:
    bundle = two_functions(path)
    b = hlobundle.load(bundle).select("mul")
    results = b.function("xla").call_flat(*[b.tensor(a.name) for a in b.arguments])
    _tensor_writing.write(
        path / "outputs.safetensors",
        {
            r.name: (np.asarray(x), _dtypes.BY_NAME[r.dtype])
            for r, x in zip(b.results, results, strict=True)
        },
    )
    return {"function": "mul"}


def symbolic(path: Path) -> Path:
    """`y = x + x` for x of shape (b, 3), b symbolic; stored example b = 2."""
    from hlobundle._read._inputs import from_python
    from hlobundle._write._writer import PackOptions, pack_planned

    t = "tensor<?x3xf32>"
    text = func([t], [t], [f"%y = stablehlo.add %a0, %a0 : {t}"], ["%y"])
    options = PackOptions(
        names=["x"],
        result_names=["y"],
        target_version=TARGET,
        producer=("conformance", "1"),
        expected="compute",
        shapes=[["b", 3]],
        result_shapes=[["b", 3]],
        constraints=("b >= 1",),
    )
    bundle = pack_planned(
        text, from_python([values((2, 3), "float32", 4)]), path / "bundle", options
    )
    _strip_environment(bundle)
    return bundle


@case("valid_symbolic_dimension", "x and y of shape (b, 3): a symbolic dimension, b = 2 stored")
def _(path: Path) -> None:
    save_outputs(path, symbolic(path))


@case("valid_symbolic_other_size", "the symbolic bundle run on inputs of another size (b = 5)")
def _(path: Path) -> None:
    inputs = [values((5, 3), "float32", 5)]
    bundle = symbolic(path)
    np.savez(path / "inputs.npz", x=inputs[0])
    save_outputs(path, bundle, inputs)


def foreign_sized_executables(bundle: Path, *sizes: dict) -> None:
    """Store XLA executables of the symbolic function (format 2.2), one per entry of `sizes`,
    for a device no reader has, as `foreign_xla_executable` does (SPEC.md 2.7)."""
    (bundle / "compiled").mkdir()
    source = hashlib.sha256((bundle / "module.mlirbc").read_bytes()).hexdigest()
    entries = []
    for at in sizes:
        name = "compiled/xla-tpu" + "".join(f".{k}={v}" for k, v in sorted(at.items())) + ".pjrt"
        (bundle / name).write_bytes(b"not an executable\n")
        entries.append(
            {
                "target": "xla-tpu",
                "file": name,
                "compiler": "xla",
                "compiler_version": "0.0.1",
                "architecture": "riscv64",
                "cpu": "generic",
                "source_sha256": source,
                "device_kind": "TPU v0",
                "topology": "1",
                "sizes": at,
            }
        )

    def change(m: dict) -> None:
        m.update(format_version="2.2")
        m["functions"][0]["executables"] = entries
        for e in entries:
            m["files"][e["file"]] = {"size": 0, "sha256": "0" * 64}

    edit(bundle, change)
    for e in entries:
        rehash(bundle, e["file"])


@case(
    "valid_xla_executable_sizes_foreign",
    "XLA executables of the symbolic function at b = 2 and b = 5, for another platform "
    "(format 2.2): ignored, not parsed",
)
def _(path: Path) -> None:
    bundle = symbolic(path)
    foreign_sized_executables(bundle, {"b": 2}, {"b": 5})
    save_outputs(path, bundle)


@case(
    "invalid_xla_executable_sizes_missing",
    "an XLA executable of a function with symbolic dimensions, without its sizes",
    "MANIFEST_INVALID",
)
def _(path: Path) -> None:
    bundle = symbolic(path)
    foreign_sized_executables(bundle, {"b": 2})
    edit(bundle, lambda m: m["functions"][0]["executables"][0].pop("sizes"))


@case(
    "invalid_xla_executable_sizes_unknown_symbol",
    "an XLA executable's sizes name a symbol the function does not have",
    "MANIFEST_INVALID",
)
def _(path: Path) -> None:
    bundle = symbolic(path)
    foreign_sized_executables(bundle, {"b": 2})
    edit(bundle, lambda m: m["functions"][0]["executables"][0].update(sizes={"b": 2, "c": 2}))


@case(
    "invalid_xla_executable_sizes_duplicate",
    "two XLA executables of one target at the same sizes",
    "MANIFEST_INVALID",
)
def _(path: Path) -> None:
    bundle = symbolic(path)
    foreign_sized_executables(bundle, {"b": 2}, {"b": 5})
    edit(bundle, lambda m: m["functions"][0]["executables"][1].update(sizes={"b": 2}))


@case(
    "invalid_xla_executable_sizes_static",
    "an XLA executable of a static function that gives sizes",
    "MANIFEST_INVALID",
)
def _(path: Path) -> None:
    bundle = base(path)
    foreign_xla_executable(bundle, sizes={"b": 2})


def _function(m: dict, name: str) -> dict:
    return next(f for f in m["functions"] if f["name"] == name)


@case(
    "invalid_functions_tensor_typed_differently",
    "function v names the shared tensor w, which add types float32[3], as float32[2, 3]",
    "TENSOR_MISMATCH",
)
def _(path: Path) -> None:
    bundle = two_functions(path, second="other", w_shape=(2, 3))
    edit(bundle, lambda m: _function(m, "other")["arguments"][1]["value"].update(key="w"))


@case("invalid_default_function_unknown", "default_function names no function", "MANIFEST_INVALID")
def _(path: Path) -> None:
    edit(two_functions(path), lambda m: m.update(default_function="nope"))


@case(
    "invalid_symbol_expression_bomb", "a dimension nested 20 parentheses deep", "MANIFEST_INVALID"
)
def _(path: Path) -> None:
    bomb = "(" * 20 + "b" + ")" * 20
    edit(symbolic(path), lambda m: m["functions"][0]["arguments"][0].update(shape=[bomb, 3]))


@case(
    "invalid_symbolic_example_mismatch",
    "the result is declared (2*b, 3): the stored x (b = 2) and y (2*b = 2) disagree",
    "TENSOR_MISMATCH",
)
def _(path: Path) -> None:
    edit(symbolic(path), lambda m: m["functions"][0]["results"][0].update(shape=["2*b", 3]))


def independent(path: Path, result: str = "b") -> Path:
    """`z = x + y` for x of shape (b, 3) and y of shape (c, 3): the manifest calls the sizes
    independent, the module's add needs them equal. No example values are stored."""
    from hlobundle._write._writer import PackOptions, pack_planned

    t = "tensor<?x3xf32>"
    text = func([t, t], [t], [f"%z = stablehlo.add %a0, %a1 : {t}"], ["%z"])
    options = PackOptions(
        names=["x", "y"],
        result_names=["z"],
        target_version=TARGET,
        producer=("conformance", "1"),
        shapes=[["b", 3], ["c", 3]],
        result_shapes=[[result, 3]],
    )
    bundle = pack_planned(text, None, path / "bundle", options)
    _strip_environment(bundle)
    return bundle


@case(
    "valid_symbolic_independent_agree",
    "x: (b, 3) and y: (c, 3) added by the module, called with b = c = 3: the module accepts it",
)
def _(path: Path) -> None:
    inputs = [values((3, 3), "float32", 6), values((3, 3), "float32", 7)]
    bundle = independent(path)
    np.savez(path / "inputs.npz", x=inputs[0], y=inputs[1])
    save_outputs(path, bundle, inputs)


@case(
    "invalid_symbolic_independent_symbols",
    "x: (b, 3) and y: (c, 3) added by the module, called with b = 4, c = 2: the module refuses "
    "the shapes the manifest allows",
    "INPUT_INVALID",
)
def _(path: Path) -> None:
    independent(path)
    np.savez(path / "inputs.npz", x=values((4, 3), "float32", 6), y=values((2, 3), "float32", 7))


@case(
    "invalid_symbolic_result_expression",
    "the result is declared (2*b, 3) where the module computes (b, 3), called with b = c = 2",
    "INPUT_INVALID",
)
def _(path: Path) -> None:
    independent(path, result="2*b")
    np.savez(path / "inputs.npz", x=values((2, 3), "float32", 6), y=values((2, 3), "float32", 7))


@case("invalid_symbolic_in_1x", "a symbolic dimension in a format 1.3 manifest", "MANIFEST_INVALID")
def _(path: Path) -> None:
    def flatten(m: dict) -> None:
        (f,) = m.pop("functions")
        m.pop("default_function")  # a 2.x field: the case is about the symbolic dimension
        m.update(
            {k: v for k, v in f.items() if k != "name"}, function=f["name"], format_version="1.3"
        )

    edit(symbolic(path), flatten)


# --- format 2.1: chunk digests (SPEC.md 2.9) ------------------------------------------------------

CHUNK = 1 << 16  # the smallest chunk size: each case's weights are one chunk


def chunked(path: Path, change: Callable[[dict], object] = lambda c: None) -> Path:
    """The two-function bundle at 2.1, its weights file listed with its chunk digests (one chunk
    of 64 KiB: the file is smaller), then `change`d."""
    bundle = two_functions(path)
    data = (bundle / "weights.safetensors").read_bytes()

    def add_chunks(m: dict) -> None:
        m["format_version"] = "2.1"
        entry = m["files"]["weights.safetensors"]
        entry["chunks"] = {"size": CHUNK, "sha256": [hashlib.sha256(data).hexdigest()]}
        change(entry["chunks"])

    edit(bundle, add_chunks)
    return bundle


@case("valid_chunk_digests", "format 2.1: the weights file listed with its chunk digests")
def _(path: Path) -> None:
    save_outputs(path, chunked(path))


@case(
    "invalid_chunk_digest_mismatch",
    "the weights file's sha256 matches, its one chunk's digest does not",
    "HASH_MISMATCH",
)
def _(path: Path) -> None:
    chunked(path, lambda c: c.update(sha256=["0" * 64]))


@case(
    "invalid_chunk_count",
    "two chunk digests for a file of one chunk",
    "MANIFEST_INVALID",
)
def _(path: Path) -> None:
    chunked(path, lambda c: c["sha256"].append("0" * 64))


@case(
    "invalid_chunk_size",
    "a chunk size that is not a power of two (100,000)",
    "MANIFEST_INVALID",
)
def _(path: Path) -> None:
    chunked(path, lambda c: c.update(size=100_000))


@case("invalid_chunks_in_2_0", "chunk digests in a format 2.0 manifest", "MANIFEST_INVALID")
def _(path: Path) -> None:
    edit(chunked(path), lambda m: m.update(format_version="2.0"))


# --- sharded tensor files (SPEC.md 2.10): the references are the index ---------------------------

SHARD_1, SHARD_2 = (f"weights-0000{i}-of-00002.safetensors" for i in (1, 2))


def sharded(path: Path) -> Path:
    """`y = x + v + w` with parameters v and w (64 floats each) in two shards of 256 bytes."""
    t = tensor((64,), "float32")
    text = func(
        [t, t, t],
        [t],
        [f"%s = stablehlo.add %a0, %a1 : {t}", f"%y = stablehlo.add %s, %a2 : {t}"],
        ["%y"],
    )
    inputs = [values((64,), "float32", k) for k in (1, 2, 3)]
    roles = {"v": "parameter", "w": "parameter"}
    bundle = pack(path, text, inputs, names=["x", "v", "w"], roles=roles, max_shard_size=256)
    assert {SHARD_1, SHARD_2} <= set(json.loads((bundle / "manifest.json").read_text())["files"])
    return bundle


def _shard_file(b: Path, name: str, tensors: dict[str, np.ndarray]) -> None:
    _tensor_writing.write(
        b / name, {k: (v, _dtypes.BY_NAME["float32"]) for k, v in tensors.items()}
    )


@case("valid_sharded_weights", "the parameters in two shards, weights-0000{1,2}-of-00002")
def _(path: Path) -> None:
    save_outputs(path, sharded(path))


@case("invalid_shard_unlisted", "a third shard on disk that files does not list", "FILE_UNLISTED")
def _(path: Path) -> None:
    b = sharded(path)
    _shard_file(b, "weights-00003-of-00003.safetensors", {"z": values((4,), "float32")})


@case(
    "invalid_shard_outside",
    "v's reference names a shard outside the bundle (../weights-00001-of-00002.safetensors)",
    "PATH_UNSAFE",
)
def _(path: Path) -> None:
    def outside(m: dict) -> None:
        (v,) = [a for a in m["arguments"] if a["name"] == "v"]
        v["value"]["file"] = "../" + v["value"]["file"]

    edit(sharded(path), outside)


@case(
    "invalid_shard_tensor_twice",
    "a tensor in two shards: the second shard holds a copy of v, which no reference names there",
    "TENSOR_MISMATCH",
)
def _(path: Path) -> None:
    b = sharded(path)
    with_v = {"v": values((64,), "float32", 2), "w": values((64,), "float32", 3)}
    (b / SHARD_2).unlink()
    _shard_file(b, SHARD_2, with_v)
    rehash(b, SHARD_2)


@case(
    "invalid_shard_offsets_past_end",
    "the second shard's tensor has offsets past the end of its data",
    "SAFETENSORS_INVALID",
)
def _(path: Path) -> None:
    b = sharded(path)
    raw = json.dumps({"w": {"dtype": "F32", "shape": [64], "data_offsets": [0, 512]}}).encode()
    (b / SHARD_2).write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(256))
    rehash(b, SHARD_2)


# --- format 2.1: metadata and a model card (SPEC.md 2.12) ------------------------------------------

CARD = "---\nlicense: apache-2.0\ntags:\n- conformance\n---\n\n# Two functions\n"
METADATA = {
    "description": "add and mul over one weight",
    "license": "Apache-2.0",
    "authors": ["hlobundle conformance"],
    "source_url": "https://example.org/two",
    "tags": ["conformance"],
    "citation": "@misc{two, title={Two functions}}",
    "framework": "JAX",
    "base_model": "none",
    "card": "README.md",
}


def with_metadata(path: Path, change: Callable[[dict], object] = lambda m: None) -> Path:
    """The two-function bundle at 2.1 with metadata and its README.md card, then `change`d."""
    bundle = two_functions(path)
    (bundle / "README.md").write_text(CARD)
    size, digest = len(CARD.encode()), hashlib.sha256(CARD.encode()).hexdigest()

    def add(m: dict) -> None:
        m["format_version"] = "2.1"
        m["metadata"] = dict(METADATA)
        m["files"]["README.md"] = {"size": size, "sha256": digest}
        change(m)

    edit(bundle, add)
    return bundle


@case("valid_metadata", "format 2.1: every metadata field, and the README.md card it names")
def _(path: Path) -> None:
    save_outputs(path, with_metadata(path))


@case(
    "invalid_license_spdx_bomb",
    "a license of 100 licenses joined by OR: a valid SPDX expression of 696 characters, over "
    "the limit of 256",
    "MANIFEST_INVALID",
)
def _(path: Path) -> None:
    with_metadata(path, lambda m: m["metadata"].update(license=" OR ".join(["MIT"] * 100)))


@case(
    "invalid_license_nested_too_deep",
    "a license in parentheses nested 6 deep (the limit is 4)",
    "MANIFEST_INVALID",
)
def _(path: Path) -> None:
    with_metadata(path, lambda m: m["metadata"].update(license="((((((MIT))))))"))


@case("invalid_license_unknown", "a license that is no SPDX identifier", "MANIFEST_INVALID")
def _(path: Path) -> None:
    with_metadata(path, lambda m: m["metadata"].update(license="Use-it-at-midnight"))


@case("invalid_metadata_in_2_0", "metadata in a format 2.0 manifest", "MANIFEST_INVALID")
def _(path: Path) -> None:
    with_metadata(path, lambda m: m.update(format_version="2.0"))


@case(
    "invalid_card_unlisted",
    "metadata.card names README.md, which files does not list (nor the disk hold)",
    "MANIFEST_INVALID",
)
def _(path: Path) -> None:
    bundle = with_metadata(path, lambda m: m["files"].pop("README.md"))
    (bundle / "README.md").unlink()


@case(
    "invalid_metadata_control_character",
    "an author's name holding an escape sequence (ESC [ 2 J: clear the screen)",
    "MANIFEST_INVALID",
)
def _(path: Path) -> None:
    with_metadata(path, lambda m: m["metadata"].update(authors=["a\x1b[2J"]))


# --- format 2.1: declared independent rows (SPEC.md 2.13) -----------------------------------------


def rows(path: Path, declaration: dict) -> Path:
    """The symbolic `y = x + x` (x, y of shape (b, 3)) at 2.1 with `independent_rows`."""

    def declare(m: dict) -> None:
        m["format_version"] = "2.1"
        m["functions"][0]["independent_rows"] = declaration

    bundle = symbolic(path)
    edit(bundle, declare)
    return bundle


ROWS = {"arguments": {"x": 0}, "results": {"y": 0}, "checked": False}


@case("valid_independent_rows", "format 2.1: x's and y's rows independent along b (axis 0)")
def _(path: Path) -> None:
    save_outputs(path, rows(path, ROWS))


@case(
    "invalid_rows_unknown_argument",
    "independent_rows names an argument z the function does not have",
    "MANIFEST_INVALID",
)
def _(path: Path) -> None:
    rows(path, {**ROWS, "arguments": {"x": 0, "z": 0}})


@case(
    "invalid_rows_not_a_symbol",
    "independent_rows puts x's rows on axis 1, whose size is 3, not a symbol",
    "MANIFEST_INVALID",
)
def _(path: Path) -> None:
    rows(path, {**ROWS, "arguments": {"x": 1}})


@case(
    "invalid_rows_result_left_out",
    "independent_rows leaves the result y out: every result must have its rows declared",
    "MANIFEST_INVALID",
)
def _(path: Path) -> None:
    rows(path, {**ROWS, "results": {}})


@case("invalid_rows_in_2_0", "independent_rows in a format 2.0 manifest", "MANIFEST_INVALID")
def _(path: Path) -> None:
    edit(rows(path, ROWS), lambda m: m.update(format_version="2.0"))


# --- format 2.1: several platforms (SPEC.md 2.14) ------------------------------------------------

PLATFORMS_TEXT = """func.func @main(%a0: tensor<i32> {jax.global_constant = "_platform_index"}, %a1: tensor<3xf32>) -> (tensor<3xf32>) {
  %y = "stablehlo.case"(%a0) ({
    %s = stablehlo.add %a1, %a1 : tensor<3xf32>
    stablehlo.return %s : tensor<3xf32>
  }, {
    %p = stablehlo.multiply %a1, %a1 : tensor<3xf32>
    stablehlo.return %p : tensor<3xf32>
  }) : (tensor<i32>) -> tensor<3xf32>
  return %y : tensor<3xf32>
}
"""


def platforms(path: Path, listed: list[str] | None = None) -> Path:
    """`y = x + x` lowered for cpu (index 0) and `y = x * x` for cuda (index 1): a reader on a
    CPU passes 0, and the expected outputs are x + x."""
    from hlobundle._read._inputs import from_python
    from hlobundle._write._writer import PackOptions, pack_planned

    options = PackOptions(
        names=["x"],
        result_names=["y"],
        target_version=TARGET,
        producer=("conformance", "1"),
        expected="compute",
        platforms=("cpu", "cuda"),
    )
    x = np.array([1.0, 2.0, 3.0], np.float32)
    bundle = pack_planned(PLATFORMS_TEXT, from_python([x]), path / "bundle", options)
    _strip_environment(bundle)
    if listed is not None:
        edit(bundle, lambda m: m["functions"][0].update(platforms=listed))
    return bundle


@case(
    "valid_platforms",
    "format 2.1: one module for cpu (x + x, index 0) and cuda (x * x, index 1); a CPU reader "
    "passes 0",
)
def _(path: Path) -> None:
    save_outputs(path, platforms(path))


@case("invalid_platforms_duplicate", "platforms lists cpu twice", "MANIFEST_INVALID")
def _(path: Path) -> None:
    platforms(path, ["cpu", "cpu"])


@case("invalid_platforms_one", "platforms lists one platform (one is no list)", "MANIFEST_INVALID")
def _(path: Path) -> None:
    platforms(path, ["cpu"])


@case("invalid_platforms_in_2_0", "platforms in a format 2.0 manifest", "MANIFEST_INVALID")
def _(path: Path) -> None:
    edit(platforms(path), lambda m: m.update(format_version="2.0"))


@case(
    "invalid_platforms_without_index",
    "platforms over a module whose @main takes x alone, no platform index",
    "SIGNATURE_MISMATCH",
)
def _(path: Path) -> None:
    t = tensor((3,), "float32")
    bundle = pack(path, func([t], [t], [f"%y = stablehlo.add %a0, %a0 : {t}"], ["%y"]), None)

    def claim(m: dict) -> None:  # the 1.x manifest of one function, as a 2.1 one claiming two
        function = {k: m.pop(k) for k in list(m) if k not in ("format", "files", "provenance")}
        function.pop("format_version")
        function["name"] = function.pop("function")
        m.update(format_version="2.1", functions=[{**function, "platforms": ["cpu", "cuda"]}])

    edit(bundle, claim)


# --- where expected outputs were computed (format 2.2, SPEC.md 2.15) -----------------------------

TPU_RECORD = {
    "platform": "tpu",
    "device_kind": "TPU v5 lite",
    "jaxlib_version": "0.10.2",
    "precision": "DEFAULT",
}


def expected_from(path: Path, record: dict | None = None, version: str = "2.2") -> Path:
    """A dot of a 2x3 and a 3x2 float32, its expected outputs recorded as computed on a TPU at
    DEFAULT precision (small integers: bfloat16 holds them exactly, so a TPU computes them
    exactly too), as a manifest of one function in format `version`."""
    a, b, y = tensor((2, 3), "float32"), tensor((3, 2), "float32"), tensor((2, 2), "float32")
    dot = f"%y = stablehlo.dot_general %a0, %a1, contracting_dims = [1] x [0] : ({a}, {b}) -> {y}"
    text = func([a, b], [y], [dot], ["%y"])
    bundle = pack(
        path, text, [values((2, 3), "float32"), values((3, 2), "float32", 1)], expected="compute"
    )

    def record_it(m: dict) -> None:  # the 1.x manifest of one function, as a 2.x one
        function = {k: m.pop(k) for k in list(m) if k not in ("format", "files", "provenance")}
        function.pop("format_version")
        function["name"] = function.pop("function")
        function["expected_from"] = TPU_RECORD if record is None else record
        m.update(format_version=version, functions=[function])

    edit(bundle, record_it)
    return bundle


@case(
    "valid_expected_from",
    "format 2.2: expected outputs recorded as computed on a TPU at DEFAULT precision (a dot)",
)
def _(path: Path) -> None:
    save_outputs(path, expected_from(path))


@case(
    "valid_another_computation",
    "the outputs stand for another computation's (another XLA's summation order): 1 is off by "
    "0.01 where the result's largest magnitude is 1e5, within float32's roundoff on each side "
    "(4 * 2^-24 * 1e5 = 0.0238, SPEC.md 2.15 and 9) and past the case's own atol",
)
def _(path: Path) -> None:
    x = np.array([1e5, 1.0], np.float32)
    t = tensor((2,), "float32")
    pack(path, func([t], [t], [], ["%a0"]), [x])
    _tensor_writing.write(
        path / "outputs.safetensors",
        {"result0": (np.array([1e5, 1.01], np.float32), _dtypes.BY_NAME["float32"])},
    )


@case("invalid_expected_from_in_2_1", "expected_from in a format 2.1 manifest", "MANIFEST_INVALID")
def _(path: Path) -> None:
    expected_from(path, version="2.1")


@case(
    "invalid_expected_from_precision",
    "expected_from.precision is LOW, not DEFAULT, HIGH or HIGHEST",
    "MANIFEST_INVALID",
)
def _(path: Path) -> None:
    expected_from(path, {**TPU_RECORD, "precision": "LOW"})


@case(
    "invalid_expected_from_platform",
    "expected_from.platform is TPU (jax's platform names are lower case)",
    "MANIFEST_INVALID",
)
def _(path: Path) -> None:
    expected_from(path, {**TPU_RECORD, "platform": "TPU"})


@case(
    "invalid_expected_from_without_expected",
    "expected_from in a function none of whose results has an expected value",
    "MANIFEST_INVALID",
)
def _(path: Path) -> None:
    bundle = expected_from(path)
    edit(bundle, lambda m: [r.pop("expected") for r in m["functions"][0]["results"]])


def generate(out: Path) -> None:
    if out.exists():
        shutil.rmtree(out)
    for name, build in CASES.items():
        path = out / name
        path.mkdir(parents=True)
        spec = build(path)
        if spec["expect"] == "ok":  # SPEC.md 2.11: what another implementation must compute
            with warnings.catch_warnings():  # a newer minor version's warning
                warnings.simplefilter("ignore")
                spec["fingerprint"] = hlobundle.load(path / "bundle").fingerprint()
        (path / "case.json").write_text(json.dumps(spec, indent=2, sort_keys=True) + "\n")
    index = {"jaxlib": _jaxlib(), "ml_dtypes": ml_dtypes.__version__, "cases": len(CASES)}
    (out / "index.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")


def _jaxlib() -> str:
    from importlib.metadata import version

    return version("jaxlib")


if __name__ == "__main__":
    import jax

    jax.config.update("jax_enable_x64", True)
    generate(
        Path(sys.argv[1]) if len(sys.argv) > 1 else HERE.parent / "hlobundle" / "conformance_cases"
    )
    print(f"wrote {len(CASES)} cases")

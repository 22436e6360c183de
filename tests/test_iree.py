"""The iree backend, stored executables (`hlobundle compile`) and IREE scripts (SPEC.md,
"Executables")."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from helpers import (
    ALL_DTYPES,
    INSTALLED_BACKENDS,
    ROOT,
    cli,
    copy_of,
    edit_manifest,
    lowered_text,
    np_dtype,
    rehash,
    sample,
)

import hlobundle
from hlobundle._cli import _conformance
from hlobundle._read import _cache
from hlobundle._run._backends import _installed, _iree, _iree_compile

pytestmark = pytest.mark.skipif(
    not (_iree.BACKEND.available() and _installed.iree_compiler()),
    reason="the iree extra (iree-base-compiler, iree-base-runtime) is absent",
)
EXAMPLE = ROOT / "examples" / "lenet5.hlobundle"
# What IREE 3.13 cannot run among the conformance cases, each refused with BACKEND_UNSUPPORTED.
REFUSED = {f"valid_dtype_{d}" for d in _iree_compile.UNSUPPORTED_DTYPES} | {"valid_many_arguments"}
REFUSED |= {"valid_platforms"}  # IREE passes no platform index (SPEC.md 2.14): BACKEND_UNSUPPORTED


@pytest.fixture(autouse=True)
def cache_dir(tmp_path_factory, monkeypatch):
    """One compile cache for this module's tests, never the user's."""
    monkeypatch.setenv("HLOBUNDLE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> Path:
    """The example, with an llvm-cpu executable stored."""
    out = tmp_path_factory.mktemp("compiled") / "lenet5.hlobundle"
    shutil.copytree(EXAMPLE, out)
    hlobundle.compile(out)
    return out


def _bundle(tmp_path: Path, fn, *args, name: str = "b") -> Path:
    return hlobundle.export(fn, *args, out=tmp_path / name)


@pytest.fixture(scope="module")
def doubled(tmp_path_factory) -> Path:
    """x * 2 of f32[3]: a small bundle the tests below copy before they change it."""
    return _bundle(tmp_path_factory.mktemp("doubled"), lambda x: x * 2, np.float32([1, 2, 3]))


@pytest.mark.slow
def test_the_backends_agree_on_the_example():
    b = hlobundle.load(EXAMPLE)
    want = b.expected_outputs()["result"]
    outputs = {name: np.asarray(b.function(name)(*b.example_args())) for name in INSTALLED_BACKENDS}
    outputs["iree"] = b.function("iree")(*b.example_args())
    assert type(outputs["iree"]) is np.ndarray
    for name, got in outputs.items():
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=name)
    np.testing.assert_allclose(outputs["iree"], outputs["xla"], rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def multi_and_constant(tmp_path_factory) -> tuple[Path, Path]:
    """(sin(x), sum(x), x > 0) of f32[2, 3], and arange(5.0) * 2 of no argument: each backend
    runs the same two bundles."""
    tmp = tmp_path_factory.mktemp("multi")
    x = sample((2, 3), "float32", 1)
    multi = _bundle(tmp, lambda x: (jnp.sin(x), x.sum(), x > 0), x, name="m")
    return multi, _bundle(tmp, lambda: jnp.arange(5.0) * 2, name="z")


@pytest.mark.slow
@pytest.mark.parametrize("backend", [*INSTALLED_BACKENDS, "iree"])
def test_multi_result_and_zero_argument_bundles(multi_and_constant, backend):
    x = sample((2, 3), "float32", 1)
    multi = hlobundle.load(multi_and_constant[0])
    want = (np.sin(x), x.sum(), x > 0)
    got = multi.function(backend).call_flat(x)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-6)
        assert np.asarray(g).dtype == w.dtype
    constant = hlobundle.load(multi_and_constant[1])
    (got,) = constant.function(backend).call_flat()
    np.testing.assert_array_equal(np.asarray(got), np.arange(5.0) * 2)


SUPPORTED = [d for d in ALL_DTYPES if d not in _iree_compile.UNSUPPORTED_DTYPES]


@pytest.mark.slow
def test_every_dtype_iree_supports_gives_xlas_bytes(tmp_path):
    # One module over every dtype, so one IREE compile (about 0.4 s each) rather than one per
    # dtype: each argument comes back as itself, transposed and concatenated, byte for byte.
    xs = [sample((2, 3), dtype, 5) for dtype in SUPPORTED]
    text = lowered_text(lambda *xs: [(x, x.T, jnp.concatenate([x[:, 1:], x], 1)) for x in xs], *xs)
    b = hlobundle.load(hlobundle.pack(text, xs, tmp_path / "b"))
    ours = b.function("iree").call_flat(*xs)
    theirs = b.function("xla").call_flat(*xs)
    assert len(ours) == len(theirs) == 3 * len(SUPPORTED)
    for k, (g, w) in enumerate(zip(ours, theirs, strict=True)):
        dtype, w = SUPPORTED[k // 3], np.asarray(w)
        assert g.dtype == w.dtype == np_dtype(dtype) and g.shape == w.shape, (dtype, k % 3)
        assert g.tobytes() == w.tobytes(), (dtype, k % 3)


def test_an_op_iree_cannot_compile_is_a_coded_refusal(tmp_path):
    """IREE 3.13 does not compile `stablehlo.reverse` of unsigned integers (SPEC.md,
    "Executables", lists it): the compiler's message comes back as BACKEND_UNSUPPORTED."""
    x = np.arange(6, dtype=np.uint32).reshape(2, 3)
    b = hlobundle.load(
        hlobundle.pack(lowered_text(lambda x: jnp.flip(x, 0), x), [x], tmp_path / "b")
    )
    with pytest.raises(
        hlobundle.errors.BackendUnsupportedError,
        match="IREE cannot compile this bundle: failed to legalize",
    ):
        b.function("iree")
    np.testing.assert_array_equal(b.function("xla").call_flat(x)[0], x[::-1])


@pytest.mark.parametrize("dtype", sorted(_iree_compile.UNSUPPORTED_DTYPES))
def test_dtypes_iree_lacks_are_refused_with_the_reason(tmp_path, dtype):
    x = sample((4,), dtype, 2)
    b = hlobundle.load(hlobundle.pack(lowered_text(lambda x: x, x), [x], tmp_path / "b"))
    with pytest.raises(hlobundle.errors.BackendUnsupportedError, match=f"element type.*{dtype}"):
        b.function("iree")


def test_sharded_and_custom_call_bundles_are_refused(tmp_path):
    sharded = hlobundle.load(ROOT / "hlobundle/conformance_cases/valid_zero_d/bundle")
    manifest = sharded.manifest
    assert _iree_compile.refusal(manifest) is None
    mesh = {"axes": [{"name": "x", "size": 2}]}
    with_mesh = manifest.model_validate({**manifest.model_dump(), "mesh": mesh})
    assert "sharded" in _iree_compile.refusal(with_mesh)
    module = {**manifest.module.model_dump(), "allowed_custom_calls": ["my_kernel"]}
    with_call = manifest.model_validate({**manifest.model_dump(), "module": module})
    assert "custom calls ['my_kernel']" in _iree_compile.refusal(with_call)


@pytest.mark.slow
def test_the_suites_single_threaded_compiler_writes_the_same_bytes(doubled):
    # tests/conftest.py runs iree-compile on one thread and keeps what it wrote: what it hands
    # the package (its kept bytes, or a compile of its own) must be what the package's own
    # flags compile, or every IREE test would test another program. The program is the one
    # `hlobundle.compile` compiles for test_compile_never_drops_a_file_another_field_references,
    # so that the suite's single-threaded compile of it is one the run makes anyway.
    real = _iree_compile._run_compiler.__wrapped__
    chosen = _iree_compile.flags("llvm-cpu", "generic")
    portable = hlobundle.load(doubled).portable_artifact
    assert _iree_compile._run_compiler(portable, chosen) == real(portable, chosen)


@pytest.mark.slow
def test_conformance_on_iree_passes_or_refuses_with_the_code():
    outcomes = [
        _conformance.run_case(c, backend="iree") for c in _conformance.cases(_conformance.INSTALLED)
    ]
    refused = {o.case for o in outcomes if o.refused}
    failed = [(o.case, o.got, o.detail) for o in outcomes if not (o.passed or o.refused)]
    assert failed == []
    assert refused == REFUSED
    many = next(o for o in outcomes if o.case == "valid_many_arguments")
    assert "binding count" in many.detail


def test_compile_stores_a_listed_hashed_executable(compiled):
    manifest = json.loads((compiled / "manifest.json").read_text())
    (entry,) = manifest["executables"]
    assert manifest["format_version"] == "1.3"
    assert entry["file"] == "compiled/llvm-cpu.vmfb" and entry["cpu"] == "generic"
    assert entry["compiler_version"] == _iree.runtime_version()
    assert "--iree-llvmcpu-target-cpu=generic" in entry["flags"]
    data = (compiled / entry["file"]).read_bytes()
    assert manifest["files"][entry["file"]]["size"] == len(data)
    assert (compiled / "compiled").stat().st_mode & 0o111  # a directory others can enter
    hlobundle.load(compiled).verify()


def test_a_flipped_executable_byte_fails_verify(compiled, tmp_path):
    b = tmp_path / "b"
    shutil.copytree(compiled, b)
    vmfb = b / "compiled" / "llvm-cpu.vmfb"
    data = bytearray(vmfb.read_bytes())
    data[len(data) // 2] ^= 1
    vmfb.write_bytes(bytes(data))
    r = cli("verify", b)
    assert r.returncode == 1 and "[HASH_MISMATCH] compiled/llvm-cpu.vmfb" in r.stderr


def _swap_in_another_program(compiled: Path, tmp_path: Path) -> Path:
    """`compiled` with its stored executable replaced by another program's (same signature,
    results doubled), rehashed: what an attacker who can rewrite the manifest could do."""
    b = tmp_path / "swapped"
    shutil.copytree(compiled, b)
    bundle = hlobundle.load(b)
    other = lowered_text(
        lambda *a: (jnp.zeros((4, 10), jnp.float32) + 2.0,), *bundle.example_inputs().values()
    )
    other_vmfb = _iree_compile.compile_portable(
        hlobundle.load(
            hlobundle.pack(
                other,
                list(bundle.example_inputs().values()),
                tmp_path / "o",
                names=[a.name for a in bundle.arguments],
            )
        ).portable_artifact,
        bundle.manifest,
    ).data
    (b / "compiled" / "llvm-cpu.vmfb").write_bytes(other_vmfb)
    rehash(b, "compiled/llvm-cpu.vmfb")
    return b


@pytest.mark.slow
def test_stored_executables_run_only_from_a_trusted_bundle(compiled, tmp_path):
    b = hlobundle.load(_swap_in_another_program(compiled, tmp_path))
    b.verify()  # the hashes agree: verification alone cannot tell native code is honest
    args = b.example_args()
    untrusted = b.function("iree")
    assert "stored" not in untrusted.source
    np.testing.assert_allclose(
        untrusted(*args), b.expected_outputs()["result"], rtol=1e-5, atol=1e-6
    )
    trusted = b.function("iree", trust=hlobundle.Trust.EXECUTABLES)
    assert trusted.source == "stored executable compiled/llvm-cpu.vmfb"
    np.testing.assert_array_equal(trusted(*args), np.full((4, 10), 2.0, np.float32))


@pytest.mark.slow  # over half a second alone (the edit loop's --durations, 2026-12-07)
def test_a_signed_bundle_verified_with_a_key_runs_its_executable(compiled, tmp_path):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    (tmp_path / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    (tmp_path / "pub.pem").write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    b = tmp_path / "b"
    shutil.copytree(EXAMPLE, b)
    hlobundle.sign(b, tmp_path / "key.pem")
    r = cli("compile", b)
    assert r.returncode == 1 and "is signed" in r.stderr and "--sign-key" in r.stderr
    assert cli("compile", b, "--sign-key", tmp_path / "key.pem").returncode == 0
    r = cli("run", b, "--backend", "iree", "--public-key", tmp_path / "pub.pem", "--json")
    report = json.loads(r.stdout)
    assert r.returncode == 0 and report["ok"]
    assert report["module"] == "stored executable compiled/llvm-cpu.vmfb"
    assert "stored" not in json.loads(cli("run", b, "--backend", "iree", "--json").stdout)["module"]


@pytest.mark.parametrize(
    ("field", "value", "why"),
    [
        ("compiler_version", "0.0.1", "compiled by IREE 0.0.1"),
        ("architecture", "riscv64", "it is for riscv64"),
        ("source_sha256", "0" * 64, "from another portable artifact"),
    ],
)
def test_executables_this_runtime_cannot_use_are_ignored(compiled, tmp_path, field, value, why):
    b = tmp_path / "b"
    shutil.copytree(compiled, b)
    edit_manifest(b, lambda m: m["executables"][0].update({field: value}))
    bundle = hlobundle.load(b)
    assert why in _iree.usable(bundle.manifest.executables[0], bundle)
    fn = bundle.function("iree", trust=hlobundle.Trust.EXECUTABLES)
    assert "stored" not in fn.source
    np.testing.assert_allclose(
        fn(*bundle.example_args()), bundle.expected_outputs()["result"], rtol=1e-5, atol=1e-6
    )


# --- the compile cache is trusted input: private, bound to its source, checked on read -------


@pytest.fixture(scope="module")
def twins(tmp_path_factory):
    """Two bundles of one signature computing different things, and the second's module
    compiled for this CPU: the program a planted cache entry would run instead of the first's."""
    tmp = tmp_path_factory.mktemp("twins")
    x = sample((5,), "float32", 3)
    a = _bundle(tmp, lambda x: x + 1, x, name="a")
    b = _bundle(tmp, lambda x: x * 0 - 5, x, name="b")
    other = hlobundle.load(b)
    return (
        a,
        b,
        _iree_compile.compile_portable(other.portable_artifact, other.manifest, cpu="host").data,
    )


@pytest.mark.slow
def test_the_compile_cache_is_used_the_second_time(tmp_path, monkeypatch, twins):
    # A cache of its own, empty: the module's shared one may hold this program already.
    monkeypatch.setenv("HLOBUNDLE_CACHE_DIR", str(tmp_path / "cache"))
    b = hlobundle.load(twins[0])
    assert b.function("iree").source == "compiled"
    assert b.function("iree").source == "compile cache"


def _key(bundle):
    return _iree_compile.cache_key(bundle.portable_artifact, "llvm-cpu", "host", _iree._host_cpu())


def _runs_its_own_module(path):
    bundle = hlobundle.load(path)
    fn = bundle.function("iree")
    np.testing.assert_array_equal(fn(*bundle.example_args()), bundle.expected_outputs()["result"])
    return fn.source


def _files_under(root):
    return sorted((str(p), p.read_bytes()) for p in Path(root).rglob("*") if p.is_file())


@pytest.mark.slow
def test_planted_cache_entries_never_run(tmp_path, monkeypatch, twins):
    a, b, other = twins
    monkeypatch.setenv("HLOBUNDLE_CACHE_DIR", str(tmp_path / "cache"))
    key, entries = _key(hlobundle.load(a)), tmp_path / "cache" / "iree"
    assert hlobundle.load(b).function("iree").source == "compiled"
    (theirs,) = entries.glob("*/*")
    mine = _cache.shard(entries, key)
    mine.mkdir(mode=0o700, exist_ok=True)
    shutil.copyfile(theirs, mine / theirs.name.replace(_key(hlobundle.load(b)), key))
    (mine / f"{key}.vmfb").write_bytes(other)  # the name entries had before they were bound
    (entries / _cache.entry_name(key, other)).write_bytes(other)  # where they were unsharded
    (tmp_path / "elsewhere.vmfb").write_bytes(other)
    _cache.entry_path(entries, key, other).symlink_to(tmp_path / "elsewhere.vmfb")
    planted = set(entries.glob("*/*"))
    assert _runs_its_own_module(a) == "compiled"
    (ours,) = set(entries.glob("*/*")) - planted
    assert _runs_its_own_module(a) == "compile cache"
    ours.write_bytes(other)  # our own entry, its bytes replaced: ignored and compiled again
    assert _runs_its_own_module(a) == "compiled"
    assert _runs_its_own_module(a) == "compile cache"


def _unsafe_root(tmp_path, kind, key, other):
    """A cache root holding an entry for `key` named as ours would be, made unsafe by `kind`."""
    real = tmp_path / "real"
    (real / "iree").mkdir(parents=True, mode=0o700)
    os.chmod(real, 0o700)
    _cache.shard(real / "iree", key).mkdir(mode=0o700)
    _cache.entry_path(real / "iree", key, other).write_bytes(other)
    if kind == "symlink":
        (tmp_path / "link").symlink_to(real)
        return tmp_path / "link", real
    if kind == "group_writable_root":
        os.chmod(real, 0o770)
    elif kind == "world_writable_entries":
        os.chmod(real / "iree", 0o777)
    elif os.geteuid() != 0:
        pytest.skip("giving a directory to another user needs root")
    else:
        os.chown(real, 4242, 4242)
    return real, real


@pytest.mark.parametrize(
    "kind", ["symlink", "group_writable_root", "world_writable_entries", "foreign_owner"]
)
def test_an_unsafe_cache_directory_is_not_used(tmp_path, monkeypatch, twins, kind):
    a, _, other = twins
    root, real = _unsafe_root(tmp_path, kind, _key(hlobundle.load(a)), other)
    monkeypatch.setenv("HLOBUNDLE_CACHE_DIR", str(root))
    before = _files_under(real)
    with pytest.warns(
        hlobundle.HloBundleWarning,
        match="not using the cache: .*"
        + {
            "symlink": "is a symlink",
            "group_writable_root": "writable by group or others",
            "world_writable_entries": "writable by group or others",
            "foreign_owner": "owned by uid 4242",
        }[kind],
    ):
        assert _runs_its_own_module(a) == "compiled"
    # the safe directories beside the unsafe one keep their use (the verdicts)
    safe = tuple(str(real / d) for d in ("checks", "safetensors-headers"))
    after = [
        f
        for f in _files_under(real)
        if kind != "world_writable_entries" or not f[0].startswith(safe)
    ]
    assert after == before


@pytest.mark.slow
def test_no_cache_neither_reads_nor_writes(tmp_path, monkeypatch, twins):
    a, _, other = twins
    monkeypatch.setenv("HLOBUNDLE_NO_CACHE", "1")
    root = tmp_path / "cache"
    (root / "iree").mkdir(parents=True, mode=0o700)
    os.chmod(root, 0o700)
    key = _key(hlobundle.load(a))
    _cache.shard(root / "iree", key).mkdir(mode=0o700)
    _cache.entry_path(root / "iree", key, other).write_bytes(other)
    monkeypatch.setenv("HLOBUNDLE_CACHE_DIR", str(root))
    before = _files_under(root)
    assert _runs_its_own_module(a) == "compiled"
    assert _files_under(root) == before
    monkeypatch.setenv("HLOBUNDLE_CACHE_DIR", str(tmp_path / "absent"))
    assert _runs_its_own_module(a) == "compiled"
    assert not (tmp_path / "absent").exists()


def test_compiler_failures_and_hangs_are_coded(monkeypatch):
    b = hlobundle.load(EXAMPLE)
    with pytest.raises(
        hlobundle.errors.BackendUnsupportedError, match="IREE cannot compile this bundle"
    ):
        _iree_compile.compile_portable(b"\x00garbage", b.manifest)
    monkeypatch.setattr(_iree_compile._limits, "COMPILE_TIMEOUT_S", 0.01)
    with pytest.raises(
        hlobundle.errors.BackendUnsupportedError, match="did not finish within 0.01 s"
    ):
        _iree_compile.compile_portable(b.portable_artifact, b.manifest)


def test_the_compilers_limiting_child_imports_nothing_from_the_working_directory(
    tmp_path, monkeypatch
):
    # The Python that limits iree-compile's memory before becoming it imports `resource`: one
    # beside where hlobundle runs (a downloaded bundle's folder) must not run. The garbage
    # input fails in the compiler at once; the child has imported `resource` before it.
    (tmp_path / "resource.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w').close()\n")
    monkeypatch.chdir(tmp_path)
    real = _iree_compile._run_compiler.__wrapped__
    with pytest.raises(hlobundle.errors.BackendUnsupportedError, match="cannot compile"):
        real(b"\x00garbage", _iree_compile.flags("llvm-cpu", "generic"))
    assert not (tmp_path / "ran").exists()


def test_iree_options_are_checked():
    b = hlobundle.load(EXAMPLE)
    with pytest.raises(hlobundle.InputError, match="donate and devices"):
        b.function("iree", donate=["images"])
    with pytest.raises(hlobundle.InputError, match="--target must be one of"):
        hlobundle.compile(EXAMPLE, ["cuda"])
    r = cli("run", EXAMPLE, "--backend", "enzyme", "--trust-executables")
    assert r.returncode == 2, r.stderr
    assert "--trust-executables applies to --backend auto or xla or iree, not enzyme" in r.stderr
    fn = b.function("iree")
    with pytest.raises(hlobundle.InputError, match="argument 'images'.*expected float32"):
        fn(
            *[
                np.zeros(a.shape, np.float64) if a.name == "images" else b.tensor(a.name)
                for a in b.arguments
            ]
        )


@pytest.mark.slow
@pytest.mark.subprocess
def test_the_iree_path_imports_no_jax(compiled):
    code = (
        "import sys, hlobundle\n"
        f"b = hlobundle.load({str(compiled)!r}, verify=True)\n"
        "out = b.function('iree', trust=hlobundle.Trust.EXECUTABLES)(*b.example_args())\n"
        "assert out.shape == (4, 10)\n"
        "print(sorted(m for m in sys.modules if m == 'jax' or m.startswith('jax.')))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


BLOCK = (
    "import sys\n"
    "class Block:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name.split('.')[0] in ('jax', 'jaxlib', 'enzyme_ad', 'hlobundle'):\n"
    "            raise ImportError('blocked: ' + name)\n"
    "sys.meta_path.insert(0, Block())\n"
    "import runpy\n"
    "sys.argv = sys.argv[1:]\n"
    "runpy.run_path(sys.argv[0], run_name='__main__')\n"
)


@pytest.mark.slow
@pytest.mark.subprocess
def test_the_emitted_iree_script_runs_with_jax_blocked(compiled, tmp_path):
    script = tmp_path / "run.py"
    r = cli("emit", compiled, "--backend", "iree", "-o", script)
    assert r.returncode == 1 and "native code" in r.stderr and "--trust-executables" in r.stderr
    assert (
        cli("emit", compiled, "--backend", "iree", "-o", script, "--trust-executables").returncode
        == 0
    )
    run = subprocess.run([sys.executable, "-c", BLOCK, str(script)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "max abs diff from expected" in run.stdout and run.stdout.strip().endswith("ok")
    vmfb = compiled / "compiled" / "llvm-cpu.vmfb"
    original = vmfb.read_bytes()
    try:  # the script runs only the bytes emit verified
        vmfb.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
        run = subprocess.run(
            [sys.executable, "-c", BLOCK, str(script)], capture_output=True, text=True
        )
        assert run.returncode == 1 and "changed since this script was written" in run.stderr
    finally:
        vmfb.write_bytes(original)
    weights = compiled / "weights.safetensors"
    original = weights.read_bytes()
    try:  # and reads only the tensor files emit verified
        weights.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
        run = subprocess.run(
            [sys.executable, "-c", BLOCK, str(script)], capture_output=True, text=True
        )
        assert run.returncode == 1, run.stdout
        assert "weights.safetensors changed since this script was written" in run.stderr
    finally:
        weights.write_bytes(original)


@pytest.mark.slow
@pytest.mark.subprocess
def test_the_emitted_iree_script_takes_help_and_inputs(compiled, tmp_path):
    script = tmp_path / "run.py"
    assert (
        cli("emit", compiled, "--backend", "iree", "-o", script, "--trust-executables").returncode
        == 0
    )
    bundle = hlobundle.load(compiled)
    first = bundle.arguments[-1].name
    np.save(tmp_path / "a.npy", np.asarray(bundle.tensor(first)) * 2)

    def run(*args):
        return subprocess.run(
            [sys.executable, "-c", BLOCK, str(script), *map(str, args)],
            capture_output=True,
            text=True,
        )

    r = run("--help")
    assert r.returncode == 0 and "NAME=FILE" in r.stdout
    r = run("--inputs", f"{first}={tmp_path / 'a.npy'}")
    assert r.returncode == 0, r.stderr
    assert "max abs diff" not in r.stdout and r.stdout.strip().endswith("ok")
    if len(bundle.arguments) > 1:
        r = run("--inputs", tmp_path / "a.npy")
        assert r.returncode == 1 and "NAME=FILE" in r.stderr


def test_emit_iree_needs_an_executable_this_runtime_runs(tmp_path):
    b = tmp_path / "b"
    shutil.copytree(EXAMPLE, b)
    r = cli("emit", b, "--backend", "iree", "--trust-executables", "-o", tmp_path / "r.py")
    assert r.returncode == 1 and f"store one with: hlobundle compile {b}" in r.stderr


def test_emit_iree_of_a_bundle_never_compiled_says_compile_first_not_key(tmp_path):
    b = tmp_path / "b"
    shutil.copytree(EXAMPLE, b)
    r = cli("emit", b, "--backend", "iree", "-o", tmp_path / "r.py")  # no key, no trust flag
    assert r.returncode == 1 and f"hlobundle compile {b}" in r.stderr
    assert "--public-key" not in r.stderr and not (tmp_path / "r.py").exists()


def _time_line(*args) -> str:
    r = cli("run", *args, "--backend", "iree")
    assert r.returncode == 0, r.stderr
    (line,) = [line for line in r.stdout.splitlines() if line.startswith("time: ")]
    return line


@pytest.mark.slow
def test_the_time_line_says_what_compiled_and_when(compiled, tmp_path, monkeypatch):
    """IREE compiles (or loads) the module when the function is made, never in its first call:
    the line times that apart, and says "compile" only when something compiled."""
    ms = r"\d+\.\d+ ms"
    line = _time_line(compiled, "--trust-executables")
    assert re.fullmatch(
        f"time: module loaded in {ms} \\(nothing compiled\\), "
        f"first call {ms} \\(run\\), second call {ms}",
        line,
    ), line
    monkeypatch.setenv("HLOBUNDLE_CACHE_DIR", str(tmp_path / "cache"))
    line = _time_line(EXAMPLE)
    assert re.fullmatch(
        f"time: module compiled by IREE in {ms}, first call {ms} \\(run\\), second call {ms}", line
    ), line
    line = _time_line(EXAMPLE)
    assert re.fullmatch(
        f"time: module loaded in {ms} \\(nothing compiled\\), "
        f"first call {ms} \\(run\\), second call {ms}",
        line,
    ), line


@pytest.mark.slow
def test_cli_compile_run_and_inspect(tmp_path):
    b = tmp_path / "b"
    shutil.copytree(EXAMPLE, b)
    r = cli("compile", b, "--target", "llvm-cpu", "--target", "vmvx")
    assert r.returncode == 0 and "compiled/vmvx.vmfb" in r.stdout
    assert "compiled  compiled/vmvx.vmfb: IREE" in cli("inspect", b).stdout
    r = cli("run", b, "--backend", "iree", "--trust-executables")
    assert (
        r.returncode == 0 and "backend iree (stored executable compiled/llvm-cpu.vmfb)" in r.stdout
    )
    # vmvx (IREE's portable bytecode) alone is used too
    edit_manifest(
        b, lambda m: m.update(executables=[e for e in m["executables"] if e["target"] == "vmvx"])
    )
    manifest = json.loads((b / "manifest.json").read_text())
    del manifest["files"]["compiled/llvm-cpu.vmfb"]
    (b / "manifest.json").write_text(json.dumps(manifest))
    (b / "compiled" / "llvm-cpu.vmfb").unlink()
    r = cli("run", b, "--backend", "iree", "--trust-executables", "--json")
    assert (
        r.returncode == 0
        and json.loads(r.stdout)["module"] == "stored executable compiled/vmvx.vmfb"
    )


def test_cli_run_refuses_what_iree_lacks(tmp_path):
    x = sample((4,), "int4", 2)
    b = hlobundle.pack(lowered_text(lambda x: x, x), [x], tmp_path / "b")
    r = cli("run", b, "--backend", "iree")
    assert r.returncode == 1
    assert (
        "error [BACKEND_UNSUPPORTED] the iree backend cannot run this bundle: IREE does not compile"
        in r.stderr
    )


@pytest.mark.slow
def test_conformance_cli_reports_refusals():
    r = cli("conformance", "--backend", "iree", "-k", "valid_dtype_int")
    assert r.returncode == 0
    assert "valid_dtype_int4" in r.stdout and "refused" in r.stdout and "0 failed" in r.stdout


@pytest.mark.slow
@pytest.mark.subprocess
def test_a_stored_executable_runs_without_the_compiler(compiled):
    """A deployment with iree-base-runtime alone: the trusted stored executable runs; without
    one, the missing compiler is named."""
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.startswith('iree.compiler'): raise ImportError('blocked: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import hlobundle\n"
        f"b = hlobundle.load({str(compiled)!r})\n"
        "print(b.function('iree', trust=hlobundle.Trust.EXECUTABLES).source)\n"
        "try:\n"
        "    b.function('iree')\n"
        "except hlobundle.errors.BackendUnavailableError as e:\n"
        "    print(e.code)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "HLOBUNDLE_NO_CACHE": "1"},
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [
        "stored",
        "executable",
        "compiled/llvm-cpu.vmfb",
        "BACKEND_UNAVAILABLE",
    ]


def test_jax_transformations_of_the_iree_function_are_a_coded_error():
    import jax

    b = hlobundle.load(EXAMPLE)
    fn = b.function("iree")
    args = b.example_args()
    for transform in (jax.jit, jax.grad):
        with pytest.raises(hlobundle.TransformError, match="cannot be traced by jax.jit, jax.grad"):
            transform(lambda *a: fn(*a).sum())(*args)


def test_serve_on_iree_answers_as_the_xla_backend(compiled):
    pytest.importorskip("starlette", reason="the serve extra is not installed")
    pytest.importorskip("httpx2", reason="Starlette's test client needs httpx2 (the dev extra)")
    from starlette.testclient import TestClient

    from hlobundle._serve._app import app
    from hlobundle._serve._models import load_models

    models = load_models(
        [compiled], backend="iree", max_batch=16, trust=hlobundle.Trust.EXECUTABLES
    )
    served = models["lenet5"]
    assert served.function.source == "stored executable compiled/llvm-cpu.vmfb"
    assert not served.batchable  # jax.vmap runs the batched module; the iree function is not JAX
    bundle = hlobundle.load(compiled)
    images = np.asarray(bundle.tensor("images"))
    request = {
        "inputs": [
            {
                "name": "images",
                "shape": list(images.shape),
                "datatype": "FP32",
                "data": images.reshape(-1).tolist(),
            }
        ]
    }
    r = TestClient(app(models, max_batch=16)).post("/v2/models/lenet5/infer", json=request)
    assert r.status_code == 200, r.text
    (out,) = r.json()["outputs"]
    want = np.asarray(bundle.function("xla")(*bundle.example_args()))
    np.testing.assert_allclose(
        np.asarray(out["data"], np.float32).reshape(out["shape"]), want, rtol=1e-5, atol=1e-6
    )


@pytest.mark.parametrize("shared", ["module.mlirbc", "module.mlir", "inputs.safetensors"])
def test_compile_never_drops_a_file_another_field_references(doubled, tmp_path, shared):
    """An executable being replaced whose file is also the module's artifact (or text, or a
    tensor file) leaves that file listed: compile removes only what nothing else references."""
    b = copy_of(doubled, tmp_path)
    listed = json.loads((b / "manifest.json").read_text())["files"]
    assert shared in listed
    entry = {
        "target": "llvm-cpu",
        "file": shared,
        "compiler": "iree",
        "compiler_version": "0",
        "architecture": "x86_64",
        "cpu": "generic",
        "flags": [],
        "source_sha256": "0" * 64,
    }
    edit_manifest(b, lambda m: m.update(format_version="1.3", executables=[entry]))
    hlobundle.load(b).verify()
    hlobundle.compile(b)
    after = hlobundle.load(b)
    after.verify()
    assert shared in after.manifest.files
    assert [e.file for e in after.manifest.executables] == ["compiled/llvm-cpu.vmfb"]


def test_compile_never_overwrites_a_file_another_field_references(doubled, tmp_path):
    b = copy_of(doubled, tmp_path)
    manifest = json.loads((b / "manifest.json").read_text())
    entry = manifest["files"].pop("inputs.safetensors")
    manifest["files"]["compiled/llvm-cpu.vmfb"] = entry
    manifest["arguments"][0]["value"]["file"] = "compiled/llvm-cpu.vmfb"
    (b / "compiled").mkdir()
    (b / "inputs.safetensors").rename(b / "compiled" / "llvm-cpu.vmfb")
    (b / "manifest.json").write_text(json.dumps(manifest))
    hlobundle.load(b).verify()
    with pytest.raises(hlobundle.InputError, match="compile would write 'compiled/llvm-cpu.vmfb'"):
        hlobundle.compile(b)
    hlobundle.load(b).verify()


# Format 2.0: symbolic functions run from one module for any size; each function its own module.
W = np.linspace(-1, 1, 24, dtype=np.float32).reshape(8, 3)


@pytest.fixture(scope="module")
def symbolic(tmp_path_factory) -> Path:
    """predict(w, x) = tanh(x @ w) (x: f32[b, 8], the default) and pair(x, y) = (x @ w) * y
    with w constant (y: f32[b, 3]; IREE lacks a dynamic slice's gather and broadcast)."""
    out = tmp_path_factory.mktemp("symbolic") / "fns"
    x, y = np.ones((2, 8), np.float32), np.ones((2, 3), np.float32)
    hlobundle.export(
        lambda w, x: jnp.tanh(x @ w), W, x, out=out, name="predict", shapes_specs=(None, "b, 8")
    )
    hlobundle.export(
        lambda x, y: (x @ W) * y,
        x,
        y,
        out=out,
        name="pair",
        shapes_specs=("b, 8", "b, 3"),
        add=True,
    )
    return out


# The compile tests below store executables for this CPU, the program the iree backend compiles
# for itself when it runs a function (test_a_symbolic_function_runs_on_iree_for_any_size_as_on_xla,
# test_shape_proofs' pair): one compile of each function serves both.
HOST = "host"


@pytest.mark.slow
def test_a_symbolic_function_runs_on_iree_for_any_size_as_on_xla(symbolic):
    bundle = hlobundle.load(symbolic)
    for name in ("predict", "pair"):
        iree, xla = bundle.function("iree", name=name), bundle.function("xla", name=name)
        for rows in (1, 3, 17):
            x = sample((rows, 8), "float32", seed=rows)
            args = (W, x) if name == "predict" else (x, sample((rows, 3), "float32"))
            got, want = iree(*args), np.asarray(xla(*args))
            assert got.shape == want.shape == (rows, 3)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_iree_refuses_shapes_that_do_not_bind_the_symbols(symbolic):
    pair = hlobundle.load(symbolic).function("iree", name="pair")
    with pytest.raises(hlobundle.InputError, match=r"y.shape\[0\] is 3, but b = 2 with b=2"):
        pair(np.ones((2, 8), np.float32), np.ones((3, 3), np.float32))


@pytest.mark.slow
def test_compile_stores_an_executable_per_function(symbolic, tmp_path):
    out = shutil.copytree(symbolic, tmp_path / "fns")
    hlobundle.compile(out, cpu=HOST)
    manifest = json.loads((out / "manifest.json").read_text())
    files = {f["name"]: [e["file"] for e in f["executables"]] for f in manifest["functions"]}
    assert files == {
        "predict": ["predict/compiled/llvm-cpu.vmfb"],
        "pair": ["pair/compiled/llvm-cpu.vmfb"],
    }
    bundle = hlobundle.load(out)
    bundle.verify()
    x = sample((5, 8), "float32")
    for name, args in (("predict", (W, x)), ("pair", (x, np.ones((5, 3), np.float32)))):
        fn = bundle.function("iree", name=name, trust=hlobundle.Trust.EXECUTABLES)
        assert fn.source.startswith(f"stored executable {name}/compiled/"), fn.source
        want = np.asarray(bundle.function("xla", name=name)(*args))
        np.testing.assert_allclose(fn(*args), want, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_compile_of_one_named_function(symbolic, tmp_path):
    out = shutil.copytree(symbolic, tmp_path / "fns")
    hlobundle.compile(out, function="pair", cpu=HOST)
    manifest = json.loads((out / "manifest.json").read_text())
    assert {f["name"]: f.get("executables") is not None for f in manifest["functions"]} == {
        "predict": False,
        "pair": True,
    }
    hlobundle.load(out).verify()
    with pytest.raises(hlobundle.InputError, match="no function named 'nope'"):
        hlobundle.compile(out, function="nope")


@pytest.mark.slow
def test_cli_compile_of_one_named_function(symbolic, tmp_path):
    out = shutil.copytree(symbolic, tmp_path / "fns")
    r = cli("compile", out, "--function", "pair", "--cpu", HOST)
    assert r.returncode == 0, r.stderr
    assert f"wrote {out / 'pair' / 'compiled' / 'llvm-cpu.vmfb'}" in r.stdout
    manifest = json.loads((out / "manifest.json").read_text())
    assert [f["name"] for f in manifest["functions"] if f.get("executables")] == ["pair"]
    r = cli("run", out, "--function", "pair", "--backend", "iree", "--trust-executables")
    assert r.returncode == 0 and "stored executable pair/compiled/llvm-cpu.vmfb" in r.stdout
    r = cli("compile", out, "--function", "nope")
    assert r.returncode == 1 and "error [INPUT_INVALID] no function named 'nope'" in r.stderr


@pytest.mark.parametrize("cpu", ["", "a b", "x" * 65, "-march=native\n"])
def test_a_cpu_the_manifest_would_refuse_is_an_input_error_before_any_compile(
    tmp_path, monkeypatch, cpu
):
    # The library's compile(), not only the command line, refuses it before compiling: the
    # executable's manifest entry (Executable.cpu) would refuse it after the work.
    out = tmp_path / "b"
    shutil.copytree(EXAMPLE, out)

    def never(*args, **kwargs):
        raise AssertionError("compiled before the cpu was checked")

    monkeypatch.setattr(_iree_compile, "compile_portable", never)
    with pytest.raises(hlobundle.InputError, match="cpu") as e:
        hlobundle.compile(out, cpu=cpu)
    assert e.value.argument == "cpu"

"""XLA's stored executables (`hlobundle compile --target xla-cpu`, SPEC.md 2.7): stored with
their key, run only from a trusted bundle, with no XLA compile, and ignored (compiling, saying
so once) where their key is not this machine's."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import jax
import numpy as np
import pytest
from helpers import ROOT, cli, compiled_during, edit_manifest

import hlobundle
from hlobundle._run._backends import _xla_executables

EXAMPLE = ROOT / "examples" / "lenet5.hlobundle"


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("xla") / "lenet5.hlobundle"
    shutil.copytree(EXAMPLE, out)
    hlobundle.compile(out, ["xla-cpu"])
    return out


@pytest.fixture
def copy(compiled, tmp_path) -> Path:
    out = tmp_path / "b.hlobundle"
    shutil.copytree(compiled, out)
    return out


def _edit_entry(bundle: Path, edit) -> None:
    """Edit the one function's executable entry (a 1.x bundle compiled for XLA is 2.2)."""
    edit_manifest(bundle, lambda m: edit(m["functions"][0]["executables"][0]))


def _run(bundle: Path, **kwargs):
    b = hlobundle.load(bundle)
    f = b.function("xla", **kwargs)
    return f, np.asarray(f(*b.example_args()))


def test_compile_stores_the_executable_with_its_key(compiled):
    b = hlobundle.load(compiled)
    b.verify()
    (entry,) = b.manifest.executables
    here = _xla_executables.here()
    assert (entry.target, entry.file, entry.compiler) == ("xla-cpu", "compiled/xla-cpu.pjrt", "xla")
    assert (entry.device_kind, entry.topology) == (here.device_kind, "1")
    assert entry.compiler_version == here.compiler_version and entry.cpu == here.cpu
    assert entry.source_sha256 == b.modules["module"].portable_sha256
    assert b.manifest.format_version == "2.2"  # XLA's executables are 2.2 (SPEC.md 5)
    assert (compiled / entry.file).stat().st_size == b.manifest.files[entry.file].size


def test_an_untrusted_bundle_compiles_and_ignores_its_executable(compiled):
    (f, got), compiles = compiled_during(lambda: _run(compiled))
    assert f.source is None and compiles >= 1
    _, want = _run(EXAMPLE)
    np.testing.assert_array_equal(got, want)


def test_a_trusted_bundle_runs_its_executable_without_an_xla_compile(compiled):
    trust = hlobundle.Trust.EXECUTABLES
    (f, got), compiles = compiled_during(lambda: _run(compiled, trust=trust))
    assert f.source == "stored executable compiled/xla-cpu.pjrt"
    assert compiles == 0
    _, want = _run(EXAMPLE)
    np.testing.assert_array_equal(got, want)
    r = cli("run", compiled, "--trust-executables")
    assert r.returncode == 0, r.stderr
    assert "backend xla (stored executable compiled/xla-cpu.pjrt)" in r.stdout
    assert "(nothing compiled)" in r.stdout


def test_under_jit_the_function_is_traced_and_compiled(compiled):
    b = hlobundle.load(compiled)
    f = b.function("xla", trust=hlobundle.Trust.EXECUTABLES)
    args = b.example_args()
    got, compiles = compiled_during(lambda: jax.jit(lambda *a: f(*a))(*args))
    assert compiles >= 1
    np.testing.assert_array_equal(np.asarray(got), np.asarray(f(*args)))


def test_an_executable_for_another_jaxlib_falls_back_saying_so_once(copy):
    _edit_entry(copy, lambda e: e.update(compiler_version="0.0.1"))
    with pytest.warns(hlobundle.HloBundleWarning, match="compiler_version is '0.0.1'") as said:
        (f, got), compiles = compiled_during(lambda: _run(copy, trust=hlobundle.Trust.EXECUTABLES))
    assert len(said) == 1 and "compiling the portable artifact instead" in str(said[0].message)
    assert f.source is None and compiles >= 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once: not again
        _run(copy, trust=hlobundle.Trust.EXECUTABLES)


def test_an_executable_of_another_artifact_is_not_run(copy):
    _edit_entry(copy, lambda e: e.update(source_sha256="0" * 64))
    with pytest.warns(hlobundle.HloBundleWarning, match="another portable artifact"):
        f, _ = _run(copy, trust=hlobundle.Trust.EXECUTABLES)
    assert f.source is None


def test_a_tampered_executable_is_refused_before_jaxlib_parses_it(copy, monkeypatch):
    path = copy / "compiled" / "xla-cpu.pjrt"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    parsed = []
    monkeypatch.setattr(
        _xla_executables._compat, "deserialize_executable", lambda *a: parsed.append(a)
    )
    b = hlobundle.load(copy)
    with pytest.raises(hlobundle.errors.HashMismatchError, match="xla-cpu.pjrt"):
        b.function("xla", trust=hlobundle.Trust.EXECUTABLES)
    assert parsed == []


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda e: e.update(target="llvm-cpu"), "target 'llvm-cpu' and compiler 'xla' disagree"),
        (lambda e: e.pop("device_kind"), r"executable gives \['device_kind', 'topology'\]"),
        (lambda e: e.update(compiler="iree"), "target 'xla-cpu' and compiler 'iree' disagree"),
    ],
)
def test_an_xla_executable_entry_must_carry_its_key(copy, edit, message):
    _edit_entry(copy, edit)
    with pytest.raises(hlobundle.errors.ManifestError, match=message):
        hlobundle.load(copy)


def test_an_xla_executable_needs_format_2_2(copy):
    edit_manifest(copy, lambda m: m.update(format_version="2.1"))
    with pytest.raises(hlobundle.errors.ManifestError, match=r"needs format_version 2\.2"):
        hlobundle.load(copy)


def test_compile_for_a_platform_jax_does_not_run_here_is_refused(copy):
    with pytest.raises(hlobundle.InputError, match="XLA compiles for the platform JAX runs on"):
        hlobundle.compile(copy, ["xla-tpu"])
    r = cli("compile", copy, "--target", "xla-nothing")
    assert r.returncode == 2 and "--target xla-nothing" in r.stderr


@pytest.mark.slow
@pytest.mark.subprocess
def test_an_executable_is_compiled_afresh_when_jax_s_cache_holds_the_function(tmp_path):
    """An executable JAX loaded from its persistent cache serializes without its code (jaxlib
    on the CPU): `compile` must not store one (`_compat.compile_uncached`)."""
    import subprocess
    import sys

    out = tmp_path / "b.hlobundle"
    shutil.copytree(EXAMPLE, out)
    code = (
        "import jax, numpy as np, hlobundle\n"
        f"jax.config.update('jax_compilation_cache_dir', {str(tmp_path / 'jax')!r})\n"
        "jax.config.update('jax_persistent_cache_min_compile_time_secs', 0)\n"
        "jax.config.update('jax_persistent_cache_min_entry_size_bytes', 0)\n"
        "from hlobundle._run._backends import _xla_executables\n"
        f"b = hlobundle.load({str(out)!r})\n"
        "_xla_executables.lowered(b).compile()  # into JAX's cache\n"
        f"hlobundle.compile({str(out)!r}, ['xla-cpu'])\n"
        f"hlobundle.compile({str(out)!r}, ['xla-cpu'])  # again, as a second run of it would\n"
        f"b = hlobundle.load({str(out)!r})\n"
        "f = b.function('xla', trust=hlobundle.Trust.EXECUTABLES)\n"
        "print(f.source, np.asarray(f(*b.example_args())).shape)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    source, shape = r.stdout.rsplit(" ", 2)[0], r.stdout.split()[-2:]
    assert source.startswith("stored executable ") and shape == ["(4,", "10)"], r.stdout


def test_an_executable_pjrt_refuses_falls_back_saying_so(copy):
    """Bytes whose hash agrees (the manifest rewritten with them) but that PJRT cannot load."""
    from helpers import rehash

    (copy / "compiled" / "xla-cpu.pjrt").write_bytes(b"not an executable")
    rehash(copy, "compiled/xla-cpu.pjrt")
    with pytest.warns(hlobundle.HloBundleWarning, match="does not load here .*INVALID_ARGUMENT"):
        f, got = _run(copy, trust=hlobundle.Trust.EXECUTABLES)
    assert f.source is None
    np.testing.assert_array_equal(got, _run(EXAMPLE)[1])

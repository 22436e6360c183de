"""`hlobundle run` and expected outputs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from helpers import ENZYME, ROOT, cli, cli_process, identity_module, pack_identity, rehash, sample
from safetensors.numpy import load_file

import hlobundle

EXAMPLE = ROOT / "examples" / "lenet5.hlobundle"


# The example's expected outputs were computed with jaxlib 0.10.2 on a CPU with AVX-512; XLA's
# CPU code sums in another order in other versions and on other vector widths (an AMD EPYC
# without AVX-512 gives 1.99e-07 with the same jaxlib), so the last bits of a float result are
# not the example's: the check is the bound, never bit equality.
CLOSE = 1e-6


@pytest.mark.parametrize("backend", ["enzyme", "xla"])
def test_run_example_ok(backend):
    r = cli("run", EXAMPLE, "--backend", backend)
    assert r.returncode == 0, r.stderr
    row = re.search(r"^  result  \(4, 10\)  float32  (\S+) +ok$", r.stdout, re.M)
    assert row, r.stdout
    assert float(row[1]) < CLOSE
    assert r.stdout.rstrip().endswith("ok")


def test_run_json(tmp_path):
    r = cli("run", EXAMPLE, "--json")
    data = json.loads(r.stdout)
    # a forward run's auto is xla (it needs only jax), even where enzyme-ad is installed
    assert data["ok"] is True and data["backend"] == "xla" and data["inputs"] == "stored"
    (row,) = data["outputs"]
    diff = row.pop("max_abs_diff")
    assert row == {
        "name": "result",
        "shape": [4, 10],
        "dtype": "float32",
        "ok": True,
        "rtol": 1e-5,
        "atol": 1e-5,
        "worst": None,
    }
    assert (data["platform"], data["precision"]) == ("cpu", None)
    # Widened (by float32's roundoff, below the dtype's 1e-5 here) only under another jaxlib
    # than the one that computed the example's expected outputs (SPEC.md 2.15).
    made_by = hlobundle.load(EXAMPLE).manifest.provenance.jaxlib_version
    assert (data["widened"] is None) == (data["jaxlib_version"] == made_by), data["widened"]
    assert diff < CLOSE


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["auto", "iree"])
def test_run_resolves_its_backend_once_and_not_through_bundle_function(monkeypatch, backend):
    """The name becomes a backend once, at the command's entry; the run is handed the object
    (it does not go back up through the public `Bundle.function`)."""
    from hlobundle._read._reader import Bundle
    from hlobundle._run import _backends

    if not _backends.kind(backend).available():
        pytest.skip(f"{backend} is not installed")
    resolved = []
    real = _backends.resolve

    def counted(name, manifest=None):
        resolved.append(name)
        return real(name, manifest)

    def refused(*args, **kwargs):
        raise AssertionError("run went through Bundle.function")

    monkeypatch.setattr(_backends, "resolve", counted)
    monkeypatch.setattr(Bundle, "function", refused)
    r = cli("run", EXAMPLE, "--backend", backend, "--json")
    assert r.returncode == 0, r.stderr
    assert resolved == ["xla" if backend == "auto" else backend]
    assert json.loads(r.stdout)["backend"] == resolved[0]


def _runtime_start(monkeypatch, starting):
    """`jax.devices` where a thread other than the test's calls it: `starting(thread)` first
    (the runtime's start, as a fresh process would spend it), then the real one."""
    import jax

    real, caller = jax.devices, threading.current_thread()

    def devices(*args, **kwargs):
        if threading.current_thread() is not caller:
            starting(threading.current_thread())
        return real(*args, **kwargs)

    monkeypatch.setattr(jax, "devices", devices)


@pytest.mark.slow
def test_run_reads_the_bundle_while_the_runtime_starts(monkeypatch):
    """`run` starts the JAX runtime (`jax.devices()`: 13-14 s of a fresh process on a TPU) in a
    thread of its own before it reads the bundle, and reads while it starts (issue 66, 3)."""
    from hlobundle._remote import _load

    events, read, real_load = [], threading.Event(), _load.load

    def starting(thread):
        events.append("start")
        events.append("read meanwhile" if read.wait(10) else "not read meanwhile")

    def load(*args, **kwargs):
        read.set()
        return real_load(*args, **kwargs)

    _runtime_start(monkeypatch, starting)
    monkeypatch.setattr(_load, "load", load)
    r = cli("run", EXAMPLE, "--json")
    assert r.returncode == 0, r.stderr
    assert events == ["start", "read meanwhile"]
    assert json.loads(r.stdout)["ok"] is True


@pytest.mark.slow
def test_run_parses_what_its_check_walks_while_the_runtime_starts(monkeypatch):
    """The module's contractions, which the check walks where precision can matter (a TPU: the
    module parsed then, after the runtime's start, when its verdict was cached), are walked
    while the runtime starts, where it has not started yet."""
    from hlobundle._run import _run

    walked, real = threading.Event(), _run.lowest_asked
    events = []

    def lowest_asked(bundle):
        walked.set()
        return real(bundle)

    def starting(thread):
        events.append("walked meanwhile" if walked.wait(3) else "not walked meanwhile")

    _runtime_start(monkeypatch, starting)
    monkeypatch.setattr(_run, "lowest_asked", lowest_asked)
    r = cli("run", EXAMPLE, "--json")
    assert r.returncode == 0, r.stderr
    assert events == ["walked meanwhile"]


def test_run_leaves_no_runtime_start_running_after_an_error(monkeypatch, tmp_path):
    """A bundle that cannot be read is refused, coded, once the runtime's start has ended:
    nothing `run` began outlives it."""
    threads = []

    def starting(thread):
        threads.append(thread)
        time.sleep(0.2)

    _runtime_start(monkeypatch, starting)
    r = cli("run", tmp_path / "absent.hlobundle")
    assert r.returncode == 1 and r.stderr.startswith("error ["), r.stderr
    assert threads and not any(t.is_alive() for t in threads)


def test_a_runtime_that_fails_to_start_is_refused_coded(monkeypatch):
    """What the thread's `jax.devices()` raises (a TPU held by another process) is not printed
    there: the run, about to use the devices, refuses with DEVICES_UNAVAILABLE and JAX's
    reason, no traceback."""

    def starting(thread):
        raise RuntimeError("Unable to initialize backend 'tpu': in use by another process")

    _runtime_start(monkeypatch, starting)
    r = cli("run", EXAMPLE, "--json")
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith("error [DEVICES_UNAVAILABLE] JAX could not start its runtime: ")
    assert "Unable to initialize backend 'tpu': in use by another process" in r.stderr
    assert json.loads(r.stdout)["code"] == "DEVICES_UNAVAILABLE"


def test_run_fails_on_corrupted_expected_output(tmp_path):
    import shutil

    from safetensors.numpy import save_file

    bundle = tmp_path / "b"
    shutil.copytree(EXAMPLE, bundle)
    expected = load_file(str(bundle / "expected.safetensors"))
    expected["result"][0, 0] += 0.5
    save_file(expected, str(bundle / "expected.safetensors"))
    rehash(bundle, "expected.safetensors")
    r = cli("run", bundle)
    assert r.returncode == 1
    assert "result  (4, 10)  float32  0.5           MISMATCH" in r.stdout
    assert "FAILED: outputs differ from the expected outputs" in r.stdout
    r = cli("run", bundle, "--atol", "1")
    assert r.returncode == 0


def test_save_outputs(tmp_path):
    assert cli("run", EXAMPLE, "--save-outputs", tmp_path / "out.npz").returncode == 0
    bundle = hlobundle.load(EXAMPLE)
    want = bundle.function()(*bundle.example_args())  # what this jax computes, bit for bit
    np.testing.assert_array_equal(np.load(tmp_path / "out.npz")["result"], want)
    assert cli("run", EXAMPLE, "--save-outputs", tmp_path / "out.safetensors").returncode == 0
    np.testing.assert_array_equal(load_file(str(tmp_path / "out.safetensors"))["result"], want)
    r = cli("run", EXAMPLE, "--save-outputs", tmp_path / "out.csv")
    assert r.returncode == 2 and "--save-outputs: expected a .npz or .safetensors file" in r.stderr


def test_saved_outputs_may_have_the_names_of_savez_s_own_parameters(tmp_path):
    # np.savez(path, **named) took a result named `file` or `allow_pickle` as its own argument
    # (a TypeError, or a result silently left out); mypy's check of the call found it.
    from hlobundle._run._run import save_outputs

    x, y = np.arange(6, dtype=np.float32).reshape(2, 3), np.ones(4, np.int32)
    bundle = hlobundle.load(pack_identity(tmp_path, x, y, result_names=["file", "allow_pickle"]))
    save_outputs(tmp_path / "out.npz", bundle, [x, y], producer_layout=False)
    with np.load(tmp_path / "out.npz") as saved:
        assert sorted(saved.files) == ["allow_pickle", "file"]
        np.testing.assert_array_equal(saved["file"], x)
        np.testing.assert_array_equal(saved["allow_pickle"], y)


def test_run_on_given_inputs(tmp_path):
    b = hlobundle.load(EXAMPLE)
    inputs = dict(b.example_inputs())
    inputs["images"] = np.zeros_like(inputs["images"])
    np.savez(tmp_path / "in.npz", **inputs)
    r = cli(
        "run",
        EXAMPLE,
        "--inputs",
        tmp_path / "in.npz",
        "--save-outputs",
        tmp_path / "out.npz",
        "--json",
    )
    data = json.loads(r.stdout)
    assert data["inputs"] == "given" and data["outputs"][0]["max_abs_diff"] is None
    fn = b.function("xla")
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["result"], fn(**inputs), rtol=1e-6)


def test_generated_inputs_have_the_right_dtypes(tmp_path):
    text = identity_module(
        sample((3,), "int32"), sample((2,), "bool"), sample((2, 2), "float16"), sample((), "uint8")
    )
    out = hlobundle.pack(text, None, tmp_path / "b")
    r = cli("run", out, "--json", "--save-outputs", tmp_path / "out.npz")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["inputs"] == "generated"
    got = np.load(tmp_path / "out.npz")
    assert got["result_0"].dtype == np.int32 and set(got["result_0"]) <= set(range(10))
    assert got["result_1"].dtype == np.bool_
    assert got["result_2"].dtype == np.float16 and got["result_3"].dtype == np.uint8


def test_run_x64_bundle_from_cli(tmp_path):
    text = "func.func @main(%a: tensor<3xi64>, %b: tensor<f64>) -> tensor<f64> {\n  return %b : tensor<f64>\n}"
    out = hlobundle.pack(text, [np.arange(3), np.float64(1.5)], tmp_path / "b", expected="compute")
    r = cli("run", out)
    assert r.returncode == 0, r.stderr


def test_pack_compute_expected_and_expected_file(tmp_path):
    x = sample((2, 3), "float32")
    (tmp_path / "m.mlir").write_text(identity_module(x))
    np.savez(tmp_path / "in.npz", x)
    r = cli(
        "pack",
        tmp_path / "m.mlir",
        "--inputs",
        tmp_path / "in.npz",
        "-o",
        tmp_path / "a",
        "--compute-expected",
    )
    assert r.returncode == 0, r.stderr
    np.testing.assert_array_equal(hlobundle.load(tmp_path / "a").expected_outputs()["result_0"], x)
    np.savez(tmp_path / "exp.npz", result_0=x + 1)
    r = cli(
        "pack",
        tmp_path / "m.mlir",
        "--inputs",
        tmp_path / "in.npz",
        "-o",
        tmp_path / "b",
        "--expected",
        tmp_path / "exp.npz",
    )
    assert r.returncode == 0, r.stderr
    assert cli("run", tmp_path / "b").returncode == 1
    np.savez(tmp_path / "bad.npz", result_0=np.zeros(3, np.float32))
    r = cli(
        "pack",
        tmp_path / "m.mlir",
        "--inputs",
        tmp_path / "in.npz",
        "-o",
        tmp_path / "c",
        "--expected",
        tmp_path / "bad.npz",
    )
    assert r.returncode == 1
    assert (
        "expected result 'result_0' (from bad.npz[result_0]): expected shape (2, 3), got (3,) (field: results[0])"
        in r.stderr
    )


def test_compute_expected_needs_inputs(tmp_path):
    with pytest.raises(
        hlobundle.InputError, match="computing expected outputs needs example inputs"
    ):
        hlobundle.pack(
            identity_module(sample((2,), "float32")), None, tmp_path / "b", expected="compute"
        )
    with pytest.raises(
        hlobundle.InputError, match="expected must be arrays or 'compute', got 'yes'"
    ):
        hlobundle.pack(
            identity_module(sample((2,), "float32")),
            [sample((2,), "float32")],
            tmp_path / "b",
            expected="yes",
        )


def test_unused_arguments_are_not_read(tmp_path):
    text = "func.func @main(%a: tensor<3xf32>, %big: tensor<1000xf32>) -> tensor<3xf32> {\n  return %a : tensor<3xf32>\n}"
    out = hlobundle.pack(text, [np.ones(3, np.float32), np.ones(1000, np.float32)], tmp_path / "b")
    bundle = hlobundle.load(out)
    assert bundle.signature.unused == {1}
    fn = bundle.function("xla")
    assert fn.arguments_read == ("arg0",)  # the unused argument is neither transferred nor read
    big = bundle.tensor("arg1")
    (result,) = fn(bundle.tensor("arg0"), big)
    np.testing.assert_array_equal(result, np.ones(3))
    assert cli("run", out).returncode == 0


@pytest.mark.slow
@pytest.mark.subprocess
def test_compilation_cache_is_used_and_can_be_turned_off(tmp_path):
    import helpers

    run = helpers.CLI_ZYGOTE.run  # each a process of its own, whose JAX settings are its own
    r = run("run", EXAMPLE, env={"HLOBUNDLE_CACHE_DIR": str(tmp_path / "cache")})
    assert r.returncode == 0 and any((tmp_path / "cache").iterdir())
    r = run("run", EXAMPLE, "--no-cache", env={"HLOBUNDLE_CACHE_DIR": str(tmp_path / "other")})
    assert r.returncode == 0 and not (tmp_path / "other").exists()


@pytest.mark.slow
@pytest.mark.subprocess
def test_no_cache_turns_off_a_jax_cache_the_user_configured(tmp_path):
    """`--no-cache` means no persistent cache at all, not only ours: JAX's own settings (here
    from its environment variables) are overridden too."""
    env = {
        "HLOBUNDLE_CACHE_DIR": str(tmp_path / "ours"),
        "JAX_COMPILATION_CACHE_DIR": str(tmp_path / "jax_own"),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
    }
    r = cli_process("run", EXAMPLE, "--no-cache", env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert not (tmp_path / "ours").exists() and not (tmp_path / "jax_own").exists()


@pytest.mark.slow
@pytest.mark.subprocess
def test_jax_cache_is_not_kept_in_a_directory_others_can_write(tmp_path):
    import helpers

    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(real)
    for root, why in (
        (tmp_path / "link", "is a symlink"),
        (real, "is writable by group or others"),
    ):
        os.chmod(real, 0o700 if root != real else 0o777)
        r = helpers.CLI_ZYGOTE.run("run", EXAMPLE, env={"HLOBUNDLE_CACHE_DIR": str(root)})
        assert r.returncode == 0, r.stderr[-2000:]
        assert f"warning: not using the cache: {root} {why}" in r.stderr
        assert not any(real.iterdir())


def _solve_bundle(out):
    import jax.numpy as jnp

    a = np.array([[4.0, 1.0], [2.0, 3.0]], np.float32)
    b = np.array([1.0, 2.0], np.float32)
    return hlobundle.export(lambda a, b: jnp.linalg.solve(a, b), a, b, out=out)


@pytest.mark.slow
@pytest.mark.subprocess
@pytest.mark.parametrize("backend", ["enzyme", "xla"] if ENZYME else ["xla"])
def test_a_bundle_calling_lapack_runs_on_every_backend(tmp_path, backend):
    """A module calling LAPACK (jnp.linalg.solve) needs jax's LAPACK kernels initialized before
    it runs; uninitialized, the call jumps through a null pointer (SIGSEGV)."""
    import helpers

    bundle = _solve_bundle(tmp_path / "solve")
    assert "lapack_sgetrf_ffi" in hlobundle.load(bundle).module_text
    # a fork of the CLI zygote, which imported jax but never lowered, so never initialized them
    r = helpers.CLI_ZYGOTE.run("run", bundle, "--backend", backend, "--json")
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert json.loads(r.stdout)["ok"] is True


@pytest.mark.slow
@pytest.mark.subprocess
@pytest.mark.parametrize(
    "backend", [pytest.param("enzyme", marks=pytest.mark.slow), "xla"] if ENZYME else ["xla"]
)
def test_an_emitted_script_of_a_bundle_calling_lapack_runs(tmp_path, backend, script_zygote):
    """The emitted enzyme script calls hlo_call on the module text, which does not initialize
    jax's LAPACK kernels: it must do so itself, or the call jumps through a null pointer."""
    bundle = _solve_bundle(tmp_path / "solve")
    script = tmp_path / "run.py"
    hlobundle.emit_script(bundle, script, backend=backend)
    r = script_zygote(script)
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert r.stdout.rstrip().endswith("ok") and "max abs diff from expected 0" in r.stdout


@pytest.mark.slow
@pytest.mark.subprocess
def test_a_module_without_lapack_calls_does_not_import_scipy(tmp_path):
    """jax initializes LAPACK (importing scipy) whenever it lowers an Exported on CPU; the xla
    backend skips that for a module whose checked custom calls include no LAPACK target."""
    code = (
        "import sys, jax, hlobundle\n"
        f"b = hlobundle.load({str(EXAMPLE)!r})\n"
        "f = b.function('xla')\n"
        "jax.block_until_ready(f.call_flat(*[b.tensor(a.name) for a in b.arguments]))\n"
        "print('scipy' in sys.modules)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "False"

"""Tests for a machine with an accelerator, run by hand there (CI has none; pytest does not
collect this file unless named, and every test skips where JAX has no accelerator):

    HLOBUNDLE_LUX=lux.hlobundle python -m pytest -q -s -o addopts="" -p no:cacheprovider \
        --noconftest tests/on_accelerator.py [-k xla]

as docs/accelerators.md gives it: `-o addopts=""`, since a bare device machine may lack
pytest-xdist (pyproject's `--dist worksteal`), and `--noconftest`, since tests/conftest.py sets
the CPU tests' XLA flags, x64 and a private cache in pytest's own process.

The seed's Lux export, packed on a CPU with `hlobundle pack --from-reactant
../shared/fixtures/reactant/export_to_enzymejax_lux --compute-expected -o lux.hlobundle`, is
checked too when `HLOBUNDLE_LUX` names it (../shared does not travel to a device machine).

Every step is a `python -m hlobundle` process of its own and this module opens no device: one
process at a time may hold a TPU chip. What it checks, on each JAX backend (xla, enzyme):
- part 1 of docs/accelerators.md: every shipped example and the Lux bundle pass `run` as
  shipped (their expected outputs computed on a CPU, the tolerance derived, SPEC.md 2.15); a
  weight matrix scaled by 1.01 fails, its message naming the worst element, rtol and atol;
  `--precision highest` passes with nothing widened;
- part 2: `hlobundle compile --target xla-PLATFORM` stores an executable that a trusted `run`
  uses with nothing compiled;
- part 3: `serve --uds` answers an inference over a unix socket with the in-process result;
- a function lowered for several platforms runs the lowering of the one it runs on (SPEC.md
  2.14), and one not lowered for it is refused.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from importlib.util import find_spec
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))
from benchmarks import serve_client  # noqa: E402  (the serving benchmarks' client, over a unix socket)

LENET = ROOT / "examples" / "lenet5.hlobundle"
LM = ROOT / "examples" / "lm.hlobundle"
LUX = os.environ.get("HLOBUNDLE_LUX")
PLATFORM = "tpu" if find_spec("libtpu") else None  # what this module checks: a TPU

pytestmark = [
    pytest.mark.accelerator,
    pytest.mark.skipif(PLATFORM is None, reason="no accelerator here (run by hand on a TPU)"),
]
BACKENDS = [
    "xla",
    pytest.param(
        "enzyme",
        marks=pytest.mark.skipif(find_spec("enzyme_ad") is None, reason="no enzyme-ad"),
    ),
]


def hlobundle(*args: object, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "hlobundle", *map(str, args)]
    return subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=timeout)


def run_json(bundle: Path | str, backend: str, *extra: str) -> tuple[int, dict, str]:
    """`run --json`'s exit status, report and standard error."""
    r = hlobundle("run", bundle, "--backend", backend, "--json", *extra)
    lines = r.stdout.strip().splitlines()
    report = json.loads(lines[-1]) if lines else {}
    shown = [(o["name"], o.get("max_abs_diff"), o.get("atol")) for o in report.get("outputs", [])]
    print(f"{Path(bundle).name} {backend} {' '.join(extra)}: rc {r.returncode} {shown}")
    return r.returncode, report, r.stderr


def scaled(
    source: Path, into: Path, names: Iterable[str] | None = None, factor: float = 1.01
) -> Path:
    """A copy of `source` with the stored values of arguments `names` (default: every argument
    of role `parameter`, in every function) scaled by `factor`, and the manifest's size and
    digest of each edited file, so that the bundle verifies and computes otherwise. A value
    that functions share (the language model's weights) is scaled once."""
    shutil.copytree(source, into)
    manifest = json.loads((into / "manifest.json").read_text())
    arguments = [a for f in manifest.get("functions", [manifest]) for a in f["arguments"]]
    wanted = None if names is None else set(names)
    chosen = [
        a
        for a in arguments
        if (a["role"] == "parameter" if wanted is None else a["name"] in wanted)
    ]
    assert chosen and wanted in (None, {a["name"] for a in chosen}), (source, names)
    keys: dict[str, set[str]] = {}
    for a in chosen:
        keys.setdefault(a["value"]["file"], set()).add(a["value"]["key"])
    for file, scaled_keys in keys.items():
        stored = load_file(str(into / file))
        for key in scaled_keys:
            stored[key] = (stored[key] * factor).astype(stored[key].dtype)
        save_file(stored, str(into / file))
        data = (into / file).read_bytes()
        manifest["files"][file].update(size=len(data), sha256=hashlib.sha256(data).hexdigest())
    (into / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return into


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_shipped_example_passes_as_shipped(backend):
    for bundle, extra in [
        (LENET, ()),
        (LM, ("--function", "prefill")),
        (LM, ("--function", "decode")),
    ]:
        rc, report, err = run_json(bundle, backend, *extra)
        assert rc == 0, err[-2000:]
        assert report["platform"] == PLATFORM and report["widened"], report


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_lux_export_passes_and_a_weight_scaled_by_1_percent_fails(backend, tmp_path):
    if LUX is None:
        pytest.skip("HLOBUNDLE_LUX names no packed Lux export")
    rc, report, err = run_json(LUX, backend)
    assert rc == 0, err[-2000:]
    rc, report, err = run_json(scaled(Path(LUX), tmp_path / "lux", ["arg_3_6_3_1"]), backend)
    assert rc == 1 and not report["ok"], err[-2000:]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_lenet_weight_scaled_by_1_percent_fails_naming_the_worst_element(backend, tmp_path):
    rc, report, err = run_json(scaled(LENET, tmp_path / "b", ["params_dense1_w"]), backend)
    assert rc == 1, err[-2000:]
    (out,) = report["outputs"]
    worst = out["worst"]  # the element furthest past its tolerance, and the tolerance used
    assert not out["ok"] and worst["diff"] > worst["allowed"], report
    assert out["rtol"] > 0 and out["atol"] > 0 and report["widened"], report


@pytest.mark.parametrize("backend", BACKENDS)
def test_precision_highest_passes_at_float32_s_tolerance(backend):
    rc, report, err = run_json(LENET, backend, "--precision", "highest")
    # another platform: float32's roundoff on the CPU's side, the TPU's own (not IEEE's) on its
    # side (SPEC.md 2.15)
    assert rc == 0 and "atol = 2 * 1.53e-05 *" in report["widened"], (err[-2000:], report)


def test_a_stored_executable_gives_the_first_result_without_compiling(tmp_path):
    bundle = tmp_path / "lenet5.hlobundle"
    shutil.copytree(LENET, bundle)
    r = hlobundle("compile", bundle, "--target", f"xla-{PLATFORM}")
    assert r.returncode == 0, r.stderr[-2000:]
    r = hlobundle("run", bundle, "--backend", "xla", "--trust-executables")
    print(r.stdout)
    assert r.returncode == 0 and "(nothing compiled)" in r.stdout, r.stdout + r.stderr[-2000:]
    r = hlobundle("run", bundle, "--backend", "xla")  # untrusted: compiled, not loaded
    assert r.returncode == 0 and "(nothing compiled)" not in r.stdout, r.stderr[-2000:]


def _over(path: str, method: str, url: str, body: bytes | None = None) -> tuple[int, bytes]:
    """One HTTP request to a server on the unix socket `path`."""
    c = serve_client.connection(path, timeout=60)
    try:
        c.request(method, url, body, {"Content-Type": "application/json"})
        answer = c.getresponse()
        return answer.status, answer.read()
    finally:
        c.close()


def _ready(path: str, server: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 240
    while True:
        assert server.poll() is None and time.monotonic() < deadline, server.stderr
        try:
            if _over(path, "GET", "/v2/health/ready")[0] == 200:
                return
        except OSError:  # not bound yet, or bound and not yet listening
            pass
        time.sleep(0.2)


def test_serve_answers_over_a_unix_socket(tmp_path):
    images = load_file(str(LENET / "inputs.safetensors"))
    ((name, x),) = images.items()
    want = load_file(str(LENET / "expected.safetensors"))
    path = str(tmp_path / "s.sock")
    server = subprocess.Popen(
        [sys.executable, "-m", "hlobundle", "serve", str(LENET), "--uds", path],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _ready(path, server)
        inputs = [
            {"name": name, "shape": list(x.shape), "datatype": "FP32", "data": x.ravel().tolist()}
        ]
        body = json.dumps({"inputs": inputs}).encode()
        status, raw = _over(path, "POST", "/v2/models/lenet5/infer", body)
        assert status == 200, raw[:2000]
        answer = json.loads(raw)
        (out,) = answer["outputs"]
        (expected,) = want.values()
        got = np.asarray(out["data"], np.float32).reshape(out["shape"])
        print("serve --uds: max |answer - expected| =", float(np.abs(got - expected).max()))
        assert np.allclose(got, expected, rtol=0.02, atol=0.02 * float(np.abs(expected).max()))
    finally:
        server.send_signal(signal.SIGTERM)
        _, said = server.communicate(timeout=60)
    assert server.returncode == 0, said[-2000:]
    assert not os.path.exists(path)


def test_a_function_lowered_for_several_platforms_runs_this_platform_s_lowering():
    r = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("accelerator_platforms.py"))],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    print(r.stdout)
    assert r.returncode == 0 and r.stdout.rstrip().endswith("ok"), r.stderr[-2000:]

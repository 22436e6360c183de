"""Every command on a symbolic bundle (SPEC.md 2.8): with stored inputs, without them, and with a
dimension as large as `["b", 4000000000]`. Each succeeds or gives a coded error; none prints a
traceback or allocates what a declared size drives."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from helpers import cli

import hlobundle
from hlobundle._write._writer import PackOptions, pack_planned

W = np.linspace(-1, 1, 24, dtype=np.float32).reshape(8, 3)
HUGE = 4_000_000_000


@pytest.fixture(scope="module")
def bundles(tmp_path_factory) -> dict[str, Path]:
    """`stored`: predict(w, x) = tanh(x @ w), x: f32[b, 8] (b = 2 stored); `bare`: the same
    without x's stored value or the expected output; `huge`: the identity of f32[b, 4e9]."""
    root = tmp_path_factory.mktemp("symbolic_commands")
    stored = root / "stored"
    hlobundle.export(
        lambda w, x: jnp.tanh(x @ w),
        W,
        np.ones((2, 8), np.float32),
        out=stored,
        name="predict",
        roles={"w": "parameter"},
        shapes_specs=(None, "b, 8"),
    )
    bare = shutil.copytree(stored, root / "bare")
    m = json.loads((bare / "manifest.json").read_text())
    (f,) = m["functions"]
    f["arguments"][1].pop("value")
    for r in f["results"]:
        r.pop("expected", None)
    m["files"].pop("expected.safetensors")
    (bare / "expected.safetensors").unlink()
    (bare / "manifest.json").write_text(json.dumps(m))
    t = f"tensor<?x{HUGE}xf32>"
    text = f"func.func @main(%x: {t}) -> {t} {{\n  return %x : {t}\n}}\n"
    options = PackOptions(names=["x"], shapes=[["b", HUGE]], result_shapes=[["b", HUGE]])
    huge = pack_planned(text, None, root / "huge", options)
    return {"stored": stored, "bare": bare, "huge": huge}


def _clean(r, code: int = 0) -> None:
    assert r.returncode == code, r.stdout + r.stderr
    assert "Traceback" not in r.stderr, r.stderr


def test_run_on_stored_inputs(bundles):
    r = cli("run", bundles["stored"])
    _clean(r)
    assert "stored inputs" in r.stdout and "(2, 3)" in r.stdout


def test_run_without_stored_inputs_invents_the_smallest_size(bundles):
    r = cli("run", bundles["bare"], "--json")
    _clean(r)
    report = json.loads(r.stdout)
    assert report["inputs"] == "generated and stored"
    assert report["outputs"][0]["shape"] == [1, 3]  # b = 1


def test_run_inputs_binds_a_symbolic_dimension(bundles, tmp_path):
    """`--inputs x=x.npy` for x: f32[b, 8] takes any b (it was refused for every array)."""
    x = np.arange(40, dtype=np.float32).reshape(5, 8) / 40
    np.save(tmp_path / "x.npy", x)
    for bundle in (bundles["stored"], bundles["bare"]):
        out = tmp_path / f"{bundle.name}.npz"
        r = cli("run", bundle, "--inputs", f"x={tmp_path / 'x.npy'}", "--save-outputs", out)
        _clean(r)
        with np.load(out) as saved:
            np.testing.assert_allclose(saved["result"], np.tanh(x @ W), rtol=1e-5, atol=1e-6)


def test_run_inputs_of_a_shape_the_symbols_refuse(bundles, tmp_path):
    np.save(tmp_path / "x.npy", np.ones((5, 7), np.float32))
    r = cli("run", bundles["bare"], "--inputs", f"x={tmp_path / 'x.npy'}")
    _clean(r, 1)
    assert r.stderr.startswith("error [INPUT_INVALID] argument 'x'"), r.stderr
    assert "expected shape [b, 8]" in r.stderr, r.stderr


def test_run_without_inputs_refuses_to_invent_a_huge_dimension(bundles):
    r = cli("run", bundles["huge"])
    _clean(r, 1)
    assert r.stderr.startswith("error [LIMIT_EXCEEDED] the bundle stores no inputs"), r.stderr
    assert "16,000,000,000 bytes" in r.stderr


def test_run_invents_no_size_its_constraints_refuse(bundles, tmp_path):
    out = shutil.copytree(bundles["bare"], tmp_path / "b")
    m = json.loads((out / "manifest.json").read_text())
    m["functions"][0]["constraints"] = ["b >= 4"]
    (out / "manifest.json").write_text(json.dumps(m))
    r = cli("run", out)
    _clean(r, 1)
    assert "inventing them with each free symbol 1 (b)" in r.stderr, r.stderr
    assert "b >= 4 does not hold" in r.stderr


@pytest.mark.parametrize("name", ["stored", "bare", "huge"])
def test_inspect_and_verify(bundles, name):
    r = cli("inspect", bundles[name])
    _clean(r)
    assert "b" in r.stdout
    _clean(cli("verify", bundles[name]))


@pytest.mark.parametrize("name", ["stored", "bare", "huge"])
def test_emit_writes_a_script(bundles, name, tmp_path):
    r = cli("emit", bundles[name], "-o", tmp_path / "run.py")
    _clean(r)
    compile(Path(tmp_path / "run.py").read_text(), "run.py", "exec")  # it is Python


@pytest.mark.parametrize("name", ["stored", "bare", "huge"])
def test_refresh_rewrites_the_artifact(bundles, name, tmp_path):
    out = shutil.copytree(bundles[name], tmp_path / name)
    _clean(cli("refresh", out, "--target-version", "1.13.7"))
    _clean(cli("verify", out))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["stored", "bare", "huge"])
def test_compile_stores_an_executable(bundles, name, tmp_path):
    pytest.importorskip("iree.compiler", reason="the iree extra is not installed")
    out = shutil.copytree(bundles[name], tmp_path / name)
    # For this CPU: predict's is the module the iree backend compiles for itself to run it
    # (test_iree's symbolic tests), so that the run compiles it once, not once per CPU.
    _clean(cli("compile", out, "--cpu", "host"))
    _clean(cli("verify", out))


def test_serve_answers_each_symbolic_bundle(bundles):
    pytest.importorskip("starlette", reason="the serve extra is not installed")
    pytest.importorskip("httpx2", reason="Starlette's test client needs httpx2 (the dev extra)")
    from starlette.testclient import TestClient

    from hlobundle._serve._app import app
    from hlobundle._serve._models import load_models

    models = load_models([bundles["bare"], bundles["huge"]], backend="xla")
    client = TestClient(app(models, max_body=1 << 20))
    x = np.ones((3, 8), np.float32)
    body = {
        "inputs": [
            {"name": "x", "shape": [3, 8], "datatype": "FP32", "data": x.reshape(-1).tolist()}
        ]
    }
    r = client.post("/v2/models/bare.predict/infer", json=body)
    assert r.status_code == 200 and r.json()["outputs"][0]["shape"] == [3, 3], r.text
    meta = client.get("/v2/models/huge.main").json()
    assert meta["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, HUGE]}]
    body = {"inputs": [{"name": "x", "shape": [1, HUGE], "datatype": "FP32", "data": [0.0]}]}
    r = client.post("/v2/models/huge.main/infer", json=body)
    assert r.status_code == 400 and r.json()["code"] == "INPUT_INVALID", r.text

"""Every bundle feature on a bundle from PyTorch (issue 65; docs/torch.md): `serve` answers what
eager torch computes, `sign` with a key verifies and a changed weight is refused, `push` and
`pull` carry it through a registry byte for byte, `compile --target xla-cpu` stores executables
that run it trusted, and the script `emit` writes runs it against eager torch's expected outputs.
One small model, torch_models.py's MLP with a dynamic batch (`Dim("batch")`, a symbolic
dimension), packed once; each test asks another batch size than the example's where it can."""

from __future__ import annotations

import importlib
import importlib.util
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import cli, compiled_during, new_key, rehash

import hlobundle
from hlobundle._run._tolerance import default_tolerance

if importlib.util.find_spec("torch") is None:
    pytest.skip(
        "torch is in the torch extra (its CPU wheel: Python 3.11 here)", allow_module_level=True
    )


def _torch() -> Any:
    return importlib.import_module("torch")


def _eager(module: Any, x: np.ndarray) -> np.ndarray:
    torch = _torch()
    with torch.no_grad():
        return module(torch.from_numpy(x)).numpy()


def _close(got: Any, want: np.ndarray) -> None:
    """SPEC.md 2.15's check, a CPU against a CPU."""
    got = np.asarray(got, np.float32)
    tol = default_tolerance("float32")
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def _rows(n: int) -> np.ndarray:
    return np.random.default_rng(n).standard_normal((n, 6)).astype(np.float32)


@pytest.fixture(scope="module")
def mlp(tmp_path_factory) -> tuple[Any, Path]:
    """The dynamic-batch MLP (its module, for eager torch) and its bundle, written once: tests
    that change a bundle change a copy."""
    torch_models = importlib.import_module("torch_models")
    case = torch_models.cases()["dynamic_batch"]()
    out = tmp_path_factory.mktemp("torch-bundle") / "mlp.hlobundle"
    hlobundle.from_torch(case.module, case.args, out=out, dynamic_shapes=case.dynamic_shapes)
    return case.module, out


def _copy(bundle: Path, where: Path) -> Path:
    copied = where / bundle.name
    shutil.copytree(bundle, copied)
    return copied


# -- serve ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_serve_answers_an_infer_with_eager_torch_s_outputs(mlp):
    pytest.importorskip("starlette", reason="the serve extra is not installed")
    pytest.importorskip("httpx2", reason="Starlette's test client needs httpx2 (the dev extra)")
    from starlette.testclient import TestClient

    from hlobundle._serve._app import app
    from hlobundle._serve._models import load_models

    module, out = mlp
    client = TestClient(app(load_models([out], backend="xla")))
    x = _rows(3)  # the example had 5 rows: the symbolic batch takes 3
    tensor = {"name": "x", "shape": [3, 6], "datatype": "FP32", "data": x.ravel().tolist()}
    r = client.post("/v2/models/mlp/infer", json={"inputs": [tensor]})
    assert r.status_code == 200, r.text
    (result,) = r.json()["outputs"]
    assert (result["name"], result["datatype"], result["shape"]) == ("result", "FP32", [3, 3])
    _close(np.reshape(result["data"], result["shape"]), _eager(module, x))
    meta = client.get("/v2/models/mlp").json()
    assert meta["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 6]}]


# -- sign -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> tuple[Path, Path]:
    pytest.importorskip("model_signing", reason="the sign extra (model-signing) is not installed")
    return new_key(tmp_path_factory.mktemp("torch-keys"))


@pytest.fixture(scope="module")
def signed(mlp, keys, tmp_path_factory) -> Path:
    out = _copy(mlp[1], tmp_path_factory.mktemp("torch-signed"))
    hlobundle.sign(out, keys[0])
    return out


def _change_a_weight(bundle: Path, name: str) -> None:
    """One float of weight `name` changed in its tensor file, and the manifest's size and
    sha256 of that file made to match again: integrity alone is satisfied, the signature not."""
    manifest = json.loads((bundle / "manifest.json").read_text())
    (arg,) = [a for a in manifest["functions"][0]["arguments"] if a["name"] == name]
    path = bundle / arg["value"]["file"]
    data = bytearray(path.read_bytes())
    header = 8 + int.from_bytes(data[:8], "little")
    begin, _ = json.loads(data[8:header])[arg["value"]["key"]]["data_offsets"]
    at = header + begin
    value = np.frombuffer(data[at : at + 4], np.float32)[0]
    data[at : at + 4] = np.float32(value + 1).tobytes()
    path.write_bytes(bytes(data))
    rehash(bundle, arg["value"]["file"])


@pytest.mark.slow
def test_a_signed_bundle_verifies_with_its_key_and_a_changed_weight_is_refused(
    mlp, signed, keys, tmp_path
):
    private, public = keys
    bundle = hlobundle.load(signed, public_key=public)
    assert bundle.signer is not None and bundle.signer.startswith("key ")
    _close(bundle.function()(_rows(2)), _eager(mlp[0], _rows(2)))
    tampered = _copy(signed, tmp_path)
    _change_a_weight(tampered, "fc1_weight")
    assert cli("verify", tampered).returncode == 0  # every listed file matches its hash
    r = cli("verify", tampered, "--public-key", public)
    assert r.returncode == 1
    assert r.stderr.startswith(
        "error [SIGNATURE_INVALID] model.sig verifies, but files changed since signing: "
        "changed: manifest.json, weights.safetensors"
    ), r.stderr
    with pytest.raises(hlobundle.errors.SignatureInvalidError):
        hlobundle.load(tampered, public_key=public)
    r = cli("run", tampered, "--public-key", public)
    assert r.returncode == 1 and r.stdout == ""


# -- push and pull ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    """A registry of this module's own (tests/oci_registry.py, as test_oci.py's)."""
    pytest.importorskip("oras", reason="the oci extra (oras) is not installed")
    from oci_registry import serve

    with serve(tmp_path_factory.mktemp("torch-registry")) as running:
        yield running


@pytest.mark.slow
def test_a_signed_push_pulls_back_byte_for_byte_and_runs(mlp, signed, keys, registry, tmp_path):
    ref = f"oci://{registry.host}/torch/mlp:1"
    pushed = hlobundle.push(signed, ref)
    assert pushed.signature is not None  # the signature travels as a referrer
    pulled = hlobundle.pull(ref, tmp_path / "mlp.hlobundle", public_key=keys[1])
    assert pulled.digest == pushed.digest and pulled.signer is not None
    names = sorted(p.name for p in signed.iterdir())
    assert sorted(p.name for p in (tmp_path / "mlp.hlobundle").iterdir()) == names
    for path in signed.rglob("*"):
        if path.is_file():
            assert (tmp_path / "mlp.hlobundle" / path.relative_to(signed)).read_bytes() == (
                path.read_bytes()
            ), path
    bundle = hlobundle.load(tmp_path / "mlp.hlobundle", public_key=keys[1])
    assert bundle.manifest.provenance.producer == "torch"
    _close(bundle.function()(_rows(4)), _eager(mlp[0], _rows(4)))


# -- compile and emit -------------------------------------------------------------------------


@pytest.mark.slow
def test_compile_for_xla_cpu_stores_executables_that_run_it_without_a_compile(mlp, tmp_path):
    module, out = mlp
    compiled = _copy(out, tmp_path)
    r = cli("compile", compiled, "--target", "xla-cpu", "--sizes", "batch=3,7")
    assert r.returncode == 0, r.stderr
    bundle = hlobundle.load(compiled)
    bundle.verify()
    stored = sorted(e.file for e in bundle.manifest.executables)
    assert stored == [f"forward/compiled/xla-cpu.batch={n}.pjrt" for n in (3, 7)]
    f = bundle.function("xla", trust=hlobundle.Trust.EXECUTABLES)
    got, compiles = compiled_during(lambda: np.asarray(f(_rows(7))))
    assert f.source is not None and "xla-cpu.batch=7.pjrt" in f.source
    assert compiles == 0
    _close(got, _eager(module, _rows(7)))


@pytest.mark.slow
@pytest.mark.subprocess
def test_the_script_emit_writes_runs_the_bundle_against_eager_torch(mlp, tmp_path, script_zygote):
    _, out = mlp
    script = tmp_path / "run.py"
    source = hlobundle.emit_script(out, script, backend="xla", bundle_path="absolute")
    assert "import torch" not in source and "import hlobundle" not in source
    r = script_zygote(script)
    assert r.returncode == 0, r.stderr[-3000:]
    # the stored expected outputs the script checks are eager torch's (from_torch's)
    assert "result: float32['batch', 3], max abs diff from expected" in r.stdout
    assert r.stdout.rstrip().endswith("ok")

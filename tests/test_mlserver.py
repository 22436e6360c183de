"""hlobundle as an MLServer custom runtime (hlobundle.integrations.mlserver), run by the real
`mlserver start` on 127.0.0.1 and queried with tritonclient over REST (JSON and binary) and
gRPC: the results are the in-process call's; batching needs a symbolic batch and trust.

MLServer's pins clash with this project's test environment: `.ci/run` runs this module in an
environment of its own (`.venv-mlserver`); elsewhere it skips unless mlserver is installed."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import LM, ROOT, assert_close, lm_calls

import hlobundle

if importlib.util.find_spec("mlserver") is None:  # not imported: its protos would clash
    pytest.skip("mlserver is not installed (.ci/run: .venv-mlserver)", allow_module_level=True)
httpclient = pytest.importorskip("tritonclient.http", reason="tritonclient[http] is not installed")
grpcclient = pytest.importorskip("tritonclient.grpc", reason="tritonclient[grpc] is not installed")
pytestmark = [pytest.mark.slow, pytest.mark.subprocess]

EXAMPLE = ROOT / "examples" / "lenet5.hlobundle"
RUNTIME = "hlobundle.integrations.mlserver.HloBundleRuntime"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _symbolic(out: Path) -> Path:
    """`y = tanh(x @ w)`, x of shape (b, 8): a symbolic batch MLServer can concatenate along."""
    import jax.numpy as jnp

    w = np.linspace(-1, 1, 24, dtype=np.float32).reshape(8, 3)
    return hlobundle.export(
        lambda w, x: jnp.tanh(x @ w),
        w,
        np.ones((2, 8), np.float32),
        out=out,
        roles={"w": "parameter"},
        shapes_specs=(None, "b, 8"),
    )


def _docs_settings() -> tuple[dict, dict]:
    """docs/deploy.md's model-settings.json and settings.json, as the docs show them."""
    from test_readme import FENCE

    text = (ROOT / "docs" / "deploy.md").read_text().split("### MLServer", 1)[1]
    model, server = [
        json.loads(code) for language, code in FENCE.findall(text) if language == "json"
    ]
    assert model["implementation"] == RUNTIME
    return model, server


def _write_repository(root: Path, models: dict[str, dict]) -> tuple[int, int]:
    """An MLServer model repository at `root`: docs/deploy.md's settings.json on free loopback
    ports, and each model's settings over the docs' model-settings.json."""
    model, server = _docs_settings()
    http, grpc = _free_port(), _free_port()
    (root / "settings.json").write_text(
        json.dumps({**server, "http_port": http, "grpc_port": grpc})
    )
    for name, settings in models.items():
        (root / name).mkdir()
        settings = {**model, "name": name, **settings}
        (root / name / "model-settings.json").write_text(json.dumps(settings))
    return http, grpc


def _mlserver(root: Path) -> tuple[subprocess.Popen, Any]:
    log = open(root / "mlserver.log", "wb")
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "mlserver"), "start", str(root)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    return proc, log


def _stop(proc: subprocess.Popen, log: Any) -> None:
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`mlserver start` of four models: the LeNet, the language model's `prefill` and
    `decode`, and a symbolic function with adaptive batching, trusted."""
    root = tmp_path_factory.mktemp("mlserver")
    symbolic = _symbolic(root / "symbolic.hlobundle")
    batching = {"max_batch_size": 4, "max_batch_time": 0.05}
    (root / "models").mkdir()
    http, grpc = _write_repository(
        root / "models",
        {
            "lenet": {"parameters": {**_docs_settings()[0]["parameters"], "uri": str(EXAMPLE)}},
            **{
                name: {"parameters": {"uri": str(LM), "extra": {"function": name}}}
                for name in ("prefill", "decode")
            },
            "batched": {
                "parameters": {"uri": str(symbolic), "extra": {"trust_batched": True}},
                **batching,
            },
        },
    )
    proc, log = _mlserver(root / "models")
    client = httpclient.InferenceServerClient(f"127.0.0.1:{http}")
    try:
        for _ in range(600):
            try:
                if all(client.is_model_ready(m) for m in ("lenet", "prefill", "decode", "batched")):
                    break
            except Exception:  # not listening yet
                pass
            if proc.poll() is not None:
                pytest.fail((root / "models" / "mlserver.log").read_text()[-3000:])
            time.sleep(0.2)
        else:
            pytest.fail("mlserver did not get ready")
        yield client, grpcclient.InferenceServerClient(f"127.0.0.1:{grpc}"), symbolic, http
    finally:
        _stop(proc, log)


# MLServer has no binary tensor extension over REST: a REST client sends its tensors as JSON
# (binary tensors go over gRPC, raw_input_contents). The header is what docs/deploy.md showed
# before MLServer was seen to read JSON without it (test_rest_tensors_are_json_with_or_without_
# the_header); the calls that pass it show it does no harm.
JSON = {"Content-Type": "application/json"}


def _lenet_call() -> tuple[str, np.ndarray, np.ndarray]:
    b = hlobundle.load(EXAMPLE)
    (name,) = [a.name for a in b.arguments if a.role == "input"]
    return name, b.tensor(name), np.asarray(b.function("xla")(*b.example_args()))


def test_mlserver_answers_tritonclient_over_rest_with_the_in_process_result(server):
    client, *_ = server
    name, x, want = _lenet_call()
    given = httpclient.InferInput(name, list(x.shape), "FP32")
    given.set_data_from_numpy(x, binary_data=False)
    answer = client.infer("lenet", [given], headers=JSON)
    (output,) = answer.get_response()["outputs"]
    assert_close(answer.as_numpy(output["name"]), want)


def test_mlserver_answers_over_grpc_with_binary_tensors(server):
    _, client, *_ = server
    name, x, want = _lenet_call()
    given = grpcclient.InferInput(name, list(x.shape), "FP32")
    given.set_data_from_numpy(x)  # raw_input_contents
    answer = client.infer("lenet", [given])
    (output,) = answer.get_response(as_json=True)["outputs"]
    assert_close(answer.as_numpy(output["name"]), want)


@pytest.mark.parametrize("over", ["rest", "grpc"])
def test_the_language_model_s_prefill_and_decode_give_the_in_process_results(server, over):
    """Each function of the shipped language model is a model of its own: `decode` takes the
    cache `prefill` returned, int32 and float32 tensors of five dimensions."""
    rest, grpc, *_ = server
    module, client = (httpclient, rest) if over == "rest" else (grpcclient, grpc)
    for function, inputs, want in lm_calls():
        given = []
        for name, x in inputs.items():
            given.append(
                module.InferInput(name, list(x.shape), "INT32" if x.dtype == np.int32 else "FP32")
            )
            if over == "rest":
                given[-1].set_data_from_numpy(x, binary_data=False)
            else:
                given[-1].set_data_from_numpy(x)
        answer = client.infer(function, given, **({"headers": JSON} if over == "rest" else {}))
        for name, value in want.items():
            got = answer.as_numpy(name)
            assert got.shape == value.shape and got.dtype == value.dtype, name
            assert_close(got, value)


def test_with_adaptive_batching_each_client_gets_its_own_rows(server):
    from concurrent.futures import ThreadPoolExecutor

    client, _, symbolic, http = server
    fn = hlobundle.load(symbolic).function("xla")
    w = hlobundle.load(symbolic).tensor("w")
    rows = [np.full((k + 1, 8), k / 10, np.float32) for k in range(6)]

    def ask(x: np.ndarray) -> np.ndarray:
        own = httpclient.InferenceServerClient(f"127.0.0.1:{http}")
        given = httpclient.InferInput("x", list(x.shape), "FP32")
        given.set_data_from_numpy(x, binary_data=False)
        return own.infer("batched", [given], headers=JSON).as_numpy("result")

    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(ask, rows))
    for x, got in zip(rows, answers, strict=True):
        assert_close(got, fn(w, x))


def test_batching_without_trust_is_refused_at_load(server, tmp_path):
    """MLServer stops when a model fails to load at start-up: the message says why."""
    _, _, symbolic, _ = server
    root = tmp_path / "models"
    root.mkdir()
    untrusted = {"parameters": {"uri": str(symbolic)}, "max_batch_size": 4}
    _write_repository(root, {"untrusted": untrusted})
    proc, log = _mlserver(root)
    try:
        proc.wait(120)
    finally:
        _stop(proc, log)
    text = (root / "mlserver.log").read_text()
    assert "[INPUT_INVALID]" in text and "trust_batched=True" in text


def test_a_wrong_input_is_a_400_naming_it(server):
    client, *_ = server
    name, *_ = _lenet_call()
    given = httpclient.InferInput(name, [1, 2], "FP32")
    given.set_data_from_numpy(np.zeros((1, 2), np.float32), binary_data=False)
    with pytest.raises(Exception, match=r"\[INPUT_INVALID\] input 'images': shape \[1, 2\]"):
        client.infer("lenet", [given], headers=JSON)


@pytest.mark.parametrize("headers", [None, JSON], ids=["no-header", "json-header"])
def test_rest_tensors_are_json_with_or_without_the_header(server, headers):
    """docs/deploy.md: tritonclient's default binary tensors get a 422, `Content-Type` or not;
    `binary_data=False` is read with or without it, and the results come back as JSON even
    where binary ones are asked for."""
    client, *_ = server
    name, x, want = _lenet_call()
    binary = httpclient.InferInput(name, list(x.shape), "FP32")
    binary.set_data_from_numpy(x)  # tritonclient's default: binary_data=True
    with pytest.raises(Exception, match=r"(?s)\[422\].*JSON decode error"):
        client.infer("lenet", [binary], headers=headers)
    given = httpclient.InferInput(name, list(x.shape), "FP32")
    given.set_data_from_numpy(x, binary_data=False)
    asked = httpclient.InferRequestedOutput("result", binary_data=True)
    answer = client.infer("lenet", [given], outputs=[asked], headers=headers)
    (output,) = answer.get_response()["outputs"]
    assert "data" in output and "binary_data_size" not in output.get("parameters", {})
    assert_close(answer.as_numpy("result"), want)

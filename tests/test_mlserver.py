"""hlobundle as an MLServer custom runtime (hlobundle.integrations.mlserver), run by the real
MLServer on 127.0.0.1 (`python -m hlobundle.integrations.mlserver`, and `mlserver start`) and
queried with tritonclient over REST (JSON and binary) and gRPC: the results are the in-process call's; batching needs rows declared independent and
trust, and checks each request alone before MLServer merges it with others.

MLServer's pins clash with this project's test environment: `.ci/run` runs this module in an
environment of its own (`.venv-mlserver`); elsewhere it skips unless mlserver is installed."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
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
MODELS = ("lenet", "prefill", "decode", "batched", "relative")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _symbolic(out: Path, rows: str | None = "b") -> Path:
    """`y = tanh(x @ w)`, x of shape (b, 8), its rows declared independent along b (`rows`):
    a batch MLServer can concatenate along."""
    import jax.numpy as jnp

    w = np.linspace(-1, 1, 24, dtype=np.float32).reshape(8, 3)
    return hlobundle.export(
        lambda w, x: jnp.tanh(x @ w),
        w,
        np.ones((2, 8), np.float32),
        out=out,
        roles={"w": "parameter"},
        shapes_specs=(None, "b, 8"),
        independent_rows=rows,
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


def _write_repository(root: Path, models: dict[str, dict], **server_extra: Any) -> tuple[int, int]:
    """An MLServer model repository at `root`: docs/deploy.md's settings.json on free loopback
    ports (and `server_extra`), and each model's settings over the docs' model-settings.json."""
    model, server = _docs_settings()
    http, grpc = _free_port(), _free_port()
    (root / "settings.json").write_text(
        json.dumps({**server, **server_extra, "http_port": http, "grpc_port": grpc})
    )
    for name, settings in models.items():
        (root / name).mkdir()
        settings = {**model, "name": name, **settings}
        (root / name / "model-settings.json").write_text(json.dumps(settings))
    return http, grpc


MLSERVER_START = [str(Path(sys.executable).parent / "mlserver"), "start"]
# docs/deploy.md's command: `mlserver start` with `hlobundle serve`'s limits on request bodies.
HLOBUNDLE_START = [sys.executable, "-m", "hlobundle.integrations.mlserver"]


def _mlserver(root: Path, start: list[str] = MLSERVER_START) -> tuple[subprocess.Popen, Any]:
    log = open(root / "mlserver.log", "wb")
    proc = subprocess.Popen(
        [*start, str(root)],
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
    """`python -m hlobundle.integrations.mlserver` of five models: the LeNet (by an absolute
    and by a relative uri), the language model's `prefill` and `decode`, and a symbolic
    function with adaptive batching, trusted."""
    root = tmp_path_factory.mktemp("mlserver")
    symbolic = _symbolic(root / "symbolic.hlobundle")
    batching = {"max_batch_size": 3, "max_batch_time": 0.5}
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
            "relative": {},  # the docs' model-settings.json as written: a relative uri
        },
        parallel_workers=0,  # adaptive batching, as docs/deploy.md says
    )
    shutil.copytree(
        EXAMPLE, root / "models" / "relative" / _docs_settings()[0]["parameters"]["uri"]
    )
    proc, log = _mlserver(root / "models", HLOBUNDLE_START)
    client = httpclient.InferenceServerClient(f"127.0.0.1:{http}")
    try:
        for _ in range(600):
            try:
                if all(client.is_model_ready(m) for m in MODELS):
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


def test_a_relative_uri_is_the_model_settings_folder_s(server):
    """docs/deploy.md's model-settings.json names `lenet5.hlobundle` beside it, as MLServer's
    own runtimes resolve a relative uri; the server runs from another directory."""
    client, *_ = server
    name, x, want = _lenet_call()
    given = httpclient.InferInput(name, list(x.shape), "FP32")
    given.set_data_from_numpy(x, binary_data=False)
    answer = client.infer("relative", [given], headers=JSON)
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


def _refused_at_load(root: Path, settings: dict, **server_extra: Any) -> str:
    """MLServer stops when a batching model fails to load at start-up: its log, which says why
    (`parallel_workers` 0 unless `server_extra` says otherwise)."""
    root.mkdir()
    batching = {**settings, "max_batch_size": 4, "max_batch_time": 0.05}
    _write_repository(root, {"refused": batching}, **{"parallel_workers": 0, **server_extra})
    proc, log = _mlserver(root)
    try:
        proc.wait(120)
    finally:
        _stop(proc, log)
    return (root / "mlserver.log").read_text()


def test_batching_without_trust_is_refused_at_load(server, tmp_path):
    _, _, symbolic, _ = server
    text = _refused_at_load(tmp_path / "models", {"parameters": {"uri": str(symbolic)}})
    assert "[INPUT_INVALID]" in text and "trust_batched=True" in text


def test_batching_rows_not_declared_independent_is_refused_at_load_trusted(tmp_path):
    """A function whose rows only lead with a symbol may mix them (a mean over the batch):
    trusted, it is still not batched, and the model does not load."""
    bare = _symbolic(tmp_path / "bare.hlobundle", rows=None)
    settings = {"parameters": {"uri": str(bare), "extra": {"trust_batched": True}}}
    text = _refused_at_load(tmp_path / "models", settings)
    assert "[INPUT_INVALID]" in text and "does not declare its rows independent" in text


def _post(http: int, body: dict | bytes, model: str = "batched") -> tuple[int, dict]:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        f"http://127.0.0.1:{http}/v2/models/{model}/infer",
        data=body if isinstance(body, bytes) else json.dumps(body).encode(),
        headers=JSON,
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_under_adaptive_batching_a_client_whose_shapes_lie_gets_no_one_s_rows(server):
    """MLServer merges requests by their declared shapes and splits the answer by them: the
    attacker's first request declares 2 rows and sends 1, its second declares 0 and sends 1,
    around the victim's honest row; merged, the attacker would get the victim's row and the
    victim the attacker's. Each request is checked alone first: the lies are refused, and the
    victim gets its own answer."""
    from concurrent.futures import ThreadPoolExecutor

    client, _, symbolic, http = server
    b = hlobundle.load(symbolic)
    victim, mine = np.full((1, 8), 0.7, np.float32), np.full((1, 8), -0.2, np.float32)

    def body(x: np.ndarray, shape: list[int]) -> dict:
        return {
            "inputs": [
                {"name": "x", "shape": shape, "datatype": "FP32", "data": x.ravel().tolist()}
            ]
        }

    asks = [body(mine, [2, 8]), body(victim, [1, 8]), body(mine, [0, 8])]
    with ThreadPoolExecutor(3) as pool:  # in this order, within one batch (0.5 s, 3 requests)
        futures = []
        for ask in asks:
            futures.append(pool.submit(_post, http, ask))
            time.sleep(0.05)
        (s1, a1), (s2, a2), (s3, a3) = [f.result() for f in futures]
    assert (s1, s3) == (400, 400), (a1, a3)
    assert "[INPUT_INVALID] input 'x': 8 values for shape [2, 8]" in a1["error"], a1
    assert s2 == 200, a2
    (out,) = a2["outputs"]
    want = np.asarray(b.function("xla")(b.tensor("w"), victim))
    assert out["shape"] == [1, 3]
    assert_close(np.asarray(out["data"], np.float32).reshape(1, 3), want)


@pytest.mark.parametrize("model", ["lenet", "batched"])
@pytest.mark.parametrize("datatype", ["INT32", "UINT8"])
def test_a_value_its_declared_datatype_cannot_hold_is_a_400(server, model, datatype):
    """Attack: an integer out of the declared datatype's range (2**40 as INT32, -1 as UINT8):
    MLServer's NumpyCodec raised OverflowError, which the runtime let through (a 500), alone
    and in front of the batcher. It is a 400 naming the input."""
    *_, http = server
    name = _lenet_call()[0] if model == "lenet" else "x"
    shape = [1, 1, 28, 28] if model == "lenet" else [1, 8]
    data = [2**40 if datatype == "INT32" else -1] + [0] * (int(np.prod(shape)) - 1)
    body = {"inputs": [{"name": name, "shape": shape, "datatype": datatype, "data": data}]}
    status, answer = _post(http, body, model=model)
    assert status == 400, answer
    assert "[INPUT_INVALID]" in answer["error"] and f"input {name!r}" in answer["error"], answer


@pytest.mark.parametrize("model", ["lenet", "batched"])
def test_an_fp32_value_beyond_its_range_is_a_400_as_serve_answers(server, model):
    """Attack: 1e300 as FP32 became inf in MLServer's NumpyCodec and the model answered 200,
    where `hlobundle serve` answers 400: the runtime decodes with serve's own decoder
    (`_serve/_protocol.read_inputs`, through `integrations._models.decoded_inputs`), alone
    and in front of the batcher."""
    *_, http = server
    name, x, _ = _lenet_call() if model == "lenet" else ("x", np.ones((1, 8), np.float32), None)
    data = [1e300] + x.ravel().tolist()[1:]
    body = {"inputs": [{"name": name, "shape": list(x.shape), "datatype": "FP32", "data": data}]}
    status, answer = _post(http, body, model=model)
    assert status == 400, answer
    assert f"[INPUT_INVALID] input {name!r}: a value does not fit FP32" in answer["error"], answer


def test_mlserver_s_defaults_serve_and_batching_in_its_worker_says_what_to_set(tmp_path):
    """docs/deploy.md's settings.json as written (MLServer's default worker process) serves
    the docs' model; a batching model in that worker, where MLServer merges requests before
    any runtime code sees them, does not load and says what to set."""
    root = tmp_path / "models"
    root.mkdir()
    http, _ = _write_repository(root, {"lenet": {}})
    shutil.copytree(EXAMPLE, root / "lenet" / _docs_settings()[0]["parameters"]["uri"])
    proc, log = _mlserver(root)
    try:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{http}")
        for _ in range(600):
            try:
                if client.is_model_ready("lenet"):
                    break
            except Exception:  # not listening yet
                pass
            assert proc.poll() is None, (root / "mlserver.log").read_text()[-3000:]
            time.sleep(0.2)
        name, x, want = _lenet_call()
        given = httpclient.InferInput(name, list(x.shape), "FP32")
        given.set_data_from_numpy(x, binary_data=False)
        answer = client.infer("lenet", [given], headers=JSON)
        assert_close(answer.as_numpy(answer.get_response()["outputs"][0]["name"]), want)
    finally:
        _stop(proc, log)
    bundle = _symbolic(tmp_path / "s.hlobundle")
    settings = {"parameters": {"uri": str(bundle), "extra": {"trust_batched": True}}}
    text = _refused_at_load(tmp_path / "pooled", settings, parallel_workers=1)
    assert 'set "parallel_workers": 0' in text


def test_a_body_over_the_model_s_bound_is_refused_before_mlserver_parses_it(server):
    """The LeNet takes 3,136 values: its bound is 64 KiB + 64 bytes a value, as `serve`'s."""
    *_, http = server
    limit = (64 << 10) + 64 * 3136
    status, body = _post(http, b" " * (limit + 1), model="lenet")
    assert status == 413 and body.get("code") == "LIMIT_EXCEEDED", (status, body)
    assert f"over the limit of {limit} bytes" in body["error"]


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


# MLServer's batcher, in a process of its own (its protos clash with tritonclient's, imported
# here): the runtime loaded with adaptive batching, as MLServer loads it; prints why not.
_LOAD_BATCHING = """
import asyncio, sys
from mlserver.batching import load_batching
from mlserver.errors import MLServerError
from mlserver.settings import ModelParameters, ModelSettings
from hlobundle.integrations.mlserver import HloBundleRuntime
settings = ModelSettings(
    name="m",
    implementation=HloBundleRuntime,
    parameters=ModelParameters(uri=sys.argv[1], extra={"trust_batched": True}),
    max_batch_size=3,
    max_batch_time=0.5,
)
async def loaded():
    model = HloBundleRuntime(settings)
    await load_batching(model)
    await model.load()
try:
    asyncio.run(loaded())
except MLServerError as e:
    print("refused:", e)
else:
    print("loaded")
"""


def test_batching_a_function_with_another_symbolic_dimension_is_refused_at_load(tmp_path):
    """Attack: MLServer merges requests under the first one's shape, its batch axis the sum of
    theirs, and splits the answer by those sizes. For `y = 2 x` with x of shape (b, n), rows
    independent along b, three clients of one row each, n = 3, 2 and 4 (9 values: three rows
    of 3), each checked alone: the second got back [4, 4, 6], 6 being twice the third's first
    value. A batching model whose inputs have a symbolic dimension besides axis 0 does not
    load."""
    bundle = hlobundle.export(
        lambda x: x * 2,
        np.ones((2, 3), np.float32),
        out=tmp_path / "wide.hlobundle",
        shapes_specs=("b, n",),
        independent_rows="b",
    )
    r = subprocess.run(
        [sys.executable, "-c", _LOAD_BATCHING, str(bundle)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.stdout.startswith("refused:") and "[INPUT_INVALID]" in r.stdout, (
        r.stdout + r.stderr[-2000:]
    )
    assert "input 'x' has symbol n in dimension 1" in r.stdout, r.stdout


_LOAD = """
import asyncio, sys
from mlserver.errors import MLServerError
from mlserver.settings import ModelParameters, ModelSettings
from hlobundle.integrations.mlserver import HloBundleRuntime
settings = ModelSettings(name="m", implementation=HloBundleRuntime, parameters=ModelParameters(uri=sys.argv[1]))
try:
    asyncio.run(HloBundleRuntime(settings).load())
except MLServerError as e:
    print("refused:", e)
else:
    print("loaded")
"""


def test_a_model_whose_results_json_cannot_carry_is_refused_at_load(tmp_path):
    """MLServer answers in JSON, which has no bfloat16: such a model loaded, and every request
    then got MLServer's bare 500. It is refused at load, saying what to do."""
    import jax.numpy as jnp

    bundle = hlobundle.export(
        lambda x: x.astype(jnp.bfloat16), np.ones((2,), np.float32), out=tmp_path / "bf.hlobundle"
    )
    r = subprocess.run(
        [sys.executable, "-c", _LOAD, str(bundle)], capture_output=True, text=True, timeout=300
    )
    assert r.stdout.startswith("refused:") and "[INPUT_INVALID]" in r.stdout, (
        r.stdout + r.stderr[-2000:]
    )
    assert "no datatype for results ['result (bfloat16)']" in r.stdout, r.stdout
    assert "hlobundle serve" in r.stdout

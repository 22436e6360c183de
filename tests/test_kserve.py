"""hlobundle as a KServe custom predictor (hlobundle.integrations.kserve), started as KServe's
model server starts (`python -m hlobundle.integrations.kserve`) and queried with tritonclient
over REST (JSON and binary) and gRPC: the results are the in-process call's.

KServe 0.21 binds every interface and offers no option to bind one, so this module runs only in
a network namespace whose one interface is loopback (`.ci/run`: `unshare --net`, in an
environment of its own, `.venv-kserve`, as KServe's pins clash with this project's tests');
anywhere else it skips."""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import LM, ROOT, assert_close, lm_calls

import hlobundle

if importlib.util.find_spec("kserve") is None:
    pytest.skip("kserve is not installed (.ci/run: .venv-kserve)", allow_module_level=True)
if [name for _, name in socket.if_nameindex()] != ["lo"]:  # this network namespace's
    pytest.skip(
        "KServe binds every interface: run this module in a network namespace of loopback "
        "alone (unshare --net; .ci/run does)",
        allow_module_level=True,
    )
httpclient = pytest.importorskip("tritonclient.http", reason="tritonclient[http] is not installed")
grpcclient = pytest.importorskip("tritonclient.grpc", reason="tritonclient[grpc] is not installed")
pytestmark = [pytest.mark.slow, pytest.mark.subprocess]

EXAMPLE = ROOT / "examples" / "lenet5.hlobundle"
# KServe parses a REST body as JSON only with this header, which tritonclient does not send.
JSON = {"Content-Type": "application/json"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _KServe:
    """`python -m hlobundle.integrations.kserve` of one function, on free loopback ports."""

    def __init__(self, where: Path, name: str, bundle: Path, function: str | None = None) -> None:
        self.name, self.http, self.grpc = name, _free_port(), _free_port()
        self.log = open(where / f"{name}.log", "wb")
        command = [sys.executable, "-m", "hlobundle.integrations.kserve", "--model_name", name]
        command += ["--bundle", str(bundle), "--http_port", str(self.http)]
        command += ["--grpc_port", str(self.grpc)] + (["--function", function] if function else [])
        self.proc = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT)

    def ready(self) -> tuple:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{self.http}")
        for _ in range(600):
            try:
                if client.is_model_ready(self.name):
                    return client, grpcclient.InferenceServerClient(f"127.0.0.1:{self.grpc}")
            except Exception:  # not listening yet
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        pytest.fail(Path(self.log.name).read_text()[-3000:])

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    started = _KServe(tmp_path_factory.mktemp("kserve"), "lenet", EXAMPLE)
    try:
        yield (*started.ready(), started.http)
    finally:
        started.stop()


def _lenet_call() -> tuple[str, np.ndarray, np.ndarray]:
    b = hlobundle.load(EXAMPLE)
    (name,) = [a.name for a in b.arguments if a.role == "input"]
    return name, b.tensor(name), np.asarray(b.function("xla")(*b.example_args()))


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_kserve_answers_tritonclient_over_rest_with_the_in_process_result(server, binary):
    client, *_ = server
    name, x, want = _lenet_call()
    given = httpclient.InferInput(name, list(x.shape), "FP32")
    given.set_data_from_numpy(x, binary_data=binary)
    answer = client.infer("lenet", [given], headers=None if binary else JSON)
    (output,) = answer.get_response()["outputs"]
    assert_close(answer.as_numpy(output["name"]), want)


def test_kserve_answers_over_grpc(server):
    _, client, _ = server
    name, x, want = _lenet_call()
    given = grpcclient.InferInput(name, list(x.shape), "FP32")
    given.set_data_from_numpy(x)
    answer = client.infer("lenet", [given])
    (output,) = answer.get_response(as_json=True)["outputs"]
    assert_close(answer.as_numpy(output["name"]), want)


def test_a_wrong_input_is_refused_naming_it(server):
    client, *_ = server
    name, *_ = _lenet_call()
    given = httpclient.InferInput(name, [1, 2], "FP32")
    given.set_data_from_numpy(np.zeros((1, 2), np.float32), binary_data=False)
    with pytest.raises(Exception, match=r"\[INPUT_INVALID\] input 'images': shape \[1, 2\]"):
        client.infer("lenet", [given], headers=JSON)


def _post(http: int, body: bytes) -> tuple[int, dict]:
    import json
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        f"http://127.0.0.1:{http}/v2/models/lenet/infer", data=body, headers=JSON
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _lenet_body(shape: list[int], x: np.ndarray) -> bytes:
    import json

    name, *_ = _lenet_call()
    inputs = [{"name": name, "shape": shape, "datatype": "FP32", "data": x.ravel().tolist()}]
    return json.dumps({"inputs": inputs}).encode()


@pytest.mark.parametrize("shape", [[-1, 1, 28, 28], [8, 1, 28, 28]], ids=["minus_one", "more"])
def test_a_shape_that_is_not_its_data_s_is_refused(server, shape):
    """KServe reshapes the data to the declared shape: -1 would take any count, a larger
    shape fails in numpy. Each is a 400 naming the input, never an answer or a 500."""
    *_, http = server
    name, x, _ = _lenet_call()
    status, body = _post(http, _lenet_body(shape, x))
    assert status == 400, body
    assert "[INPUT_INVALID]" in body["error"] and f"input {name!r}" in body["error"]


@pytest.mark.parametrize("datatype", ["INT32", "UINT8"])
def test_a_value_its_declared_datatype_cannot_hold_is_a_400(server, datatype):
    """Attack: an integer out of the declared datatype's range (2**40 as INT32, -1 as UINT8):
    KServe's numpy conversion raised OverflowError, which the adapter let through (a 500 and a
    traceback in the log). It is a 400 naming the input."""
    import json

    *_, http = server
    name, *_ = _lenet_call()
    data = [2**40 if datatype == "INT32" else -1] + [0] * 783
    inputs = [{"name": name, "shape": [1, 1, 28, 28], "datatype": datatype, "data": data}]
    status, body = _post(http, json.dumps({"inputs": inputs}).encode())
    assert status == 400, body
    assert "[INPUT_INVALID]" in body["error"] and f"input {name!r}" in body["error"], body


@pytest.mark.parametrize("value", [1e300, -1e39])
def test_an_fp32_value_beyond_its_range_is_a_400_as_serve_answers(server, value):
    """Attack: 1e300 as FP32 became inf in KServe's numpy conversion and the model answered
    200, where `hlobundle serve` answers 400: the adapter decodes with serve's own decoder
    (`_serve/_protocol.read_inputs`, through `integrations._models.decoded_inputs`)."""
    import json

    *_, http = server
    name, x, _ = _lenet_call()
    data = [value] + x.ravel().tolist()[1:]
    inputs = [{"name": name, "shape": list(x.shape), "datatype": "FP32", "data": data}]
    status, body = _post(http, json.dumps({"inputs": inputs}).encode())
    assert status == 400, body
    assert f"[INPUT_INVALID] input {name!r}: a value does not fit FP32" in body["error"], body


def test_a_body_over_the_model_s_bound_is_refused_before_kserve_parses_it(server):
    """The LeNet takes 3,136 values: its bound is 64 KiB + 64 bytes a value, as `serve`'s."""
    *_, http = server
    limit = (64 << 10) + 64 * 3136
    status, body = _post(http, b" " * (limit + 1))
    assert (status, body["code"]) == (413, "LIMIT_EXCEEDED"), body
    assert f"over the limit of {limit} bytes" in body["error"]


@pytest.fixture(scope="module")
def lm_servers(tmp_path_factory):
    """Each function of the shipped language model served by a KServe server of its own, as
    one InferenceService each: the clients of `prefill`'s, then of `decode`'s."""
    where = tmp_path_factory.mktemp("kserve-lm")
    servers = [_KServe(where, function, LM, function) for function in ("prefill", "decode")]
    try:
        yield [s.ready() for s in servers]
    finally:
        for s in servers:
            s.stop()


@pytest.mark.parametrize("over", ["json", "binary", "grpc"])
def test_the_language_model_s_prefill_and_decode_give_the_in_process_results(lm_servers, over):
    """`decode` takes the cache `prefill` returned: int32 and float32 tensors of five
    dimensions, over JSON, binary tensors and gRPC."""
    for (rest, grpc), (function, inputs, want) in zip(lm_servers, lm_calls(), strict=True):
        module = grpcclient if over == "grpc" else httpclient
        given = []
        for name, x in inputs.items():
            datatype = "INT32" if x.dtype == np.int32 else "FP32"
            given.append(module.InferInput(name, list(x.shape), datatype))
            if over == "grpc":
                given[-1].set_data_from_numpy(x)
            else:
                given[-1].set_data_from_numpy(x, binary_data=over == "binary")
        if over == "grpc":
            answer = grpc.infer(function, given)
        else:
            answer = rest.infer(function, given, headers=None if over == "binary" else JSON)
        for name, value in want.items():
            got = answer.as_numpy(name)
            assert got.shape == value.shape and got.dtype == value.dtype, name
            assert_close(got, value)


# In a process of its own: kserve's protos and tritonclient's share names in one registry.
# Each document is walked along the SDK's types (their `openapi_types` and `attribute_map`,
# KServe's own and the Kubernetes ones they name): every key must be a field of its type.
CRD_CHECK = """
import copy, json, re, sys
import yaml
import kserve.models
import kubernetes.client.models

def model(name):
    return getattr(kserve.models, name, None) or getattr(kubernetes.client.models, name, None)

def check(value, typ, where):
    listed = re.fullmatch(r"[Ll]ist\\[(.+)\\]", typ)
    if listed:
        assert isinstance(value, list), where
        for i, v in enumerate(value):
            check(v, listed[1], f"{where}[{i}]")
        return
    mapped = re.fullmatch(r"dict\\(str, ?(.+)\\)|Dict\\[str, ?(.+)\\]", typ)
    if mapped:
        assert isinstance(value, dict), where
        for k, v in value.items():
            check(v, mapped[1] or mapped[2], f"{where}.{k}")
        return
    cls = model(typ)
    if cls is None:  # str, int, bool, object
        return
    assert isinstance(value, dict), f"{where}: {typ} is an object"
    fields = {j: a for a, j in cls.attribute_map.items()}
    for key, v in value.items():
        assert key in fields, f"{where}.{key} is not a field of {typ}"
        check(v, cls.openapi_types[fields[key]], f"{where}.{key}")

types = {"ServingRuntime": "V1alpha1ServingRuntime", "InferenceService": "V1beta1InferenceService"}
documents = list(yaml.safe_load_all(sys.stdin.read()))
for document in documents:
    check(document, types[document["kind"]], document["kind"])
    print("valid")
wrong = copy.deepcopy(documents[1])
wrong["spec"]["predictor"]["model"]["storageURI"] = "oci://x/y:z"  # a misspelled field
try:
    check(wrong, types["InferenceService"], "InferenceService")
except AssertionError as e:
    print("refused:", e)
"""


def test_the_docs_servingruntime_and_inferenceservice_are_valid_crds():
    """Every field of docs/deploy.md's two documents is one KServe's SDK types know: each,
    deserialized into its type and serialized again, is the same document."""
    import yaml
    from test_readme import FENCE

    text = (ROOT / "docs" / "deploy.md").read_text().split("### KServe\n", 1)[1]
    (block,) = [c for language, c in FENCE.findall(text) if language == "yaml"]
    documents = list(yaml.safe_load_all(block))
    assert [d["kind"] for d in documents] == ["ServingRuntime", "InferenceService"]
    checked = subprocess.run(
        [sys.executable, "-c", CRD_CHECK], input=block, capture_output=True, text=True
    )
    lines = checked.stdout.splitlines()
    assert lines[:2] == ["valid", "valid"], checked.stdout + checked.stderr[-2000:]
    refused = "InferenceService.spec.predictor.model.storageURI is not a field of V1beta1ModelSpec"
    assert lines[2] == f"refused: {refused}"  # the walk refuses a field the types lack
    runtime, service = documents
    command = runtime["spec"]["containers"][0]["command"]
    assert command[-1] == "hlobundle.integrations.kserve"  # the module the tests start
    # an image volume of what `push --image` writes (test_image.py), not the ModelPack artifact
    assert service["spec"]["predictor"]["model"]["storageUri"].startswith("oci+native://")

"""`hlobundle serve`: bundles behind the Open Inference Protocol (KServe v2 REST), with JSON and
binary tensor data; every bad request is a 4xx with a message naming the input, and the server
keeps serving. In process (Starlette's test client) except where the process is what is tested."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request

import helpers
import numpy as np
import pytest
from helpers import ROOT, new_key

import hlobundle

pytest.importorskip("starlette", reason="the serve extra is not installed")
pytest.importorskip("httpx2", reason="Starlette's test client needs httpx2 (the dev extra)")

from starlette.testclient import TestClient  # noqa: E402

from hlobundle._serve._app import app  # noqa: E402
from hlobundle._serve._models import Served, load_models  # noqa: E402

EXAMPLE = ROOT / "examples" / "lenet5.hlobundle"
INFER = "/v2/models/lenet5/infer"


@pytest.fixture(scope="module")
def models():
    return load_models([EXAMPLE], backend="xla")


# The server of one process, and the same through a front door of `serve --frontends` (its
# checks in a process apart from the model's: tests/frontdoor_pair.py).
SERVERS = ["one process", "a front door"]


@pytest.fixture(scope="module", params=SERVERS)
def client(request, models):
    if request.param == "one process":
        yield TestClient(app(models, max_body=1 << 20))
        return
    from frontdoor_pair import front_door

    with front_door(models, max_body=1 << 20) as door, TestClient(door) as served:
        yield served


@pytest.fixture(scope="module")
def images():
    return np.asarray(hlobundle.load(EXAMPLE).tensor("images"))


def _want(images):
    bundle = hlobundle.load(EXAMPLE)
    fn = bundle.function("xla")
    return np.asarray(
        fn(*[bundle.tensor(a.name) if a.name != "images" else images for a in bundle.arguments])
    )


def _json_request(images):
    return {
        "id": "r1",
        "inputs": [
            {
                "name": "images",
                "shape": list(images.shape),
                "datatype": "FP32",
                "data": images.reshape(-1).tolist(),
            }
        ],
    }


def test_health_and_metadata(client, models):
    assert client.get("/v2/health/live").status_code == 200
    assert client.get("/v2/health/ready").status_code == 200
    assert client.get("/v2").json()["extensions"] == ["binary_tensor_data"]
    meta = client.get("/v2/models/lenet5").json()
    version = models["lenet5"].version
    assert meta["versions"] == [version] and meta["platform"] == "hlobundle"
    assert meta["inputs"] == [{"name": "images", "datatype": "FP32", "shape": [4, 1, 28, 28]}]
    assert meta["outputs"] == [{"name": "result", "datatype": "FP32", "shape": [4, 10]}]
    assert client.get(f"/v2/models/lenet5/versions/{version}/ready").json()["ready"] is True
    assert client.get("/v2/models/lenet5.hlobundle").status_code == 404  # the stem is "lenet5"


def test_json_inference_matches_the_in_process_function(client, images):
    r = client.post(INFER, json=_json_request(images))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["id"] == "r1" and body["model_name"] == "lenet5"
    (out,) = body["outputs"]
    assert out["name"] == "result" and out["shape"] == [4, 10] and out["datatype"] == "FP32"
    np.testing.assert_array_equal(np.float32(out["data"]).reshape(4, 10), _want(images))


def test_binary_inference_both_ways(client, images):
    x = (images * 0.5).astype(np.float32)
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "images",
                    "shape": list(x.shape),
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": x.nbytes},
                }
            ],
            "outputs": [{"name": "result", "parameters": {"binary_data": True}}],
        }
    ).encode()
    r = client.post(
        INFER,
        content=header + x.tobytes(),
        headers={"Inference-Header-Content-Length": str(len(header))},
    )
    assert r.status_code == 200, r.text
    n = int(r.headers["inference-header-content-length"])
    meta = json.loads(r.content[:n])
    (out,) = meta["outputs"]
    assert out["parameters"]["binary_data_size"] == 4 * 10 * 4
    got = np.frombuffer(r.content[n:], np.float32).reshape(4, 10)
    np.testing.assert_array_equal(got, _want(x))


def test_a_binary_header_is_parsed_once_and_each_request_gets_its_own_data(client, images):
    from hlobundle._serve import _protocol

    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "images",
                    "shape": list(images.shape),
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": images.nbytes},
                }
            ],
            "outputs": [{"name": "result", "parameters": {"binary_data": True}}],
        }
    ).encode()
    parsed = _protocol._read_header.cache_info()
    for scale in (0.25, 2.0):  # the same header text, other data
        x = (images * scale).astype(np.float32)
        r = client.post(
            INFER,
            content=header + x.tobytes(),
            headers={"Inference-Header-Content-Length": str(len(header))},
        )
        assert r.status_code == 200, r.text
        got = np.frombuffer(r.content[int(r.headers["inference-header-content-length"]) :], "<f4")
        np.testing.assert_array_equal(got.reshape(4, 10), _want(x))
    now = _protocol._read_header.cache_info()
    # parsed at most once: the second request's header is a kept one (`_repeated`)
    assert now.hits + now.misses <= parsed.hits + parsed.misses + 1


def test_inference_health_and_metadata_are_answered_without_starlettes_routing(
    client, images, monkeypatch
):
    from starlette.routing import Router

    assert client.get(INFER).status_code == 405  # through Starlette: inference is a POST
    assert client.post("/v2/health/live").status_code == 405  # and health a GET

    def unreachable(*args):
        raise AssertionError("routed through Starlette")

    monkeypatch.setattr(Router, "__call__", unreachable)
    version = hlobundle.load(EXAMPLE).manifest_sha256[:12]
    for path in (INFER, f"/v2/models/lenet5/versions/{version}/infer"):
        assert client.post(path, json=_json_request(images)).status_code == 200
    for path in ("/v2/health/live", "/v2/health/ready", "/v2", "/v2/models/lenet5/ready"):
        assert client.get(path).status_code == 200
    assert client.head(f"/v2/models/lenet5/versions/{version}").content == b""
    for path in ("/metrics", "/v2/models/lenet5/versions/0/ready", "/v2/nothing"):
        with pytest.raises(AssertionError, match="routed through Starlette"):
            client.get(path)


def test_the_prepared_answers_are_the_routes_answers(models):
    # Each answer made once (`App.prepared`) is, byte for byte and header for header, what
    # its Starlette route answers.
    asgi = app(models)
    routed = TestClient(asgi.routed)
    assert set(asgi.prepared) >= {"/v2/health/live", "/v2/health/ready", "/v2"}
    assert len(asgi.prepared) == 3 + 4 * len(models)
    for path in asgi.prepared:
        bare, starlette = TestClient(asgi).get(path), routed.get(path)
        assert (bare.status_code, bare.content) == (starlette.status_code, starlette.content)
        assert bare.headers == starlette.headers, path


def _error(client, body=None, *, status, message, **kwargs):
    r = client.post(INFER, **({"json": body} if body is not None else kwargs))
    assert r.status_code == status, r.text
    assert message in r.json()["error"], r.json()


def test_bad_requests_are_clear_4xx_and_the_server_keeps_serving(client, images):
    good = _json_request(images)
    inp = good["inputs"][0]
    _error(
        client,
        {**good, "inputs": [{**inp, "shape": [1, 1, 28, 28]}]},
        status=400,
        message="input 'images': shape [1, 1, 28, 28], expected [4, 1, 28, 28]",
    )
    _error(
        client,
        {**good, "inputs": [{**inp, "datatype": "FP64"}]},
        status=400,
        message="input 'images': datatype 'FP64', expected 'FP32'",
    )
    _error(client, {"inputs": []}, status=400, message="missing input(s) ['images']")
    _error(
        client,
        {"inputs": [{**inp, "name": "params_conv1_w"}]},
        status=400,
        message="unknown input 'params_conv1_w'",
    )  # a stored parameter is not an input
    _error(
        client,
        {**good, "inputs": [{**inp, "data": inp["data"][:-1]}]},
        status=400,
        message="input 'images': 3135 values for shape [4, 1, 28, 28]",
    )
    _error(
        client,
        {**good, "inputs": [{**inp, "data": ["x"] * 3136}]},
        status=400,
        message="input 'images': values must be FP32 numbers",
    )
    _error(
        client,
        {**good, "outputs": [{"name": "nope"}]},
        status=400,
        message="unknown output(s) ['nope']",
    )
    _error(client, status=400, message="the request is not JSON", content=b"{not json")
    _error(client, status=400, message="nested", content=b"[" * 5000 + b"]" * 5000)
    _error(client, status=413, message="over the limit of 266240 bytes", content=b" " * (2 << 20))
    header = json.dumps(
        {"inputs": [{**inp, "data": None, "parameters": {"binary_data_size": 12544}}]}
    ).encode()
    _error(
        client,
        status=400,
        message="the body holds 100 more bytes, not 12544",
        content=header + b"\0" * 100,
        headers={"Inference-Header-Content-Length": str(len(header))},
    )
    _error(
        client,
        status=400,
        message="is outside the body's",
        content=b"{}",
        headers={"Inference-Header-Content-Length": "99"},
    )
    _error(
        client,
        status=400,
        message="inference-header-content-length is not a number: '2x'",
        content=b"{}",
        headers={"Inference-Header-Content-Length": "2x"},
    )
    r = client.post("/v2/models/nope/infer", json=good)
    assert r.status_code == 404 and "no model 'nope'" in r.json()["error"]
    assert client.post(INFER, json=good).status_code == 200  # still serving
    metrics = client.get("/metrics").text
    assert 'hlobundle_requests_total{model="lenet5",status="400"}' in metrics
    assert 'hlobundle_requests_total{model="lenet5",status="200"}' in metrics


def test_a_boolean_dimension_is_refused_not_read_as_1(client, images):
    """JSON's `true` is no integer here, though Python's True equals 1: [4, true, 28, 28] is not
    lenet5's [4, 1, 28, 28]."""
    inp = _json_request(images)["inputs"][0]
    r = client.post(INFER, json={"inputs": [{**inp, "shape": [4, True, 28, 28]}]})
    assert r.status_code == 400 and r.json()["code"] == "INPUT_INVALID", r.text
    assert "input 'images': shape must be a list of integers" in r.json()["error"], r.json()


def test_a_failing_model_is_a_500_and_the_server_keeps_serving(models, images):
    served = models["lenet5"]
    broken = TestClient(
        app(
            {
                "lenet5": _Failing(
                    **{f.name: getattr(served, f.name) for f in dataclasses.fields(served)}
                )
            }
        )
    )
    r = broken.post(INFER, json=_json_request(images))
    assert r.status_code == 500 and "model 'lenet5' failed: RuntimeError: boom" in r.json()["error"]
    assert broken.get("/v2/health/live").status_code == 200


class _Failing(Served):
    """A served model whose call fails (as a model's runtime error would)."""

    def __call__(self, given):
        raise RuntimeError("boom")


def test_unservable_bundles_are_refused_at_start(tmp_path):
    x = np.zeros((2,), np.complex64)
    from helpers import identity_module

    out = hlobundle.pack(identity_module(x), [x], tmp_path / "c")
    with pytest.raises(hlobundle.InputError, match="no datatype for arg0 \\(complex64\\)"):
        load_models([out])


def _wait_ready(base: str, tries: int = 6000) -> None:
    """Until the server at `base` says it is ready (each try up to 0.01 s apart)."""
    for _ in range(tries):
        try:
            with urllib.request.urlopen(f"{base}/v2/health/ready", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.01)


@pytest.mark.slow
@pytest.mark.subprocess
def test_serve_starts_compiled_answers_and_drains_on_sigterm(tmp_path, images):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = helpers.CLI_ZYGOTE.start(  # a fork of the CLI zygote, a process of its own
        "serve",
        EXAMPLE,
        "--port",
        port,
        "--backend",
        "xla",
        "--access-log",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_ready(base)
        request = urllib.request.Request(
            f"{base}{INFER}",
            data=json.dumps(_json_request(images)).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as r:
            out = json.loads(r.read())["outputs"][0]
        np.testing.assert_array_equal(np.float32(out["data"]).reshape(4, 10), _want(images))
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-2000:]
    assert out.startswith(f"serving lenet5 at http://127.0.0.1:{port}/v2")
    assert f'"POST {INFER} HTTP/1.1" 200' in out  # uvicorn's access log: a line per request


def test_with_a_public_key_an_unsigned_bundle_is_not_served(tmp_path):
    pytest.importorskip("model_signing", reason="the sign extra is not installed")
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1()).public_key()
    (tmp_path / "pub.pem").write_bytes(
        key.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    with pytest.raises(hlobundle.errors.UnsignedError):
        load_models([EXAMPLE], backend="xla", public_key=tmp_path / "pub.pem")


def test_column_major_values_travel_in_the_producers_orientation(tmp_path):
    # A Julia client sends its (3, 2) array: the bundle stores it as [2, 3], the same bytes.
    from helpers import identity_module

    julia = np.asfortranarray(np.arange(6, dtype=np.float32).reshape(3, 2))
    out = hlobundle.pack(identity_module(julia.T), [julia], tmp_path / "cm", layout="column_major")
    client = TestClient(app(load_models([out], backend="xla")))
    name = hlobundle.load(out).manifest.function
    data = list(range(6))
    body = {
        "parameters": {"layout": "producer"},
        "inputs": [{"name": "arg0", "shape": [3, 2], "datatype": "FP32", "data": data}],
    }
    r = client.post(f"/v2/models/{name}/infer", json=body)
    assert r.status_code == 200, r.text
    (result,) = r.json()["outputs"]
    assert result["shape"] == [3, 2] and result["data"] == data
    r = client.post(f"/v2/models/{name}/infer", json={**body, "parameters": {}})
    assert r.status_code == 400 and "shape [3, 2], expected [2, 3]" in r.json()["error"]
    r = client.post(f"/v2/models/{name}/infer", json={**body, "parameters": {"layout": "julia"}})
    assert (
        r.status_code == 400
        and "parameters.layout must be 'stored' or 'producer'" in r.json()["error"]
    )


def test_bool_bytes_other_than_0_and_1_are_refused(tmp_path):
    from helpers import identity_module

    m = np.array([True, False, True])
    out = hlobundle.pack(identity_module(m), None, tmp_path / "b")
    client = TestClient(app(load_models([out], backend="xla")))
    name = hlobundle.load(out).manifest.function
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "arg0",
                    "shape": [3],
                    "datatype": "BOOL",
                    "parameters": {"binary_data_size": 3},
                }
            ]
        }
    ).encode()
    for payload, status in ((b"\x01\x00\x01", 200), (b"\x01\x07\x01", 400)):
        r = client.post(
            f"/v2/models/{name}/infer",
            content=header + payload,
            headers={"Inference-Header-Content-Length": str(len(header))},
        )
        assert r.status_code == status, r.text
    assert "BOOL bytes must be 0 or 1" in r.json()["error"]


@pytest.fixture(scope="module")
def rolling(tmp_path_factory):
    """x * 2 (x: f32[3]), whose producer-written batched module rolls the batch: row k of a
    batched call answers with row k-1's input (another client's)."""
    import jax
    import jax.numpy as jnp
    from helpers import lowered_text
    from jax import export

    x = np.zeros(3, np.float32)
    (b,) = export.symbolic_shape("b")
    rolls = jax.jit(lambda xs: jnp.roll(xs * 2, 1, axis=0))
    batched = export.export(rolls)(jax.ShapeDtypeStruct((b, 3), jnp.float32)).mlir_module()
    out = tmp_path_factory.mktemp("rolling") / "rolling"
    return hlobundle.pack(
        lowered_text(lambda x: x * 2, x),
        [x],
        out,
        names=["x"],
        batched=batched,
        batched_arguments=["x"],
    )


def _concurrent_answers(models, clients: int) -> tuple[list[list[float]], str]:
    """The answers to `clients` concurrent requests (client k sends [k, k, k]), with batching
    up to `clients` that waits long enough for all of them to join one batch; and /metrics."""
    from concurrent.futures import ThreadPoolExecutor

    (name,) = {m.name for m in models.values()}
    with TestClient(app(models, max_batch=clients, batch_timeout_s=30)) as client:

        def ask(k: int) -> list[float]:
            body = {"inputs": [{"name": "x", "shape": [3], "datatype": "FP32", "data": [k] * 3}]}
            r = client.post(f"/v2/models/{name}/infer", json=body)
            assert r.status_code == 200, r.text
            return r.json()["outputs"][0]["data"]

        with ThreadPoolExecutor(clients) as pool:
            answers = list(pool.map(ask, range(clients)))
        metrics = client.get("/metrics").text.replace(f'model="{name}"', 'model="m"')
    return answers, metrics


def test_an_unverified_batched_module_never_mixes_clients(rolling):
    answers, metrics = _concurrent_answers(load_models([rolling], backend="xla", max_batch=4), 4)
    assert answers == [[2.0 * k] * 3 for k in range(4)]  # each client its own answer
    assert 'hlobundle_batch_size_bucket{le="1.0",model="m"} 4.0' in metrics


def test_trust_batched_runs_the_producers_batched_module(rolling):
    models = load_models([rolling], backend="xla", max_batch=4, trust=hlobundle.Trust.BATCHED)
    answers, metrics = _concurrent_answers(models, 4)
    # The batched module ran (one call of 4): it answers each client with another's input.
    assert sorted(a[0] for a in answers) == [0.0, 2.0, 4.0, 6.0]
    assert answers != [[2.0 * k] * 3 for k in range(4)]
    assert 'hlobundle_batch_size_count{model="m"} 1.0' in metrics


def test_batches_run_at_exact_sizes_compiled_at_start_up(rolling):
    models = load_models([rolling], backend="xla", max_batch=4, trust=hlobundle.Trust.BATCHED)
    served = next(iter(models.values()))
    assert served.compiled_sizes == (2, 3, 4)
    compiled = served._vmapped._cache_size()
    answers = served.call_many([{"x": np.full(3, k, np.float32)} for k in (1, 2, 3)])
    # The module rolls its batch: within exactly 3 rows, with no padding row to roll in.
    assert [float(next(iter(a.values()))[0]) for a in answers] == [6.0, 2.0, 4.0]
    assert served._vmapped._cache_size() == compiled  # no request compiles


def test_batch_sizes_are_exact_up_to_16_then_pad_by_under_an_eighth():
    from hlobundle._serve._served import batch_sizes

    assert batch_sizes(1) == () and batch_sizes(8) == tuple(range(2, 9))
    sizes = batch_sizes(100)
    assert sizes[:15] == tuple(range(2, 17)) and sizes[15:19] == (18, 20, 22, 24)
    assert sizes[-1] == 100 and len(sizes) < 40
    for n in range(2, 101):  # the size n requests run at
        assert min(s for s in sizes if s >= n) < n * 9 / 8


@pytest.fixture(scope="module")
def divides_models(tmp_path_factory):
    """x / (x - x) (x: f32[3]): [0, 1, -1] gives NaN, Infinity and -Infinity."""
    from helpers import lowered_text

    x = np.zeros(3, np.float32)
    out = tmp_path_factory.mktemp("divides") / "divides"
    bundle = hlobundle.pack(lowered_text(lambda x: x / (x - x), x), [x], out, names=["x"])
    return load_models([bundle], backend="xla")


@pytest.fixture(scope="module", params=SERVERS)
def divides(request, divides_models):
    infer = f"/v2/models/{next(iter(divides_models))}/infer"
    if request.param == "one process":
        yield TestClient(app(divides_models)), infer
        return
    from frontdoor_pair import front_door

    with front_door(divides_models) as door, TestClient(door) as served:
        yield served, infer


X = {"name": "x", "shape": [3], "datatype": "FP32", "data": [0, 1, -1]}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"inputs": [X], "parameters": ["layout"]}, "'parameters' must be an object"),
        ({"inputs": [X], "parameters": "producer"}, "'parameters' must be an object"),
        (
            {"inputs": [X], "parameters": {"binary_data_output": "no"}},
            'parameters.binary_data_output must be true or false, not "no"',
        ),
        (
            {"inputs": [X], "parameters": {"layout": ["producer"]}},
            "parameters.layout must be 'stored' or 'producer'",
        ),
        ({"inputs": [X], "id": {"a": 1}}, "'id' must be a string"),
        (
            {"inputs": [X], "outputs": [{"name": "result", "parameters": ["binary_data"]}]},
            "output 'result': 'parameters' must be an object",
        ),
        (
            {"inputs": [X], "outputs": [{"name": "result", "parameters": {"binary_data": 1}}]},
            "output 'result': parameters.binary_data must be true or false, not 1",
        ),
        (
            {"inputs": [X], "outputs": [{"name": "result"}, {"name": "result"}]},
            "output 'result' is asked for twice",
        ),
        ({"inputs": [X], "outputs": {"name": "result"}}, "'outputs' must be a list"),
        ({"inputs": [{**X, "parameters": "binary"}]}, "input 'x': 'parameters' must be an object"),
        ({"inputs": [{**X, "data": [[0, 1], [-1]]}]}, "input 'x': 'data' is not a list of"),
        ({"inputs": [{**X, "data": ["NaN", "nan", 1]}]}, "input 'x': values must be FP32 numbers"),
        ({"inputs": {"x": X}}, "must be a JSON object with an 'inputs' list"),
        ({"inputs": [{k: v for k, v in X.items() if k != "name"}]}, "each input needs a 'name'"),
        ({"inputs": [5]}, "each input needs a 'name'"),
        ({"inputs": [X, X]}, "input 'x' is given twice"),
        ({"inputs": [{**X, "shape": None}]}, "input 'x': shape must be a list of integers"),
        ({"inputs": [{**X, "shape": [3.0]}]}, "input 'x': shape must be a list of integers"),
        ({"inputs": [{**X, "data": None}]}, "input 'x': 'data' must be a list"),
        ({"inputs": [{**X, "data": [1e39, 0, 0]}]}, "input 'x': a value does not fit FP32"),
    ],
)
def test_every_malformed_field_is_a_coded_400(divides, body, message):
    client, infer = divides
    r = client.post(infer, json=body)
    assert r.status_code == 400, r.text
    assert message in r.json()["error"] and r.json()["code"] == "INPUT_INVALID", r.json()


def test_a_request_nested_past_the_limit_that_orjson_parses_is_refused(divides):
    """100 levels: orjson parses them (it refuses past 1,024), so the nesting check of the
    fast parse is what refuses them, not the standard library's path."""
    client, infer = divides
    body = json.dumps({"inputs": [X], "parameters": {"a": "@"}}).replace(
        '"@"', "[" * 100 + "]" * 100
    )
    r = client.post(infer, content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["code"] == "INPUT_INVALID", r.text
    assert "JSON nested 102 deep; the limit is 64" in r.json()["error"], r.json()


def test_a_version_the_model_does_not_have_is_a_404(divides):
    client, infer = divides
    other = infer.replace("/infer", "/versions/nope/infer")
    r = client.post(other, json={"inputs": [X]})
    assert r.status_code == 404, r.text
    assert "not 'nope'" in r.json()["error"], r.json()
    r = client.get(other.replace("/infer", "/ready"))
    assert r.status_code == 404, r.text


def _strict(text: bytes):
    def bare(token):
        raise AssertionError(f"a bare {token} in the response")

    return json.loads(text, parse_constant=bare)


def test_non_finite_outputs_are_strings_in_strict_json(divides):
    client, infer = divides
    r = client.post(infer, json={"inputs": [X]})
    assert r.status_code == 200, r.text
    assert _strict(r.content)["outputs"][0]["data"] == ["NaN", "Infinity", "-Infinity"]
    # ... and a client may send them back as they came
    r = client.post(infer, json={"inputs": [{**X, "data": ["NaN", "Infinity", "-Infinity"]}]})
    assert r.status_code == 200, r.text
    assert _strict(r.content)["outputs"][0]["data"] == ["NaN", "NaN", "NaN"]


def _binary(client, infer, size, data: bytes):
    """A binary request of x (FP32[3]) declaring `binary_data_size` `size`, `data` after it."""
    item = {k: v for k, v in X.items() if k != "data"}
    header = json.dumps({"inputs": [{**item, "parameters": {"binary_data_size": size}}]}).encode()
    return client.post(
        infer,
        content=header + data,
        headers={"Inference-Header-Content-Length": str(len(header))},
    )


@pytest.mark.parametrize(
    ("size", "extra", "message"),
    [
        (12.0, b"", "input 'x': binary_data_size 12.0, expected 12 bytes for FP32[3]"),
        (12, b"\0" * 4, "the body has 4 bytes of binary data no input claims"),
    ],
    ids=["a float size", "bytes no input claims"],
)
def test_binary_data_is_claimed_whole_by_an_integer_size(divides, size, extra, message):
    client, infer = divides
    data = np.float32([0, 1, -1]).tobytes()
    assert _binary(client, infer, 12, data).status_code == 200  # the same request, exact
    r = _binary(client, infer, size, data + extra)
    assert r.status_code == 400 and r.json()["code"] == "INPUT_INVALID", r.text
    assert message in r.json()["error"], r.json()


def test_the_body_limit_follows_the_models_inputs(divides, divides_models):
    # 3 values: 64 KiB + 64 bytes each, far below --max-body-bytes (64 MiB by default)
    client, infer = divides
    big = json.dumps({"inputs": [{**X, "data": [0.5] * 200_000}]}).encode()
    r = client.post(infer, content=big)
    assert r.status_code == 413 and r.json()["code"] == "LIMIT_EXCEEDED", r.text
    assert "over the limit of 65728 bytes" in r.json()["error"]
    chunked = client.post(infer, content=iter([big[:50_000], big[50_000:]]))  # no content-length
    assert chunked.status_code == 413, chunked.text
    assert client.post(infer, json={"inputs": [X]}).status_code == 200
    smaller = TestClient(app(divides_models, max_body=1000)).post(infer, content=b" " * 1001)
    assert smaller.status_code == 413 and "over the limit of 1000 bytes" in smaller.text


def test_requests_are_decoded_off_the_event_loop(divides, monkeypatch):
    import asyncio

    from hlobundle._serve import _app

    where = []

    def parse(*args):
        try:
            asyncio.get_running_loop()
            where.append("event loop")
        except RuntimeError:
            where.append("thread")
        return _app.parse_request.__wrapped__(*args)

    parse.__wrapped__ = _app.parse_request
    monkeypatch.setattr(_app, "parse_request", parse)
    client, infer = divides
    assert client.post(infer, json={"inputs": [X]}).status_code == 200
    assert where == ["event loop"]  # a small body: parsed inline, cheaper than a thread hop
    monkeypatch.setattr(_app, "INLINE_BYTES", 16)  # now it counts as large
    assert client.post(infer, json={"inputs": [X]}).status_code == 200
    assert where == ["event loop", "thread"]


def _where_called(monkeypatch, module, name) -> list[str]:
    """Replaces `module.name` with a wrapper that notes where each call ran: on the event loop
    or in a thread."""
    import asyncio

    where, inner = [], getattr(module, name)

    def noted(*args):
        try:
            asyncio.get_running_loop()
            where.append("event loop")
        except RuntimeError:
            where.append("thread")
        return inner(*args)

    monkeypatch.setattr(module, name, noted)
    return where


def test_short_model_calls_and_small_results_stay_on_the_event_loop(divides_models, monkeypatch):
    from hlobundle._serve import _app

    served = next(iter(divides_models.values()))
    assert served.call_s is not None  # timed at start-up
    encoded = _where_called(monkeypatch, _app, "encoded")
    called = _where_called(monkeypatch, type(served), "__call__")
    client, infer = TestClient(app(divides_models)), f"/v2/models/{served.name}/infer"
    assert client.post(infer, json={"inputs": [X]}).status_code == 200
    assert called == encoded == ["event loop"]  # a hop to a thread costs more than either
    monkeypatch.setattr(_app, "INLINE_CALL_S", 0.0)  # now every call counts as long
    assert client.post(infer, json={"inputs": [X]}).status_code == 200
    assert called == ["event loop", "thread"]


def _posted(asgi, path, headers, messages, within_s=5.0) -> list[dict]:
    """(Only of the one-process app: a front door answers on the event loop it started on,
    its client's, not the one each call here makes.)

    The messages the ASGI app `asgi` sends for a POST of `path` with `headers`, driven
    directly (no server, no client between: the headers arrive as given), its receive()
    giving `messages` in turn and then nothing more, as a client that stopped sending; given
    up after `within_s`."""
    import asyncio

    sent, pending = [], list(messages)

    async def receive():
        if pending:
            return pending.pop(0)
        await asyncio.sleep(3600)

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"a"), *headers],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }

    async def answered():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asgi(scope, receive, send), within_s)

    asyncio.run(answered())
    return sent


def _one_process_only(client) -> None:
    if client.app.__class__.__name__ == "FrontApp":
        pytest.skip(
            "drives the app on event loops of its own (`_posted`): a front door answers "
            "on the loop it started on; it reads bodies with the same code"
        )


def _answer(sent) -> tuple[list[int], dict]:
    """The statuses sent, and the last body as JSON (or {})."""
    statuses = [m["status"] for m in sent if m["type"] == "http.response.start"]
    bodies = [m["body"] for m in sent if m["type"] == "http.response.body"]
    return statuses, json.loads(bodies[-1]) if bodies else {}


@pytest.mark.parametrize("declared", [b"12x", b"1\xb2"], ids=["12x", "a superscript 2"])
def test_a_content_length_that_is_not_a_number_is_a_coded_400(divides, declared):
    """HTTP servers refuse such a header before the app; the app does not count on them. A
    superscript two (a byte of latin-1) is a digit to str.isdigit, and no number to int."""
    client, infer = divides
    _one_process_only(client)
    body = json.dumps({"inputs": [X]}).encode()
    request = {"type": "http.request", "body": body, "more_body": False}
    sent = _posted(client.app, infer, [(b"content-length", declared)], [request])
    statuses, error = _answer(sent)
    assert statuses == [400] and error["code"] == "INPUT_INVALID", sent
    assert error["error"] == "content-length is not a number"
    sent = _posted(client.app, infer, [(b"content-length", str(len(body)).encode())], [request])
    assert _answer(sent)[0] == [200]  # the same request, its length a number


def test_a_declared_length_over_the_limit_is_refused_before_the_body(divides):
    """Refused at once (413) on the header, with no byte of the body sent: not after the body
    has arrived, nor at the read timeout (30 s here) for want of it."""
    client, infer = divides
    _one_process_only(client)
    start = time.monotonic()
    sent = _posted(client.app, infer, [(b"content-length", b"1000000000")], [], within_s=3.0)
    waited = time.monotonic() - start
    statuses, error = _answer(sent)
    assert statuses == [413] and error["code"] == "LIMIT_EXCEEDED", sent
    assert "over the limit of 65728 bytes" in error["error"]
    assert waited < 1.0, f"refused after {waited:.2f} s"


def test_a_client_that_leaves_mid_body_never_runs_the_model(divides, monkeypatch):
    """The part that arrived is a whole request, but the body declared is longer: the client
    left, and what it sent is not run."""
    client, infer = divides
    _one_process_only(client)
    called = _where_called(monkeypatch, Served, "__call__")
    body = json.dumps({"inputs": [X]}).encode()
    declared = [(b"content-length", str(len(body) + 64).encode())]
    part = {"type": "http.request", "body": body, "more_body": True}
    sent = _posted(client.app, infer, declared, [part, {"type": "http.disconnect"}])
    statuses, error = _answer(sent)
    assert called == [] and statuses == [400], sent
    assert error == {
        "error": "the client left before sending the whole body",
        "code": "INPUT_INVALID",
    }


@contextlib.contextmanager
def _listening(models, limits):
    """`hlobundle serve`'s uvicorn server (`_server.server`) for `models`, in a thread, on a
    free loopback port; yields the port."""
    import threading

    from hlobundle._serve._server import server

    asgi = app(models, max_body=limits.max_body, read_timeout_s=limits.read_timeout_s)
    srv = server(asgi, "127.0.0.1", 0, limits)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    for _ in range(200):
        if srv.started:
            break
        time.sleep(0.05)
    try:
        yield srv.servers[0].sockets[0].getsockname()[1]
    finally:
        srv.should_exit = True
        thread.join(30)


def _live(port) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/live", timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


@pytest.mark.slow
def test_silent_and_slow_clients_are_cut_off(divides_models):
    # 50 connections: 20 send nothing, 15 trickle their headers, 15 their body (a byte at a
    # time, forever). Each is closed once it has not finished within the read timeout.
    import select

    from hlobundle._serve._server import Limits

    infer = f"/v2/models/{next(iter(divides_models))}/infer"
    with _listening(divides_models, Limits(read_timeout_s=1.0)) as port:
        started = time.monotonic()
        clients = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(50)]
        headers, bodies = clients[20:35], clients[35:]
        for s in headers:
            s.sendall(f"POST {infer} HTTP/1.1\r\nHost: a\r\nX-Slow: ".encode())
        for s in bodies:
            s.sendall(f"POST {infer} HTTP/1.1\r\nHost: a\r\nContent-Length: 999\r\n\r\n{{".encode())
        open_, answers, closed = set(clients), {}, {}
        # Each is closed at its deadline, not at some multiple of it: the silent ones and the
        # slow headers 1 s after they connected (the read timeout), the slow bodies at 2 s (the
        # read timeout for the headers, and again for the body); 3.5 s at most here. The bounds
        # leave 0.9 s for this test's own turn on a busy machine (three test processes on two
        # cores had it see a slow body closed at 2.77 s), below the next multiple of each.
        while open_ and time.monotonic() < started + 3.5:
            for s in headers + bodies:
                if s in open_:
                    with contextlib.suppress(OSError):
                        s.send(b"x")
            for s in select.select(list(open_), [], [], 0.2)[0]:
                try:
                    data = s.recv(65536)
                except OSError:
                    data = b""
                answers[s] = answers.get(s, b"") + data
                if not data:
                    open_.discard(s)
                    closed[s] = time.monotonic() - started
            assert _live(port) == 200  # the others are served meanwhile
        try:
            assert not open_, f"{len(open_)} of 50 connections are still open after 3.5 s"
            assert min(closed.values()) >= 0.9, "a connection was closed before its deadline"
            assert max(closed[s] for s in clients[:35]) < 1.9, (
                "silent or slow headers kept too long"
            )
            assert max(closed[s] for s in bodies) < 2.9, "slow bodies kept too long"
            assert all(answers.get(s, b"").startswith(b"HTTP/1.1 408") for s in bodies)
        finally:  # a failure here is this test's alone: no socket left for the collector
            for s in clients:
                s.close()


def test_connections_over_the_cap_are_answered_503(divides_models):
    from hlobundle._serve._server import Limits

    with _listening(divides_models, Limits(read_timeout_s=60, max_connections=8)) as port:
        idle = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(8)]
        try:
            assert _live(port) == 503
        finally:
            for s in idle:
                s.close()
        for _ in range(100):  # the server sees the closes
            if _live(port) == 200:
                break
            time.sleep(0.05)
        assert _live(port) == 200


def test_manifest_strings_reach_the_terminal_escaped(models, images, caplog):
    from hlobundle._serve._server import banner

    served = dataclasses.replace(models["lenet5"], names=("evil\x1b[2J\u202e",))
    assert banner({"evil": served}, "127.0.0.1", 8000) == (
        "serving evil\\x1b[2J\\u202e at http://127.0.0.1:8000/v2"
    )
    fields = {f.name: getattr(served, f.name) for f in dataclasses.fields(served)}
    client = TestClient(app({"lenet5": _Failing(**fields)}))
    assert client.post(INFER, json=_json_request(images)).status_code == 500
    (record,) = [r for r in caplog.records if r.name == "hlobundle.serve"]
    assert "evil\\x1b[2J\\u202e failed" in record.getMessage()


def test_a_bundle_the_users_key_verified_batches_through_its_batched_module(rolling, tmp_path):
    pytest.importorskip("model_signing", reason="the sign extra is not installed")
    import shutil

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
    signed = shutil.copytree(rolling, tmp_path / "signed")
    hlobundle.sign(signed, tmp_path / "key.pem")
    assert not load_models([signed], backend="xla")["_lambda"].batchable  # no key given
    models = load_models([signed], backend="xla", max_batch=4, public_key=tmp_path / "pub.pem")
    answers, metrics = _concurrent_answers(models, 4)
    assert answers != [[2.0 * k] * 3 for k in range(4)]  # the (signed, rolling) module ran
    assert 'hlobundle_batch_size_count{model="m"} 1.0' in metrics


@pytest.fixture
def compiled(monkeypatch):
    """The bundles whose function was made (compiled) in this test, by directory name."""
    from hlobundle._read._reader import Bundle

    made, function = [], Bundle.function
    monkeypatch.setattr(
        Bundle,
        "function",
        lambda self, *a, **k: made.append(self.path.name) or function(self, *a, **k),
    )
    return made


def test_two_copies_of_a_model_are_served_under_names_given(tmp_path, monkeypatch, compiled):
    import shutil

    from helpers import cli

    from hlobundle._serve import _server

    copy = shutil.copytree(EXAMPLE, tmp_path / "lenet5.hlobundle")
    answers = {}

    # the app the CLI built, via Starlette
    def in_process(asgi, host, port, limits, uds, access_log):
        client = TestClient(asgi)
        paths = ["/v2/models/old/ready", "/v2/models/new/ready", "/v2/models/lenet5/ready"]
        return type(
            "Server",
            (),
            {
                "run": lambda self, sockets: answers.update(
                    {p: client.get(p).status_code for p in paths}
                )
            },
        )()

    monkeypatch.setattr(_server, "server", in_process)
    r = cli("serve", f"old={EXAMPLE}", f"new={copy}", "--backend", "xla", "--port", "0")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("serving new, old at http://127.0.0.1:"), r.stdout
    assert answers == {
        "/v2/models/old/ready": 200,
        "/v2/models/new/ready": 200,
        "/v2/models/lenet5/ready": 404,
    }
    assert sorted(compiled) == ["lenet5.hlobundle"] * 2


def test_a_name_clash_is_refused_before_anything_compiles(tmp_path, compiled):
    import shutil

    from helpers import cli

    copy = shutil.copytree(EXAMPLE, tmp_path / "v2")
    r = cli("serve", EXAMPLE, copy, "--backend", "xla", "--port", "0")
    assert r.returncode == 1 and "serving" not in r.stdout, r.stdout + r.stderr
    assert r.stderr.startswith("error [INPUT_INVALID] two bundles are both called 'lenet5'")
    assert "NAME=BUNDLE" in r.stderr
    for bad in ("a/b", "../x", ".x", "a b"):  # an empty NAME: a usage error
        r = cli("serve", f"{bad}={EXAMPLE}", "--backend", "xla", "--port", "0")
        assert r.returncode == 1 and r.stderr.startswith("error [INPUT_INVALID] model name"), (
            r.stderr
        )
    assert compiled == []


def test_a_busy_port_is_refused_before_anything_compiles(compiled):
    from helpers import cli

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = cli("serve", EXAMPLE, "--backend", "xla", "--port", port)
    assert r.returncode == 1 and "serving" not in r.stdout, r.stdout + r.stderr
    assert r.stderr.startswith(f"error [INPUT_INVALID] --port {port}: 127.0.0.1:{port} is in use")
    assert compiled == []


# Format 2.0: every function of a bundle is a model; symbolic dimensions bind per request.
W = np.linspace(-1, 1, 24, dtype=np.float32).reshape(8, 3)


@pytest.fixture(scope="module")
def functions(tmp_path_factory):
    """`fns`: predict(w, x) = tanh(x @ w) (the default; rows declared independent), center(x) =
    x minus the batch's mean (rows depend on each other; nothing declared) and pair(x, y) =
    x[:, :3] + y (rows declared independent), with x: f32[b, 8] and y: f32[b, 3], w stored."""
    import jax.numpy as jnp

    out = tmp_path_factory.mktemp("functions") / "fns"
    x, y = np.ones((2, 8), np.float32), np.ones((2, 3), np.float32)
    hlobundle.export(
        lambda w, x: jnp.tanh(x @ w),
        W,
        x,
        out=out,
        name="predict",
        roles={"w": "parameter"},
        shapes_specs=(None, "b, 8"),
        independent_rows="b",
    )
    hlobundle.export(
        lambda x: x - x.mean(axis=0, keepdims=True),
        x,
        out=out,
        name="center",
        shapes_specs=("b, 8",),
        add=True,
    )
    hlobundle.export(
        lambda x, y: x[:, :3] + y,
        x,
        y,
        out=out,
        name="pair",
        shapes_specs=("b, 8", "b, 3"),
        add=True,
        independent_rows="b",
    )
    return out


def _alone(bundle, name, **inputs):
    fn = hlobundle.load(bundle).function("xla", name=name)
    stored = {"w": W} if name == "predict" else {}
    return np.asarray(fn(**stored, **inputs)).tolist()


def _x(rows: int, k: int = 0) -> np.ndarray:
    return (np.arange(rows * 8, dtype=np.float32).reshape(rows, 8) + 10 * k) / 50


def _ask(client, model, **inputs):
    body = {
        "inputs": [
            {"name": n, "shape": list(v.shape), "datatype": "FP32", "data": v.reshape(-1).tolist()}
            for n, v in inputs.items()
        ]
    }
    return client.post(f"/v2/models/{model}/infer", json=body)


@pytest.mark.slow
def test_every_function_of_a_bundle_is_a_model_with_variable_dimensions(functions):
    models = load_models([functions], backend="xla")
    assert sorted(models) == ["fns", "fns.center", "fns.pair", "fns.predict"]
    assert models["fns"] is models["fns.predict"]  # the default function, under both names
    client = TestClient(app(models))
    meta = client.get("/v2/models/fns.predict").json()
    assert meta["name"] == "fns"
    assert meta["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 8]}]
    assert meta["outputs"] == [{"name": "result", "datatype": "FP32", "shape": [-1, 3]}]
    assert client.get("/v2/models/fns.pair").json()["name"] == "fns.pair"
    for rows in (1, 3, 17):
        r = _ask(client, "fns.predict", x=_x(rows))
        assert r.status_code == 200, r.text
        (out,) = r.json()["outputs"]
        assert out["shape"] == [rows, 3]
        np.testing.assert_array_equal(
            out["data"], np.ravel(_alone(functions, "predict", x=_x(rows)))
        )
    r = _ask(client, "fns.pair", x=_x(2), y=np.ones((2, 3), np.float32))
    assert r.status_code == 200, r.text


def test_a_2_0_bundle_named_by_the_user_prefixes_its_functions(functions):
    models = load_models([("m", functions)], backend="xla")
    assert sorted(models) == ["m", "m.center", "m.pair", "m.predict"]


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ({"x": np.ones((2, 7), np.float32)}, "input 'x': shape [2, 7], expected [b, 8]"),
        ({"x": np.ones((2, 8, 1), np.float32)}, "input 'x': shape [2, 8, 1], expected [b, 8]"),
        ({"x": np.ones((0, 8), np.float32)}, "symbol 'b' would be 0; it must be at least 1"),
    ],
)
def test_request_shapes_must_fit_the_symbolic_ones(functions, inputs, message):
    client = TestClient(app(load_models([functions], backend="xla")))
    r = _ask(client, "fns.predict", **inputs)
    assert r.status_code == 400 and r.json()["code"] == "INPUT_INVALID", r.text
    assert message in r.json()["error"], r.json()


def test_the_functions_of_a_2x_bundle_are_served_through_a_front_door(functions):
    # A served function's manifest crosses to a front door as JSON: a 2.x function's own
    # (format_version 2.x, no `functions`) was refused there, and `serve --frontends 2` of any
    # 2.x bundle failed at start ("a front door did not start": MANIFEST_INVALID).
    from frontdoor_pair import front_door

    with front_door(load_models([functions], backend="xla")) as door, TestClient(door) as client:
        r = _ask(client, "fns.predict", x=_x(3))
        assert r.status_code == 200, r.text
        assert (
            r.json()["outputs"][0]["data"]
            == np.ravel(_alone(functions, "predict", x=_x(3))).tolist()
        )
        assert _ask(client, "fns.pair", x=_x(2), y=np.ones((3, 3), np.float32)).status_code == 400


def test_symbols_bind_across_inputs_and_negative_dimensions_are_refused(functions):
    client = TestClient(app(load_models([functions], backend="xla")))
    r = _ask(client, "fns.pair", x=_x(2), y=np.ones((3, 3), np.float32))
    assert r.status_code == 400, r.text
    assert "y.shape[0] is 3, but b = 2 with b=2" in r.json()["error"]
    body = {"inputs": [{"name": "x", "shape": [-1, 8], "datatype": "FP32", "data": [0.0] * 8}]}
    r = client.post("/v2/models/fns.predict/infer", json=body)
    assert r.status_code == 400 and "shape [-1, 8], expected [b, 8]" in r.json()["error"], r.text


def _concurrent(models, model, sizes) -> tuple[list[list[float]], str]:
    """The answers to one concurrent request per size (rows of `_x(size, k)`), batched up to
    `len(sizes)`, waiting long enough for all to join one batch; and /metrics."""
    from concurrent.futures import ThreadPoolExecutor

    with TestClient(app(models, max_batch=len(sizes), batch_timeout_s=30)) as client:

        def ask(k: int) -> list[float]:
            r = _ask(client, model, x=_x(sizes[k], k))
            assert r.status_code == 200, r.text
            (out,) = r.json()["outputs"]
            assert out["shape"][0] == sizes[k]
            return out["data"]

        with ThreadPoolExecutor(len(sizes)) as pool:
            answers = list(pool.map(ask, range(len(sizes))))
        metrics = client.get("/metrics").text.replace(f'model="{models[model].name}"', 'model="m"')
    return answers, metrics


SIZES = (1, 4, 2, 3)


@pytest.mark.slow
@pytest.mark.parametrize("trusted", [True, False])
def test_a_symbolic_batch_dimension_batches_any_sizes_exactly(functions, trusted):
    models = load_models(
        [functions],
        backend="xla",
        max_batch=4,
        trust=hlobundle.Trust.BATCHED if trusted else hlobundle.Trust.NOTHING,
    )
    answers, metrics = _concurrent(models, "fns.predict", SIZES)
    want = [
        np.ravel(_alone(functions, "predict", x=_x(n, k))).tolist() for k, n in enumerate(SIZES)
    ]
    # Each client its own answer (a batch of 10 rows may round an ulp apart from a row alone).
    for got, expected in zip(answers, want, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-6)
    if trusted:  # one call of 10 rows, no padding
        assert 'hlobundle_batch_size_count{model="m"} 1.0' in metrics
    else:
        assert 'hlobundle_batch_size_bucket{le="1.0",model="m"} 4.0' in metrics


@pytest.mark.slow
@pytest.mark.parametrize("how", ["trust_batched", "public_key"])
def test_rows_not_declared_independent_are_never_joined_trusted_or_signed(functions, tmp_path, how):
    """center's rows depend on each other (a mean over the batch) and the bundle does not
    declare them independent: joined, one client's answer would depend on, and reveal, the
    others' inputs. Trusted (`Trust.BATCHED`) or signed and verified, each request runs alone
    and gets exactly the in-process call's answer."""
    want = [np.ravel(_alone(functions, "center", x=_x(n, k))).tolist() for k, n in enumerate(SIZES)]
    if how == "public_key":
        pytest.importorskip("model_signing", reason="the sign extra is not installed")
        private, public = new_key(tmp_path)
        signed = shutil.copytree(functions, tmp_path / "fns")
        hlobundle.sign(signed, private)
        models = load_models([signed], backend="xla", max_batch=4, public_key=public)
    else:
        models = load_models([functions], backend="xla", max_batch=4, trust=hlobundle.Trust.BATCHED)
    answers, metrics = _concurrent(models, "fns.center", SIZES)
    assert answers == want
    assert 'hlobundle_batch_size_bucket{le="1.0",model="m"} 4.0' in metrics
    assert not models["fns.center"].batchable and models["fns.predict"].batchable


def _deep(layers: int):
    """`layers` layers of sin, cos and a matmul: each shape's compiled code grows with them."""
    import jax.numpy as jnp

    def deep(w, x):
        for k in range(layers):
            x = jnp.sin(x @ w + k) * jnp.cos(x)
        return x

    return deep


# `hlobundle serve` whose compiles of new shapes, once the test has armed it with a line on
# stdin (after start-up, which compiles too), are held until the test says so: the server says
# "held" on stdout and waits for a line on stdin. A compile on the event loop would hold the
# loop too, however fast the machine.
_HELD_COMPILES = """
import sys, threading
from hlobundle._serve import _served
first_call, armed = _served.Served._first_call, threading.Event()
def held(self, given):
    if armed.is_set():
        print("held", flush=True)
        sys.stdin.readline()
    return first_call(self, given)
def arm():
    sys.stdin.readline()
    armed.set()
    print("armed", flush=True)
_served.Served._first_call = held
threading.Thread(target=arm, daemon=True).start()
from hlobundle._cli._main import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
@pytest.mark.subprocess
def test_new_shapes_neither_stall_the_server_nor_grow_its_memory(tmp_path):
    """A client choosing 6 new batch sizes: each compiles in a worker thread (one at a time),
    so that a health check is answered while a compile is held (the compile waits for the
    test, not for the machine: with the compile on the event loop, the health check is not
    answered within 10 s, and the test fails), and the server keeps 2 shapes (--max-shapes
    2), so that, once it has dropped shapes, its memory grows under 25 MB over 6 more (with
    every shape kept, --max-shapes 20, it grew about 50 MB over 6; jax 0.12's first drops
    cost about 30 MB once, so the measure starts after 4 of them)."""
    out = tmp_path / "deep"
    hlobundle.export(
        _deep(150),
        np.eye(8, dtype=np.float32) / 2,
        np.ones((2, 8), np.float32),
        out=out,
        name="predict",
        roles={"w": "parameter"},
        shapes_specs=(None, "b, 8"),
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = helpers.CLI_ZYGOTE.start(  # `python -c _HELD_COMPILES ...`, in a fork of the zygote
        *("serve", out, "--port", port, "--backend", "xla", "--max-shapes", "2"),
        source=_HELD_COMPILES,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"

    def rss_mb() -> float:
        with open(f"/proc/{proc.pid}/status") as f:
            return int(next(line for line in f if line.startswith("VmRSS")).split()[1]) / 1024

    def ask(rows: int, answered: list[int]) -> None:
        x = np.ones((rows, 8), np.float32)
        body = {"inputs": [{"name": "x", "shape": [rows, 8], "datatype": "FP32"}]}
        body["inputs"][0]["data"] = x.reshape(-1).tolist()
        request = urllib.request.Request(
            f"{base}/v2/models/deep.predict/infer",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as r:
            answered.append(r.status)

    def held_while_live(rows: int) -> None:
        """A request of a new shape, whose compile is held while the server answers a health
        check; then released and answered."""
        answered: list[int] = []
        asked = threading.Thread(target=ask, args=(rows, answered))
        asked.start()
        _said(proc, "held")
        try:
            live = _live(port)
        except OSError:  # not answered within 10 s
            live = None
        still_held = asked.is_alive()
        proc.stdin.write("\n")
        proc.stdin.flush()
        asked.join(60)
        assert live == 200, f"no health check answered while the compile for b={rows} was held"
        assert still_held and answered == [200], "the request was not held, then answered"

    try:
        _wait_ready(base)
        proc.stdin.write("arm\n")
        proc.stdin.flush()
        _said(proc, "armed")
        for n in range(3, 9):  # the 2 shapes it keeps, and 4 more: what a first drop costs
            held_while_live(n)
        before = rss_mb()
        for n in range(9, 15):
            held_while_live(n)
        grown = rss_mb() - before
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
    assert grown < 25, f"the server grew {grown:.0f} MB over 6 new shapes"


def _said(proc: helpers.Forked, word: str) -> None:
    """Until the process says `word` on a line of its stdout (other lines: the server's own)."""
    while proc.stdout.readline().strip() != word:
        assert proc.poll() is None, f"the server stopped before it said {word!r}"


@pytest.mark.slow
def test_pinned_sizes_compile_at_start_up_and_others_are_refused(functions):
    models = load_models([functions], backend="xla", sizes={"b": [1, 4]})
    served = models["fns.predict"]
    assert set(served._warm) >= {((1, 8),), ((4, 8),)}  # compiled before the first request
    client = TestClient(app(models))
    assert _ask(client, "fns.predict", x=_x(4)).status_code == 200
    r = _ask(client, "fns.predict", x=_x(3))
    assert r.status_code == 400 and r.json()["code"] == "INPUT_INVALID", r.text
    assert "the inputs make 'b' 3; model 'fns' serves b in [1, 4] (serve --sizes)" in r.text
    with pytest.raises(hlobundle.InputError, match="the sizes pinned give 3 shapes, more than"):
        load_models([functions], backend="xla", sizes={"b": [1, 2, 3]}, max_shapes=2)


@pytest.mark.slow
def test_a_new_shape_finding_every_compile_slot_taken_gets_a_503(functions, monkeypatch):
    """A new shape waits COMPILE_WAIT_S (0.5 s here) for a compile slot: it runs when one frees
    within that time, and is answered 503 after it, not before and not much later."""
    from hlobundle._serve import _served

    monkeypatch.setattr(_served, "COMPILE_WAIT_S", 0.5)
    models = load_models([functions], backend="xla")
    client = TestClient(app(models))
    assert _ask(client, "fns.predict", x=_x(2)).status_code == 200  # stored b = 2: compiled
    semaphore = models["fns.predict"].compiles
    assert semaphore.acquire(blocking=False)  # another shape is compiling, for 0.1 s
    threading.Timer(0.1, semaphore.release).start()
    assert _ask(client, "fns.predict", x=_x(3)).status_code == 200  # it waited for the slot
    assert semaphore.acquire(blocking=False)  # another shape is compiling, for long
    try:
        start = time.monotonic()
        r = _ask(client, "fns.predict", x=_x(5))
        waited = time.monotonic() - start
        assert r.status_code == 503 and r.json()["code"] == "LIMIT_EXCEEDED", r.text
        assert "is compiling other shapes" in r.json()["error"]
        assert 0.5 <= waited < 1.5, f"answered 503 after {waited:.2f} s, the wait 0.5 s"
        assert _ask(client, "fns.predict", x=_x(2)).status_code == 200  # a kept shape runs
    finally:
        semaphore.release()
    assert _ask(client, "fns.predict", x=_x(5)).status_code == 200


@pytest.mark.parametrize("value", ["b=0", "b=", "B=4", "b=4,x", "b=" + ",".join(["1"] * 65)])
def test_malformed_pinned_sizes_are_usage_errors(value):
    from helpers import cli

    r = cli("serve", EXAMPLE, "--sizes", value)
    assert r.returncode == 2 and "--sizes: expected SYMBOL=N[,N...]" in r.stderr, r.stderr


def _served_by_the_cli(monkeypatch, names, *args: str) -> tuple[str, dict[str, int]]:
    """`hlobundle serve ARGS`'s start line, and the readiness of each model of `names` as the
    app the CLI built answers it (in process, through Starlette)."""
    from helpers import cli

    from hlobundle._serve import _server

    ready = {}

    def in_process(asgi, host, port, limits, uds, access_log):
        client = TestClient(asgi)
        return type(
            "Server",
            (),
            {
                "run": lambda self, sockets: ready.update(
                    {n: client.get(f"/v2/models/{n}/ready").status_code for n in names}
                )
            },
        )()

    monkeypatch.setattr(_server, "server", in_process)
    r = cli("serve", *args, "--backend", "xla", "--port", "0")
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()[0], ready


@pytest.mark.slow
def test_the_start_line_names_every_model_served(tmp_path, monkeypatch):
    from helpers import two_functions

    names = ["l", "lenet5", "two", "two.loss", "two.predict"]
    line, ready = _served_by_the_cli(
        monkeypatch, names, str(two_functions(tmp_path)), f"l={EXAMPLE}"
    )
    assert line.startswith("serving l, two, two.loss, two.predict at http://127.0.0.1:"), line
    assert ready == {"l": 200, "lenet5": 404, "two": 200, "two.loss": 200, "two.predict": 200}


def test_a_one_function_symbolic_bundle_is_served_under_its_plain_name(tmp_path, monkeypatch):
    """Its function is its default (docs/serving.md): `m` answers, as `m.predict` does."""
    from helpers import edit_manifest

    w, x = np.eye(3, dtype=np.float32), np.ones((2, 3), np.float32)
    out = hlobundle.export(
        lambda w, x: x @ w,
        w,
        x,
        out=tmp_path / "m",
        name="predict",
        roles={"w": "parameter"},
        shapes_specs=(None, "b, 3"),
    )
    assert hlobundle.load(out).default_function == "predict"
    line, ready = _served_by_the_cli(monkeypatch, ["m", "m.predict"], str(out))
    assert line.startswith("serving m, m.predict at "), line
    assert ready == {"m": 200, "m.predict": 200}
    edit_manifest(out, lambda m: m.pop("default_function"))  # as written before: still `m`
    line, ready = _served_by_the_cli(monkeypatch, ["m", "m.predict"], str(out))
    assert line.startswith("serving m, m.predict at "), line
    assert ready == {"m": 200, "m.predict": 200}


@pytest.mark.slow
def test_joined_requests_run_only_at_the_sizes_pinned(functions):
    """Attack: `--sizes b=1,2` says requests never compile; three concurrent requests of one
    row each, joined along `b`, made a call of 3 rows, which compiled a shape not pinned (and,
    with `--max-shapes 2`, dropped a pinned one). Joined calls keep to the pinned sizes."""
    models = load_models(
        [functions],
        backend="xla",
        max_batch=3,
        trust=hlobundle.Trust.BATCHED,
        sizes={"b": [1, 2]},
        max_shapes=2,
    )
    served = models["fns.predict"]
    pinned = list(served._warm)
    answers, metrics = _concurrent(models, "fns.predict", (1, 1, 1))
    want = [np.ravel(_alone(functions, "predict", x=_x(1, k))).tolist() for k in range(3)]
    for got, expected in zip(answers, want, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-6)
    assert 'hlobundle_batch_size_count{model="m"} 1.0' in metrics  # still joined
    assert set(served._warm) == set(pinned), list(served._warm)  # nothing compiled, none dropped


@pytest.fixture(scope="module")
def empty_rows(tmp_path_factory):
    """`sums(x) = x.sum(axis=1)` with x: f32[b, 0]: a request holds no values whatever b is."""
    out = tmp_path_factory.mktemp("empty") / "sums"
    hlobundle.export(
        lambda x: x.sum(axis=1), np.ones((2, 0), np.float32), out=out, shapes_specs=("b, 0",)
    )
    return out


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_a_shape_numpy_cannot_make_is_a_400(empty_rows, binary):
    """Attack: x of shape [2**62, 0] holds no values, so its data (none) fits, but numpy
    refuses to make the array ("array is too big"): its ValueError left the ASGI app, an empty
    500 and a traceback. It is a 400 naming the input."""
    client = TestClient(app(load_models([empty_rows], backend="xla")))
    item = {"name": "x", "shape": [2**62, 0], "datatype": "FP32"}
    if binary:
        header = json.dumps({"inputs": [{**item, "parameters": {"binary_data_size": 0}}]})
        r = client.post(
            "/v2/models/sums/infer",
            content=header.encode(),
            headers={"inference-header-content-length": str(len(header))},
        )
    else:
        r = client.post("/v2/models/sums/infer", json={"inputs": [{**item, "data": []}]})
    assert r.status_code == 400 and r.json()["code"] == "INPUT_INVALID", r.text
    assert "input 'x': shape [4611686018427387904, 0]" in r.json()["error"], r.text


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_a_response_too_large_for_json_is_refused_saying_to_ask_for_binary(
    functions, monkeypatch, binary
):
    """Attack: a response of about 120 million JSON values (a [b, 0] input makes any b cost
    nothing: 2**28 rows, a 60-byte request) segfaulted the server in orjson. A response over
    `MAX_JSON_VALUES` (here 10) as JSON is a 413 saying to ask for binary data; as binary it
    is sent."""
    from hlobundle._serve import _responses

    monkeypatch.setattr(_responses, "MAX_JSON_VALUES", 10)
    client = TestClient(app(load_models([functions], backend="xla")))
    x = _x(4)
    body = {
        "inputs": [{"name": "x", "shape": [4, 8], "datatype": "FP32", "data": x.ravel().tolist()}],
        "parameters": {"binary_data_output": binary},
    }
    r = client.post("/v2/models/fns.predict/infer", json=body)
    if binary:
        assert r.status_code == 200 and r.headers["inference-header-content-length"], r.text
    else:
        assert r.status_code == 413 and r.json()["code"] == "LIMIT_EXCEEDED", r.text
        assert "would hold 12 values as JSON, over the limit of 10" in r.json()["error"]
        assert "binary_data_output" in r.json()["error"]


def test_the_engines_body_bound_is_the_model_s_under_a_root_path():
    """Attack: MLServer's `root_path` setting (a server mounted below a URL path): uvicorn
    gives the app the path with it in front (/mlserver/v2/models/m/infer), which Starlette's
    routing strips, and the engines' bounded body reader (`BoundedBody`) looked the model's
    bound up by it unstripped: no model matched, and an 11-byte body passed a model bound of
    10 bytes (only --max-body-bytes applied). The bound is looked up by the route's path."""
    import uvicorn
    from starlette.responses import PlainTextResponse

    from hlobundle.integrations._models import BoundedBody

    async def engine(scope, receive, send):
        await PlainTextResponse("answered")(scope, receive, send)

    def limit(path: str) -> int:
        return 10 if path.startswith("/v2/models/m/") else 1000

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = uvicorn.Config(
        BoundedBody(engine, limit, 5.0), port=port, root_path="/mlserver", log_level="error"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            time.sleep(0.02)
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v2/models/m/infer", data=b"x" * 11
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        assert refused.value.code == 413
        assert json.loads(refused.value.read())["code"] == "LIMIT_EXCEEDED"
    finally:
        server.should_exit = True
        thread.join(10)

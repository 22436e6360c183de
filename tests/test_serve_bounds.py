"""What a request may make a server do is bounded by what it sends (SPEC.md 8, "Serving"): a
symbol that the request's values do not back is at most `SIZE_WITHOUT_VALUES`, and an answer
whose size the request chooses is at most `max_response_bytes`. Each is refused (413,
`LIMIT_EXCEEDED`) before the model is called, on every path: REST's JSON and binary requests,
gRPC, and the check every engine's adapter runs (`integrations._models.checked_inputs`; the
adapters' own tests run in environments of their own)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import hlobundle

pytest.importorskip("starlette", reason="the serve extra is not installed")
pytest.importorskip("httpx2", reason="Starlette's test client needs httpx2 (the dev extra)")

from starlette.testclient import TestClient  # noqa: E402

from hlobundle._serve import _served, _spec  # noqa: E402
from hlobundle._serve._app import app  # noqa: E402
from hlobundle._serve._models import Served, load_models  # noqa: E402
from hlobundle._serve._protocol import RequestError  # noqa: E402

UNBOUNDED = 1 << 50  # a response bound that never refuses: only the symbols' rule applies


@pytest.fixture(scope="module")
def bounds(tmp_path_factory):
    """`sums(x) = x.sum(axis=1)` with x: f32[b, 0] (a request holds no values whatever b is; the
    answer is b zeros) and `doubled(x) = 2 * x` with x: f32[b, 2]."""
    out = tmp_path_factory.mktemp("bounds") / "bounds"
    hlobundle.export(
        lambda x: x.sum(axis=1),
        np.ones((2, 0), np.float32),
        out=out,
        name="sums",
        shapes_specs=("b, 0",),
    )
    hlobundle.export(
        lambda x: 2 * x,
        np.ones((2, 2), np.float32),
        out=out,
        name="doubled",
        shapes_specs=("b, 2",),
        add=True,
    )
    return out


@pytest.fixture(scope="module")
def lifted(bounds):
    """The models of `bounds` with the response bound lifted: only the symbols' rule applies."""
    return load_models([bounds], backend="xla", max_response_bytes=UNBOUNDED)


@pytest.fixture(scope="module")
def bounded(bounds):
    """The models of `bounds` whose answers are at most 100 bytes."""
    return load_models([bounds], backend="xla", max_response_bytes=100)


@pytest.fixture(scope="module")
def default(bounds):
    """The models of `bounds` under the default limits."""
    return load_models([bounds], backend="xla")


@pytest.fixture
def calls(monkeypatch):
    """The names of the served models called (their inputs run) in the test: its module-wide
    fixtures load (and warm up) the models before it starts counting."""
    called = []
    call = Served.__call__

    def counted(self, given):
        called.append(self.name)
        return call(self, given)

    monkeypatch.setattr(Served, "__call__", counted)
    return called


def _request(model: str, shape: list[int], data: np.ndarray, binary: bool) -> dict:
    """The keyword arguments of a POST of input `x` to `model`'s infer route (`binary`: data
    and answer as binary tensor data)."""
    item = {"name": "x", "shape": shape, "datatype": "FP32"}
    path = f"/v2/models/{model}/infer"
    if not binary:
        return {"url": path, "json": {"inputs": [{**item, "data": data.ravel().tolist()}]}}
    raw = data.astype("<f4").tobytes()
    inputs = [{**item, "parameters": {"binary_data_size": len(raw)}}]
    header = json.dumps({"inputs": inputs, "parameters": {"binary_data_output": True}}).encode()
    return {
        "url": path,
        "content": header + raw,
        "headers": {"inference-header-content-length": str(len(header))},
    }


def _refused(r, *words: str) -> None:
    assert r.status_code == 413 and r.json()["code"] == "LIMIT_EXCEEDED", r.text
    for word in words:
        assert word in r.json()["error"], r.json()


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_a_symbol_no_value_backs_is_refused_before_the_model_runs(lifted, calls, binary):
    """Attack: x: f32[b, 0] holds no values whatever b is, so a request of a few bytes chose
    any b, and the server computed and sent an answer of b values (b = 2**27: 512 MiB for 128
    bytes). A symbol beyond the values a request sends is at most `SIZE_WITHOUT_VALUES`; over
    it, 413 before the model is called (the response bound is lifted here, so this rule alone
    refuses)."""
    client = TestClient(app(lifted))
    over = _served.SIZE_WITHOUT_VALUES + 1
    r = client.post(**_request("bounds.sums", [over, 0], np.zeros(0), binary))
    _refused(r, f"'b' {over}", "hold 0 values", str(_served.SIZE_WITHOUT_VALUES), "--sizes")
    assert calls == []
    r = client.post(**_request("bounds.sums", [3, 0], np.zeros(0), binary))
    assert r.status_code == 200, r.text
    assert calls == ["bounds"]  # sums, the default function


def test_a_symbol_up_to_the_values_sent_or_the_size_without_values_is_served(lifted, calls):
    """The rule's edges: b at `SIZE_WITHOUT_VALUES` with no values, and b over it backed by
    the values sent (x: f32[b, 2] holds 2b), are answered."""
    client = TestClient(app(lifted))
    edge = _served.SIZE_WITHOUT_VALUES
    r = client.post(**_request("bounds.sums", [edge, 0], np.zeros(0), False))
    assert r.status_code == 200 and r.json()["outputs"][0]["shape"] == [edge], r.text
    x = np.ones((edge + 1, 2), np.float32)
    r = client.post(**_request("bounds.doubled", [edge + 1, 2], x, True))
    assert r.status_code == 200, r.text
    assert calls == ["bounds", "bounds.doubled"]


def test_the_issue_s_attack_gets_a_413_by_default(default, calls):
    """The attack as reported: a binary request of about 150 bytes for x: FP32[2**27, 0] and a
    binary answer, to a server with its default limits (measured before the fix: a 155-byte
    request, a 536,871,076-byte answer after 9 s, the process's peak memory 1.5 GiB higher)."""
    client = TestClient(app(default))
    kwargs = _request("bounds.sums", [2**27, 0], np.zeros(0), True)
    assert len(kwargs["content"]) < 160
    _refused(client.post(**kwargs), f"'b' {2**27}")
    assert calls == []


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_an_answer_over_the_bound_is_refused_before_the_model_runs(bounded, calls, binary):
    """The answer's size, from the manifest's result shapes at the symbols a request binds,
    is at most `max_response_bytes` (`serve --max-response-bytes`): a request backed by its
    values (x: f32[13, 2], whose answer is 104 bytes, over a bound of 100) is refused before
    the model is called; one under it (96 bytes) is answered."""
    client = TestClient(app(bounded))
    x = np.ones((13, 2), np.float32)
    r = client.post(**_request("bounds.doubled", [13, 2], x, binary))
    _refused(r, "104 bytes", "limit of 100", "--max-response-bytes")
    assert calls == []
    r = client.post(**_request("bounds.doubled", [12, 2], x[:12], binary))
    assert r.status_code == 200, r.text
    assert calls == ["bounds.doubled"]


def test_an_answer_too_large_for_json_is_refused_before_the_model_runs(default, calls, monkeypatch):
    """A response of more values than JSON may send (`MAX_JSON_VALUES`) was refused only after
    the model had computed it: the count is known from the shapes, so it is refused first."""
    from hlobundle._serve import _responses

    monkeypatch.setattr(_responses, "MAX_JSON_VALUES", 10)
    client = TestClient(app(default))
    x = np.ones((6, 2), np.float32)
    r = client.post(**_request("bounds.doubled", [6, 2], x, False))
    _refused(r, "would hold 12 values as JSON, over the limit of 10", "binary_data_output")
    assert calls == []
    r = client.post(**_request("bounds.doubled", [5, 2], x[:5], False))
    assert r.status_code == 200, r.text
    assert calls == ["bounds.doubled"]


def test_grpc_refuses_both_before_the_model_runs(bounded, calls):
    """The same rules over gRPC (raw contents): RESOURCE_EXHAUSTED with `LIMIT_EXCEEDED` in
    the trailing metadata, before the model is called; a request within them is answered."""
    grpc = pytest.importorskip("grpc", reason="grpcio is not installed (the grpc extra)")
    pytest.importorskip("tritonclient.grpc", reason="tritonclient[grpc] is not installed")
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    from hlobundle._serve import _grpc

    def request(model: str, x: np.ndarray) -> object:
        message = service_pb2.ModelInferRequest(model_name=model)
        message.inputs.add(name="x", datatype="FP32", shape=list(x.shape))
        message.raw_input_contents.append(x.astype("<f4").tobytes())
        return message

    over = _served.SIZE_WITHOUT_VALUES + 1
    with _grpc.serving(bounded) as port, grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        for model, x, words in [
            ("bounds.sums", np.zeros((over, 0), np.float32), f"'b' {over}"),
            ("bounds.doubled", np.ones((13, 2), np.float32), "limit of 100"),
        ]:
            with pytest.raises(grpc.RpcError) as e:
                stub.ModelInfer(request(model, x), timeout=60)
            assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, e.value
            assert words in e.value.details()
            assert dict(e.value.trailing_metadata())["hlobundle-error-code"] == "LIMIT_EXCEEDED"
        assert calls == []
        answer = stub.ModelInfer(request("bounds.doubled", np.ones((12, 2), np.float32)))
        assert list(answer.outputs[0].shape) == [12, 2]
    assert calls == ["bounds.doubled"]


def test_the_adapters_shared_check_refuses_both(bounds):
    """Every engine's adapter (KServe, MLServer, Ray) checks a request's arrays with
    `checked_inputs` before it calls the function: the same two rules, as a `RequestError`
    with the status 413. `open_function` takes the response bound."""
    from hlobundle.integrations._models import checked_inputs, open_function

    sums = open_function(bounds, "sums", max_response_bytes=UNBOUNDED)
    over = _served.SIZE_WITHOUT_VALUES + 1
    with pytest.raises(RequestError) as e:
        checked_inputs(sums, {"x": np.zeros((over, 0), np.float32)})
    assert (e.value.status, e.value.code) == (413, "LIMIT_EXCEEDED")
    assert f"'b' {over}" in e.value.message
    doubled = open_function(bounds, "doubled", max_response_bytes=100)
    with pytest.raises(RequestError) as e:
        checked_inputs(doubled, {"x": np.ones((13, 2), np.float32)})
    assert e.value.status == 413 and "104 bytes" in e.value.message
    given = checked_inputs(doubled, {"x": np.ones((12, 2), np.float32)})
    np.testing.assert_array_equal(doubled(given)["result"], np.full((12, 2), 2, np.float32))
    for wrong in ("64", 0, True):  # as MLServer's model-settings.json may give it
        with pytest.raises(hlobundle.errors.InputError, match="max_response_bytes must be"):
            open_function(bounds, "doubled", max_response_bytes=wrong)


def test_the_adapters_refuse_an_answer_too_large_for_json_before_the_function_runs(
    bounds, calls, monkeypatch
):
    """The attack (issue 64's independent attack): `serve` refuses an answer of more values
    than JSON may carry (`MAX_JSON_VALUES`) before the model runs, and SPEC.md 8 says every
    adapter does; KServe (without binary outputs) and MLServer (JSON only) decoded with
    `decoded_inputs`, which did not count them, and made every value a Python object. The
    decoder counts them unless the engine answers in binary (`as_json=False`)."""
    from hlobundle._serve import _responses
    from hlobundle.integrations._models import WireTensor, decoded_inputs, open_function

    monkeypatch.setattr(_responses, "MAX_JSON_VALUES", 10)
    doubled = open_function(bounds, "doubled", max_response_bytes=UNBOUNDED)
    calls.clear()

    def wire(rows: int) -> list[WireTensor]:
        return [WireTensor("x", "FP32", [rows, 2], [1.0] * (2 * rows))]

    with pytest.raises(RequestError) as e:
        decoded_inputs(doubled, wire(6))
    assert (e.value.status, e.value.code) == (413, "LIMIT_EXCEEDED")
    assert "would hold 12 values as JSON, over the limit of 10" in e.value.message
    assert decoded_inputs(doubled, wire(6), as_json=False)["x"].shape == (6, 2)
    assert decoded_inputs(doubled, wire(5))["x"].shape == (5, 2)
    assert calls == []


@pytest.mark.slow
def test_pinned_sizes_and_stored_arguments_are_the_operator_s_not_bounded(tmp_path):
    """A symbol `--sizes` pins takes the values the operator chose, beyond the values sent
    (a bounded set, compiled at start-up); and a symbol the bundle's stored arguments bind is
    the bundle's size, whatever the request sends."""
    import jax.numpy as jnp

    size = _served.SIZE_WITHOUT_VALUES + 8
    out = tmp_path / "pinned"
    hlobundle.export(
        lambda x: x.sum(axis=1), np.ones((2, 0), np.float32), out=out, shapes_specs=("b, 0",)
    )
    models = load_models([out], backend="xla", sizes={"b": [size]})
    client = TestClient(app(models))
    r = client.post(**_request("pinned", [size, 0], np.zeros(0), True))
    assert r.status_code == 200, r.text
    stored = tmp_path / "stored"
    table = np.ones((size, 2), np.float32)
    hlobundle.export(
        lambda t, i: jnp.take(t, i, axis=0),
        table,
        np.zeros(1, np.int32),
        out=stored,
        roles={"t": "parameter"},
        shapes_specs=("v, 2", "n"),
    )
    client = TestClient(app(load_models([stored], backend="xla")))
    body = {"inputs": [{"name": "i", "shape": [1], "datatype": "INT32", "data": [3]}]}
    r = client.post("/v2/models/stored/infer", json=body)
    assert r.status_code == 200 and r.json()["outputs"][0]["data"] == [1.0, 1.0], r.text


def test_the_command_takes_the_response_bound(bounds, monkeypatch):
    """`hlobundle serve --max-response-bytes 100`: the app the command builds answers 96 bytes
    and refuses 104 (in process: the command's server replaced by Starlette's test client)."""
    from helpers import cli

    from hlobundle._serve import _server

    statuses = []

    def in_process(asgi, host, port, limits, uds, access_log):
        client = TestClient(asgi)

        def run(self, sockets):
            for rows in (12, 13):
                x = np.ones((rows, 2), np.float32)
                answer = client.post(**_request("bounds.doubled", [rows, 2], x, True))
                statuses.append(answer.status_code)

        return type("Server", (), {"run": run})()

    monkeypatch.setattr(_server, "server", in_process)
    args = ("--backend", "xla", "--port", "0", "--max-response-bytes", "100")
    r = cli("serve", str(bounds), *args)
    assert r.returncode == 0, r.stderr
    assert statuses == [200, 413]


def test_a_shape_checked_once_is_recalled_and_a_refused_one_refused_again(bounds, monkeypatch):
    """`check_shapes` keeps the results of the shapes that passed (at most `CHECKED_SHAPES`),
    never a refusal: a shape over the bound is refused each time, after one that passed too."""
    doubled = load_models([bounds], backend="xla", max_response_bytes=100)["bounds.doubled"]
    ok, over = {"x": np.ones((12, 2), np.float32)}, {"x": np.ones((13, 2), np.float32)}
    binds = []
    bind = _spec.bind_symbols
    monkeypatch.setattr(_spec, "bind_symbols", lambda *a: binds.append(1) or bind(*a))
    for _ in range(2):
        assert doubled.check_shapes(ok) == {"result": (12, 2)}
        with pytest.raises(RequestError) as e:
            doubled.check_shapes(over)
        assert e.value.status == 413
    assert list(doubled._checked) == [((12, 2),)] and len(binds) == 3  # ok once, over twice
    monkeypatch.setattr(_spec, "CHECKED_SHAPES", 1)
    assert doubled.check_shapes({"x": np.ones((3, 2), np.float32)}) == {"result": (3, 2)}
    assert len(doubled._checked) == 1  # full: checked, not kept

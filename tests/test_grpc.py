"""`hlobundle serve --grpc-port`: KServe v2's gRPC predict protocol beside REST, driven by the
real client (`tritonclient.grpc`, raw contents) and by the protocol's own messages (typed
contents); the same answers, messages and codes as REST; hostile clients (oversized messages,
wrong dtypes and shapes, unknown models, clients that never finish a message) get coded errors
and stall nobody. In process (a gRPC server over loopback, on an event loop in a thread, where
the REST app's calls run too, as `serve` runs both on uvicorn's), except the test of the command
itself."""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import subprocess
import threading
import time

import helpers
import numpy as np
import pytest
from helpers import ROOT

import hlobundle

grpc = pytest.importorskip("grpc", reason="grpcio is not installed (the grpc extra)")
grpcclient = pytest.importorskip("tritonclient.grpc", reason="tritonclient[grpc] is not installed")
pytest.importorskip("httpx2", reason="Starlette's test client needs httpx2 (the dev extra)")

from starlette.testclient import TestClient  # noqa: E402
from tritonclient.grpc import service_pb2, service_pb2_grpc  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

from hlobundle._serve import _app, _grpc, _grpc_messages  # noqa: E402
from hlobundle._serve._app import app  # noqa: E402
from hlobundle._serve._models import load_models  # noqa: E402

EXAMPLE = ROOT / "examples" / "lenet5.hlobundle"
MAX_BODY = 1 << 20


@pytest.fixture(scope="module")
def models():
    return load_models([EXAMPLE], backend="xla")


@pytest.fixture(scope="module")
def images():
    return np.asarray(hlobundle.load(EXAMPLE).tensor("images"))


@pytest.fixture(scope="module")
def served(models):
    with _grpc.serving(models, max_body=MAX_BODY, max_rpcs=8) as port:
        yield port, TestClient(app(models, max_body=MAX_BODY))


@pytest.fixture(scope="module")
def client(served):
    return grpcclient.InferenceServerClient(f"127.0.0.1:{served[0]}")


@pytest.fixture(scope="module")
def stub(served):
    channel = grpc.insecure_channel(f"127.0.0.1:{served[0]}")
    yield service_pb2_grpc.GRPCInferenceServiceStub(channel)
    channel.close()


def _want(images):
    bundle = hlobundle.load(EXAMPLE)
    args = [images if a.name == "images" else bundle.tensor(a.name) for a in bundle.arguments]
    return np.asarray(bundle.function("xla")(*args))


def test_the_descriptor_is_generated_from_the_vendored_proto():
    pytest.importorskip("grpc_tools", reason="grpcio-tools is not installed (the dev extra)")
    assert _grpc_messages.GENERATED.read_text() == _grpc_messages.generated_text(), (
        "stale: python -c 'from hlobundle._serve import _grpc_messages; _grpc_messages.write()'"
    )


def test_the_messages_live_beside_tritonclient_s_own_copy():
    ours = _grpc_messages.messages().ModelInferRequest
    assert ours.DESCRIPTOR.full_name == service_pb2.ModelInferRequest.DESCRIPTOR.full_name
    assert ours is not service_pb2.ModelInferRequest  # two pools, one process, no clash
    wire = service_pb2.ModelInferRequest(model_name="m", raw_input_contents=[b"\1"])
    assert ours.FromString(wire.SerializeToString()).raw_input_contents == [b"\1"]


def test_health_and_metadata(client, models):
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("lenet5")
    assert client.is_model_ready("lenet5", models["lenet5"].version)
    meta = client.get_model_metadata("lenet5", as_json=True)
    assert meta["inputs"] == [
        {"name": "images", "datatype": "FP32", "shape": ["4", "1", "28", "28"]}
    ]
    assert meta["versions"] == [models["lenet5"].version] and meta["platform"] == "hlobundle"
    assert client.get_server_metadata(as_json=True)["name"] == "hlobundle"


def test_raw_inference_agrees_with_rest_on_the_same_server(client, served, images):
    x = (images * 1.5).astype(np.float32)
    inp = grpcclient.InferInput("images", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    result = client.infer("lenet5", [inp], request_id="r7")
    assert result.get_response().id == "r7"
    np.testing.assert_array_equal(result.as_numpy("result"), _want(x))
    rest = served[1].post(
        "/v2/models/lenet5/infer",
        json={
            "inputs": [
                {
                    "name": "images",
                    "shape": list(x.shape),
                    "datatype": "FP32",
                    "data": x.ravel().tolist(),
                }
            ]
        },
    )
    np.testing.assert_array_equal(
        np.reshape(rest.json()["outputs"][0]["data"], (4, 10)), result.as_numpy("result")
    )


def test_a_call_awaits_the_model_on_the_loop_it_runs_on(client, images, monkeypatch):
    # gRPC's server runs on the REST app's loop (`serve`: uvicorn's): a call hops to no other
    # loop and back, which cost more CPU than the rest of a small request (benchmarks/RESULTS.md)
    def hop(*_):
        raise AssertionError("a call hopped to another event loop")

    monkeypatch.setattr(_grpc, "_on_loop", hop)
    inp = grpcclient.InferInput("images", list(images.shape), "FP32")
    inp.set_data_from_numpy(images)
    np.testing.assert_array_equal(client.infer("lenet5", [inp]).as_numpy("result"), _want(images))


def _typed_request(x, datatype="FP32", **fields):
    request = service_pb2.ModelInferRequest(model_name="lenet5", **fields)
    tensor = request.inputs.add(name="images", datatype=datatype, shape=list(x.shape))
    getattr(tensor.contents, f"{datatype.lower()}_contents").extend(x.ravel().tolist())
    return request


def test_typed_contents_are_served_and_outputs_come_raw(stub, images):
    response = stub.ModelInfer(_typed_request(images))
    (out,) = response.outputs
    assert (out.name, out.datatype, list(out.shape)) == ("result", "FP32", [4, 10])
    got = np.frombuffer(response.raw_output_contents[0], "<f4").reshape(4, 10)
    np.testing.assert_array_equal(got, _want(images))


def _refused(stub, request):
    with pytest.raises(grpc.RpcError) as e:
        stub.ModelInfer(request, timeout=30)
    codes = dict(e.value.trailing_metadata() or ())
    return e.value.code(), e.value.details(), codes.get("hlobundle-error-code")


def _rest_error(served, body):
    r = served[1].post("/v2/models/lenet5/infer", json=body)
    return r.status_code, r.json()["error"], r.json()["code"]


def test_bad_requests_are_rest_s_errors_as_grpc_statuses(stub, served, images):
    x = images.ravel().tolist()
    cases = [  # (a gRPC request, the same request over REST, the gRPC status)
        (
            _typed_request(images[:1]),
            {"name": "images", "shape": [1, 1, 28, 28], "datatype": "FP32", "data": x[:784]},
        ),
        (
            _typed_request(images.astype(np.float64), "FP64"),
            {"name": "images", "shape": [4, 1, 28, 28], "datatype": "FP64", "data": x},
        ),
    ]
    for request, rest in cases:
        status, message, code = _refused(stub, request)
        assert (status, code) == (grpc.StatusCode.INVALID_ARGUMENT, "INPUT_INVALID")
        assert (400, message, "INPUT_INVALID") == _rest_error(served, {"inputs": [rest]})
    unknown = service_pb2.ModelInferRequest(model_name="lenet5")
    unknown.inputs.add(
        name="params_conv1_w", datatype="FP32", shape=[1]
    ).contents.fp32_contents.append(0)
    status, message, code = _refused(stub, unknown)
    assert (
        status == grpc.StatusCode.INVALID_ARGUMENT and "unknown input 'params_conv1_w'" in message
    )
    status, message, _ = _refused(stub, service_pb2.ModelInferRequest(model_name="nope"))
    assert status == grpc.StatusCode.NOT_FOUND and message.startswith("no model 'nope'")
    mixed = _typed_request(images)
    mixed.inputs[0].contents.int_contents.append(1)
    status, message, _ = _refused(stub, mixed)
    assert (
        "FP32 values travel in fp32_contents (or raw_input_contents), not int_contents" in message
    )
    both = _typed_request(images, raw_input_contents=[images.tobytes()])
    assert "contents given with raw_input_contents" in _refused(stub, both)[1]
    short = service_pb2.ModelInferRequest(model_name="lenet5", raw_input_contents=[b"\0" * 100])
    short.inputs.add(name="images", datatype="FP32", shape=[4, 1, 28, 28])
    status, message, _ = _refused(stub, short)
    assert (
        status == grpc.StatusCode.INVALID_ARGUMENT
        and "binary_data_size 100, expected 12544" in message
    )
    assert stub.ModelInfer(_typed_request(images)).outputs[0].name == "result"  # still serving


@pytest.mark.slow
def test_oversized_messages_are_refused_before_decoding(stub, client, images):
    huge = service_pb2.ModelInferRequest(
        model_name="lenet5", raw_input_contents=[b"\0" * (MAX_BODY + 1)]
    )
    huge.inputs.add(name="images", datatype="FP32", shape=[4, 1, 28, 28])
    status, message, _ = _refused(stub, huge)  # grpc's own limit: never decoded
    assert status == grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in message
    over = service_pb2.ModelInferRequest(model_name="lenet5", raw_input_contents=[b"\0" * 300_000])
    over.inputs.add(name="images", datatype="FP32", shape=[4, 1, 28, 28])
    status, message, code = _refused(stub, over)  # the model's own limit, as REST's 413
    assert (status, code) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "LIMIT_EXCEEDED")
    assert "over the limit of 266240 bytes" in message
    inp = grpcclient.InferInput("images", [4, 1, 28, 28], "FP32")
    inp.set_data_from_numpy(images)
    assert client.infer("lenet5", [inp]).as_numpy("result").shape == (4, 10)


def _hanging_call(port: int) -> socket.socket:
    """A client that starts a ModelInfer and never finishes its message: HTTP/2 by hand (the
    preface, SETTINGS, HEADERS in HPACK literals, then 10 of the 1,000 bytes it announces)."""

    def frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
        return (
            struct.pack(">I", len(payload))[1:]
            + bytes([kind, flags])
            + struct.pack(">I", stream)
            + payload
        )

    def literal(name: str, value: str) -> bytes:
        return b"\0" + bytes([len(name)]) + name.encode() + bytes([len(value)]) + value.encode()

    headers = b"".join(
        literal(k, v)
        for k, v in [
            (":method", "POST"),
            (":scheme", "http"),
            (":authority", f"127.0.0.1:{port}"),
            (":path", "/inference.GRPCInferenceService/ModelInfer"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        ]
    )
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
        + frame(4, 0, 0, b"")
        + frame(1, 4, 1, headers)
        + frame(0, 0, 1, b"\0" + struct.pack(">I", 1000) + b"\0" * 10)
    )
    return sock


@pytest.mark.slow
def test_clients_that_never_finish_a_message_stall_no_one(served, client, images):
    hanging = [_hanging_call(served[0]) for _ in range(6)]  # of 8 RPCs at once, 6 held
    try:
        time.sleep(0.5)
        inp = grpcclient.InferInput("images", [4, 1, 28, 28], "FP32")
        inp.set_data_from_numpy(images)
        start = time.perf_counter()
        for _ in range(5):
            assert client.infer("lenet5", [inp], client_timeout=10).as_numpy("result").shape == (
                4,
                10,
            )
        assert time.perf_counter() - start < 5
    finally:
        for sock in hanging:
            sock.close()


@pytest.mark.slow
def test_beyond_the_rpc_cap_a_call_is_refused_not_queued(models, images):
    with _grpc.serving(models, max_rpcs=2) as port:
        hanging = [_hanging_call(port) for _ in range(2)]
        try:
            time.sleep(0.5)
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
                status, _, _ = _refused(stub, _typed_request(images))
            assert status == grpc.StatusCode.RESOURCE_EXHAUSTED
        finally:
            for sock in hanging:
                sock.close()


@pytest.mark.slow
def test_a_client_that_never_finishes_its_message_is_dropped_with_its_connection(models, images):
    # The only RPC slot, held by a message that never ends, until its connection is too old
    # (1 s here) and its grace (the longest model call, 0.5 s, and 0.5 s here, 5 s by default)
    # is over: the slot is free again within about 2 s, and by 4 s at the latest, which an
    # age or a grace a few times longer would pass.
    with _grpc.serving(
        models, max_rpcs=1, max_age_s=1, max_deadline_s=0.5, age_grace_s=0.5
    ) as port:
        started = time.monotonic()
        hanging = _hanging_call(port)
        try:
            time.sleep(0.5)
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
                assert (
                    _refused(stub, _typed_request(images))[0] == grpc.StatusCode.RESOURCE_EXHAUSTED
                )
                deadline = started + 4
                while True:
                    try:
                        assert stub.ModelInfer(_typed_request(images), timeout=5).outputs
                        break
                    except grpc.RpcError as e:
                        assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                        assert time.monotonic() < deadline, "the hanging client kept its slot"
                        time.sleep(0.2)
        finally:
            hanging.close()


def test_a_call_past_the_server_s_deadline_is_deadline_exceeded(models, images):
    with _grpc.serving(models, max_deadline_s=1e-6) as port:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            status, message, code = _refused(stub, _typed_request(images))
    assert (status, code) == (grpc.StatusCode.DEADLINE_EXCEEDED, "LIMIT_EXCEEDED")
    assert "did not answer within the deadline" in message


def test_a_grpc_port_in_use_is_refused_with_its_flag(models):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        service = _grpc.Service(models, app(models), MAX_BODY)
        with pytest.raises(hlobundle.errors.InputError, match=f"--grpc-port {port}"):
            _grpc.GrpcServer(service, "127.0.0.1", port, 8).start()
        with pytest.raises(hlobundle.errors.InputError, match=f"--grpc-port {port}"):
            _grpc.check_port("127.0.0.1", port)
    with _grpc.serving(models) as port:  # grpc sets SO_REUSEPORT unless told not to, which
        with pytest.raises(hlobundle.errors.InputError, match=f"--grpc-port {port}"):  # shares
            _grpc.GrpcServer(service, "127.0.0.1", port, 8).start()  # a port in use


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.subprocess
def test_the_command_serves_both_protocols_and_drains_on_sigterm(images):
    import tritonclient.http as httpclient

    port, grpc_port = _free_port(), _free_port()
    proc = helpers.CLI_ZYGOTE.start(  # a fork of the CLI zygote, a process of its own
        *("serve", EXAMPLE, "--port", port, "--grpc-port", grpc_port, "--backend", "xla"),
        *("--trust-batched", "--batch-timeout-ms", "1500"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
        for _ in range(600):
            try:
                if client.is_server_ready():
                    break
            except InferenceServerException:
                time.sleep(0.1)
        rest = httpclient.InferenceServerClient(f"127.0.0.1:{port}")
        assert rest.is_model_ready("lenet5") and client.is_model_ready("lenet5")
        inp = grpcclient.InferInput("images", [4, 1, 28, 28], "FP32")
        inp.set_data_from_numpy(images)
        answer = {}
        asking = threading.Thread(target=lambda: answer.update(r=client.infer("lenet5", [inp])))
        asking.start()  # waits 1.5 s for its batch (the batcher of the REST app, on its loop)
        time.sleep(0.5)
        proc.terminate()
        asking.join(timeout=60)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err[-2000:]
        assert f"serving gRPC (inference.GRPCInferenceService) at 127.0.0.1:{grpc_port}" in out
        np.testing.assert_allclose(
            answer["r"].as_numpy("result"), _want(images), rtol=1e-5, atol=1e-6
        )
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


@pytest.fixture(scope="module")
def center(tmp_path_factory):
    """`center(x) = x - mean(x, axis=0)` for x: f32[b, 8]: rows that depend on each other, and
    no declaration that they are independent."""
    import jax.numpy as jnp

    out = tmp_path_factory.mktemp("center") / "center"
    x = np.ones((2, 8), np.float32)
    hlobundle.export(lambda x: x - jnp.mean(x, axis=0), x, out=out, shapes_specs=("b, 8",))
    return out


@pytest.mark.slow
def test_trusted_rows_not_declared_independent_are_never_joined(center):
    """Four concurrent gRPC clients of a trusted bundle whose rows are not declared independent,
    under a batch timeout of 30 s that joins them if anything does: each gets exactly the
    in-process call's answer, never one that depends on the others' rows."""
    from concurrent.futures import ThreadPoolExecutor

    models = load_models([center], backend="xla", trust=hlobundle.Trust.BATCHED)
    fn = hlobundle.load(center).function("xla")
    rows = [
        np.arange(n * 8, dtype=np.float32).reshape(n, 8) * (k + 1)
        for k, n in enumerate((1, 4, 2, 3))
    ]
    with _grpc.serving(models, max_batch=4, batch_timeout_s=30) as port:
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")

        def ask(x):
            inp = grpcclient.InferInput("x", list(x.shape), "FP32")
            inp.set_data_from_numpy(x)
            return client.infer("center", [inp], client_timeout=60).as_numpy("result")

        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(ask, rows))
    for x, got in zip(rows, answers, strict=True):
        np.testing.assert_array_equal(got, np.asarray(fn(x)))


def test_shared_memory_regions_are_refused_over_grpc(client, images):
    # A server without the system shared-memory extension (max_shared_memory 0, the default of
    # `serving`): a region named in a gRPC request is refused, never read or written.
    inp = grpcclient.InferInput("images", list(images.shape), "FP32")
    inp.set_shared_memory("r", images.nbytes)
    with pytest.raises(InferenceServerException) as e:
        client.infer("lenet5", [inp])
    assert "StatusCode.INVALID_ARGUMENT" in e.value.status()
    assert "input 'images': the system shared-memory extension is offered only" in e.value.message()
    inp = grpcclient.InferInput("images", list(images.shape), "FP32")
    inp.set_data_from_numpy(images)
    out = grpcclient.InferRequestedOutput("result")
    out.set_shared_memory("r", 160)
    with pytest.raises(InferenceServerException) as e:
        client.infer("lenet5", [inp], outputs=[out])
    assert (
        "output 'result': the system shared-memory extension is offered only" in e.value.message()
    )


def _on_a_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def test_a_large_message_is_read_off_the_event_loop_rest_shares(stub, images, monkeypatch):
    # `serve` runs gRPC on uvicorn's loop: a large message's contents, made into the request
    # object there (a Python value per typed value), would stall every REST request meanwhile
    where = []

    def request_object(request):
        where.append(_on_a_loop())
        return _grpc.request_object.__wrapped__(request)

    request_object.__wrapped__ = _grpc.request_object
    monkeypatch.setattr(_grpc, "request_object", request_object)
    large = _typed_request(images, id="x" * (_grpc.INLINE_BYTES + 1))
    assert stub.ModelInfer(large).outputs[0].name == "result"
    stub.ModelInfer(_typed_request(images))
    assert where == [False, True]  # the small one stays on the loop (cheaper than the hop)


def test_a_large_result_is_encoded_off_the_event_loop_rest_shares(models, images, monkeypatch):
    # as REST's `encoded`: a large result's bytes are copied into the answer in a thread
    where = []
    encode = _grpc.Service._response

    def response(self, *args):
        where.append(_on_a_loop())
        return encode(self, *args)

    async def large(self, served, given):
        return {"result": np.ones((4, _grpc.INLINE_BYTES), np.float32)}

    monkeypatch.setattr(_grpc.Service, "_response", response)
    monkeypatch.setattr(_app.App, "call", large)
    with _grpc.serving(models) as port, grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        answer = stub.ModelInfer(_typed_request(images))
    assert len(answer.raw_output_contents[0]) == 16 * _grpc.INLINE_BYTES
    assert where == [False]


def test_a_message_that_does_not_parse_is_refused_with_a_code(served):
    # grpc's own parse answered UNKNOWN and logged a traceback for each such message
    with grpc.insecure_channel(f"127.0.0.1:{served[0]}") as channel:
        for method in ("ModelInfer", "ServerLive", "ModelMetadata", "SystemSharedMemoryStatus"):
            call = channel.unary_unary(f"/{_grpc_messages.SERVICE}/{method}")  # bytes as they are
            with pytest.raises(grpc.RpcError) as e:
                call(b"\xff\xff\xff", timeout=30)
            codes = dict(e.value.trailing_metadata() or ())
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (method, e.value.details())
            assert codes.get("hlobundle-error-code") == "INPUT_INVALID"
            assert e.value.details().startswith(f"the message is not a {method}Request")

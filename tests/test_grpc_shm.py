"""The system shared-memory extension over gRPC (Triton's SystemSharedMemoryRegister, -Status
and -Unregister, and inputs and outputs naming a region in their parameters), driven by
tritonclient's own utilities (`tritonclient.utils.shared_memory`, `tritonclient.grpc`) against
the gRPC service in this process, on a unix socket (where it is offered by default; a loopback
port refuses it unless asked): the answer through regions is the in-process
call's, and each way of naming memory the server must not trust is a coded error before any
work. The checks are REST's own (`_shm`, tests/test_serve_shm.py): one implementation."""

from __future__ import annotations

import os
import uuid

import numpy as np
import pytest
from helpers import ROOT, held_open, shm_regions, triton_shm

import hlobundle

grpc = pytest.importorskip("grpc", reason="grpcio is not installed (the grpc extra)")
grpcclient = pytest.importorskip("tritonclient.grpc", reason="tritonclient[grpc] is not installed")

from tritonclient.grpc import service_pb2, service_pb2_grpc  # noqa: E402

from hlobundle._serve import _grpc  # noqa: E402
from hlobundle._serve._models import load_models  # noqa: E402

EXAMPLE = ROOT / "examples" / "lenet5.hlobundle"
IMAGES_BYTES = 4 * 1 * 28 * 28 * 4  # FP32[4, 1, 28, 28]
RESULT_BYTES = 4 * 10 * 4  # FP32[4, 10]
CAP = 64 << 10  # the server's max_shared_memory
pytestmark = pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm here")
shm = triton_shm()


@pytest.fixture(scope="module")
def models():
    return load_models([EXAMPLE], backend="xla")


@pytest.fixture(scope="module")
def target(models, tmp_path_factory):
    """The service's address: `unix:PATH`, a socket only this user can open."""
    path = tmp_path_factory.mktemp("grpc-shm") / "s.sock"
    with _grpc.serving(models, uds=str(path), max_shared_memory=CAP, max_rpcs=8):
        yield f"unix:{path}"


@pytest.fixture(scope="module")
def client(target):
    client = grpcclient.InferenceServerClient(target)
    yield client
    client.close()


@pytest.fixture(scope="module")
def stub(target):
    channel = grpc.insecure_channel(target)
    yield service_pb2_grpc.GRPCInferenceServiceStub(channel)
    channel.close()


@pytest.fixture(scope="module")
def images():
    return np.asarray(hlobundle.load(EXAMPLE).tensor("images"))


@pytest.fixture
def regions(client):
    """Make regions with tritonclient (/dev/shm files of ours, mode 0600); after the test,
    every region is unregistered and the files destroyed."""
    with shm_regions() as make:
        yield make
        client.unregister_system_shared_memory()


def _reference(images):
    bundle = hlobundle.load(EXAMPLE)
    args = [images if a.name == "images" else bundle.tensor(a.name) for a in bundle.arguments]
    return np.asarray(bundle.function("xla")(*args))


def _refused(call, request):
    """The gRPC status, message and SPEC.md code (trailing metadata) `call` refused with."""
    with pytest.raises(grpc.RpcError) as e:
        call(request, timeout=30)
    codes = dict(e.value.trailing_metadata() or ())
    return e.value.code(), e.value.details(), codes.get(_grpc.ERROR_CODE_KEY)


def _region(params, name, size, offset=0):
    """The parameters tritonclient's set_shared_memory writes (an offset only when not 0)."""
    params["shared_memory_region"].string_param = name
    params["shared_memory_byte_size"].int64_param = size
    if offset:
        params["shared_memory_offset"].int64_param = offset


def _infer(region, size, offset=0, output=None):
    """A ModelInferRequest whose input names `region`, and whose output names `output`
    (a region's name and size) if given."""
    request = service_pb2.ModelInferRequest(model_name="lenet5")
    tensor = request.inputs.add(name="images", datatype="FP32", shape=[4, 1, 28, 28])
    _region(tensor.parameters, region, size, offset)
    if output is not None:
        _region(request.outputs.add(name="result").parameters, *output)
    return request


def _register(name, key, size, offset=0):
    return service_pb2.SystemSharedMemoryRegisterRequest(
        name=name, key=key, offset=offset, byte_size=size
    )


def test_inference_through_regions_equals_the_in_process_call(client, images, regions):
    assert "system_shared_memory" in client.get_server_metadata(as_json=True)["extensions"]
    x = (images * 1.5).astype(np.float32)
    key_in, handle_in = regions(IMAGES_BYTES + 64)
    key_out, handle_out = regions(RESULT_BYTES)
    shm.set_shared_memory_region(handle_in, [x], offset=64)
    client.register_system_shared_memory("in", "/" + key_in, IMAGES_BYTES + 64)
    client.register_system_shared_memory("out", "/" + key_out, RESULT_BYTES)
    status = client.get_system_shared_memory_status(as_json=True)["regions"]
    assert status["in"] == {
        "name": "in",
        "key": "/" + key_in,  # as given
        "byte_size": str(IMAGES_BYTES + 64),  # protobuf's JSON writes a uint64 as a string
    }
    assert set(status) == {"in", "out"}
    inp = grpcclient.InferInput("images", [4, 1, 28, 28], "FP32")
    inp.set_shared_memory("in", IMAGES_BYTES, 64)
    out = grpcclient.InferRequestedOutput("result")
    out.set_shared_memory("out", RESULT_BYTES)
    result = client.infer("lenet5", [inp], outputs=[out])
    answer = result.get_output("result")
    assert (answer.name, answer.datatype, list(answer.shape)) == ("result", "FP32", [4, 10])
    assert result.get_response().raw_output_contents == [b""]  # as Triton: its data is there
    got = shm.get_contents_as_numpy(handle_out, np.float32, [4, 10])
    np.testing.assert_array_equal(got, _reference(x))
    client.unregister_system_shared_memory("in")
    assert list(client.get_system_shared_memory_status(as_json=True)["regions"]) == ["out"]
    client.unregister_system_shared_memory()  # "": every region
    assert client.get_system_shared_memory_status(as_json=True) == {}


def test_an_output_into_a_region_beside_an_input_as_raw_contents(client, images, regions):
    key_out, handle_out = regions(RESULT_BYTES)
    client.register_system_shared_memory("out", key_out, RESULT_BYTES)
    inp = grpcclient.InferInput("images", list(images.shape), "FP32")
    inp.set_data_from_numpy(images)
    out = grpcclient.InferRequestedOutput("result")
    out.set_shared_memory("out", RESULT_BYTES)
    client.infer("lenet5", [inp], outputs=[out])
    got = shm.get_contents_as_numpy(handle_out, np.float32, [4, 10])
    np.testing.assert_array_equal(got, _reference(images))


def test_a_region_over_the_cap_is_refused(stub, regions):
    key, _ = regions(CAP + 8)
    status, message, code = _refused(
        stub.SystemSharedMemoryRegister, _register("big", key, CAP + 1)
    )
    assert (status, code) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "LIMIT_EXCEEDED")
    assert f"over the limit of {CAP} (--max-shared-memory)" in message
    stub.SystemSharedMemoryRegister(_register("half", key, CAP // 2))
    status, _, code = _refused(
        stub.SystemSharedMemoryRegister, _register("more", key, CAP // 2 + 1)
    )
    assert (status, code) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "LIMIT_EXCEEDED")


def test_a_region_beyond_its_file_is_refused(stub, regions):
    key, _ = regions(100)
    status, message, code = _refused(stub.SystemSharedMemoryRegister, _register("r", key, 60, 50))
    assert (status, code) == (grpc.StatusCode.INVALID_ARGUMENT, "INPUT_INVALID")
    assert "offset + byte_size is 110, beyond" in message


def _images_in(stub, regions, images, name, size):
    """The images, in a region of `size` bytes registered as `name`."""
    key, handle = regions(size)
    shm.set_shared_memory_region(handle, [images])
    stub.SystemSharedMemoryRegister(_register(name, key, size))


def test_an_offset_and_size_beyond_the_region_are_refused(stub, regions, images):
    _images_in(stub, regions, images, "in4", IMAGES_BYTES + 4)
    status, message, code = _refused(stub.ModelInfer, _infer("in4", IMAGES_BYTES, 8))
    assert (status, code) == (grpc.StatusCode.INVALID_ARGUMENT, "INPUT_INVALID")
    assert "input 'images': bytes [8, 12552) are outside region 'in4'" in message
    output = ("in4", RESULT_BYTES, IMAGES_BYTES)
    status, message, code = _refused(stub.ModelInfer, _infer("in4", IMAGES_BYTES, 0, output))
    assert (status, code) == (grpc.StatusCode.INVALID_ARGUMENT, "INPUT_INVALID")
    assert "output 'result': bytes [12544, 12704) are outside region 'in4'" in message


def test_a_size_not_the_declared_tensor_s_is_refused(stub, regions, images):
    _images_in(stub, regions, images, "in4", IMAGES_BYTES + 4)
    status, message, code = _refused(stub.ModelInfer, _infer("in4", IMAGES_BYTES + 4))
    assert (status, code) == (grpc.StatusCode.INVALID_ARGUMENT, "INPUT_INVALID")
    assert "shared_memory_byte_size 12548, expected 12544 bytes for its shape" in message
    output = ("in4", RESULT_BYTES - 4)
    status, message, code = _refused(stub.ModelInfer, _infer("in4", IMAGES_BYTES, 0, output))
    assert (status, code) == (grpc.StatusCode.INVALID_ARGUMENT, "INPUT_INVALID")
    assert "output 'result': shared_memory_byte_size 156, expected at least 160" in message


def test_a_region_not_registered_is_refused(stub, regions, images):
    status, message, code = _refused(stub.ModelInfer, _infer("nowhere", IMAGES_BYTES))
    assert (status, code) == (grpc.StatusCode.INVALID_ARGUMENT, "INPUT_INVALID")
    assert "no shared-memory region 'nowhere' is registered" in message
    status, message, code = _refused(
        stub.SystemSharedMemoryStatus, service_pb2.SystemSharedMemoryStatusRequest(name="nowhere")
    )
    assert (status, code) == (grpc.StatusCode.INVALID_ARGUMENT, "INPUT_INVALID")
    absent = f"hlobundle-test-{uuid.uuid4().hex}"  # a key no file has
    status, message, code = _refused(
        stub.SystemSharedMemoryRegister, _register("r", absent, IMAGES_BYTES)
    )
    assert code == "INPUT_INVALID" and f"/dev/shm/{absent} cannot be opened" in message


def test_a_file_of_another_user_is_refused(stub, regions, monkeypatch):
    # The file is ours; the server is made to be another user (its uid + 1), which the file
    # is then not: what a region naming another user's file meets.
    key, _ = regions(IMAGES_BYTES)
    uid = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: uid + 1)
    status, message, code = _refused(
        stub.SystemSharedMemoryRegister, _register("theirs", key, IMAGES_BYTES)
    )
    assert (status, code) == (grpc.StatusCode.INVALID_ARGUMENT, "INPUT_INVALID")
    assert f"is owned by uid {uid}, not the server's" in message


def test_data_both_in_a_region_and_in_the_request_is_refused(stub, regions, images):
    _images_in(stub, regions, images, "in", IMAGES_BYTES)
    both = _infer("in", IMAGES_BYTES)
    both.raw_input_contents.append(images.tobytes())
    status, message, code = _refused(stub.ModelInfer, both)
    assert (status, code) == (grpc.StatusCode.INVALID_ARGUMENT, "INPUT_INVALID")
    assert "raw_input_contents holds more tensors than the inputs that name no" in message
    fewer = service_pb2.ModelInferRequest(model_name="lenet5", raw_input_contents=[b"\0" * 8])
    for _ in range(2):
        fewer.inputs.add(name="images", datatype="FP32", shape=[4, 1, 28, 28])
    assert "holds fewer tensors than the inputs" in _refused(stub.ModelInfer, fewer)[1]
    typed = _infer("in", IMAGES_BYTES)
    typed.inputs[0].contents.fp32_contents.extend(images.ravel().tolist())
    status, message, code = _refused(stub.ModelInfer, typed)
    assert "data in a shared-memory region and in the request too" in message


def test_the_server_s_stop_unregisters_every_region(models, regions, tmp_path):
    # A region is the server's, not a connection's (a channel reconnects; the server ages
    # connections out): what ends it is an unregister, or the server's stop, which closes them.
    key, _ = regions(IMAGES_BYTES)
    path = os.path.join("/dev/shm", key)
    with _grpc.serving(models, uds=str(tmp_path / "s.sock"), max_shared_memory=CAP):
        other = grpcclient.InferenceServerClient(f"unix:{tmp_path / 's.sock'}")
        other.register_system_shared_memory("r", key, IMAGES_BYTES)
        other.close()  # its connection gone: the region stays, for the server's clients
        assert held_open(path) == 1
    assert held_open(path) == 0


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"])
def test_serve_s_shutdown_unregisters_the_regions_of_both_protocols(models, regions, host):
    # What `serve --grpc-port` runs: REST's app, the gRPC server started and drained in its
    # lifespan (`with_grpc`); the lifespan's end (SIGTERM's drain) closes every region, REST's
    # too where gRPC offers none (on 0.0.0.0, beside REST on --uds; loopback is asked for).
    pytest.importorskip("httpx2", reason="Starlette's test client needs httpx2 (the dev extra)")
    from starlette.testclient import TestClient

    from hlobundle._serve._app import app

    rest = app(models, max_shared_memory=CAP)
    regions_of_grpc = _grpc.regions_for(rest, host, None, CAP, over_loopback=True)
    service = _grpc.Service(models, rest, 1 << 20, 60, regions_of_grpc)
    server = _grpc.GrpcServer(service, "127.0.0.1", 0, 8)  # bound to loopback all the same
    port = server.start()
    keys = [regions(8)[0] for _ in range(2)]
    paths = [os.path.join("/dev/shm", key) for key in keys]
    with TestClient(_grpc.with_grpc(rest, server, grace_s=5)) as web:
        url = "/v2/systemsharedmemory/region/by-rest/register"
        assert web.post(url, json={"key": keys[0], "byte_size": 8}).status_code == 200
        if service.regions is not None:
            other = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
            other.register_system_shared_memory("by-grpc", keys[1], 8)
            status = other.get_system_shared_memory_status(as_json=True)["regions"]
            assert sorted(status) == ["by-grpc", "by-rest"]
            other.close()
        assert [held_open(p) for p in paths] == [1, int(service.regions is not None)]
    assert [held_open(p) for p in paths] == [0, 0]


def test_grpc_offers_it_on_its_socket_or_loopback_when_asked(models):
    from hlobundle._serve._app import app

    rest = app(models, max_shared_memory=CAP)  # REST's regions (it is on --uds, or asked)
    assert _grpc.regions_for(rest, "0.0.0.0", "serve-grpc.sock", CAP) is rest.regions  # one set
    assert _grpc.regions_for(rest, "127.0.0.1", None, CAP) is None  # loopback, not asked
    assert _grpc.regions_for(rest, "127.0.0.1", None, CAP, over_loopback=True) is rest.regions
    assert _grpc.regions_for(rest, "0.0.0.0", None, CAP, over_loopback=True) is None
    assert _grpc.regions_for(rest, "0.0.0.0", "serve-grpc.sock", 0) is None  # 0: off
    alone = _grpc.regions_for(app(models), "::1", "g.sock", CAP)  # REST offers none, gRPC does
    assert alone is not None and alone.max_bytes == CAP


def test_a_loopback_port_with_default_options_refuses_a_register(models, regions):
    # The attack: every user of the machine may connect to a loopback TCP port, and register a
    # /dev/shm file of the server's user (mode 0600, made by another process of that user for
    # itself), reading it through the model's outputs or writing outputs into it. The gRPC
    # service on a loopback host with the default options must refuse, saying what to pass.
    key, _ = regions(8)
    with _grpc.serving(models, max_shared_memory=CAP) as port:  # 127.0.0.1, TCP
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        try:
            status, message, code = _refused(
                stub.SystemSharedMemoryRegister, _register("r", key, 8)
            )
            metadata = stub.ServerMetadata(service_pb2.ServerMetadataRequest())
        finally:
            channel.close()
    assert (status, code) == (grpc.StatusCode.INVALID_ARGUMENT, "INPUT_INVALID")
    assert "every user of the machine" in message and "--shared-memory-over-loopback" in message
    assert "system_shared_memory" not in metadata.extensions
    assert held_open(os.path.join("/dev/shm", key)) == 0


def test_a_server_not_offering_it_refuses_every_call(models):
    with _grpc.serving(models) as port:  # max_shared_memory=0: the default
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        try:
            for call, request in [
                (stub.SystemSharedMemoryRegister, _register("r", "k", 8)),
                (stub.SystemSharedMemoryStatus, service_pb2.SystemSharedMemoryStatusRequest()),
                (
                    stub.SystemSharedMemoryUnregister,
                    service_pb2.SystemSharedMemoryUnregisterRequest(),
                ),
            ]:
                status, message, code = _refused(call, request)
                assert (status, code) == (grpc.StatusCode.INVALID_ARGUMENT, "INPUT_INVALID")
                assert "the system shared-memory extension is offered only" in message
            metadata = stub.ServerMetadata(service_pb2.ServerMetadataRequest())
            assert "system_shared_memory" not in metadata.extensions
        finally:
            channel.close()


def test_the_messages_are_triton_s_field_for_field():
    from google.protobuf import descriptor_pb2

    from hlobundle._serve import _grpc_messages, _grpc_shm

    ours = _grpc_messages.messages()
    names = [n for _, request, response in _grpc_shm.RPCS.values() for n in (request, response)]
    for name in names:
        protos = []
        for message in (getattr(ours, name), getattr(service_pb2, name)):
            proto = descriptor_pb2.DescriptorProto()
            message.DESCRIPTOR.CopyToProto(proto)
            protos.append(proto)
        for proto in protos:  # protoc's JSON names, which only one side records
            for field in [*proto.field, *(f for n in proto.nested_type for f in n.field)]:
                field.ClearField("json_name")
        assert protos[0] == protos[1], name
    methods = service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"].methods_by_name
    for name, (_, request, response) in _grpc_shm.RPCS.items():
        assert methods[name].input_type.name == request, name
        assert methods[name].output_type.name == response, name
    assert (
        _grpc.SERVICE == service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"].full_name
    )

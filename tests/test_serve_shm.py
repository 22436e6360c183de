"""The system shared-memory extension of `hlobundle serve`, driven by tritonclient's own
utilities (`tritonclient.utils.shared_memory`, `InferInput.set_shared_memory`...) against a
served process on loopback, offering it there as asked (`--shared-memory-over-loopback`:
tritonclient's HTTP client speaks TCP only): the answer through regions is the in-process
call's, and each way of naming memory the server must not trust is refused with a 400 before
any work. Without the flag, a loopback port refuses it (`--uds` offers it by default)."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import time
import uuid

import helpers
import numpy as np
import pytest
from helpers import ROOT, held_open, shm_regions, triton_shm

import hlobundle
from hlobundle._serve import _shm
from hlobundle._serve._protocol import RequestError

httpclient = pytest.importorskip("tritonclient.http", reason="tritonclient[http] is not installed")
from tritonclient.utils import InferenceServerException  # noqa: E402

EXAMPLE = ROOT / "examples" / "lenet5.hlobundle"
IMAGES_BYTES = 4 * 1 * 28 * 28 * 4  # FP32[4, 1, 28, 28]
RESULT_BYTES = 4 * 10 * 4  # FP32[4, 10]
CAP = 64 << 10  # the server's --max-shared-memory
pytestmark = [
    pytest.mark.subprocess,  # a served process, driven over loopback
    pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm here"),
]


shm = triton_shm()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server():
    port = free_port()
    command = ["serve", str(EXAMPLE), "--backend", "xla"]
    grpc_port = None
    if importlib.util.find_spec("grpc") is not None:  # gRPC beside it, over the same regions
        grpc_port = free_port()
        command += ["--grpc-port", str(grpc_port)]
    proc = helpers.CLI_ZYGOTE.start(  # a fork of the CLI zygote, a process of its own
        *command,
        *("--port", str(port), "--max-shared-memory", str(CAP)),
        "--shared-memory-over-loopback",  # tritonclient's HTTP client speaks TCP only
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    client = httpclient.InferenceServerClient(f"127.0.0.1:{port}")
    client.port = port  # for the requests tritonclient cannot make
    client.grpc_port = grpc_port
    for _ in range(6000):  # 60 s at most, polled every 0.01 s: a start is over within the poll
        try:
            if client.is_server_ready():
                break
        except Exception:  # not listening yet
            time.sleep(0.01)
    else:
        proc.kill()
        pytest.fail(f"the server did not start: {proc.communicate()[1][-2000:]}")
    yield client
    client.unregister_system_shared_memory()
    proc.terminate()
    proc.communicate(timeout=60)


@pytest.fixture(scope="module")
def images():
    return np.asarray(hlobundle.load(EXAMPLE).tensor("images"))


@pytest.fixture
def regions():
    """Make regions with tritonclient (/dev/shm files of ours, mode 0600), destroyed after."""
    with shm_regions() as make:
        yield make


@pytest.fixture
def own_file():
    """A file made here under /dev/shm (`make(size, mode)`): its key; removed after."""
    made = []

    def make(size, mode=0o600):
        key = f"hlobundle-test-{uuid.uuid4().hex}"
        path = os.path.join("/dev/shm", key)
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        made.append(path)
        os.ftruncate(fd, size)
        os.fchmod(fd, mode)  # whatever the umask
        os.close(fd)
        return key

    yield make
    for path in made:
        os.unlink(path)


def _reference(images):
    bundle = hlobundle.load(EXAMPLE)
    args = [images if a.name == "images" else bundle.tensor(a.name) for a in bundle.arguments]
    return np.asarray(bundle.function("xla")(*args))


def _refused(call, *args, **kwargs):
    with pytest.raises(InferenceServerException) as e:
        call(*args, **kwargs)
    return e.value.status(), e.value.message()


def _input(region, size, offset=0):
    inp = httpclient.InferInput("images", [4, 1, 28, 28], "FP32")
    inp.set_shared_memory(region, size, offset)
    return inp


def test_inference_through_regions_equals_the_in_process_call(server, images, regions):
    assert "system_shared_memory" in server.get_server_metadata()["extensions"]
    x = (images * 1.5).astype(np.float32)
    key_in, handle_in = regions(IMAGES_BYTES + 64)
    key_out, handle_out = regions(RESULT_BYTES)
    shm.set_shared_memory_region(handle_in, [x], offset=64)
    server.register_system_shared_memory("in", "/" + key_in, IMAGES_BYTES + 64)
    server.register_system_shared_memory("out", "/" + key_out, RESULT_BYTES)
    status = {r["name"]: r for r in server.get_system_shared_memory_status()}
    assert status["in"] == {
        "name": "in",
        "key": "/" + key_in,  # as given
        "offset": 0,
        "byte_size": IMAGES_BYTES + 64,
    }
    out = httpclient.InferRequestedOutput("result")
    out.set_shared_memory("out", RESULT_BYTES)
    result = server.infer("lenet5", [_input("in", IMAGES_BYTES, 64)], outputs=[out])
    answer = result.get_output("result")
    assert answer == {"name": "result", "datatype": "FP32", "shape": [4, 10]}  # no data
    got = shm.get_contents_as_numpy(handle_out, np.float32, [4, 10])
    np.testing.assert_array_equal(got, _reference(x))
    server.unregister_system_shared_memory("in")
    server.unregister_system_shared_memory("out")
    assert server.get_system_shared_memory_status() == []


def test_one_set_of_regions_serves_rest_and_grpc(server, images, regions):
    # serve --grpc-port beside REST: a region registered over one protocol is named over the
    # other, and unregistered over either.
    grpcclient = pytest.importorskip("tritonclient.grpc", reason="tritonclient[grpc] is missing")
    if server.grpc_port is None:
        pytest.skip("grpcio is not installed (the grpc extra)")
    other = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    key_in, handle_in = regions(IMAGES_BYTES)
    key_out, handle_out = regions(RESULT_BYTES)
    shm.set_shared_memory_region(handle_in, [images])
    server.register_system_shared_memory("in", key_in, IMAGES_BYTES)
    other.register_system_shared_memory("out", key_out, RESULT_BYTES)
    assert set(other.get_system_shared_memory_status(as_json=True)["regions"]) == {"in", "out"}
    inp = grpcclient.InferInput("images", [4, 1, 28, 28], "FP32")
    inp.set_shared_memory("in", IMAGES_BYTES)
    out = grpcclient.InferRequestedOutput("result")
    out.set_shared_memory("out", RESULT_BYTES)
    other.infer("lenet5", [inp], outputs=[out])
    got = shm.get_contents_as_numpy(handle_out, np.float32, [4, 10])
    np.testing.assert_array_equal(got, _reference(images))
    other.unregister_system_shared_memory()
    assert server.get_system_shared_memory_status() == []
    other.close()


def test_a_key_that_is_a_symbolic_link_is_refused(server, own_file):
    target = own_file(IMAGES_BYTES)
    link = f"{target}-link"
    os.symlink(os.path.join("/dev/shm", target), os.path.join("/dev/shm", link))
    try:
        status, message = _refused(
            server.register_system_shared_memory, "link", "/" + link, IMAGES_BYTES
        )
    finally:
        os.unlink(os.path.join("/dev/shm", link))
    assert status == "400" and "is a symbolic link" in message
    assert server.get_system_shared_memory_status() == []


def test_a_region_beyond_its_file_is_refused(server, regions):
    key, _ = regions(100)
    status, message = _refused(server.register_system_shared_memory, "big", "/" + key, 60, 50)
    assert status == "400" and "offset + byte_size is 110, beyond" in message


def test_a_key_that_is_no_regular_file_is_refused(server):
    key = f"hlobundle-test-{uuid.uuid4().hex}"
    os.mkfifo(os.path.join("/dev/shm", key), 0o600)  # a read of it would wait for a writer
    try:
        status, message = _refused(server.register_system_shared_memory, "fifo", key, 8)
    finally:
        os.unlink(os.path.join("/dev/shm", key))
    assert status == "400" and "is not a regular file" in message


def test_a_register_body_is_bounded(server):
    import urllib.error
    import urllib.request

    url = f"http://127.0.0.1:{server.port}/v2/systemsharedmemory/region/r/register"
    body = b'{"key": "k", "byte_size": 8, "pad": "' + b"x" * 5000 + b'"}'
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(urllib.request.Request(url, body, method="POST"), timeout=30)
    assert e.value.code == 413 and b"over the limit of 4096 bytes" in e.value.read()


def test_a_file_its_group_or_others_may_write_is_refused(server, own_file):
    key = own_file(IMAGES_BYTES, 0o666)
    status, message = _refused(server.register_system_shared_memory, "open", key, IMAGES_BYTES)
    assert status == "400" and "writable by its group or others (mode 666)" in message


def test_registrations_over_the_cap_are_refused(server, regions):
    key, _ = regions(CAP)
    server.register_system_shared_memory("half", key, CAP // 2)
    try:
        status, message = _refused(
            server.register_system_shared_memory, "more", key, CAP // 2 + 1, CAP // 2 - 1
        )
        assert status == "413" and f"over the limit of {CAP} (--max-shared-memory)" in message
        server.register_system_shared_memory("rest", key, CAP // 2, CAP // 2)  # up to the cap
    finally:
        server.unregister_system_shared_memory()


def test_a_request_size_not_the_tensors_bytes_is_refused(server, regions, images):
    key, handle = regions(IMAGES_BYTES + 4)
    shm.set_shared_memory_region(handle, [images])
    server.register_system_shared_memory("in4", key, IMAGES_BYTES + 4)
    try:
        status, message = _refused(server.infer, "lenet5", [_input("in4", IMAGES_BYTES + 4)])
        assert status == "400" and "expected 12544 bytes for its shape" in message
        status, message = _refused(server.infer, "lenet5", [_input("in4", IMAGES_BYTES, 8)])
        assert status == "400" and "bytes [8, 12552) are outside region 'in4'" in message
        out = httpclient.InferRequestedOutput("result")
        out.set_shared_memory("in4", RESULT_BYTES - 4)
        status, message = _refused(
            server.infer, "lenet5", [_input("in4", IMAGES_BYTES)], outputs=[out]
        )
        assert status == "400" and "expected at least 160 bytes" in message
    finally:
        server.unregister_system_shared_memory("in4")


def test_a_region_unregistered_is_refused(server, regions, images):
    key, handle = regions(IMAGES_BYTES)
    shm.set_shared_memory_region(handle, [images])
    server.register_system_shared_memory("gone", key, IMAGES_BYTES)
    server.infer("lenet5", [_input("gone", IMAGES_BYTES)])
    server.unregister_system_shared_memory("gone")
    status, message = _refused(server.infer, "lenet5", [_input("gone", IMAGES_BYTES)])
    assert status == "400" and "no shared-memory region 'gone' is registered" in message


def test_a_file_shrunk_after_registering_is_an_error_not_a_crash(server, own_file, images):
    key = own_file(IMAGES_BYTES)
    server.register_system_shared_memory("shrunk", key, IMAGES_BYTES)
    try:
        with open(os.path.join("/dev/shm", key), "r+b") as f:
            f.truncate(0)  # a read of the mapping past the end would be a SIGBUS
        status, message = _refused(server.infer, "lenet5", [_input("shrunk", IMAGES_BYTES)])
        assert status == "400" and "its file was shrunk" in message
        assert server.is_server_live()
    finally:
        server.unregister_system_shared_memory("shrunk")


@pytest.mark.parametrize(
    ("name", "key", "expected"),
    [
        ("a b", "k", "region name 'a b' must be 1 to 128"),
        ("x" * 129, "k", "must be 1 to 128"),
        ("ok", "/../etc/passwd", "key '../etc/passwd' must be 1 to 128"),
        ("ok", "/..", "key '/..' names no file"),
    ],
)
def test_names_and_keys_are_bounded_and_validated(server, name, key, expected):
    status, message = _refused(server.register_system_shared_memory, name, key, 8)
    assert status == "400" and expected in message


def test_a_unix_socket_offers_it_and_loopback_only_when_asked():
    for host in ("127.0.0.1", "127.0.0.2", "::1", "localhost"):
        assert not _shm.offered(host, None), host  # every user of the machine may connect
        assert _shm.offered(host, None, over_loopback=True), host
    for host in ("0.0.0.0", "::", "192.168.1.2", "example.com", "localhost."):
        assert not _shm.offered(host, None, over_loopback=True), host
    assert _shm.offered("0.0.0.0", "serve.sock")  # --uds: the socket, not --host, is listened on


def test_serve_offers_it_only_on_its_socket_or_loopback_when_asked():
    from argparse import Namespace

    from hlobundle._cli._commands import _shared_memory

    def served(host, uds=None, over_loopback=False):
        args = Namespace(host=host, uds=uds, max_shared_memory=CAP)
        return _shared_memory(Namespace(**vars(args), shared_memory_over_loopback=over_loopback))

    assert served("127.0.0.1") == 0
    assert served("127.0.0.1", over_loopback=True) == CAP
    assert served("0.0.0.0", over_loopback=True) == 0
    assert served("0.0.0.0", "s.sock") == CAP


def test_a_server_that_does_not_offer_it_refuses_regions():
    pytest.importorskip("httpx2", reason="Starlette's test client needs httpx2")
    from starlette.testclient import TestClient

    from hlobundle._serve._app import app

    client = TestClient(app({}))  # max_shared_memory=0: what serve runs off loopback
    r = client.post("/v2/systemsharedmemory/region/r/register", json={"key": "k", "byte_size": 8})
    assert r.status_code == 400 and "offered only on a unix socket" in r.json()["error"]
    assert "system_shared_memory" not in client.get("/v2").json()["extensions"]


def test_the_server_s_stop_unregisters_every_region(own_file):
    # A region is the server's, not a connection's: the end of the app's lifespan (uvicorn's,
    # once SIGTERM's drain is done) closes every region's file.
    pytest.importorskip("httpx2", reason="Starlette's test client needs httpx2")
    from starlette.testclient import TestClient

    from hlobundle._serve._app import app

    key = own_file(8)
    with TestClient(app({}, max_shared_memory=CAP)) as client:
        url = "/v2/systemsharedmemory/region/r/register"
        assert client.post(url, json={"key": key, "byte_size": 8}).status_code == 200
        assert held_open(os.path.join("/dev/shm", key)) == 1
    assert held_open(os.path.join("/dev/shm", key)) == 0


def test_what_was_checked_is_what_runs(own_file):
    # The input's bytes are copied out of the mapping once: a client writing the region after
    # the request was checked changes nothing of the array that runs.
    key = own_file(16)
    regions = _shm.Regions(1 << 10)
    regions.register("r", {"key": key, "offset": 0, "byte_size": 16})
    try:
        use = regions.checked(
            "input 'x'",
            {"shared_memory_region": "r", "shared_memory_byte_size": 16},
            16,
            exact=True,
        )
        read = regions.read(use)
        with open(os.path.join("/dev/shm", key), "r+b") as f:
            f.write(b"\xff" * 16)
        assert bytes(read) == bytes(16)
    finally:
        regions.close()


def test_an_output_larger_than_its_checked_size_is_never_written_past_it(own_file):
    # The size was checked against the output's declared shape before the model ran; an output
    # that comes back larger (a module returning more than its signature says) must not run on
    # past its use, into the rest of the client's file or beyond its end (growing it).
    key = own_file(32)
    regions = _shm.Regions(1 << 10)
    regions.register("r", {"key": key, "offset": 0, "byte_size": 16})
    try:
        params = {"shared_memory_region": "r", "shared_memory_byte_size": 8}
        use = regions.checked("output 'y'", params, 8, exact=False)
        with pytest.raises(RequestError, match="40 bytes, more than the 8"):
            regions.write(use, b"\x02" * 40)
        with open(os.path.join("/dev/shm", key), "rb") as f:
            assert f.read() == bytes(32)  # nothing written, the file's size unchanged
    finally:
        regions.close()


def _served_app(*flags):
    """The REST app `serve EXAMPLE FLAGS` would build (no models, the same shared memory)."""
    from starlette.testclient import TestClient

    from hlobundle._cli._commands import _shared_memory
    from hlobundle._cli._parser import build
    from hlobundle._serve._app import app

    args = build().parse_args(["serve", str(EXAMPLE), *flags])
    return TestClient(app({}, max_shared_memory=_shared_memory(args)))


def test_a_loopback_port_with_default_options_refuses_a_register(own_file):
    # The attack: every user of the machine may connect to a loopback TCP port, and register a
    # /dev/shm file of the server's user (mode 0600, made by another process of that user for
    # itself), reading it through the model's outputs or writing outputs into it. serve on a
    # loopback --host with its default options must refuse, saying why and what to pass.
    pytest.importorskip("httpx2", reason="Starlette's test client needs httpx2")
    key = own_file(8)
    url = "/v2/systemsharedmemory/region/r/register"
    client = _served_app("--host", "127.0.0.1")
    r = client.post(url, json={"key": key, "byte_size": 8})
    assert r.status_code == 400 and r.json()["code"] == "INPUT_INVALID"
    assert "every user of the machine" in r.json()["error"]
    assert "--shared-memory-over-loopback" in r.json()["error"]
    assert "system_shared_memory" not in client.get("/v2").json()["extensions"]
    assert held_open(os.path.join("/dev/shm", key)) == 0
    # said explicitly, it is offered there (and on --uds, whatever --host is, by default)
    for flags in (["--shared-memory-over-loopback"], ["--host", "0.0.0.0", "--uds", "s.sock"]):
        with _served_app(*flags) as client:
            assert client.post(url, json={"key": key, "byte_size": 8}).status_code == 200

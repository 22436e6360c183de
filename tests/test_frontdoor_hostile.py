"""A compromised or broken front door (`serve --frontends`), played on the socket pair: the process
that holds the device trusts nothing a front door sends. A message it cannot read, a call naming
bytes outside its buffer, a shape or dtype the bytes cannot hold, a model not served, a buffer
its front door could shrink under it: each is answered with a 500 where it has an id to answer
(never a lost answer, which would hang the front door's client), its descriptors are closed (none
kept open by a message refused), and the next call is answered as before."""

from __future__ import annotations

import asyncio
import math
import mmap
import os
import select
import socket
import types

import numpy as np
import orjson
import pytest
from helpers import small_bundle

pytest.importorskip("starlette", reason="the serve extra is not installed")

from frontdoor_pair import compromised_door  # noqa: E402

from hlobundle._format._errors import BackendUnsupportedError  # noqa: E402
from hlobundle._serve import _app, _arena, _frontdoor, _grpc, _wire  # noqa: E402
from hlobundle._serve._models import load_models  # noqa: E402
from hlobundle._serve._protocol import Relayed  # noqa: E402

SIZE = 1 << 16
X = np.arange(12, dtype=np.float32).reshape(4, 3)
W = np.linspace(-1, 1, 6, dtype=np.float32).reshape(3, 2)
INPUTS = [["x", "float32", [4, 3], 0], ["w", "float32", [3, 2], 64]]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return load_models([small_bundle(tmp_path_factory.mktemp("m"))], backend="xla")


@pytest.fixture(scope="module")
def name(models):
    return next(iter(models))


@pytest.fixture(scope="module")
def door(models, name):
    """The front door's end, its buffer 1 (the inputs written) known to the device already."""
    with compromised_door(models) as sock:
        fd = _arena.anonymous(SIZE)
        view = mmap.mmap(fd, SIZE)
        np.frombuffer(view, np.float32, 12, 0)[:] = X.ravel()
        np.frombuffer(view, np.float32, 6, 64)[:] = W.ravel()
        assert _ask(sock, _good(name, 0), [fd])[2] == 200
        yield sock
        view.close()


def _good(name, number):
    return ["call", number, name, 1, SIZE, INPUTS, 128]


def _send(sock, data: bytes, fds=()) -> None:
    """`data` sent with `fds`, which are then closed here: the device's are its own."""
    socket.send_fds(sock, [data], list(fds)) if fds else sock.send(data)
    for fd in fds:
        os.close(fd)


def _ask(sock, message, fds=()):
    _send(sock, orjson.dumps(message), fds)
    return orjson.loads(sock.recv(1 << 20))


def _messages(data: bytes) -> list:
    """The messages of one datagram: itself, or those of a batch (`_wire`)."""
    message = orjson.loads(data)
    return message[1:] if message[0] == "batch" else [message]


def _open_fds() -> int:
    """The shared buffers open in this process (the device's loop runs in it): memfds."""
    links = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            links.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:  # closed meanwhile (the listing's own)
            pass
    return sum(link.startswith("/memfd:") for link in links)


def _still_answers(door, name) -> None:
    """A good call after the hostile ones is answered, with the model's result."""
    _, number, status, placed = _ask(door, _good(name, 99))
    assert (number, status) == (99, 200), placed
    ((result, dtype, shape, at),) = placed
    assert (result, dtype, shape) == ("result", "float32", [4, 2])


def _sealed(size: int = SIZE) -> int:
    return _arena.anonymous(size)


@pytest.mark.parametrize(
    "call",
    [
        ["call", 7],  # too few fields
        ["call", 7, "m", 2, SIZE, INPUTS, 128, "more"],  # too many
        ["call", 7, "m", 2, -1, INPUTS, 128],  # a negative size
        ["call", 7, "m", 2, 1 << 62, INPUTS, 128],  # a size no mapping can have
        ["call", 7, "m", [2], SIZE, INPUTS, 128],  # a buffer id no dict takes
    ],
)
def test_a_call_the_device_cannot_read_is_answered_and_its_descriptors_closed(door, name, call):
    # A front door waits for each call's answer: an unreadable call must still be answered
    # (else that client hangs), and the descriptor it carried closed (else each one leaks).
    call = [name if field == "m" else field for field in call]
    before = _open_fds()
    _, number, status, body = _ask(door, call, [_sealed()])
    assert (number, status) == (7, 500)
    assert "the front door's call could not be read" in body["error"]
    _still_answers(door, name)  # the device is done with the call before this one
    assert _open_fds() == before


@pytest.mark.parametrize(
    "inputs",
    [
        [["x", "float32", [1 << 40, 1 << 40], 0], INPUTS[1]],  # a shape no count can hold
        [["x", "float32", [4, 3], 1 << 62], INPUTS[1]],  # an offset past any buffer
        [["x", "float32", [-1, 4, 4], 0], INPUTS[1]],  # numpy's count -1: the whole buffer
        [["x", "float32", [4, 3], -64], INPUTS[1]],  # before the buffer
        [["x", "float32", [4, 3], SIZE - 8], INPUTS[1]],  # running past its end
        [["x", "no_such_dtype", [4, 3], 0], INPUTS[1]],  # no dtype at all
        [["x", "float32", [4, 3]], INPUTS[1]],  # no offset
        "inputs",  # not a list of inputs
    ],
)
def test_inputs_outside_the_buffer_are_refused_without_reading_there(door, name, inputs):
    _, number, status, body = _ask(door, ["call", 8, name, 1, SIZE, inputs, 128])
    assert (number, status) == (8, 500), body
    assert "the front door's call could not be read" in body["error"]
    _still_answers(door, name)


def test_a_shape_is_checked_before_its_values_are_counted(door, name, monkeypatch):
    # the count is the product of the sizes: 50,000 sizes near 2**63 in one message (1 MB)
    # made a 3-million-bit integer, which took the device's event loop 7.6 s of CPU
    counted = []

    def prod(sizes):
        counted.append(len(sizes))
        return math.prod(sizes)

    monkeypatch.setattr(_frontdoor, "math", types.SimpleNamespace(prod=prod))
    inputs = [["x", "float32", [(1 << 63) - 1] * 1000, 0], INPUTS[1]]
    _, number, status, body = _ask(door, ["call", 9, name, 1, SIZE, inputs, 128])
    assert (number, status) == (9, 500), body
    assert "the front door's call could not be read" in body["error"]
    _still_answers(door, name)
    assert counted and max(counted) <= 64  # an array's most dimensions


@pytest.mark.parametrize(
    "raw",
    [
        b"{not json",
        b"5",
        b"[]",
        b'{"call": 1}',
        b'"call"',
        b'["forget", 5]',
        b'["forget", [[1]]]',
        b'["no such kind"]',
        b"[" * 10_000,
        b'["batch"]',  # a batch carries no descriptor: it is closed, and so are these
        b'["batch", 5, [], {"call": 1}, ["no such kind"]]',
        b'["batch", ["batch", ["no such kind"]]]',  # one inside another: an unknown kind
    ],
)
def test_a_message_that_is_no_call_is_dropped_and_its_descriptors_closed(door, name, raw):
    before = _open_fds()
    _send(door, raw, [_sealed()])
    _still_answers(door, name)  # messages are handled in order: this one's is done
    assert _open_fds() == before


def test_the_calls_of_a_batch_are_answered_each(door, name):
    # A front door sends the messages of one turn of its loop as one datagram (`_wire`).
    batch = orjson.dumps(["batch", _good(name, 21), ["batch", _good(name, 22)], _good(name, 23)])
    _send(door, batch)
    answers = []
    while len(answers) < 2:
        answers += _messages(door.recv(1 << 20))
    assert sorted((a[1], a[2]) for a in answers) == [(21, 200), (23, 200)]
    _still_answers(door, name)  # and the nested call was never answered


def test_a_batch_larger_than_a_front_door_makes_is_dropped_whole(door, name):
    # A front door's batch holds under `BATCH_BYTES` of messages: one datagram of 11,000 calls
    # (a megabyte: 116,000) would have the device's loop make and answer every one in a turn
    calls = [b'["call",%d]' % k for k in range(11_000)]
    batch = b'["batch",' + b",".join(calls) + b"]"
    assert len(batch) > 2 * _wire.BATCH_BYTES
    _send(door, batch)
    _send(door, orjson.dumps(_good(name, 99)))
    answered = []
    while 99 not in answered:
        answered += [a[1] for a in _messages(door.recv(1 << 20))]
    assert answered == [99]


def test_an_answer_that_overruns_its_buffer_is_a_500_not_a_lost_answer(door, name):
    # The results' room is the front door's to make: too little of it is the front door's
    # failure, answered as one (the RequestError(500) it raised had no code, and answering it
    # raised KeyError: no answer, the client waiting for ever).
    _, number, status, body = _ask(door, ["call", 9, name, 1, SIZE, INPUTS, SIZE - 8])
    assert (number, status) == (9, 500)
    assert "more than its shape's" in body["error"]
    _still_answers(door, name)


class _Context:
    """What `_grpc.Service._refusing` asks of a gRPC call's context."""

    def __init__(self) -> None:
        self.code = None

    def set_trailing_metadata(self, metadata) -> None:
        self.code = dict(metadata)[_grpc.ERROR_CODE_KEY]

    async def abort(self, status, message):
        raise _Aborted(status, self.code)


class _Aborted(Exception):
    pass


def _answered_over_grpc(service, error):
    async def failing(request, context):
        raise error

    context = _Context()
    with pytest.raises(_Aborted) as aborted:
        asyncio.run(service._refusing(failing)(None, context))
    return aborted.value.args


@pytest.mark.parametrize(
    "error",
    [ValueError("broken"), BackendUnsupportedError("the backend lacks an op")],
    ids=["the model failed", "the function refused the inputs"],
)
def test_a_failure_relayed_by_a_front_door_is_answered_over_grpc_as_by_one_process(
    models, name, error
):
    # A front door relays the device's answer to a failure (`failure`: a status and its JSON)
    # as `Relayed`; over gRPC it must get the status and error code the one-process server
    # gives the failure itself (before: a 500 had no code, and asking for it raised KeyError:
    # grpc's UNKNOWN; a 400 got INPUT_INVALID, not the function's own code).
    pytest.importorskip("grpc", reason="grpcio is not installed (the grpc extra)")
    service = _grpc.Service(models, _app.app(models), 1 << 20)
    relayed = Relayed(*_app.failure(models[name], error))
    assert _answered_over_grpc(service, relayed) == _answered_over_grpc(service, error)


@pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="no memfd here: nothing to seal")
def test_a_buffer_its_front_door_could_shrink_is_refused(door, name):
    # A buffer the device maps, shrunk by its front door while the device reads it, is a SIGBUS
    # that ends the device's process (the model with it): the device maps only a buffer sealed
    # against shrinking, as a front door's own are.
    fd = os.memfd_create("unsealed", os.MFD_CLOEXEC)
    os.ftruncate(fd, SIZE)
    _, number, status, body = _ask(door, ["call", 10, name, 3, SIZE, INPUTS, 128], [fd])
    assert (number, status) == (10, 500), body
    assert "the front door's call could not be read" in body["error"]
    _still_answers(door, name)


@pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="no memfd here: nothing to seal")
def test_a_front_door_s_buffers_cannot_shrink():
    fd = _arena.anonymous(SIZE)
    try:
        with pytest.raises(PermissionError):
            os.ftruncate(fd, 0)
        os.ftruncate(fd, 2 * SIZE)  # growing is harmless: what was mapped is still there
    finally:
        os.close(fd)


def test_a_front_door_holds_at_most_its_buffers_however_many_requests_wait():
    # The device keeps a descriptor open for every buffer it maps (Python's mmap keeps its
    # own): 1,500 requests at once on 3 front doors took 1,001 of a soft limit of 1,024, and
    # its process then failed every mapping (EMFILE), for good. A front door's buffers, leased
    # and idle, are bounded: a request over the bound waits for one given back, or an idle one
    # of another size is closed (and named to the device to forget).
    async def run():
        pool = _arena.Pool(max_buffers=2)
        a, b = await pool.lease(10), await pool.lease(10)
        a.known = b.known = True  # as a call's success makes them
        third = asyncio.ensure_future(pool.lease(10))
        await asyncio.sleep(0)
        assert not third.done()  # two leased: it waits
        pool.give_back(a)
        assert await third is a
        pool.give_back(b)
        big = await pool.lease(1 << 20)  # one leased, one idle of another size: closed
        assert pool.forget() == [b.id]
        assert big.size == 1 << 20 and big.id not in (a.id, b.id)
        big.known = True
        waiting = asyncio.ensure_future(pool.lease(10))
        await asyncio.sleep(0)
        waiting.cancel()  # a client gone while it waited: its place is the next one's
        next_one = asyncio.ensure_future(pool.lease(10))
        await asyncio.sleep(0)
        pool.give_back(big)
        assert (await next_one).size == _arena.SMALLEST

    asyncio.run(run())


def test_a_buffer_the_device_could_not_map_is_not_used_again(models):
    # A buffer's descriptor travels with its first call only: where the device could not map
    # it (out of descriptors, or of memory), every later call naming it was answered 500, for
    # good. A front door uses a buffer again only once a call carrying it succeeded.
    from starlette.testclient import TestClient

    from hlobundle._serve import _frontdoor
    from hlobundle._serve._spec import Described

    described = {n: Described.from_json(Described(m).as_json()) for n, m in models.items()}
    door, device = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    device.settimeout(10)
    carried = []

    def play_the_device():
        for status in (500, 200, 200):
            data, fds, _, _ = socket.recv_fds(device, 1 << 20, 8)
            call = orjson.loads(data)
            if call[0] != "call":
                data, fds, _, _ = socket.recv_fds(device, 1 << 20, 8)
                call = orjson.loads(data)
            carried.append((call[3], len(fds)))
            for fd in fds:
                os.close(fd)
            answer = [["result", "float32", [4, 2], call[6]]] if status == 200 else {"error": "x"}
            device.send(orjson.dumps(["answer", call[1], status, answer]))

    import threading

    thread = threading.Thread(target=play_the_device, daemon=True)
    thread.start()
    x = {"name": "x", "datatype": "FP32", "shape": [4, 3], "data": [0.0] * 12}
    w = {"name": "w", "datatype": "FP32", "shape": [3, 2], "data": [0.0] * 6}
    name = next(iter(models))
    with TestClient(_frontdoor.FrontApp(described, _app.Limits(), door)) as client:
        statuses = [
            client.post(f"/v2/models/{name}/infer", json={"inputs": [x, w]}).status_code
            for _ in range(3)
        ]
    thread.join(10)
    device.close()
    door.close()  # the front door's end: its loop, Starlette's test client's, is gone
    assert statuses == [500, 200, 200]
    (first, sent), (second, sent_again), (third, sent_third) = carried
    assert sent == 1 and second != first and sent_again == 1  # a new buffer, its descriptor
    assert (third, sent_third) == (second, 0)  # mapped: used again without


def test_a_flood_of_calls_is_answered_in_full(door, name):
    # A front door that sends faster than it reads: every call is answered, none lost (the
    # device queues what the socket cannot take), and the device answers the next call.
    door.setblocking(False)
    sent, answers, calls = 0, [], [orjson.dumps(_good(name, 1000 + k)) for k in range(500)]
    try:
        while len(answers) < len(calls):
            while sent < len(calls):
                try:
                    door.send(calls[sent])
                except BlockingIOError:
                    break
                sent += 1
            try:
                answers += _messages(door.recv(1 << 20))
            except BlockingIOError:
                select.select([door], [], [], 5)
    finally:
        door.setblocking(True)
        door.settimeout(5)
    assert sorted(a[1] for a in answers) == list(range(1000, 1500))
    assert {a[2] for a in answers} == {200}
    _still_answers(door, name)

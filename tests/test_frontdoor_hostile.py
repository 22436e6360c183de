"""A compromised or broken front door (`serve --frontends`), played on the socket pair: the process
that holds the device trusts nothing a front door sends. A message it cannot read, a call naming
bytes outside its buffer, a shape or dtype the bytes cannot hold, a model not served, a buffer
its front door could shrink under it: each is answered with a 500 where it has an id to answer
(never a lost answer, which would hang the front door's client), its descriptors are closed (none
kept open by a message refused), and the next call is answered as before."""

from __future__ import annotations

import mmap
import os
import socket

import numpy as np
import orjson
import pytest
from helpers import small_bundle

pytest.importorskip("starlette", reason="the serve extra is not installed")

from frontdoor_pair import compromised_door  # noqa: E402

from hlobundle._serve import _arena  # noqa: E402
from hlobundle._serve._models import load_models  # noqa: E402

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


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


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
    assert _open_fds() == before
    _still_answers(door, name)


@pytest.mark.parametrize(
    "inputs",
    [
        [["x", "float32", [1 << 40, 1 << 40], 0], INPUTS[1]],  # a shape no count can hold
        [["x", "float32", [4, 3], 1 << 62], INPUTS[1]],  # an offset past any buffer
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
    ],
)
def test_a_message_that_is_no_call_is_dropped_and_its_descriptors_closed(door, name, raw):
    before = _open_fds()
    _send(door, raw, [_sealed()])
    _still_answers(door, name)  # messages are handled in order: this one's is done
    assert _open_fds() == before

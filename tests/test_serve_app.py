"""`_serve._app.App`: each route a method over the app's own state (its models, limits, metrics
and batchers), which a test drives alone: no server, no routing, no client."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
from helpers import lowered_text

import hlobundle

pytest.importorskip("starlette", reason="the serve extra is not installed")

from hlobundle._serve._app import App, Limits  # noqa: E402
from hlobundle._serve._models import load_models  # noqa: E402


@pytest.fixture(scope="module")
def doubles(tmp_path_factory):
    x = np.zeros(3, np.float32)
    out = tmp_path_factory.mktemp("doubles") / "doubles"
    bundle = hlobundle.pack(lowered_text(lambda x: 2 * x, x), [x], out, names=["x"])
    return load_models([bundle], backend="xla")


def _infer(
    app: App, name: str, body: bytes, version: str | None = None, header: int | None = None
) -> list[dict]:
    """The ASGI messages `app.infer` sends for one POST of `body` (`header`: the length of its
    JSON header, a binary request), called alone."""
    sent: list[dict] = []
    headers = [(b"content-length", str(len(body)).encode())]
    if header is not None:
        headers.append((b"inference-header-content-length", str(header).encode()))
    scope = {"type": "http", "headers": headers}

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message):
        sent.append(message)

    asyncio.run(app.infer(scope, receive, send, name, version))
    return sent


def test_infer_alone_answers_and_counts_in_its_app_s_metrics(doubles):
    app, name = App(doubles, Limits()), next(iter(doubles))
    x = {"name": "x", "shape": [3], "datatype": "FP32", "data": [1, 2, 3]}
    body = json.dumps({"inputs": [x]}).encode()
    start, answer = _infer(app, name, body)
    assert start["status"] == 200, answer
    assert json.loads(answer["body"])["outputs"][0]["data"] == [2, 4, 6]
    start, answer = _infer(app, name, body, version="9")
    assert start["status"] == 404 and b"not '9'" in answer["body"], answer
    counted = app.metrics.text().decode()
    assert f'hlobundle_requests_total{{model="{name}",status="200"}} 1.0' in counted
    assert f'hlobundle_requests_total{{model="{name}",status="404"}} 1.0' in counted
    # another app's state is its own
    assert "hlobundle_requests_total{" not in App(doubles, Limits()).metrics.text().decode()


@pytest.fixture(scope="module")
def flags(tmp_path_factory):
    b = np.zeros(3, np.bool_)
    out = tmp_path_factory.mktemp("flags") / "flags"
    bundle = hlobundle.pack(lowered_text(lambda b: ~b, b), [b], out, names=["b"])
    return load_models([bundle], backend="xla")


def _binary(name: str, datatype: str, data: bytes, size: int | None = None) -> tuple[bytes, int]:
    """A binary request of one input `name` of 3 values whose header says `size` bytes (the
    data's own length unless given): its body and its header's length."""
    size = len(data) if size is None else size
    item = {"name": name, "shape": [3], "datatype": datatype}
    item["parameters"] = {"binary_data_size": size}
    header = json.dumps({"inputs": [item], "parameters": {"binary_data_output": True}}).encode()
    return header + data, len(header)


def test_a_repeated_binary_header_s_data_is_checked_again_and_read_anew(doubles, flags):
    # the checks of a header seen before are kept (`_repeated`); its data is every request's
    app = App({**doubles, **flags}, Limits())
    x = "doubles"  # (both bundles are also "main": their function's name)
    for values in ([1, 2, 3], [4, 5, 6]):
        body, header = _binary("x", "FP32", np.float32(values).tobytes())
        start, answer = _infer(app, x, body, header=header)
        assert start["status"] == 200, answer
        assert np.frombuffer(answer["body"][-12:], "<f4").tolist() == [2 * v for v in values]
    assert len(app.repeated.kept) == 1
    body, header = _binary("x", "FP32", np.float32([1, 2, 3]).tobytes())
    for extra, why in ((b"\0" * 4, b"no input claims"), (b"", b"4 more bytes, not 12")):
        data = body + extra if extra else body[:-8]
        start, answer = _infer(app, x, data, header=header)
        assert start["status"] == 400 and why in answer["body"], answer
    f = "flags"
    answers = []
    for data in (bytes([1, 0, 1]), bytes([1, 2, 1])):  # the same header: a BOOL's bytes again
        body, header = _binary("b", "BOOL", data)
        answers.append(_infer(app, f, body, header=header))
    (start, answer), (refused, why) = answers
    assert start["status"] == 200 and answer["body"][-3:] == bytes([0, 1, 0]), answer
    assert refused["status"] == 400 and b"BOOL bytes must be 0 or 1" in why["body"], why


@pytest.fixture(scope="module")
def counts(tmp_path_factory):
    from jax import lax

    n = np.zeros((), np.int32)
    counting = lambda n: lax.while_loop(lambda c: c < n, lambda c: c + 1, np.int32(0))  # noqa: E731
    out = tmp_path_factory.mktemp("counts") / "counts"
    bundle = hlobundle.pack(lowered_text(counting, n), [n], out, names=["n"])
    return load_models([bundle], backend="xla")


def test_a_model_whose_inputs_may_lengthen_its_loop_never_runs_on_the_event_loop(doubles, counts):
    # Its warm call counts to the stored n (0): short, so it ran on the event loop, where a
    # request's n of 2**31 - 1 held every other request (health too) for as long as it counts
    app = App({**doubles, **counts}, Limits())
    threaded = []

    async def in_thread(fn, *args):
        threaded.append(fn)
        return fn(*args)

    app.in_thread = in_thread
    loops, plain = next(iter(counts.values())), next(iter(doubles.values()))
    loops.call_s = plain.call_s = 0.0  # short warm calls, however loaded the machine
    assert asyncio.run(app.call(loops, {"n": np.int32(3)}))["result"] == 3
    assert threaded == [loops]
    asyncio.run(app.call(plain, {"x": np.ones(3, np.float32)}))
    assert threaded == [loops]  # a module without a loop still runs on it


def test_served_jax_models_run_their_cpu_calls_in_the_calling_thread(doubles):
    # the server waits for each result at once: jax's hand-off to another thread and back
    # costs a small model's call a tenth of its CPU (`_process.inline_cpu_calls`)
    from jax._src import xla_bridge

    assert xla_bridge._CPU_ENABLE_ASYNC_DISPATCH.value is False


def _never_complete():
    """An ASGI `receive` whose body's first byte comes, and then nothing more, ever."""
    sent = False

    async def receive():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": b"{", "more_body": True}
        await asyncio.Event().wait()

    return receive


def test_a_body_that_never_ends_is_answered_408_by_the_sweep():
    from hlobundle._serve._body import BodyDeadlines, read_body
    from hlobundle._serve._protocol import RequestError

    deadlines = BodyDeadlines(0.05)  # read_body's own timer (60 s) is not the one that fires

    async def read():
        reading = read_body(_never_complete(), "999", 1 << 20, 60, deadlines)
        return await asyncio.wait_for(reading, 30)  # without the sweep: a TimeoutError

    with pytest.raises(RequestError, match="did not arrive within 0.05 s") as e:
        asyncio.run(read())
    assert e.value.status == 408 and not deadlines.sweep.due and not deadlines.overdue


def test_a_read_cancelled_by_another_is_not_a_408():
    # The server shutting down cancels a request: the cancellation goes on, not a 408 answer.
    from hlobundle._serve._body import BodyDeadlines, read_body

    deadlines = BodyDeadlines(60.0)

    async def cancelled():
        task = asyncio.ensure_future(read_body(_never_complete(), None, 1 << 20, 60, deadlines))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return deadlines.sweep.due

    assert asyncio.run(cancelled()) == {}

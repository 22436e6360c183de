"""The dynamic batcher (`_serve/_batching.py`) on its own: when a batch runs, which requests it
holds, and that each request gets its own answer or the model's failure."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest

from hlobundle._serve._batching import Batcher


class _Model:
    """Doubles each request's `x`, noting each call's batch size; a call waits for `gate`."""

    def __init__(self, fail: bool = False) -> None:
        self.sizes: list[int] = []
        self.called: list[float] = []  # when each call began (time.monotonic)
        self.gate = threading.Event()
        self.gate.set()
        self.fail = fail

    def call_many(self, many):
        self.sizes.append(len(many))
        self.called.append(time.monotonic())
        if not self.gate.wait(10):
            raise TimeoutError("the test never opened the gate")
        if self.fail:
            raise RuntimeError("boom")
        return [{"y": g["x"] * 2} for g in many]


def _run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 10))


def _ask(batcher, k):
    return batcher({"x": np.array([k], np.float32)})


def test_a_full_batch_runs_without_waiting_out_its_timeout():
    model = _Model()
    batcher = Batcher(model, 3, 30.0, lambda n: None)  # a 30 s timeout: only fullness runs it

    async def main():
        return await asyncio.gather(*[_ask(batcher, k) for k in range(3)])

    answers = _run(main())
    assert model.sizes == [3] and [float(a["y"][0]) for a in answers] == [0.0, 2.0, 4.0]


def test_requests_arriving_while_a_batch_runs_form_the_next_batch():
    model = _Model()
    seen = []
    batcher = Batcher(model, 8, 0.0, seen.append)  # an idle model never waits

    async def main():
        model.gate.clear()
        first = asyncio.ensure_future(_ask(batcher, 1))
        while not model.sizes:  # the first request runs alone, and blocks the model
            await asyncio.sleep(0.001)
        rest = []
        for k in (2, 3, 4):  # one at a time, each time the batcher looks
            rest.append(asyncio.ensure_future(_ask(batcher, k)))
            await asyncio.sleep(0.02)
        assert model.sizes == [1]  # nothing else runs while the model is busy
        model.gate.set()
        return await asyncio.gather(first, *rest)

    answers = _run(main())
    assert model.sizes == seen == [1, 3]
    assert [float(a["y"][0]) for a in answers] == [2.0, 4.0, 6.0, 8.0]


def test_every_request_of_a_failed_batch_gets_the_failure_and_batching_goes_on():
    model = _Model(fail=True)
    batcher = Batcher(model, 2, 30.0, lambda n: None)

    async def main():
        results = await asyncio.gather(_ask(batcher, 1), _ask(batcher, 2), return_exceptions=True)
        model.fail = False
        return results, await asyncio.gather(_ask(batcher, 3), _ask(batcher, 4))

    failed, answers = _run(main())
    assert all(isinstance(e, RuntimeError) and str(e) == "boom" for e in failed)
    assert [float(a["y"][0]) for a in answers] == [6.0, 8.0]


@pytest.mark.slow
@pytest.mark.parametrize("timeout_s", [0.0, 0.5])
def test_an_idle_model_waits_for_others_at_most_the_timeout(timeout_s):
    model = _Model()
    batcher = Batcher(model, 8, timeout_s, lambda n: None)

    async def main():
        first = asyncio.ensure_future(_ask(batcher, 1))
        await asyncio.sleep(0.02)  # within 0.5 s of the first, after 0 s
        second = asyncio.ensure_future(_ask(batcher, 2))
        return await asyncio.gather(first, second)

    asked = time.monotonic()
    _run(main())
    assert model.sizes == ([1, 1] if timeout_s == 0 else [2])
    # The first batch ran when the first request's timeout was out: not before, nor long after.
    waited = model.called[0] - asked
    assert timeout_s <= waited + 0.01 and waited < timeout_s + 0.25, waited


def test_the_worker_is_woken_only_when_a_batch_may_run():
    """While a batch runs, arrivals do not wake the worker (the batch's end does); the model
    idle, the first arrival and the one that makes a full batch do, and no other."""
    model = _Model()
    batcher = Batcher(model, 8, 0.0, lambda n: None)  # an idle model never waits
    woken = []

    async def main():
        model.gate.clear()
        first = asyncio.ensure_future(_ask(batcher, 0))
        while not model.sizes:
            await asyncio.sleep(0.001)
        wake = batcher._wake
        setter = wake.set
        wake.set = lambda: woken.append(len(batcher.waiting)) or setter()
        rest = [asyncio.ensure_future(_ask(batcher, k)) for k in (1, 2, 3, 4)]
        await asyncio.sleep(0.02)
        assert woken == []  # four arrivals while the model is busy
        model.gate.set()
        return await asyncio.gather(first, *rest)

    answers = _run(main())
    assert [float(a["y"][0]) for a in answers] == [0.0, 2.0, 4.0, 6.0, 8.0]
    assert model.sizes == [1, 4] and woken == [4, 0]  # each batch's end alone

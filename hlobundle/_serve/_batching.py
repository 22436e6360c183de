"""Dynamic batching: concurrent requests, each checked alone, for a model whose rows are declared
independent (a batched module, or `independent_rows`; `Served.batchable`) are combined into one
call of at most `max_batch` of them. A batch runs in the model's own worker thread, one at a
time; while one runs, the next gathers every request that arrives (a busy model is the cheapest
wait there is). When the model is idle, a batch waits for others up to `timeout_s` after its
first request arrived, and never once it holds `max_batch`."""

from __future__ import annotations

import asyncio
import collections
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from ._served import Served

_Waiting = tuple[dict[str, np.ndarray], "asyncio.Future[Any]", float]  # inputs, answer, arrival


class Batcher:
    def __init__(
        self, served: Served, max_batch: int, timeout_s: float, observe: Callable[[int], None]
    ) -> None:
        self.served = served
        self.max_batch = max_batch
        self.timeout_s = timeout_s
        self.observe = observe  # told the size of every batch run (for /metrics)
        self.waiting: collections.deque[_Waiting] = collections.deque()
        self.busy = False  # a batch is running
        self._wake: asyncio.Event | None = None  # set when a request arrives or a batch ends
        self._worker: asyncio.Task[None] | None = None
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="hlobundle-batch")

    async def __call__(self, given: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        loop = asyncio.get_running_loop()
        if self._wake is None:  # created on the server's event loop, with its worker
            self._wake = asyncio.Event()
            self._worker = loop.create_task(self._work(self._wake))
        done: asyncio.Future[Any] = loop.create_future()
        self.waiting.append((given, done, loop.time()))
        # The worker waits for a running batch's end (`_answer` wakes it) or, the model idle,
        # for the first request (which arms the deadline) and the one that makes `max_batch`:
        # any other request would wake it for nothing, a step of the worker per request.
        if not self.busy and len(self.waiting) in (1, self.max_batch):
            self._wake.set()
        return await done

    async def _work(self, wake: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        while True:
            while self.busy or not self._gathered(loop.time()):
                wake.clear()
                if self.busy or not self.waiting:
                    await wake.wait()
                    continue
                try:
                    async with asyncio.timeout_at(self._deadline()):
                        await wake.wait()
                except TimeoutError:
                    pass
            count = min(len(self.waiting), self.max_batch)
            batch = [self.waiting.popleft() for _ in range(count)]
            self.busy = True
            self.observe(len(batch))
            running = loop.run_in_executor(
                self._thread, self.served.call_many, [given for given, _, _ in batch]
            )
            running.add_done_callback(functools.partial(self._answer, batch, wake))

    def _deadline(self) -> float:
        return self.waiting[0][2] + self.timeout_s

    def _gathered(self, now: float) -> bool:
        """Whether the waiting requests are a batch to run now (the model being idle)."""
        if not self.waiting:
            return False
        return len(self.waiting) >= self.max_batch or now >= self._deadline()

    def _answer(self, batch: list[_Waiting], wake: asyncio.Event, running: Any) -> None:
        """Every request of the batch gets its answer, or the model's failure."""
        self.busy = False
        wake.set()
        failed = asyncio.CancelledError() if running.cancelled() else running.exception()
        results = [None] * len(batch) if failed is not None else running.result()
        for (_, done, _), result in zip(batch, results, strict=True):
            if done.done():  # the client left
                continue
            if failed is not None:
                done.set_exception(failed)
            elif isinstance(result, Exception):  # this request alone was refused
                done.set_exception(result)
            else:
                done.set_result(result)

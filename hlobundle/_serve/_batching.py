"""Dynamic batching: concurrent requests for a model with a batched module are combined, up to
`max_batch` of them or as many as arrive within `timeout_s` of the first, into one call."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import numpy as np

from ._models import Served


class Batcher:
    def __init__(
        self, served: Served, max_batch: int, timeout_s: float, observe: Callable[[int], None]
    ) -> None:
        self.served = served
        self.max_batch = max_batch
        self.timeout_s = timeout_s
        self.observe = observe  # told the size of every batch run (for /metrics)
        self.queue: asyncio.Queue[tuple[dict[str, np.ndarray], asyncio.Future[Any]]] | None = None

    async def __call__(self, given: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.queue is None:  # created on the server's event loop, with its worker
            self.queue = asyncio.Queue()
            asyncio.get_running_loop().create_task(self._work(self.queue))
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        await self.queue.put((given, done))
        return await done

    async def _work(
        self, queue: asyncio.Queue[tuple[dict[str, np.ndarray], asyncio.Future[Any]]]
    ) -> None:
        from starlette.concurrency import run_in_threadpool

        loop = asyncio.get_running_loop()
        while True:
            batch = [await queue.get()]
            deadline = loop.time() + self.timeout_s
            while len(batch) < self.max_batch:
                if not queue.empty():  # those already waiting, without a timer each
                    batch.append(queue.get_nowait())
                    continue
                try:
                    batch.append(await asyncio.wait_for(queue.get(), deadline - loop.time()))
                except (TimeoutError, ValueError):
                    break
            self.observe(len(batch))
            try:
                results = await run_in_threadpool(self.served.call_many, [g for g, _ in batch])
            except Exception as e:  # every request of the batch gets the model's failure
                for _, done in batch:
                    if not done.done():
                        done.set_exception(e)
                continue
            for (_, done), result in zip(batch, results, strict=True):
                if not done.done():
                    done.set_result(result)

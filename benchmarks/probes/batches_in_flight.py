"""Would batches in flight at once raise the batcher's rate? A probe-only Batcher variant that
lets K batches run at once (K threads), against hlobundle's (K=1), 16 coroutines, no HTTP."""

import asyncio
import os
import resource
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.append(os.getcwd())
import numpy as np

import hlobundle
from hlobundle._serve._batching import Batcher
from hlobundle._serve._models import load_models

B = "examples/lenet5.hlobundle"
served = load_models([B], backend="xla", max_batch=16, trust=hlobundle.Trust.BATCHED)["lenet5"]
g = {"images": np.asarray(hlobundle.load(B).tensor("images"))}
for n in range(1, 17):
    served.call_many([g] * n)


class Pipelined(Batcher):
    def __init__(self, served, max_batch, timeout_s, observe, k):
        self.k, self.running = k, 0
        super().__init__(served, max_batch, timeout_s, observe)
        self.running = 0
        self._thread = ThreadPoolExecutor(k)

    @property
    def busy(self):
        return self.running >= self.k

    @busy.setter
    def busy(self, value):
        self.running += 1 if value else -1


def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def drive(bat, clients=16, per=400):
    async def main():
        async def c():
            for _ in range(per):
                await bat(g)

        await asyncio.gather(*[c() for _ in range(clients)])

    loop = asyncio.new_event_loop()
    loop.run_until_complete(main())
    rates = []
    for _ in range(3):
        c0, t0 = cpu(), time.perf_counter()
        loop.run_until_complete(main())
        rates.append(clients * per / (time.perf_counter() - t0))
    return statistics.median(rates), (cpu() - c0) / (clients * per) * 1e6


for k in (1, 2, 3, 1, 2, 3):
    sizes = []
    bat = (
        Batcher(served, 16, 0.002, sizes.append)
        if k == 1
        else Pipelined(served, 16, 0.002, sizes.append, k)
    )
    rate, c = drive(bat)
    print(
        f"batches in flight {k}: {rate:.0f} req/s, {c:.0f} us CPU/req, "
        f"mean batch {statistics.mean(sizes[-100:]):.1f}"
    )
t0 = time.perf_counter()
for _ in range(300):
    served.call_many([g] * 16)
print("call_many(16) back to back: %.0f req/s" % (300 * 16 / (time.perf_counter() - t0)))

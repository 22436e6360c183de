"""Where batched serving's time goes, no HTTP: 16 concurrent coroutines through hlobundle's
batcher alone, through a probe-only variant of it that lets 2 or 3 batches run at once, and
through the whole ASGI app (binary infer), batching and not; the model's calls one by one and
batched. Requests/s and CPU a request."""

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
from benchmarks import serve_client as client
from benchmarks.serving import infer_scope
from hlobundle._serve import _app
from hlobundle._serve._batching import Batcher
from hlobundle._serve._models import load_models

B = "examples/lenet5.hlobundle"


class InFlight(Batcher):
    """A batcher that lets `k` batches run at once, each in a thread of its own."""

    def __init__(self, served, max_batch, timeout_s, observe, k):
        self.k, self.running = k, 0
        super().__init__(served, max_batch, timeout_s, observe)
        self.running = 0  # Batcher's own `busy = False` counted one down
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


def drive(make_one, clients=16, per=300, rounds=3):
    """Median requests/s of `rounds` rounds of `clients` coroutines awaiting `make_one()` `per`
    times each (after one round untimed), and the CPU a request over all of them, in us."""

    async def main():
        async def c():
            for _ in range(per):
                await make_one()

        await asyncio.gather(*[c() for _ in range(clients)])

    loop = asyncio.new_event_loop()
    loop.run_until_complete(main())  # warm
    rates, c0 = [], cpu()
    for _ in range(rounds):
        t0 = time.perf_counter()
        loop.run_until_complete(main())
        rates.append(clients * per / (time.perf_counter() - t0))
    loop.close()
    return statistics.median(rates), (cpu() - c0) / (rounds * clients * per) * 1e6


def calls(served, g):
    """The model's calls one by one, and batched by 8 and 16."""
    t0, c0 = time.perf_counter(), cpu()
    for _ in range(500):
        served(g)
    t = time.perf_counter() - t0
    print(f"one by one: {500 / t:.0f} req/s, {(cpu() - c0) / 500 * 1e6:.0f} us CPU/req")
    for n in (8, 16):
        t0, c0 = time.perf_counter(), cpu()
        for _ in range(200):
            served.call_many([g] * n)
        t = time.perf_counter() - t0
        print(f"call_many({n}): {t / 200 * 1e3:.3f} ms/call, {(cpu() - c0) / 200 * 1e6:.0f} us CPU")


def batchers(served, g):
    """The batcher (1 batch at a time; waiting 2 ms or not) and the in-flight variant."""
    cases = [("batcher, 2 ms wait", 0.002, 1), ("batcher, no wait", 0.0, 1)]
    cases += [(f"{k} batches in flight", 0.002, k) for k in (2, 3)]
    for name, timeout_s, k in cases:
        sizes = []
        if k == 1:
            bat = Batcher(served, 16, timeout_s, sizes.append)
        else:
            bat = InFlight(served, 16, timeout_s, sizes.append, k)
        rate, c = drive(lambda bat=bat: bat(g))
        mean = statistics.mean(sizes[-200:])
        print(f"{name}: {rate:.0f} req/s, {c:.0f} us CPU/req, mean batch {mean:.1f}")


def apps(served, images):
    """The whole ASGI app, a binary infer, no HTTP: batching up to 16 and not."""
    header, body = client.binary_request(images)
    scope = infer_scope(body, header)

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(m):
        pass

    for mb in (1, 16):
        asgi = _app.app({"lenet5": served}, max_batch=mb)
        rate, c = drive(lambda asgi=asgi: asgi(scope, receive, send))
        print(f"ASGI app no HTTP, max_batch {mb}: {rate:.0f} req/s, {c:.0f} us CPU/req")


def main():
    trust = hlobundle.Trust.BATCHED
    served = load_models([B], backend="xla", max_batch=16, trust=trust)["lenet5"]
    images = np.asarray(hlobundle.load(B).tensor("images"))
    g = {"images": images}
    for n in range(1, 17):  # every batch size compiled before any is timed
        served.call_many([g] * n)
    calls(served, g)
    batchers(served, g)
    apps(served, images)


if __name__ == "__main__":
    main()

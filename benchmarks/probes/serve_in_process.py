"""Where batched serving's time goes, no HTTP: 16 concurrent coroutines through (a) the Batcher
alone, (b) the whole ASGI app (binary infer), with max_batch 16 and 1. requests/s and CPU/request."""

import asyncio
import os
import resource
import statistics
import sys
import time

sys.path.append(os.getcwd())
import numpy as np

import hlobundle
from benchmarks import serve_client as client
from hlobundle._serve import _app
from hlobundle._serve._batching import Batcher
from hlobundle._serve._models import load_models

B = "examples/lenet5.hlobundle"
served = load_models([B], backend="xla", max_batch=16, trust=hlobundle.Trust.BATCHED)["lenet5"]
images = np.asarray(hlobundle.load(B).tensor("images"))
g = {"images": images}
served(g)
served.call_many([g] * 16)
for n in range(2, 17):
    served.call_many([g] * n)


def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def drive(make_one, clients=16, per=300):
    async def main():
        async def c():
            for _ in range(per):
                await make_one()

        await asyncio.gather(*[c() for _ in range(clients)])

    loop = asyncio.new_event_loop()
    loop.run_until_complete(main())  # warm
    c0, t0 = cpu(), time.perf_counter()
    loop.run_until_complete(main())
    t, c = time.perf_counter() - t0, cpu() - c0
    loop.close()
    n = clients * per
    return n / t, c / n * 1e6


sizes = []
bat = Batcher(served, 16, 0.002, sizes.append)
print(
    "batcher alone, 16 clients: {:.0f} req/s, {:.0f} us CPU/req".format(*drive(lambda: bat(g))),
    f"mean batch {statistics.mean(sizes[-200:]):.1f}",
)
bat1 = Batcher(served, 16, 0.0, sizes.append)
print(
    "batcher timeout 0: {:.0f} req/s, {:.0f} us CPU/req".format(*drive(lambda: bat1(g))),
    f"mean batch {statistics.mean(sizes[-200:]):.1f}",
)
# serial calls, one by one
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
    print(
        f"call_many({n}): {t / 200 * 1e3:.3f} ms/call, {(cpu() - c0) / 200 * 1e6:.0f} us CPU/call"
    )

header, body = client.binary_request(images)
length = str(len(header))
scope = {
    "type": "http",
    "method": "POST",
    "path": "/v2/models/lenet5/infer",
    "headers": [
        (b"content-length", str(len(body)).encode()),
        (b"inference-header-content-length", length.encode()),
    ],
}
for mb in (1, 16):
    asgi = _app.app({"lenet5": served}, max_batch=mb)

    async def one():
        async def receive():
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(m):
            pass

        await asgi(scope, receive, send)

    rate, c = drive(one)
    print(f"ASGI app no HTTP, max_batch {mb}: {rate:.0f} req/s, {c:.0f} us CPU/req")

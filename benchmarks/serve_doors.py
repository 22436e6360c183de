"""Several front doors, one device (section `serve-doors`; `serve --frontends N`): requests per
second from forked client processes, each on its own keep-alive connection sending binary LeNet
infers, and serve's CPU per request, every process of it (the one that holds the device and its
front doors, from /proc), for 1 and for 2 front doors; every answer checked against the first.
On the accelerator (benchmarks/accelerator.py, section `doors`) the same over `--uds`. And
(section `serve-loop`; accelerator.py's `loop`) the CPU per request of the process that holds the
device beyond the model, over `--uds`, with a model that costs next to nothing."""

from __future__ import annotations

import numpy as np

from benchmarks import serve_client as client
from benchmarks.harness import ROOT, run_py
from benchmarks.serve_cpu import children, cpu_s

DOORS = (1, 2)


def _cpu_s(pid: int) -> tuple[float, float]:
    """The CPU seconds so far of process `pid` (the one that holds the device), and of its
    children (the front doors) together."""
    return cpu_s(pid), sum(cpu_s(p) for p in children(pid))


def serve_doors_cost(
    tmp: object, quick: bool, uds: bool = False, clients: int = 8, batches: tuple[int, ...] = (1,)
) -> list[dict]:
    """The rows: for each batching limit (`--max-batch-size`, 1: none) and front-door count,
    requests/s (as 1 / s, and over one front door) and serve's CPU per request (ratio: the
    device's process's share of it)."""
    import hlobundle

    images = np.asarray(hlobundle.load(ROOT / "examples" / "lenet5.hlobundle").tensor("images"))
    header, body = client.binary_request(images)
    clients, each = (4, 25) if quick else (clients, 250)
    rows = []
    for max_batch in batches:
        rows += _rows(tmp, body, header, uds, clients, each, max_batch)
    return rows


def _rows(
    tmp: object, body: bytes, header: bytes, uds: bool, clients: int, each: int, max_batch: int
) -> list[dict]:
    rows: list[dict] = []
    base = None
    for doors in DOORS:
        path = str(tmp) + f"/doors-{doors}-{max_batch}.sock" if uds else None
        flags = ("--frontends", str(doors))
        proc, where = client.start_lenet(max_batch, uds=path, ready_s=600, flags=flags)
        try:
            want = client.answer(where, body, header)
            client.load(where, body, len(header), want, clients, each // 5, processes=True)  # warm
            before = _cpu_s(proc.pid)
            rate, wrong = client.load(where, body, len(header), want, clients, each, processes=True)
            after = _cpu_s(proc.pid)
            device_s, doors_s = (
                (a - b) / (clients * each) for a, b in zip(after, before, strict=True)
            )
        finally:
            proc.terminate()
            proc.communicate(timeout=60)
        base = rate if base is None else base
        over = "over --uds" if uds else "over loopback TCP"
        batching = f"batching up to {max_batch}" if max_batch > 1 else "no batching"
        rows += [
            {
                "case": f"--frontends {doors}, {over}, {batching}: binary LeNet infers/s, "
                f"{clients} client processes ({wrong} answers lost or wrong); ratio: over 1 "
                "front door",
                "s": 1 / rate,
                "ratio": rate / base,
            },
            {
                "case": f"--frontends {doors}, {batching}: serve's CPU per request, every process "
                "of it (model included); ratio: the share of the process that holds the device",
                "s": device_s + doors_s,
                "ratio": device_s / (device_s + doors_s),
            },
        ]
    return rows


# A bundle served as the LeNet (its input and result named and shaped as the LeNet's, batched as
# it is with --trust-batched) whose model costs next to nothing: a slice of the images; made, and
# its call's own CPU measured (seconds per call, printed), in a child (on an accelerator, the
# device is the servers' after it).
CHEAP_LENET = """
import sys, time
sys.path.insert(0, {root!r})
import numpy as np
import hlobundle
from hlobundle._serve._models import load_models
images = np.asarray(hlobundle.load({lenet!r}).tensor("images"), "<f4")
def lenet5(images):
    return images[:, 0, 0, :10] * 1.0
hlobundle.export(lenet5, images, out={out!r}, vmap_in_axes=(0,), force=True)
served = load_models([{out!r}], backend="xla")["lenet5"]
given = {{"images": np.frombuffer(images.tobytes(), "<f4").reshape(images.shape)}}
for _ in range(200):
    served(given)
start = time.process_time()
for _ in range({n}):
    served(given)
print((time.process_time() - start) / {n})
"""


def device_loop_cost(
    tmp: object, quick: bool, clients: int = 8, batches: tuple[int, ...] = (1, 16)
) -> list[dict]:
    """The CPU per request of the process that holds the device beyond the model, over --uds:
    the LeNet replaced by a slice of its images (`CHEAP_LENET`: its call's own CPU, measured
    in a child, is a row of its own), for each front-door count and batching limit."""
    import hlobundle

    bundle = str(tmp) + "/cheap/lenet5.hlobundle"
    lenet = ROOT / "examples" / "lenet5.hlobundle"
    code = CHEAP_LENET.format(root=str(ROOT), lenet=str(lenet), out=bundle, n=2000)
    model_s = float(run_py(code)[1].split()[-1])
    images = np.asarray(hlobundle.load(lenet).tensor("images"))
    header, body = client.binary_request(images)
    clients, each = (4, 50) if quick else (clients, 500)
    rows = [{"case": "the slice's own call, unbatched: CPU s per call", "s": model_s, "ratio": 1.0}]
    for max_batch in batches:
        for doors in DOORS:
            path = str(tmp) + f"/loop-{doors}-{max_batch}.sock"
            flags = ("--frontends", str(doors))
            proc, where = client.start_lenet(max_batch, path, 600, flags, bundle=bundle)
            try:
                want = client.answer(where, body, header)
                client.load(where, body, len(header), want, clients, each // 5, processes=True)
                before = _cpu_s(proc.pid)
                rate, wrong = client.load(where, body, len(header), want, clients, each, True)
                after = _cpu_s(proc.pid)
            finally:
                proc.terminate()
                proc.communicate(timeout=60)
            device_s, doors_s = (
                (a - b) / (clients * each) for a, b in zip(after, before, strict=True)
            )
            batching = f"batching up to {max_batch}" if max_batch > 1 else "no batching"
            rows.append(
                {
                    "case": f"--frontends {doors}, {batching}, a slice for a model: the device "
                    f"process's CPU per request ({rate:.0f}/s, {wrong} wrong; 1: one process, HTTP in it); "
                    "ratio: the front doors' CPU per request over it",
                    "s": device_s,
                    "ratio": doors_s / device_s,
                }
            )
    return rows


if __name__ == "__main__":
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as where:
        for row in device_loop_cost(where, "--quick" in sys.argv):
            print(f"{row['s'] * 1e6:9.1f} us  {row['ratio']:6.2f}  {row['case']}", flush=True)

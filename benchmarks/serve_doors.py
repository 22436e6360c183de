"""Several front doors, one device (section `serve-doors`; `serve --frontends N`): requests per
second from forked client processes, each on its own keep-alive connection sending binary LeNet
infers, and serve's CPU per request, every process of it (the one that holds the device and its
front doors, from /proc), for 1 and for 2 front doors; every answer checked against the first.
On the accelerator (benchmarks/accelerator.py, section `doors`) the same over `--uds`."""

from __future__ import annotations

import numpy as np

from benchmarks import serve_client as client
from benchmarks.harness import ROOT
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

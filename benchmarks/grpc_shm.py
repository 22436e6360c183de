"""A small binary infer over gRPC, with and without system shared memory (section `grpc-shm`):
`hlobundle serve` of the shipped LeNet (batch 4: 12,544 bytes in, 160 out) with `--grpc-port`
(or `--grpc-uds`, where the machine allows no TCP socket: `accelerator.py --only grpc-shm`), one
client on one channel asking one request after another, in rounds taken in turns: raw contents
(the tensor in the message, the answer in raw_output_contents), then the input and the output
in regions the client registered once (the request names them; the client writes the input
into its region before each call and reads the answer out of its own after). Requests per
second (the client's wall time) and serve's CPU per request (its process's user and system
time, /proc/PID/stat, every thread, over the requests), beside the model's own call, measured
alone in a fresh process set up as serve's (`serve_cpu`). Every answer is checked against the
first raw one. The client is grpcio over the protocol's own messages (`_grpc_messages`): no
tritonclient, which is not a dependency of the project."""

from __future__ import annotations

import os
import statistics
import time
from multiprocessing import shared_memory
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import serve_client as client
from benchmarks.harness import ROOT, free_port
from benchmarks.serve_cpu import _model_cpu, _model_process, cpu_s

RESULT_BYTES = 4 * 10 * 4  # FP32[4, 10]


class Asker:
    """One channel to serve's gRPC service and its calls: `raw()` and `shared()` each ask one
    inference and give the answer's array."""

    def __init__(self, target: str, images: np.ndarray) -> None:
        import grpc

        from hlobundle._serve._grpc_messages import SERVICE, messages

        self.m = messages()
        self.channel = grpc.insecure_channel(target)
        self.images = np.ascontiguousarray(images, "<f4")

        def call(name: str, response: str) -> Any:
            return self.channel.unary_unary(
                f"/{SERVICE}/{name}",
                request_serializer=lambda r: r.SerializeToString(),
                response_deserializer=getattr(self.m, response).FromString,
            )

        self.infer = call("ModelInfer", "ModelInferResponse")
        self.register = call("SystemSharedMemoryRegister", "SystemSharedMemoryRegisterResponse")
        self.unregister = call(
            "SystemSharedMemoryUnregister", "SystemSharedMemoryUnregisterResponse"
        )
        self.raw_request = self._request(None)
        self.into = shared_memory.SharedMemory(create=True, size=self.images.nbytes)
        self.out_of = shared_memory.SharedMemory(create=True, size=RESULT_BYTES)
        self.shared_request = self._request(("in", "out"))
        self.registered = False

    def _request(self, regions: tuple[str, str] | None) -> Any:
        request = self.m.ModelInferRequest(model_name="lenet5")
        tensor = request.inputs.add(name="images", datatype="FP32", shape=self.images.shape)
        if regions is None:
            request.raw_input_contents.append(self.images.tobytes())
            return request
        into, out_of = regions
        tensor.parameters["shared_memory_region"].string_param = into
        tensor.parameters["shared_memory_byte_size"].int64_param = self.images.nbytes
        output = request.outputs.add(name="result").parameters
        output["shared_memory_region"].string_param = out_of
        output["shared_memory_byte_size"].int64_param = RESULT_BYTES
        return request

    def start_sharing(self) -> None:
        m = self.m.SystemSharedMemoryRegisterRequest
        self.register(m(name="in", key=self.into.name, byte_size=self.images.nbytes), timeout=30)
        self.register(m(name="out", key=self.out_of.name, byte_size=RESULT_BYTES), timeout=30)
        self.registered = True

    def raw(self) -> np.ndarray:
        response = self.infer(self.raw_request, timeout=60)
        return np.frombuffer(response.raw_output_contents[0], "<f4").reshape(4, 10)

    def shared(self) -> np.ndarray:
        self.into.buf[: self.images.nbytes] = self.images.data.cast("B")
        self.infer(self.shared_request, timeout=60)
        return np.frombuffer(self.out_of.buf, "<f4", 40).reshape(4, 10).copy()

    def close(self) -> None:
        if self.registered:
            self.unregister(self.m.SystemSharedMemoryUnregisterRequest(), timeout=30)
        self.channel.close()
        for region in (self.into, self.out_of):
            region.close()
            region.unlink()


def _round(pid: int, ask: Any, n: int, want: np.ndarray) -> tuple[float, float, int]:
    """`n` requests by `ask`: (requests per second, serve's CPU seconds per request, wrong)."""
    wrong = 0
    before, start = cpu_s(pid), time.perf_counter()
    for _ in range(n):
        wrong += not np.array_equal(ask(), want)
    wall = time.perf_counter() - start
    return n / wall, (cpu_s(pid) - before) / n, wrong


def grpc_shm_cost(tmp: Path, quick: bool, uds: bool = False) -> list[dict]:
    """Requests per second and serve's CPU per request, raw contents / shared memory (rounds
    in turns, medians), the model's own call beside them, and the answers that differed."""
    import hlobundle

    images = np.asarray(hlobundle.load(ROOT / "examples" / "lenet5.hlobundle").tensor("images"))
    rounds, n = (3, 100) if quick else (9, 1000)
    model = _model_process(n)
    if uds:
        grpc_at = str(tmp / "grpc-shm.sock")
        flags, target = ("--grpc-uds", grpc_at), f"unix:{grpc_at}"
        proc, _ = client.start_lenet(1, uds=str(tmp / "rest-shm.sock"), ready_s=600, flags=flags)
    else:
        port = free_port()
        flags, target = ("--grpc-port", str(port)), f"127.0.0.1:{port}"
        proc, _ = client.start_lenet(1, flags=flags)
    asker = Asker(target, images)
    try:
        asker.start_sharing()
        want = asker.raw()
        _round(proc.pid, asker.raw, n // 3, want)  # warm: the first requests' allocations
        _round(proc.pid, asker.shared, n // 3, want)
        runs = [
            (
                _round(proc.pid, asker.raw, n, want),
                _round(proc.pid, asker.shared, n, want),
                _model_cpu(model),
            )
            for _ in range(rounds)
        ]
    finally:
        asker.close()
        model.communicate("", timeout=60)
        proc.terminate()
        proc.communicate(timeout=60)
    return _rows(runs, rounds * n * 2, uds)


def _rows(runs: list[Any], asked: int, uds: bool) -> list[dict]:
    def median(mode: int, k: int) -> float:
        return statistics.median(r[mode][k] for r in runs)

    model_s = statistics.median(r[2] for r in runs)
    over = "--grpc-uds" if uds else "loopback --grpc-port"
    rows = []
    for mode, name in ((0, "raw contents"), (1, "shared memory (input and output in regions)")):
        rate, cpu = median(mode, 0), median(mode, 1)
        beyond = statistics.median(r[mode][1] - r[2] for r in runs)
        rows += [
            {
                "case": f"{over}, {name}: requests/s, one client",
                "s": rate,
                "ratio": rate / median(0, 0),
            },
            {
                "case": f"{over}, {name}: serve's CPU per request",
                "s": cpu,
                "ratio": cpu / median(0, 1),
            },
            {
                "case": f"{over}, {name}: serve's CPU beyond the model's call",
                "s": beyond,
                "ratio": beyond / 80e-6,
            },
        ]
    wrong = sum(r[mode][2] for r in runs for mode in (0, 1))
    load = os.getloadavg()[0]
    return [
        *rows,
        {"case": "the model's own call alone, CPU, a fresh process set up as serve's", "s": model_s, "ratio": 1.0},
        {"case": f"answers not the first raw answer, of {asked}", "s": float(wrong), "ratio": 0.0},
        {"case": f"the machine's 1-minute load average at the end ({os.cpu_count()} CPUs)", "s": load, "ratio": load / (os.cpu_count() or 1)},
    ]  # fmt: skip

"""An infer over gRPC, with and without system shared memory (section `grpc-shm`): `hlobundle
serve` with `--grpc-port` and `--shared-memory-over-loopback` (or `--grpc-uds`, where the
machine allows no TCP socket: `accelerator.py --only grpc-shm`) of the shipped LeNet (batch 4: 12,544 bytes in, 160 out: a
small infer) and of `double`, 2x over FP32[1024, 1024] (4 MiB in, 4 MiB out: a large one), one
client on one channel asking one request after another, in rounds taken in turns: raw contents
(the tensor in the message, the answer in raw_output_contents), then the input and the output
in regions the client registered once (the request names them; the client writes the input
into its region before each call and reads the answer out of its own after). Requests per
second (the client's wall time) and serve's CPU per request (its process's user and system
time, /proc/PID/stat, every thread, over the requests); for the LeNet beside the model's own
call, measured alone in a fresh process set up as serve's (`serve_cpu`). Every answer is
checked against the first raw one. The client is grpcio over the protocol's own messages
(`_grpc_messages`): no tritonclient, which is not a dependency of the project. The floor under
any gRPC route, in turns with serve's rounds: a bare grpc.aio server on uvicorn's kind of loop
(uvloop), answering the LeNet's raw request with a prepared answer (`BARE_GRPC`), its CPU per
request (grpc's own: its event loop's work, its poller thread and its core's threads)."""

from __future__ import annotations

import os
import statistics
import subprocess
import time
from dataclasses import dataclass
from multiprocessing import shared_memory
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import serve_client as client
from benchmarks.harness import PY, ROOT, free_port, run_py, user_env
from benchmarks.serve_cpu import _model_cpu, _model_process, cpu_s

LARGE = (1024, 1024)  # `double`'s input and output, FP32
EXPORT_DOUBLE = """
import sys
sys.path.append({root!r})
import numpy as np
import hlobundle
hlobundle.export(lambda x: 2 * x, np.zeros({shape}, np.float32), out={out!r})
"""

# The floor under serve's gRPC: grpc's asyncio server as serve runs it (on uvicorn's kind of
# event loop, with its message limits), answering ModelInfer with a prepared LeNet answer; it
# parses the request, as grpc does for serve, and says where it listens once it does.
BARE_GRPC = """
import sys
sys.path.append({root!r})
import grpc
from uvicorn.loops.auto import auto_loop_factory
from hlobundle._serve._grpc_messages import SERVICE, messages
m = messages()
answer = m.ModelInferResponse(model_name="lenet5", model_version="1")
answer.outputs.add(name="result", datatype="FP32", shape=[4, 10])
answer.raw_output_contents.append(bytes(160))
async def infer(request, context):
    return answer
async def main():
    method = grpc.unary_unary_rpc_method_handler(
        infer,
        request_deserializer=m.ModelInferRequest.FromString,
        response_serializer=m.ModelInferResponse.SerializeToString,
    )
    server = grpc.aio.server(
        handlers=[grpc.method_handlers_generic_handler(SERVICE, {{"ModelInfer": method}})],
        options=[("grpc.max_receive_message_length", 64 << 20), ("grpc.so_reuseport", 0)],
        maximum_concurrent_rpcs=512,
    )
    if not server.add_insecure_port({where!r}):
        raise SystemExit("cannot bind")
    await server.start()
    print("ready", flush=True)
    await server.wait_for_termination()
auto_loop_factory()().run_until_complete(main())
"""


@dataclass(frozen=True)
class Model:
    """A served model's one input and one output: what a request names."""

    name: str
    input: str
    output: str
    value: np.ndarray  # the input, little-endian FP32
    output_bytes: int


class Asker:
    """One channel to serve's gRPC service, and one model's two requests: `raw()` and
    `shared()` each ask one inference and give the answer's array (its bytes)."""

    def __init__(self, target: str, model: Model) -> None:
        import grpc

        from hlobundle._serve._grpc_messages import SERVICE, messages

        self.m, self.model = messages(), model
        self.channel = grpc.insecure_channel(
            target, options=[("grpc.max_receive_message_length", -1)]
        )

        def call(name: str) -> Any:
            return self.channel.unary_unary(
                f"/{SERVICE}/{name}",
                request_serializer=lambda r: r.SerializeToString(),
                response_deserializer=getattr(self.m, f"{name}Response").FromString,
            )

        self.infer = call("ModelInfer")
        self.register = call("SystemSharedMemoryRegister")
        self.unregister = call("SystemSharedMemoryUnregister")
        self.raw_request = self._request(None)
        self.into = shared_memory.SharedMemory(create=True, size=model.value.nbytes)
        self.out_of = shared_memory.SharedMemory(create=True, size=model.output_bytes)
        self.shared_request = self._request((f"{model.name}-in", f"{model.name}-out"))
        self.registered = False

    def _request(self, regions: tuple[str, str] | None) -> Any:
        model = self.model
        request = self.m.ModelInferRequest(model_name=model.name)
        tensor = request.inputs.add(name=model.input, datatype="FP32", shape=model.value.shape)
        if regions is None:
            request.raw_input_contents.append(model.value.tobytes())
            return request
        _name_region(tensor.parameters, regions[0], model.value.nbytes)
        _name_region(
            request.outputs.add(name=model.output).parameters, regions[1], model.output_bytes
        )
        return request

    def start_sharing(self) -> None:
        m, name = self.m.SystemSharedMemoryRegisterRequest, self.model.name
        for region, key, size in [
            (f"{name}-in", self.into.name, self.model.value.nbytes),
            (f"{name}-out", self.out_of.name, self.model.output_bytes),
        ]:
            self.register(m(name=region, key=key, byte_size=size), timeout=30)
        self.registered = True

    def raw(self) -> bytes:
        return bytes(self.infer(self.raw_request, timeout=60).raw_output_contents[0])

    def shared(self) -> bytes:
        self.into.buf[: self.model.value.nbytes] = self.model.value.data.cast("B")
        self.infer(self.shared_request, timeout=60)
        return bytes(self.out_of.buf[: self.model.output_bytes])

    def close(self) -> None:
        if self.registered:
            self.unregister(self.m.SystemSharedMemoryUnregisterRequest(), timeout=30)
        self.channel.close()
        for region in (self.into, self.out_of):
            region.close()
            region.unlink()


def _name_region(params: Any, region: str, size: int) -> None:
    params["shared_memory_region"].string_param = region
    params["shared_memory_byte_size"].int64_param = size


def _bare_grpc(where: str) -> subprocess.Popen:
    """`BARE_GRPC` listening at `where` (grpc's form: HOST:PORT or unix:PATH), once it does."""
    code = BARE_GRPC.format(root=str(ROOT), where=where)
    proc = subprocess.Popen([PY, "-c", code], stdout=subprocess.PIPE, text=True, env=user_env())
    if proc.stdout is None or proc.stdout.readline().strip() != "ready":
        proc.kill()
        raise RuntimeError("the bare gRPC server did not start")
    return proc


def _round(pid: int, ask: Any, n: int, want: bytes) -> tuple[float, float, int]:
    """`n` requests by `ask`: (requests per second, serve's CPU seconds per request, wrong)."""
    wrong = 0
    before, start = cpu_s(pid), time.perf_counter()
    for _ in range(n):
        wrong += ask() != want
    wall = time.perf_counter() - start
    return n / wall, (cpu_s(pid) - before) / n, wrong


def _models(tmp: Path) -> tuple[Model, Model, Path]:
    """The LeNet, and `double` exported into `tmp` (its bundle's path)."""
    import hlobundle

    images = hlobundle.load(ROOT / "examples" / "lenet5.hlobundle").tensor("images")
    lenet = Model("lenet5", "images", "result", np.asarray(images, "<f4"), 4 * 10 * 4)
    x = np.arange(np.prod(LARGE), dtype="<f4").reshape(LARGE) / 7
    bundle = tmp / "double.hlobundle"
    if not bundle.exists():  # in a child: this process never opens the accelerator
        run_py(EXPORT_DOUBLE.format(root=str(ROOT), shape=LARGE, out=str(bundle)))
    return lenet, Model("double", "x", "result", x, x.nbytes), bundle


def grpc_shm_cost(tmp: Path, quick: bool, uds: bool = False) -> list[dict]:
    """Requests per second and serve's CPU per request, raw contents and shared memory, for
    the LeNet and `double` (rounds in turns, medians), the model's own call beside the LeNet's,
    and the answers that differed from the first raw one. With `uds` (the accelerator's
    machine: no TCP, and one process at a time may hold its chip), the model's own rounds run
    first, alone, instead of in turns with the server's."""
    lenet, double, bundle = _models(tmp)
    rounds, n = (3, 60) if quick else (9, 1000)
    model = _model_process(n)
    if uds:
        model_s = [_model_cpu(model) for _ in range(rounds)]
        model.communicate("", timeout=60)  # the end of its input: it exits, freeing the chip
        grpc_at = str(tmp / "grpc-shm.sock")
        flags, target, rest = ("--grpc-uds", grpc_at), f"unix:{grpc_at}", str(tmp / "shm.sock")
    else:
        port = free_port()
        flags = ("--grpc-port", str(port), "--shared-memory-over-loopback")  # off there otherwise
        target, rest = f"127.0.0.1:{port}", None
    proc, _ = client.start_lenet(1, uds=rest, ready_s=600, flags=flags, more=(str(bundle),))
    bare_at = f"unix:{tmp / 'bare-grpc.sock'}" if uds else f"127.0.0.1:{free_port()}"
    bare = _bare_grpc(bare_at)
    askers = [Asker(target, m) for m in (lenet, double)]
    floor = (bare.pid, Asker(bare_at, lenet))
    try:
        model_round = iter(model_s).__next__ if uds else lambda: _model_cpu(model)
        runs = _measure(proc.pid, askers, model_round, rounds, n, floor)
    finally:
        for asker in [*askers, floor[1]]:
            asker.close()
        if not uds:
            model.communicate("", timeout=60)
        for server in (proc, bare):
            server.terminate()
            server.communicate(timeout=60)
    return _rows(runs, "--grpc-uds" if uds else "loopback --grpc-port")


def _measure(
    pid: int, askers: list[Asker], model_round: Any, rounds: int, n: int, floor: tuple[int, Asker]
) -> dict[str, Any]:
    """Each asker's rounds, raw then shared, in turns with the model's own (`model_round()`:
    its CPU seconds per call; `n` requests a round for the LeNet, a tenth of them for
    `double`) and the bare gRPC server's (`floor`: its pid, and an asker of it)."""
    bare_pid, bare = floor
    bare_want = bare.raw()
    _round(bare_pid, bare.raw, n // 3, bare_want)
    wants = []
    for asker, count in zip(askers, (n, n // 10), strict=True):
        asker.start_sharing()
        wants.append(asker.raw())
        _round(pid, asker.raw, count // 3, wants[-1])  # warm: the first requests' allocations
        _round(pid, asker.shared, count // 3, wants[-1])
    runs: dict[str, Any] = {"model": [], "bare": [], "asked": 0}
    for _ in range(rounds):
        for asker, count, want in zip(askers, (n, n // 10), wants, strict=True):
            for mode in ("raw", "shared"):
                key = (asker.model.name, mode)
                runs.setdefault(key, []).append(_round(pid, getattr(asker, mode), count, want))
                runs["asked"] += count
        runs["model"].append(model_round())
        runs["bare"].append(_round(bare_pid, bare.raw, n, bare_want)[1])
    return runs


def _rows(runs: dict[str, Any], over: str) -> list[dict]:
    model_s, bare_s = statistics.median(runs["model"]), statistics.median(runs["bare"])
    rows = []
    for name, what in (
        ("lenet5", "LeNet, 12,544 B in, 160 B out"),
        ("double", "double, 4 MiB in, 4 MiB out"),
    ):
        raw_rate, raw_cpu = (statistics.median(r[k] for r in runs[(name, "raw")]) for k in (0, 1))
        for mode, how in (("raw", "raw contents"), ("shared", "shared memory")):
            rate, cpu = (statistics.median(r[k] for r in runs[(name, mode)]) for k in (0, 1))
            rows += [
                {
                    "case": f"{what}, {over}, {how}: requests/s, one client",
                    "s": rate,
                    "ratio": rate / raw_rate,
                },
                {
                    "case": f"{what}, {over}, {how}: serve's CPU per request",
                    "s": cpu,
                    "ratio": cpu / raw_cpu,
                },
            ]
            if name == "lenet5":
                beyond = statistics.median(
                    r[1] - m for r, m in zip(runs[(name, mode)], runs["model"], strict=True)
                )
                rows.append(
                    {
                        "case": f"{what}, {over}, {how}: serve's CPU beyond the model's call (goal <= 80 us)",
                        "s": beyond,
                        "ratio": beyond / 80e-6,
                    }
                )
    wrong = sum(r[2] for key, value in runs.items() if isinstance(key, tuple) for r in value)
    load = os.getloadavg()[0]
    return [
        *rows,
        {"case": "the LeNet's own call alone, CPU, a fresh process set up as serve's", "s": model_s, "ratio": 1.0},
        {"case": f"a bare grpc.aio server, {over}, a prepared answer to the LeNet's raw request: its CPU per request (grpc's floor; ratio: over 80 us)", "s": bare_s, "ratio": bare_s / 80e-6},
        {"case": f"answers not the first raw answer, of {runs['asked']}", "s": float(wrong), "ratio": 0.0},
        {"case": f"the machine's 1-minute load average at the end ({os.cpu_count()} CPUs)", "s": load, "ratio": load / (os.cpu_count() or 1)},
    ]  # fmt: skip

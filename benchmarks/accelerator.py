"""Benchmarks where users run: `python benchmarks/accelerator.py [--quick]` on the accelerator
machine (by hand: CI has none) writes benchmarks/RESULTS-<platform>.md (RESULTS-tpu.md on a
TPU) with the date, the device, the jax, jaxlib and libtpu versions and the host's cores.

Every figure is a ratio against a baseline measured in the same run: medians of interleaved
repetitions (`harness.interleaved`), each with its goal. Sections (`--only`):

- `overhead`: a bundle function under `jax.jit` / the same function under native `jax.jit`,
  dispatch-bound (the LeNet at batch 4) and compute-bound (`--layers` bf16 dense layers
  `--width` wide, batch `--batch`, made with `hlobundle.export`); goal <= 1.02. The
  dispatch-bound case three ways (`dispatch_bound`): the bundle's function, the stored module
  under `jax.jit` with no hlobundle wrapper, the program jax traces today, and that program
  traced twice (the noise floor); and each one's optimized HLO against the native one's.
- `lm`: one decode step of examples/lm.hlobundle / native `lm.decode` (`language_model.lm_cost`).
- `grad`: `jax.grad` through the compute-bound bundle / native; goal <= 1.05.
- `weights`: `hlobundle.load` + `jax.device_put` of its weights / `device_put` of the same
  arrays from memory; goal <= 1.2.
- `verify`: `load(verify=True)` / the parallel sha256 bound (the same files read and hashed in
  runs of 8 MiB by a thread per host core); goal <= 1.15. And the weights verified onto the
  device, `load(verify=True, device=True)` (streamed as hashed, no private copy) / the same
  bound, goal <= 1.3, beside `load(verify=True)` then `jax.device_put` (through the copy).
  Beside them the transfer floor (`InMemory`): `jax.device_put` of the same tensors from memory,
  whole arrays and in the streamed path's runs joined as it joins them, each / the bound; and
  the streamed load / the overlapped floor, max(the bound, the fastest transfer), goal <= 1.3:
  hashing while transferring cannot beat the slower of the two. And `load(verify=True)` and
  the load onto the device with the private copy in the other kind of pages (`HUGE_PAGES`:
  transparent huge pages or 4 KiB ones), where fresh memory is the copy's cost.
  With `HLOBUNDLE_BENCH_STREAM` set (comma-separated settings), it measures only that streamed
  load under each setting (`stream_setting`), against the same bound and the overlapped floor
  (the transfer in runs of each setting's size too): `after` (hlobundle's), `after+alias=0`
  (`device_put` with `may_alias=False`), `after+run=16` (runs of 16 MiB; 8 by default),
  `after+threads=2` (a pool of 2 threads a host core; 1 by default), `after+inflight=4` (runs
  in flight per thread; 2 by default); options combine (`after+run=32+threads=2`). (`before`, the streaming before its buffers were shared, was measured once on the
  TPU against these, RESULTS-tpu.md, and removed.)
- `first`: the first result in a fresh process: no cache, JAX's persistent cache warm, and a
  stored executable (`stored_executable_first_result`: `hlobundle compile` of XLA executables);
  the language model's first decoded token from `decode`'s executable stored for its batch
  (`lm_first_token_from_stored`; `decode`'s batch is symbolic).
- `serve`: the gain of serve's batching over `serve --uds` (the machine has no TCP), 16
  clients, against the model-only bound (`serving.serve_uds_cost`); goal >= 0.8.
- `grpc-shm`: a small binary infer over `serve --grpc-uds`, one client, with raw contents and
  with system shared memory: requests per second and serve's CPU per request
  (`grpc_shm.grpc_shm_cost`; it needs the grpc extra).
- `shm`: the same gain through system shared memory (`serve_shm.serve_shm_cost`): 16 client
  processes over `serve --uds`, each naming its own regions registered over REST, in turns with
  the same clients' binary requests; requests per second, the gain against the model-only
  bound (goal >= 0.8), serve's CPU per request.
- `start`: `hlobundle run` of the LeNet from an executable stored for this device / a process
  that only starts the runtime (`python -c "import jax; jax.devices()"`), fresh processes
  (`run_over_runtime_start`); goal <= 1.03.
- `doors`: `serve --uds --frontends 1` against `--frontends 2` (`serve_doors.serve_doors_cost`),
  16 client processes, without batching and batching up to 16: requests per second and serve's
  CPU per request, every process of it.
- `loop`: the CPU per request of the process that holds the device beyond the model (a slice
  of the images served as the LeNet, `serve_doors.device_loop_cost`), `--uds`, `--frontends`
  1 and 2, without batching and batching up to 16, 16 client processes.

It needs only the project's runtime dependencies (no network, no sockets but a unix one), with
the project on PYTHONPATH. `--quick`: tiny sizes, seconds on a CPU (CI runs it so that it never
rots unseen; its figures mean nothing).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.metadata
import json
import mmap
import os
import shutil
import statistics
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

sys.path.append(str(Path(__file__).resolve().parent.parent))  # the checkout: `benchmarks`
from benchmarks.harness import ROOT, interleaved, table  # noqa: E402
from benchmarks.language_model import lm_cost  # noqa: E402

STEP = 8 << 20  # what the parallel bound reads and hashes at a time


def ratio_row(case: str, backend: str, base: float, got: float, goal: float | None) -> dict:
    return {
        "case": case,
        "backend": backend,
        "baseline_s": base,
        "ours_s": got,
        "ratio": got / base,
        "goal": "" if goal is None else f"<= {goal}",
        "met": "" if goal is None else ("yes" if got / base <= goal else "NO"),
    }


def not_measured(case: str, why: str) -> dict:
    return {"case": case, "backend": "", "ratio": "not measured", "goal": why}


# --- the compute-bound model ----------------------------------------------------------------


def dense(params: list, x: Any) -> Any:
    import jax.numpy as jnp

    for w in params:
        x = jnp.tanh(x @ w)
    return x


def dense_params(layers: int, width: int) -> list[np.ndarray]:
    import ml_dtypes

    rng = np.random.default_rng(0)
    scale = np.float32(1 / np.sqrt(width))
    return [
        (rng.standard_normal((width, width), np.float32) * scale).astype(ml_dtypes.bfloat16)
        for _ in range(layers)
    ]


def dense_bundle(
    tmp: Path, args: argparse.Namespace, functions: int = 1, shard: int | None = None
) -> Path:
    """`args.layers` bf16 layers `args.width` wide, batch `args.batch`; with `functions` > 1 the
    same model under more names (a bundle of several functions: its weights are chunked); with
    `shard`, its weights in files of at most that many bytes."""
    import hlobundle

    out = tmp / f"dense-{functions}-{shard}"
    if out.exists():
        return out
    from hlobundle._run._backends import kind

    params = dense_params(args.layers, args.width)
    x = np.ones((args.batch, args.width), params[0].dtype)
    for i in range(functions):  # the backward module (for the xla backend's grad) by enzyme-ad
        hlobundle.export(
            dense, params, x, out=out, name=f"f{i}", add=i > 0, store_expected=False,
            with_vjp=kind("enzyme").available(), roles={f"params_{k}": "parameter" for k in range(args.layers)},
            max_shard_size=shard,
        )  # fmt: skip
    return out


def jitted(fn: Callable, *args: Any, calls: int = 1) -> Callable[[], object]:
    """`fn` under `jax.jit`, called `calls` times in a row, each call waited for."""
    import jax

    j = jax.jit(fn)

    def run() -> None:
        for _ in range(calls):
            jax.block_until_ready(j(*args))

    return run


def backends() -> list[str]:
    """The backends that run under `jax.jit` here: xla, and enzyme where enzyme-ad is."""
    from hlobundle._run._backends import kind

    return ["xla", "enzyme"] if kind("enzyme").available() else ["xla"]


# --- sections ---------------------------------------------------------------------------------


def overhead(tmp: Path, args: argparse.Namespace) -> list[dict]:
    import jax

    import hlobundle

    rows = dispatch_bound(args)
    dense_b = hlobundle.load(dense_bundle(tmp, args)).select("f0")
    params = jax.device_put(dense_b.example_args()[0])
    x = jax.device_put(dense_b.example_args()[1])
    fns = {"native": jitted(dense, params, x)}
    for backend in backends():
        f = dense_b.function(backend)
        fns[backend] = jitted(lambda p, x, f=f: f(p, x), params, x)
    case = f"compute-bound: {args.layers} bf16 layers {args.width} wide, batch {args.batch}"
    return rows + _ratios(case, fns, args.reps, 1.02)


def dispatch_bound(args: argparse.Namespace) -> list[dict]:
    """The LeNet at batch 4, where a call costs its dispatch, under `jax.jit` four ways: the
    program jax traces today (`native`, the baseline); the same program in a second `jax.jit`
    (the noise floor: what two copies of one program differ by here); the stored module with no
    hlobundle wrapper (`jax.jit(bundle.to_exported().call)`); the bundle's function, each
    backend; and beside them the xla function called eagerly (its own Python, each call). A
    sample is `--calls` calls in a row, each waited for; turns rotate, so that no program
    always runs first. Then each one's optimized HLO against native's (`hlo_rows`)."""
    import jax
    import lenet5

    import hlobundle

    lenet = hlobundle.load(ROOT / "examples" / "lenet5.hlobundle")
    images = jax.device_put(np.random.default_rng(0).random((4, 1, 28, 28), np.float32))
    params = jax.device_put(lenet5.init_params())
    programs: dict[str, Callable] = {
        "native": lenet5.lenet5,
        "native again": lambda p, x: lenet5.lenet5(p, x),
        "stored module": lenet.to_exported().call,
    }
    for backend in backends():
        f = lenet.function(backend)
        programs[backend] = lambda p, x, f=f: f(p, x)
    xla = lenet.function("xla")
    fns = {k: jitted(fn, params, images, calls=args.calls) for k, fn in programs.items()}
    fns["eager"] = lambda: [jax.block_until_ready(xla(params, images)) for _ in range(args.calls)]
    for f in fns.values():
        f()  # compile
    res = {k: m / args.calls for k, (m, _) in interleaved(fns, args.reps, rotate=True).items()}
    case, base, module = "dispatch-bound: LeNet, batch 4", res["native"], res["stored module"]
    return [
        *(ratio_row(case, b, base, res[b], 1.02) for b in backends()),
        ratio_row(f"{case}: native again (the same program in a second jax.jit: the noise floor)",
                  "", base, res["native again"], None),
        ratio_row(f"{case}: the stored module under jax.jit, no hlobundle wrapper "
                  "(Bundle.to_exported().call)", "", base, module, None),
        *(ratio_row(f"{case}: the bundle's function / the stored module under jax.jit (the "
                    "wrapper alone)", b, module, res[b], 1.02) for b in backends()),
        ratio_row(f"{case}: the bundle's function called eagerly, no outer jax.jit (its Python: "
                  "binding and checking the arguments, each call)", "xla", base, res["eager"], None),
        *hlo_rows(programs, (params, images), args.hlo_out),
    ]  # fmt: skip


def hlo_rows(programs: dict[str, Callable], call: tuple, out: str | None) -> list[dict]:
    """Each program's optimized HLO (`jax.jit(f).lower(...).compile().as_text()`) against the
    native one's: its lines, and the instructions that differ once XLA's metadata (op names,
    source lines, the stack-frame tables) and the values' names are dropped. With `out`, the
    texts are written there (`<program>.hlo.txt`) for a diff by hand."""
    import difflib

    import jax

    texts = {k: jax.jit(f).lower(*call).compile().as_text() for k, f in programs.items()}
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        for k, text in texts.items():
            (Path(out) / f"{k.replace(' ', '-')}.hlo.txt").write_text(text)
    native = instructions(texts["native"])
    rows = []
    for k, text in texts.items():
        ops = instructions(text)
        diff = [d for d in difflib.unified_diff(native, ops, lineterm="", n=0)
                if d[:1] in "+-" and d[:3] not in ("+++", "---")]  # fmt: skip
        rows.append({"case": f"optimized HLO of {k} / native's: lines, and instructions that "
                             "differ once metadata and names are dropped",
                     "backend": "", "ratio": f"{len(text.splitlines())} / "
                     f"{len(texts['native'].splitlines())} lines",
                     "goal": "no instruction differs",
                     "met": "yes" if not diff else f"NO: {len(diff)} lines, e.g. {diff[0][:160]}"})  # fmt: skip
    return rows


def instructions(hlo: str) -> list[str]:
    """An optimized HLO text's lines without what names and locates the instructions: the
    stack-frame tables, each `metadata={...}`, the values' and parameters' names, the module's."""
    import re

    tables = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")
    lines = []
    for line in hlo.splitlines():
        if line.startswith(tables) or re.match(r"^\d+ [\"{]", line):
            continue
        line = re.sub(r", metadata=\{[^}]*\}", "", line)
        line = re.sub(r"%[\w.\-]+", "%v", line)
        line = re.sub(r"([(,]\s*)[\w.\-]+: ", r"\1", line)
        lines.append(re.sub(r"^HloModule \S+", "HloModule m", line))
    return lines


def _ratios(case: str, fns: dict[str, Callable[[], object]], reps: int, goal: float) -> list[dict]:
    for f in fns.values():
        f()  # compile
    res = interleaved(fns, reps)
    base = res["native"][0]
    return [ratio_row(case, k, base, res[k][0], goal) for k in fns if k != "native"]


def lm(tmp: Path, args: argparse.Namespace) -> list[dict]:
    goals = {"decode": 1.05}
    rows = []
    for r in lm_cost(tmp, args.quick):
        if str(r["case"]).startswith("decode"):
            rows.append(
                ratio_row(r["case"], r["backend"], r["native_s"], r["bundle_s"], goals["decode"])
            )
    return rows  # fmt: skip


def grad(tmp: Path, args: argparse.Namespace) -> list[dict]:
    import jax
    import jax.numpy as jnp

    import hlobundle

    bundle = hlobundle.load(dense_bundle(tmp, args)).select("f0")
    params, x = (jax.device_put(a) for a in bundle.example_args())

    def loss(fn: Callable) -> Callable:
        return jax.grad(lambda p, x: fn(p, x).astype(jnp.float32).sum())

    fns = {"native": jitted(loss(dense), params, x)}
    for backend in backends():
        f = bundle.function(backend)
        try:
            fns[backend] = jitted(loss(lambda p, x, f=f: f(p, x)), params, x)
            fns[backend]()
        except Exception as e:  # the xla backend needs a stored backward module
            fns.pop(backend)
            print(f"grad, {backend}: {str(e).splitlines()[0][:200]}", file=sys.stderr)
    case = f"jax.grad, {args.layers} bf16 layers {args.width} wide, batch {args.batch}"
    return _ratios(case, fns, args.reps, 1.05)


def weights(tmp: Path, args: argparse.Namespace) -> list[dict]:
    """The weights from the bundle's files (load, map, device_put) / from memory (device_put
    of the same arrays, already in memory); the page cache warm for both."""
    import jax

    import hlobundle

    path = dense_bundle(tmp, args)
    in_memory = [np.array(a) for a in hlobundle.load(path).select("f0").example_args()[0]]

    def from_bundle() -> None:
        b = hlobundle.load(path).select("f0")
        jax.block_until_ready(jax.device_put(b.example_args()[0]))

    fns = {
        "from memory": lambda: jax.block_until_ready(jax.device_put(in_memory)),
        "from the bundle": from_bundle,
    }
    res = interleaved(fns, args.reps_io)
    gib = sum(a.nbytes for a in in_memory) / (1 << 30)
    case = f"load + device_put of {gib:.3g} GiB / device_put from memory"
    return [ratio_row(case, "", res["from memory"][0], res["from the bundle"][0], 1.2)]


def parallel_sha256_bound(files: list[Path]) -> None:
    """The same files read and hashed in runs of `STEP` bytes by a thread per host core, each
    reading into a buffer of its own, used again: what hashing them on every core can reach
    (verify also keeps the bytes, in a private copy whose pages it must first touch)."""
    local = threading.local()
    fds = [os.open(f, os.O_RDONLY) for f in files]
    try:
        runs = [
            (fd, begin, min(STEP, os.fstat(fd).st_size - begin))
            for fd in fds
            for begin in range(0, os.fstat(fd).st_size, STEP)
        ]

        def one(run: tuple[int, int, int]) -> str:
            fd, begin, n = run
            if not hasattr(local, "buffer"):
                local.buffer = memoryview(bytearray(STEP))
            view = local.buffer[:n]
            os.preadv(fd, [view], begin)
            return hashlib.sha256(view).hexdigest()

        with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
            list(pool.map(one, runs))
    finally:
        for fd in fds:
            os.close(fd)


def fresh_memory(files: list[Path]) -> None:
    """Fresh memory for the same files' private copies, as `load(verify=True)` makes them
    (`_tensor_reading._copy_memory`: huge pages or not as `HUGE_PAGES` says), each page
    touched (a byte written) in runs of `STEP` bytes by a thread per host core, then let go:
    what the copy costs beyond reading and hashing, which a CPU's cores pay beside the hash."""
    from hlobundle._bundle_io._tensor_reading import _copy_memory

    copies = [np.frombuffer(_copy_memory(f.stat().st_size), np.uint8) for f in files]
    runs = [(m, begin) for m in copies for begin in range(0, len(m), STEP)]
    page = mmap.PAGESIZE

    def touch(run: tuple[np.ndarray, int]) -> None:
        m, begin = run
        m[begin : begin + STEP : page] = 1

    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        list(pool.map(touch, runs))


@contextlib.contextmanager
def huge_pages(on: bool | None) -> Any:
    """Private copies (`load(verify=True)`'s) in transparent huge pages or not (None: as
    hlobundle makes them), meanwhile."""
    from hlobundle._bundle_io import _tensor_reading

    saved = _tensor_reading.HUGE_PAGES
    _tensor_reading.HUGE_PAGES = saved if on is None else on
    try:
        yield
    finally:
        _tensor_reading.HUGE_PAGES = saved


class _FromMemory:
    """A tensor file's runs as `_tensor_streaming` plans them (its `_Plan`), each run's pieces
    put on the device from the file's bytes already in memory, not read or hashed: the
    transfer alone, in the streamed path's pieces, threads and joins."""

    def __init__(self, memory: np.ndarray, ordered: list, device: Any) -> None:
        self.memory, self.ordered, self.device = memory, ordered, device
        self.ends = [t.end for t in ordered]

    def run(self, begin: int, end: int) -> tuple[list[str], list[tuple[str, Any]], np.ndarray]:
        from hlobundle._bundle_io import _tensor_streaming as ts

        pieces = ts._pieces(self.ordered, self.ends, begin, end)
        sent = [ts._put(self.memory[lo:hi].view(t.dtype), self.device) for t, lo, hi in pieces]
        put = [(t.key, x) for (t, _, _), x in zip(pieces, ts._wait(sent), strict=True)]
        return [], put, self.memory[begin:end]


class InMemory:
    """The tensors of a bundle's tensor files as the streamed path puts them on the device,
    their bytes already in memory (each file read whole, its pages touched, before any timing):
    `whole` puts each tensor as one NumPy array of its own, `in_runs` in the streamed path's
    runs (`_tensor_streaming.runs_of`, `RUN_BYTES` as set now), joined on the device as it
    joins them. Both wait until the device holds every array."""

    def __init__(self, path: Path) -> None:
        from hlobundle._bundle_io._tensor_streaming import Planned
        from hlobundle._bundle_io._tensors import TensorFile
        from hlobundle._format._dtypes import TABLE
        from hlobundle._read._files import read_manifest

        manifest, _ = read_manifest(path)
        self.files: list[tuple[np.ndarray, list[Planned], int | None]] = []
        for name, listed in sorted(manifest.files.items()):
            if not name.endswith(".safetensors"):
                continue
            tf = TensorFile(path / name, name=name, with_safetensors=False)
            ordered = []
            for key, e in tf.entries.items():
                dtype = next(d for d in TABLE if d.safetensors == e.code).numpy.newbyteorder("<")
                ordered.append(Planned(key, *tf.span_of(key), dtype, tuple(e.shape)))
            ordered.sort(key=lambda t: t.begin)
            chunk = None if listed.chunks is None else listed.chunks.size
            self.files.append((np.fromfile(path / name, np.uint8), ordered, chunk))
        self.arrays = [
            np.array(memory[t.begin : t.end].view(t.dtype)).reshape(t.shape)
            for memory, ordered, _ in self.files
            for t in ordered
        ]
        self.nbytes = sum(a.nbytes for a in self.arrays)

    def whole(self) -> None:
        import jax

        jax.block_until_ready(jax.device_put(self.arrays, jax.devices()[0]))

    def in_runs(self) -> None:
        import jax

        from hlobundle._bundle_io import _tensor_streaming as ts

        device = jax.devices()[0]
        cores = os.cpu_count() or 1

        def one(file: tuple[np.ndarray, list, int | None], pool: Any) -> dict[str, Any]:
            memory, ordered, chunk = file
            _, runs = ts.runs_of(len(memory), chunk)
            joined = ts._Joiner(ordered, runs)
            for _, pieces, _ in ts._each_run(_FromMemory(memory, ordered, device), runs, pool):
                joined.add(pieces)
            return joined.arrays

        with (
            ThreadPoolExecutor(ts.threads(cores)) as pool,
            ThreadPoolExecutor(min(len(self.files), cores)) as files,
        ):
            arrays = list(files.map(lambda f: one(f, pool), self.files))
        jax.block_until_ready(arrays)


def verify(tmp: Path, args: argparse.Namespace) -> list[dict]:
    """`load(verify=True)` / the parallel sha256 bound of the same files: a bundle whose weights
    are chunked (two functions), the first time (the file's sha256 computed alongside its
    chunks) and after (recalled, SPEC.md 8); one function's weights in shards of 64 MiB (each
    file's sha256, the files side by side); and one sha256 on one core, for scale."""
    chunked = dense_bundle(tmp, args, functions=2)
    if os.environ.get("HLOBUNDLE_BENCH_STREAM"):
        settings = os.environ["HLOBUNDLE_BENCH_STREAM"].split(",")
        return _stream_rows(tmp, chunked, settings, args.reps_io)
    sharded = dense_bundle(tmp, args, shard=max(1 << 20, min(64 << 20, _weight_bytes(args) // 4)))
    rows = _verify_rows(tmp, chunked, "chunked", args.reps_io, first_too=True)
    return rows + _verify_rows(tmp, sharded, "sharded", args.reps_io, first_too=False)


def _weight_bytes(args: argparse.Namespace) -> int:
    return args.layers * args.width * args.width * 2


def _verify_rows(tmp: Path, path: Path, kind: str, reps: int, *, first_too: bool) -> list[dict]:
    import hlobundle
    from hlobundle._bundle_io import _tensor_streaming

    files = sorted(path.rglob("*.safetensors"))
    fresh = iter(range(1 << 30))

    def verified(cache: str, huge: bool | None = None) -> Callable[[], object]:
        def run() -> None:
            os.environ["HLOBUNDLE_CACHE_DIR"] = str(tmp / cache.format(next(fresh)))
            with huge_pages(huge):
                hlobundle.load(path, verify=True)

        return run

    def onto_device(streamed: bool, huge: bool | None = None) -> Callable[[], object]:
        import jax

        def run() -> None:
            os.environ["HLOBUNDLE_CACHE_DIR"] = str(tmp / f"{kind}-warm")
            with huge_pages(huge):
                if streamed:
                    b = hlobundle.load(path, verify=True, device=True).select("f0")
                    jax.block_until_ready(b.example_args()[0])
                else:
                    b = hlobundle.load(path, verify=True).select("f0")
                    jax.block_until_ready(jax.device_put(b.example_args()[0]))

        return run

    def one_core() -> None:
        for f in files:
            with open(f, "rb") as r:
                h = hashlib.sha256()
                while block := r.read(STEP):
                    h.update(block)

    fns = {"bound": lambda: parallel_sha256_bound(files), "again": verified(f"{kind}-warm")}
    if first_too:
        fns |= {"first": verified(kind + "-cold-{}"), "one core": one_core}
        fns |= {"streamed": onto_device(True), "copied": onto_device(False)}
        other = not _huge_pages_now()  # the private copy in the other kind of pages
        fns |= {
            "again, other pages": verified(f"{kind}-warm", other),
            "streamed, other pages": onto_device(True, other),
        }
        memory = InMemory(path)
        runs = f"transfer in runs of {_tensor_streaming.RUN_BYTES >> 20} MiB"
        fns |= {
            "transfer": memory.whole,
            runs: memory.in_runs,
            "fresh": lambda: fresh_memory(files),
            "together": together(lambda: parallel_sha256_bound(files), memory.in_runs),
        }
        memory.in_runs()  # untimed: its joins compiled
    with _cache_dir_kept():
        fns["again"]()  # its verdicts recorded
        # Each after the bound, untimed: a call right after one that freed 1 GiB gets fresh
        # memory back cheaply (1.0x against 2.7x on this machine, 2026-12-07), so who ran
        # before would decide the figure.
        res = interleaved(fns, reps, setup={k: fns["bound"] for k in fns if k != "bound"})
        if first_too:
            cpu = _cpu_medians(fns, ["bound", "transfer", runs, "streamed"], reps)
    gib = sum(f.stat().st_size for f in files) / (1 << 30)
    base = res["bound"][0]
    what = f"{gib:.3g} GiB, {kind} ({len(files)} tensor files), / parallel sha256 bound"
    if not first_too:
        return [ratio_row(f"load(verify=True), {what}", "", base, res["again"][0], 1.15)]
    huge, small = "transparent huge pages (MADV_HUGEPAGE)", "4 KiB pages (no MADV_HUGEPAGE)"
    pages, pages_now = (huge, small) if other else (small, huge)
    return [
        ratio_row(f"load(verify=True) again (sha256 recalled), {what}", "", base, res["again"][0], 1.15),
        ratio_row(f"load(verify=True) first time (sha256 computed too), {what}", "", base,
                  res["first"][0], None),
        ratio_row(f"sha256 on one core, {what}", "", base, res["one core"][0], None),
        ratio_row(f"load(verify=True, device=True) (streamed as hashed where the device has memory "
                  f"of its own; a CPU's arrays are the verified copy), again, {what}", "", base,
                  res["streamed"][0], 1.3),
        ratio_row(f"load(verify=True) + jax.device_put (through the private copy), again, {what}",
                  "", base, res["copied"][0], None),
        ratio_row(f"load(verify=True) again, its private copy in {pages}, {what}", "", base, res["again, other pages"][0], 1.15),
        ratio_row(f"load(verify=True, device=True) again, a private copy in {pages} (where it "
                  f"makes one: a CPU device), {what}", "", base, res["streamed, other pages"][0],
                  1.3),
        *_transfer_rows(res, what),
        _floor_row(res, "streamed", "", memory.nbytes, what),
        *_fresh_rows(res, pages_now, what),
        *_together_rows(res, ["streamed"], what),
        *_cpu_floor_rows(cpu, res, ["streamed"], what),
    ]  # fmt: skip


def _huge_pages_now() -> bool:
    """Whether hlobundle makes its private copies in transparent huge pages."""
    from hlobundle._bundle_io import _tensor_reading

    return _tensor_reading.HUGE_PAGES


def _transfer_rows(res: dict[str, tuple[float, float]], what: str) -> list[dict]:
    """The transfer floor (`InMemory`: the tensors put on the device from memory, whole
    arrays, `res["transfer"]`, and in the streamed path's runs, `res["transfer in runs..."]`)
    / the bound, and each in runs / whole arrays."""
    base, whole = res["bound"][0], res["transfer"][0]
    rows = [ratio_row(f"the transfer floor: jax.device_put of the same tensors from memory "
                      f"(NumPy arrays, pages touched), whole arrays, blocked until ready, {what}",
                      "", base, whole, None)]  # fmt: skip
    for k in (k for k in res if k.startswith("transfer in runs")):
        runs = k.removeprefix("transfer in runs")
        rows += [
            ratio_row(f"the transfer floor in the streamed path's runs{runs} (pieces put from "
                      f"memory by its threads, joined on the device as it joins them), {what}",
                      "", base, res[k][0], None),
            ratio_row(f"transfer in runs{runs} / whole arrays (what cutting into pieces costs)",
                      "", whole, res[k][0], None),
        ]  # fmt: skip
    return rows


def _fresh_rows(res: dict[str, tuple[float, float]], pages: str, what: str) -> list[dict]:
    """Fresh memory for the private copies (`fresh_memory`) / the bound, and the loads that
    make a copy / the bound and that fresh memory together: where one host's cores both hash
    and fault the copy's pages in (a CPU device's arrays are the copy), the sum is their floor."""
    base, fresh = res["bound"][0], res["fresh"][0]
    floor = base + fresh
    plain = what.removesuffix(", / parallel sha256 bound")
    return [
        ratio_row(f"fresh memory for the private copies ({pages}, as load(verify=True) makes "
                  f"them), each page touched by a thread per core, {what}", "", base, fresh, None),
        ratio_row(f"load(verify=True) again / the copy's floor, the bound + that fresh memory, "
                  f"{plain}", "", floor, res["again"][0], 1.15),
        ratio_row(f"load(verify=True, device=True) again / the bound + that fresh memory (the "
                  f"floor where its arrays are the copy: a CPU device), {plain}", "", floor,
                  res["streamed"][0], 1.3),
    ]  # fmt: skip


def _floor_row(
    res: dict[str, tuple[float, float]], streamed: str, how: str, nbytes: int, what: str
) -> dict:
    """`res[streamed]` / the overlapped floor: the larger of the bound and the fastest transfer
    of the same tensors from memory (whole or in runs), what hashing while transferring can
    reach at best."""
    transfer = min(v[0] for k, v in res.items() if k.startswith("transfer"))
    floor = max(res["bound"][0], transfer)
    return ratio_row(
        f"load(verify=True, device=True){how}, again / the overlapped floor, max(the bound, the "
        f"fastest transfer: {nbytes / transfer / 1e9:.3g} GB/s), "
        f"{what.removesuffix(', / parallel sha256 bound')}",
        "", floor, res[streamed][0], 1.3,
    )  # fmt: skip


def stream_setting(setting: str) -> None:
    """Streaming onto the device as `setting` says (`verify`'s docstring): the module the
    reader streams with, its run size and `device_put`'s may_alias."""
    from hlobundle._bundle_io import _tensor_streaming
    from hlobundle._read import _reader

    which, *options = setting.split("+")
    opts = {"run": "8", "alias": "1", "threads": "1", "inflight": "2"}
    opts |= dict(o.split("=", 1) for o in options)
    _tensor_streaming.RUN_BYTES = int(opts["run"]) << 20
    _tensor_streaming.ALIAS = opts["alias"] == "1"
    _tensor_streaming.THREADS_PER_CORE = float(opts["threads"])
    _tensor_streaming.IN_FLIGHT = int(opts["inflight"])
    if which != "after":
        raise SystemExit(f"HLOBUNDLE_BENCH_STREAM: unknown setting {setting!r}")
    _reader._tensor_streaming = _tensor_streaming


@contextlib.contextmanager
def _cache_dir_kept() -> Iterator[None]:
    """`HLOBUNDLE_CACHE_DIR` as it was before, whatever the block sets it to."""
    saved = os.environ.get("HLOBUNDLE_CACHE_DIR")
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("HLOBUNDLE_CACHE_DIR", None)
        else:
            os.environ["HLOBUNDLE_CACHE_DIR"] = saved


def _stream_rows(tmp: Path, path: Path, settings: list[str], reps: int) -> list[dict]:
    """`load(verify=True, device=True)` again under each setting / the parallel sha256 bound."""
    import jax

    import hlobundle

    files = sorted(path.rglob("*.safetensors"))

    def streamed(setting: str) -> Callable[[], object]:
        def run() -> None:
            stream_setting(setting)
            b = hlobundle.load(path, verify=True, device=True).select("f0")
            jax.block_until_ready(b.example_args()[0])

        return run

    def in_runs(mib: int) -> Callable[[], object]:
        def run() -> None:
            stream_setting(f"after+run={mib}")
            memory.in_runs()

        return run

    memory = InMemory(path)
    sizes = sorted({_run_mib(s) for s in settings})
    fns = {"bound": lambda: parallel_sha256_bound(files), "transfer": memory.whole}
    fns |= {f"transfer in runs of {m} MiB": in_runs(m) for m in sizes}
    fns |= {s: streamed(s) for s in settings}
    fns["together"] = together(fns["bound"], in_runs(8))
    with _cache_dir_kept():
        os.environ["HLOBUNDLE_CACHE_DIR"] = str(tmp / "chunked-warm")
        hlobundle.load(path, verify=True)  # its verdicts recorded: sha256 recalled after
        try:
            for k in fns:
                if k != "bound":
                    fns[k]()  # untimed: its joins compiled
            res = interleaved(fns, reps, setup={k: fns["bound"] for k in fns if k != "bound"})
            cpu_keys = [k for k in fns if k == "bound" or k.startswith("transfer in")]
            cpu = _cpu_medians(fns, cpu_keys + settings, reps)
        finally:
            stream_setting("after")
    gib = sum(f.stat().st_size for f in files) / (1 << 30)
    base = res["bound"][0]
    what = f"{gib:.3g} GiB, chunked ({len(files)} tensor files), / parallel sha256 bound"
    rows = [
        ratio_row(f"load(verify=True, device=True) again, streamed: {s}, {what} (spread "
                  f"{res[s][1]:.2f})", "", base, res[s][0], 1.3)
        for s in settings
    ]  # fmt: skip
    rows += _transfer_rows(res, what)
    rows += [_floor_row(res, s, f", streamed: {s}", memory.nbytes, what) for s in settings]
    return rows + _together_rows(res, settings, what) + _cpu_floor_rows(cpu, res, settings, what)


def together(*fns: Callable[[], object]) -> Callable[[], object]:
    """`fns` started at once, each in a thread of its own, waited for: where two kinds of work
    share the host (its memory, its cores), what doing both at once costs when neither waits
    for the other, the floor for any way of doing both."""

    def run() -> None:
        with ThreadPoolExecutor(len(fns)) as pool:
            for done in [pool.submit(fn) for fn in fns]:
                done.result()

    return run


def _against_floor(
    res: dict[str, tuple[float, float]],
    streamed: list[str],
    floor: tuple[str, str, float],
    what: str,
) -> list[dict]:
    """A floor of hashing while transferring (its name, what it is, its seconds) / the bound,
    and each streamed load / that floor, goal 1.3."""
    name, how, seconds = floor
    plain = what.removesuffix(", / parallel sha256 bound")
    return [
        ratio_row(f"{name}: {how}, {what}", "", res["bound"][0], seconds, None),
        *[ratio_row(f"load(verify=True, device=True) again, {s} / {name}, {plain}", "",
                    seconds, res[s][0], 1.3) for s in streamed],
    ]  # fmt: skip


def _together_rows(
    res: dict[str, tuple[float, float]], streamed: list[str], what: str
) -> list[dict]:
    """The bound and the transfer in runs together (`together`) / the bound, and each streamed
    load / that: hashing while transferring measured against both done at once, independently."""
    how = ("the bound and the transfer in runs started together, neither waiting for the other "
           "(the host's memory and cores shared)")  # fmt: skip
    return _against_floor(res, streamed, ("the shared floor", how, res["together"][0]), what)


def _cpu_floor_rows(
    cpu: dict[str, float], res: dict[str, tuple[float, float]], streamed: list[str], what: str
) -> list[dict]:
    """Where hashing and the transfer share the host's cores (a device's transfer from pageable
    memory is copied by the host's CPU), their CPU seconds together over the cores are a floor
    that no overlap can beat: `cpu["bound"]` and the cheapest transfer's, / the cores; each
    streamed load / that floor."""
    cores = os.cpu_count() or 1
    transfer = min((k for k in cpu if k.startswith("transfer")), key=lambda k: cpu[k])
    spent = ", ".join(f"{k}: {v:.3g}" for k, v in cpu.items())
    how = (f"(the bound's host CPU-s + the {transfer}'s) / {cores} cores (host CPU-s, every "
           f"thread of the process: {spent})")  # fmt: skip
    floor = (cpu["bound"] + cpu[transfer]) / cores
    return _against_floor(res, streamed, ("the CPU floor", how, floor), what)


def _cpu_medians(
    fns: dict[str, Callable[[], object]], keys: list[str], reps: int
) -> dict[str, float]:
    """The median host CPU seconds (this process's, every thread's: the device runtime's own
    threads too) of each of `keys`, run in turns after an untimed pass of the bound, as the
    wall-clock medians are."""
    picked = {k: fns[k] for k in keys}
    setup = {k: fns["bound"] for k in picked}
    res = interleaved(picked, max(3, reps // 2), setup=setup, clock=time.process_time)
    return {k: v[0] for k, v in res.items()}


def _run_mib(setting: str) -> int:
    """The run size, in MiB, that a `HLOBUNDLE_BENCH_STREAM` setting streams in."""
    opts = dict(o.split("=", 1) for o in setting.split("+")[1:])
    return int(opts.get("run", "8"))


FIRST = """
import json, time
t0 = time.perf_counter()
import jax, hlobundle
hlobundle.configure_jax()  # as `hlobundle run` does: JAX's persistent cache in hlobundle's
b = hlobundle.load({path!r}).select("f0")
f = b.function("xla")
args = b.example_args()
t1 = time.perf_counter()
compiles, hits = [], []
jax.monitoring.register_event_duration_secs_listener(
    lambda event, secs, **kw: compiles.append(secs) if "backend_compile" in event else None)
jax.monitoring.register_event_listener(
    lambda event, **kw: hits.append(event) if "cache_hits" in event else None)
jax.block_until_ready(f(*args))
print(json.dumps({{"load_s": t1 - t0, "first_call_s": time.perf_counter() - t1,
                  "compiles": len(compiles), "cache_hits": len(hits),
                  "platform": jax.devices()[0].platform}}))
"""


MAKE = """
import argparse, sys
from pathlib import Path
sys.path.insert(0, {here!r})
import accelerator
accelerator.dense_bundle(Path({tmp!r}), argparse.Namespace(**{sizes!r}))
"""


def child(code: str, env: dict[str, str] | None = None) -> tuple[float, str]:
    """Wall time and stdout of a fresh Python running `code`, in this process's environment
    (an accelerator machine's PYTHONPATH and TPU_ variables kept) without hlobundle's cache
    settings, `env` added. One process at a time may hold a TPU: the caller holds none yet."""
    return child_process(["-c", code], env)


def child_process(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, str]:
    """`child` of a fresh Python given `argv` (`["-m", "hlobundle", ...]`)."""
    import subprocess

    base = {k: v for k, v in os.environ.items() if not k.startswith("HLOBUNDLE_")}
    start = time.perf_counter()
    r = subprocess.run(
        [sys.executable, *argv], capture_output=True, text=True, env=base | (env or {})
    )
    if r.returncode:
        raise RuntimeError(r.stderr[-2000:])
    return time.perf_counter() - start, r.stdout


def first_result(tmp: Path, args: argparse.Namespace) -> list[dict]:
    """A fresh process's first result from the compute-bound bundle (xla backend): with no
    cache of any kind, and with JAX's persistent cache warm (a second process); the first
    call's time (trace, compile, run) / the no-cache one. Every process of it is a child (the
    bundle made in one too), run before this process touches the device: one process at a
    time may hold a TPU."""
    sizes = {"layers": args.layers, "width": args.width, "batch": args.batch}
    child(MAKE.format(here=str(Path(__file__).parent), tmp=str(tmp), sizes=sizes))
    path = dense_bundle(tmp, args)  # made: found, not made again
    cache = {"HLOBUNDLE_CACHE_DIR": str(tmp / "first-cache")}
    cold, warm = [], []
    child(FIRST.format(path=str(path)), cache)  # fills the cache
    for _ in range(args.reps_process):
        cold.append(json.loads(child(FIRST.format(path=str(path)), {"HLOBUNDLE_NO_CACHE": "1"})[1]))
        warm.append(json.loads(child(FIRST.format(path=str(path)), cache)[1]))  # fmt: skip
    med = lambda runs, k: statistics.median(r[k] for r in runs)  # noqa: E731
    base = med(cold, "first_call_s")
    rows = [
        {**ratio_row("first call, cold (no cache)", "xla", base, base, None),
         "compiles": med(cold, "compiles"), "cache_hits": med(cold, "cache_hits")},
        {**ratio_row("first call, JAX's persistent cache warm / cold", "xla", base,
                     med(warm, "first_call_s"), None), "compiles": med(warm, "compiles"),
         "cache_hits": med(warm, "cache_hits")},
    ]  # fmt: skip
    platform = cold[0]["platform"]
    return rows + [
        stored_executable_first_result(tmp, path, base, platform),
        lm_first_token_from_stored(tmp, platform),
    ]


def stored_executable_first_result(tmp: Path, path: Path, cold_s: float, platform: str) -> dict:
    """This device's XLA executable stored in a copy of the bundle (`hlobundle.compile(copy,
    ["xla-PLATFORM"])`, SPEC.md 2.7), then a fresh process's first call from it, trusted,
    against `cold_s`; its goal: no compile at all (`compiles` 0). Where `compile` refuses the
    target, "not measured", never a made-up figure."""
    target = f"xla-{platform}"
    case = f"first call from a stored executable ({target}) / cold"
    copy = tmp / "stored-executable"
    shutil.copytree(path, copy, dirs_exist_ok=True)
    try:  # in a child, as every process here that may open the device
        child(f"import hlobundle; hlobundle.compile({str(copy)!r}, [{target!r}])")
    except RuntimeError as e:
        why = str(e).strip().splitlines()[-1][:160]
        return not_measured(case, f"`hlobundle compile` refused {target}: {why}")
    got = json.loads(child(FIRST.format(path=str(copy)).replace(
        'function("xla")', 'function("xla", trust=hlobundle.Trust.EXECUTABLES)'))[1])  # fmt: skip
    return {**ratio_row(case, "xla", cold_s, got["first_call_s"], None), "goal": "compiles 0",
            "compiles": got["compiles"], "met": "yes" if got["compiles"] == 0 else "NO"}  # fmt: skip


def lm_first_token_from_stored(tmp: Path, platform: str) -> dict:
    """The language model's `decode`, whose batch is symbolic: its XLA executable stored for the
    batch its stored arguments bind (`hlobundle.compile(copy, ["xla-PLATFORM"],
    function="decode")`, SPEC.md 2.7, "Executables for several sizes"), then a fresh process's
    first decoded token from it, trusted, against a fresh process's with no cache; its goal: no
    compile at all."""
    target = f"xla-{platform}"
    case = f"LM's first decoded token from a stored executable ({target}, stored batch) / cold"
    copy = tmp / "lm-stored"
    shutil.copytree(ROOT / "examples" / "lm.hlobundle", copy, dirs_exist_ok=True)
    code = FIRST.format(path=str(copy)).replace('select("f0")', 'select("decode")')
    cold = json.loads(child(code, {"HLOBUNDLE_NO_CACHE": "1"})[1])
    try:  # in a child, as every process here that may open the device
        child(
            f"import hlobundle; hlobundle.compile({str(copy)!r}, [{target!r}], function='decode')"
        )
    except RuntimeError as e:
        why = str(e).strip().splitlines()[-1][:160]
        return not_measured(case, f"`hlobundle compile` refused {target}: {why}")
    trusted = code.replace('function("xla")', 'function("xla", trust=hlobundle.Trust.EXECUTABLES)')
    got = json.loads(child(trusted, {"HLOBUNDLE_NO_CACHE": "1"})[1])
    return {**ratio_row(case, "xla", cold["first_call_s"], got["first_call_s"], None),
            "goal": "compiles 0", "compiles": got["compiles"],
            "met": "yes" if got["compiles"] == 0 else "NO"}  # fmt: skip


RUNTIME_START = "import jax; jax.devices()"
COMPILE_HERE = """
import jax, hlobundle
platform = jax.devices()[0].platform
hlobundle.compile({path!r}, [f"xla-{{platform}}"])
print(platform)
"""


def run_over_runtime_start(tmp: Path, args: argparse.Namespace) -> list[dict]:
    """`hlobundle run` of the LeNet example from an XLA executable stored for this device
    (`--trust-executables --json`: nothing compiled), each a fresh process, / a fresh process
    that only starts the runtime (`python -c "import jax; jax.devices()"`, most of a TPU
    process's first result): what hlobundle's own work (its imports, reading, verifying,
    deserializing, the two calls and the check) adds to the runtime's start, with which `run`
    overlaps it; goal <= 1.03. Children only, one at a time, `--reps-process` pairs (at
    least 3 but `--quick`) in turns whose order alternates, after one untimed run of each (the
    OS's page cache and hlobundle's verdict cache warm, as for a user's second run)."""
    copy = tmp / "lenet-stored"
    shutil.copytree(ROOT / "examples" / "lenet5.hlobundle", copy, dirs_exist_ok=True)
    platform = child(COMPILE_HERE.format(path=str(copy)))[1].strip().splitlines()[-1]
    env = {"HLOBUNDLE_CACHE_DIR": str(tmp / "start-cache")}
    argv = ["-m", "hlobundle", "run", str(copy), "--trust-executables", "--json"]
    fns = {
        "runtime": lambda: child(RUNTIME_START, env),
        "run": lambda: child_process(argv, env),
    }
    times: dict[str, list[float]] = {k: [] for k in fns}
    reports = []
    for turn in range(1 + (args.reps_process if args.quick else max(3, args.reps_process))):
        for name in sorted(fns, reverse=turn % 2 == 1):
            seconds, out = fns[name]()
            if turn:  # the first turn warms
                times[name].append(seconds)
            if name == "run":
                reports.append(json.loads(out))
    base, got = statistics.median(times["runtime"]), statistics.median(times["run"])
    stored = all(str(r["module"]).startswith("stored executable") for r in reports)
    med = lambda k: statistics.median(float(r[k]) for r in reports)  # noqa: E731
    return [
        {**ratio_row(f"`hlobundle run` LeNet from an executable stored for {platform} / "
                     f"`{RUNTIME_START}`, fresh processes ({len(times['run'])} each)",
                     "xla", base, got, 1.03),
         "ran from": "stored executable" if stored else "NOT all from the stored executable",
         "module loaded_s": med("function_s"), "first call_s": med("first_call_s")},
    ]  # fmt: skip


def serve_batching_gain(tmp: Path, args: argparse.Namespace) -> list[dict]:
    """`hlobundle serve --uds PATH` (the accelerator machine allows no TCP socket): 16 clients'
    requests per second with dynamic batching / without, against the model-only bound, as
    `benchmarks/run.py --only serve-uds` measures it (`serving.serve_uds_cost`); goal >= 0.8."""
    from benchmarks.serving import serve_uds_cost

    return serve_uds_cost(tmp, args.quick)


def grpc_shared_memory(tmp: Path, args: argparse.Namespace) -> list[dict]:
    """`hlobundle serve --uds PATH --grpc-uds PATH2`: a small binary infer over gRPC, one client,
    raw contents / system shared memory: requests per second and serve's CPU per request, as
    `benchmarks/run.py --only grpc-shm` measures them over loopback (`grpc_shm.grpc_shm_cost`;
    it needs the grpc extra, grpcio and protobuf)."""
    from benchmarks.grpc_shm import grpc_shm_cost

    return grpc_shm_cost(tmp, args.quick, uds=True)


def shm_batching_gain(tmp: Path, args: argparse.Namespace) -> list[dict]:
    """`hlobundle serve --uds PATH`, 16 client processes, binary requests and requests naming
    shared-memory regions: the batching gain of each against the model-only bound, as
    `benchmarks/run.py --only serve-shm` measures it (`serve_shm.serve_shm_cost`); goal >= 0.8."""
    from benchmarks.serve_shm import serve_shm_cost

    return serve_shm_cost(tmp, args.quick)


# --- report -------------------------------------------------------------------------------------


def serve_doors(tmp: Path, args: argparse.Namespace) -> list[dict]:
    """`hlobundle serve --uds PATH --frontends N`, N = 1 and 2, 16 client processes, without
    batching and batching up to 16 (`serve_doors.serve_doors_cost`)."""
    from benchmarks.serve_doors import serve_doors_cost

    return serve_doors_cost(tmp, args.quick, uds=True, clients=16, batches=(1, 16))


def device_loop(tmp: Path, args: argparse.Namespace) -> list[dict]:
    """The device's process beyond the model (`serve_doors.device_loop_cost`), 16 clients."""
    from benchmarks.serve_doors import device_loop_cost

    return device_loop_cost(tmp, args.quick, clients=16)


# `first`, `serve`, `shm`, `grpc-shm`, `start`, `doors` and `loop` run only children, which hold the device in
# turn: they come before any section that opens it in this process (one process at a time may
# hold a TPU chip).
SECTIONS: dict[str, tuple[str, Callable[[Path, argparse.Namespace], list[dict]]]] = {
    "first": ("First result in a fresh process", first_result),
    "serve": ("Serving: the batching gain", serve_batching_gain),
    "shm": ("Serving: the batching gain through shared memory", shm_batching_gain),
    "grpc-shm": ("Serving over gRPC: raw contents / shared memory", grpc_shared_memory),
    "start": ("`hlobundle run` over the runtime's start, fresh processes", run_over_runtime_start),
    "doors": ("Serving: several front doors, one device (--frontends)", serve_doors),
    "loop": ("Serving: the device's process beyond the model (--frontends)", device_loop),
    "overhead": ("Run overhead: a bundle function under jax.jit / native jax.jit", overhead),
    "lm": ("LM decode: one token through examples/lm.hlobundle / native lm.decode", lm),
    "grad": ("jax.grad through the bundle / native", grad),
    "weights": ("Weights to the device: from the bundle / from memory", weights),
    "verify": ("verify on the host's cores / the parallel sha256 bound", verify),
}


def versions() -> str:
    import jax

    def version(name: str) -> str:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return "absent"

    device = jax.devices()[0]
    return (
        f"device {device.device_kind} ({device.platform}, {jax.device_count()} device(s)); "
        f"jax {jax.__version__}, jaxlib {version('jaxlib')}, libtpu {version('libtpu')}; "
        f"host {os.cpu_count()} cores, Python {sys.version.split()[0]}"
    )


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    parser.add_argument("--only", default="", help=f"comma-separated, of {list(SECTIONS)}")
    parser.add_argument("--out", default=None, help="default: benchmarks/RESULTS-<platform>.md")
    parser.add_argument("--layers", type=int, default=None, help="compute-bound: layers (8)")
    parser.add_argument("--width", type=int, default=None, help="compute-bound: width (8192)")
    parser.add_argument("--batch", type=int, default=None, help="compute-bound: batch (4096)")
    parser.add_argument("--reps", type=int, default=None, help="repetitions of a call (100)")
    parser.add_argument("--reps-io", type=int, default=None, help="of a load or verify (7)")
    parser.add_argument("--reps-process", type=int, default=None, help="of a process (2)")
    parser.add_argument("--calls", type=int, default=None, help="dispatch-bound: calls a rep (20)")
    parser.add_argument("--hlo-out", default=None, help="dispatch-bound: each optimized HLO, to")
    args = parser.parse_args()
    sizes = (2, 1024, 16, 5) if args.quick else (8, 8192, 4096, 100)
    for name, default in zip(("layers", "width", "batch", "reps"), sizes, strict=True):
        if getattr(args, name) is None:
            setattr(args, name, default)
    io, process = (2, 1) if args.quick else (7, 2)
    args.reps_io = io if args.reps_io is None else args.reps_io
    args.reps_process = process if args.reps_process is None else args.reps_process
    args.calls = (2 if args.quick else 20) if args.calls is None else args.calls
    chosen = [n for n in args.only.split(",") if n] or list(SECTIONS)
    unknown = [n for n in chosen if n not in SECTIONS]
    if unknown:
        parser.error(f"unknown sections {unknown}; choose from {list(SECTIONS)}")
    args.chosen = chosen
    return args


def main() -> None:
    args = arguments()
    tmp = Path(tempfile.mkdtemp(prefix="hlobundle-accelerator-"))
    out = Path(args.out) if args.out else None
    body: list[str] = []
    failed = []
    try:
        for name in args.chosen:
            title, fn = SECTIONS[name]
            start = time.perf_counter()
            try:
                rows = fn(tmp, args)
            except Exception as e:  # one section failing loses no other's figures
                rows = [not_measured(name, f"failed: {type(e).__name__}: {str(e)[-300:]}")]
                failed.append(name)
            seconds = time.perf_counter() - start
            body.append(f"## {title}\n\n{table(rows)}\n\n({name}: {seconds:.0f} s)")
            print(f"{name}: {seconds:.1f} s", file=sys.stderr)
            if out is not None:  # what finished is kept if the run is cut short
                out.write_text(report(body, done=False))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    import jax

    text = report(body, done=True)
    (out or ROOT / "benchmarks" / f"RESULTS-{jax.devices()[0].platform}.md").write_text(text)
    print(text)
    if failed:  # the run still fails (CI runs it --quick so that it never rots unseen)
        raise SystemExit(f"sections failed: {failed}")


def report(body: list[str], done: bool) -> str:
    """The results file: what ran, where, when; `done` False while sections remain (the device
    is then named once the run ends, since opening it here may have to wait for children)."""
    command = " ".join(["python benchmarks/accelerator.py", *sys.argv[1:]])
    where = versions() if done else "(run not finished)"
    return textwrap.dedent(f"""\
        # Benchmark results on an accelerator

        Generated by `{command}` on {time.strftime("%Y-%m-%d")}: {where}.
        Ratios compare against a baseline measured in the same run; medians of interleaved
        repetitions; "met" says whether the ratio meets its goal.

        """) + "\n\n".join(body) + "\n"  # fmt: skip


if __name__ == "__main__":
    main()

"""The benchmark suite: `python benchmarks/run.py [--quick] [--only NAME,...] [--out PATH]`
writes benchmarks/RESULTS.md.

Every number is a ratio against a baseline measured in the same run (median of interleaved
repetitions), because absolute times on a shared 2-core machine are noise. `--quick` uses tiny
sizes (a smoke run, as CI does); the full run takes a few minutes and ~12 GB of disk. This file
is the driver: which section runs, under which title, and the report. The sections live in the
modules of this package (benchmarks/__init__.py has the map), their harness in harness.py.
"""

from __future__ import annotations

import argparse
import compileall
import os
import platform
import shutil
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parent.parent))  # run by path: this package
from benchmarks import (  # noqa: E402
    calls,
    distribution,
    executables,
    packing,
    peers,
    pytorch,
    serving,
    startup,
    trust,
    usage,
)
from benchmarks.grpc_shm import grpc_shm_cost  # noqa: E402
from benchmarks.harness import ROOT, table  # noqa: E402
from benchmarks.language_model import lm_cost  # noqa: E402
from benchmarks.serve_cpu import serve_cpu_cost  # noqa: E402
from benchmarks.serve_doors import device_loop_cost, serve_doors_cost  # noqa: E402
from benchmarks.serve_shm import serve_shm_cost  # noqa: E402
from benchmarks.serving import serve_uds_cost  # noqa: E402


def sections_of(tmp: Path, quick: bool) -> dict[str, Callable[[], list[tuple[str, list[dict]]]]]:
    """Each benchmark by a short name (for --only), giving its titled tables."""

    def one(
        title: str, fn: Callable[[Path, bool], list[dict]]
    ) -> Callable[[], list[tuple[str, list[dict]]]]:
        return lambda: [(title, fn(tmp, quick))]

    def load_pack() -> list[tuple[str, list[dict]]]:
        load_rows, pack_rows = packing.load_and_pack(tmp, quick)
        return [
            (
                "Load to device-ready arrays: speedup over the baseline (goal >= 3); peak RSS / weights (goal <= 1.2)",
                load_rows,
            ),
            (
                "Pack with checksums: ratio, median time / median safetensors save_file; "
                "fastest_vs_save_file_fsync, fastest run / fastest safetensors save_file + fsync "
                "(goal <= 1.3; fastest runs, as disk writeback swings the medians); in which: "
                "the phases of the fastest pack, their seconds and their part of that ratio",
                pack_rows,
            ),
        ]

    return {
        "overhead": one(
            "Run overhead: bundle function under jit / native jax.jit of the same JAX function (goal <= 1.02)",
            calls.overhead,
        ),
        "vmap": one(
            "vmap: time / native jax.vmap of the same function. A loop, unless the bundle has a "
            "batched module for the mapped arguments (export(..., vmap_in_axes=...)), or its "
            "rows are declared independent along a symbolic batch (SPEC.md 2.13; "
            "export(..., independent_rows='b')) and trusted: then one call of 16 x 4 rows",
            calls.vmap_cost,
        ),
        "first": one(
            "Time to first result, fresh process (goals: ratio <= 1 with no cache; a second run <= 1.25x the import floor)",
            startup.first_result,
        ),
        "iree": one(
            "IREE: time to first result, fresh process, stored executable / xla backend with a "
            "warm compile cache (goal <= 0.5)",
            executables.iree_first_result,
        ),
        "first-result-executable": one(
            "XLA: time to first result, fresh process, transformer of a few layers: a cold "
            "compile, JAX's warm persistent cache, the bundle's stored XLA executable (trusted)",
            executables.xla_first_result,
        ),
        "pack": load_pack,
        "column": one(
            "Column-major packing: peak RSS above start-up / weights", packing.column_major
        ),
        "startup": lambda: [
            (
                "Start-up: time / `python -c pass` (inspect and verify parse and check the modules "
                "with jaxlib's MLIR bindings, as load() does, without jax)",
                startup.startup(),
            )
        ],
        "scale": one("Scale: a sparse bundle of many GiB", packing.scale),
        "lm": one(
            "Language model (examples/lm.hlobundle): decode per token under jit / native jax.jit "
            "(goal <= 1.05); tensor bytes / one copy of the weights + examples (goal <= 1.02)",
            lm_cost,
        ),
        "trust": one(
            "Trust: load() and verify --quick of the checking reader / the reader before it",
            trust.trust_cost,
        ),
        "children": one(
            "Untrusted artifacts in a child process: a fork of one server / a fresh process each",
            trust.children_cost,
        ),
        "foreign": one(
            "Verify of a bundle another jaxlib wrote (whole process, no verdict cached): the "
            "reader's forks of one server / a fresh process per artifact",
            trust.foreign_verify_cost,
        ),
        "sign": one(
            "Signing and full verify: sign / a full verify of the same bundle; each / one core's sha256 of "
            "the tensor file (the bound: a file's sha256 is one sequential pass)",
            trust.sign_cost,
        ),
        "usage": one(
            "Cost that grows with what is used: one function of a big bundle, and the reading "
            "commands as the manifest grows",
            usage.usage_cost,
        ),
        "serve-many": one(
            "Serving many bundles: one server against each bundle served alone",
            serving.serve_many_cost,
        ),
        "pull": one(
            "Pull from a local registry (docker-registry): time / oras pull of the same artifact; "
            "peak RSS above start-up / bundle size",
            distribution.pull_cost,
        ),
        "remote": one(
            "Remote loading: bytes fetched / the bytes the function uses (loopback counters)",
            distribution.remote_cost,
        ),
        "serve": one(
            "Serving (hlobundle serve; clients: threads of the benchmark over loopback, http.client "
            "for latency, serve_client.Lean under load): latency (ratio column: seconds over the "
            "in-process call), throughput against the bounds on batching, load",
            serving.serve_cost,
        ),
        "serve-uds": one(
            "Serving over a unix socket (hlobundle serve --uds; no TCP socket at all): dynamic "
            "batching's gain, 16 clients (http.client; threads of the benchmark, then forked "
            "processes), against the model-only bound",
            serve_uds_cost,
        ),
        "serve-shm": one(
            "Dynamic batching through system shared memory (hlobundle serve --uds, 16 forked "
            "client processes, each with its own regions registered over REST, in rounds taken "
            "in turns with the same clients' binary requests), against the model-only bound",
            serve_shm_cost,
        ),
        "serve-cpu": one(
            "serve's CPU per request (the server process's user and system time over N requests "
            "from one keep-alive client, / N; medians of rounds in turns): s per request, ratio "
            "over the goal",
            serve_cpu_cost,
        ),
        "grpc-shm": one(
            "A small binary infer over gRPC (serve --grpc-port, one client, one request after "
            "another): raw contents / system shared memory, requests per second and serve's CPU "
            "per request (its process's user and system time / N; medians of rounds in turns); "
            "ratio: over raw contents, or for the CPU beyond the model, over 80 us",
            grpc_shm_cost,
        ),
        "serve-doors": one(
            "Several front doors, one device (hlobundle serve --frontends N): binary LeNet "
            "infers from forked client processes, s per request (1 / requests per second) and "
            "serve's CPU per request over all its processes",
            serve_doors_cost,
        ),
        "serve-loop": one(
            "The process that holds the device, beyond the model (hlobundle serve --uds "
            "--frontends N, a slice of the images served as the LeNet): its CPU per request, "
            "8 forked client processes; ratio: the front doors' CPU per request over it",
            device_loop_cost,
        ),
        "peers": one(
            "Serving beside the engines (peers.py): the LeNet with a symbolic batch, the same "
            "request bytes and client (8 threads, keep-alive) against hlobundle serve, MLServer "
            "1.7.1 and KServe 0.21, each through hlobundle's adapter in its own environment; "
            "medians of interleaved rounds",
            peers.peers_cost,
        ),
        "ray": one(
            "Ray (ray_scaling.py, Ray 2.60 on this machine): Ray Data scoring and Ray Serve replicas",
            peers.ray_cost,
        ),
        "torch": one(
            "PyTorch models in (tests/test_torch.py's corpus): the bundle's forward pass under "
            "jax.jit / eager PyTorch on the CPU, at the faster of 1 and `cores` threads "
            "(torch.set_num_threads), each in its steady state (goal <= 1.0); "
            "from_torch's seconds, and / torch.export.export's alone",
            pytorch.torch_cost,
        ),
        "json": one(
            "Serving: decoding the LeNet JSON request (batch 4), warm, in process: with orjson / "
            "with the standard library (the decoder before it)",
            serving.json_decode_cost,
        ),
    }


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated section names; prints them and writes --out only if given",
    )
    parser.add_argument("--out", default=None, help="default: benchmarks/RESULTS.md for a full run")
    return parser


def main() -> None:
    parser = arguments()
    args = parser.parse_args()
    import jax

    jax.config.update("jax_enable_x64", True)
    # The package's bytecode, as `pip install` compiles it (this machine sets
    # PYTHONDONTWRITEBYTECODE, so an editable checkout would otherwise compile every import).
    compileall.compile_dir(ROOT / "hlobundle", quiet=1)
    tmp = Path(tempfile.mkdtemp(prefix="hlobundle-bench-"))
    try:
        available = sections_of(tmp, args.quick)
        chosen = [name for name in args.only.split(",") if name] or list(available)
        unknown = [name for name in chosen if name not in available]
        if unknown:
            parser.error(f"unknown sections {unknown}; choose from {list(available)}")
        sections = [section for name in chosen for section in available[name]()]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, jax {jax.__version__}"
    body = "\n\n".join(f"## {title}\n\n{table(rows)}" for title, rows in sections)
    text = (
        textwrap.dedent(f"""\
        # Benchmark results

        Generated by `python benchmarks/run.py{" --quick" if args.quick else ""}` on {time.strftime("%Y-%m-%d")}: {machine}.
        Ratios compare against a baseline measured in the same run; medians of interleaved repetitions;
        "spread" is (max - min) / median of the bundle's times.

        """)
        + body
        + "\n"
    )
    out = args.out or (None if args.only else str(ROOT / "benchmarks" / "RESULTS.md"))
    if out:
        Path(out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()

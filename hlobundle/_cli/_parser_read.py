"""The options of the commands that read and run bundles: run, emit, inspect, verify, serve and
conformance."""

from __future__ import annotations

import argparse
from typing import Any

from .._run._backends import NAMES as BACKENDS
from . import _commands, _values
from ._common import Handler


def add_run(sub: Any) -> None:
    p = sub.add_parser("run", help="run a bundle and check it against its expected outputs")
    p.add_argument("bundle")
    _add_function(p)
    p.add_argument(
        "--inputs",
        nargs="+",
        action="extend",
        metavar="FILE|NAME=FILE",
        help="inputs to use instead of the stored ones: by key or by NAME=FILE (a file "
        "of one array); arguments not given keep their stored values",
    )
    p.add_argument(
        "--save-outputs",
        metavar="FILE",
        type=_values.file_of(".npz", ".safetensors"),
        help="write the results to .npz or .safetensors",
    )
    p.add_argument(
        "--layout",
        choices=["stored", "producer"],
        default="stored",
        help="producer: --inputs and --save-outputs use the producer's orientation (Julia's, "
        "for column-major values)",
    )
    _add_backend(
        p,
        "auto (default): xla, which needs only jax; enzyme: enzyme-ad's hlo_call "
        "on the text; iree: IREE's CPU runtime (extra iree), which needs no jax",
    )
    p.add_argument(
        "--trust-executables",
        action="store_true",
        help="xla and iree: run the bundle's stored executable (native code: "
        "compiled/xla-PLATFORM.pjrt, compiled/*.vmfb) although no --public-key verified its "
        "signature (SPEC.md, 'Executables')",
    )
    p.add_argument(
        "--max-memory",
        type=_values.size,
        metavar="BYTES",
        help="iree: end with an error (LIMIT_EXCEEDED) rather than be killed when the "
        "process would use more memory (default: the memory available at start; "
        "suffixes K, M, G)",
    )
    for flag, which in (("--rtol", "relative"), ("--atol", "absolute")):
        p.add_argument(
            flag,
            type=_values.tolerance,
            help=f"{which} tolerance (default: per dtype, widened where the expected outputs "
            "were computed at another precision: docs/accelerators.md)",
        )
    p.add_argument(
        "--precision",
        choices=["highest"],
        help="highest: run every dot and convolution op at HIGHEST precision (a TPU's default "
        "for float32 is one bfloat16 pass), on a rewritten copy of the module; xla and enzyme "
        "(iree computes float32 at float32 anyway)",
    )
    _add_json(p)
    p.add_argument(
        "--verify",
        action="store_true",
        help="check every file's sha256 first and run on exactly the verified bytes (tensor files "
        "are read into memory); module files are always checked",
    )
    _add_trust(p)
    p.add_argument(
        "--devices",
        type=_values.positive_int,
        metavar="N",
        help="devices to run a sharded bundle on (default: its mesh's size; 1: unsharded)",
    )
    p.add_argument(
        "--distributed",
        action="store_true",
        help="call jax.distributed.initialize() first (multi-host; reads JAX_COORDINATOR_ADDRESS, "
        "JAX_NUM_PROCESSES, JAX_PROCESS_ID)",
    )
    p.add_argument(
        "--no-cache",
        action="store_true",
        help="read and write no persistent compilation cache, JAX's or IREE's (default: a "
        "private $HLOBUNDLE_CACHE_DIR, or ~/.cache/hlobundle; HLOBUNDLE_NO_CACHE=1 also turns "
        "it off)",
    )
    p.set_defaults(handler=Handler(_commands, "run"))


def add_emit(sub: Any) -> None:
    p = sub.add_parser(
        "emit", help="write a standalone run.py for a bundle, or a ReactantServer.jl bundle"
    )
    p.add_argument("bundle")
    _add_function(p)
    p.add_argument(
        "--format",
        choices=["script", "reactant-server"],
        default="script",
        help="script: a run.py (default); reactant-server: the directory -o names, a "
        "model bundle ReactantServer.jl loads",
    )
    p.add_argument("-o", "--output", help="the script's path (default: <bundle>_run.py beside it)")
    _add_backend(
        p,
        "how the script calls the module: xla (needs only jax), enzyme (enzyme-ad), "
        "iree (needs only iree-base-runtime; runs the executable `hlobundle compile` "
        "stored), or auto (default): a script that needs only jax and calls the module "
        "with enzyme where enzyme-ad imports when it runs, else with xla",
    )
    p.add_argument("--force", action="store_true", help="replace an existing file")
    p.add_argument(
        "--bundle-path",
        choices=["relative", "absolute"],
        default="relative",
        help="how the script finds the bundle: its path relative to the script "
        "(default: move them together) or its absolute path (the script may go "
        "anywhere; the bundle stays)",
    )
    _add_trust(p)
    p.add_argument(
        "--trust-executables",
        action="store_true",
        help="iree: write a script running the stored executable (native code) of a "
        "bundle no --public-key verified",
    )
    p.set_defaults(handler=Handler(_commands, "emit"))


def add_inspect(sub: Any) -> None:
    p = sub.add_parser("inspect", help="show a bundle's arguments, results and provenance")
    p.add_argument("bundle")
    _add_json(p)
    p.set_defaults(handler=Handler(_commands, "inspect"))


def add_verify(sub: Any) -> None:
    p = sub.add_parser("verify", help="check a bundle's structure and checksums (and signature)")
    p.add_argument("bundle")
    p.add_argument("--quick", action="store_true", help="structure and sizes only, no checksums")
    _add_json(p)
    _add_trust(p)
    p.set_defaults(handler=Handler(_commands, "verify"))


def add_fingerprint(sub: Any) -> None:
    p = sub.add_parser(
        "fingerprint",
        help="print the digest of what a bundle's functions compute (SPEC.md 2.11)",
    )
    p.add_argument("bundle")
    p.add_argument("--function", default=None, help="this function's only")
    _add_json(p)
    p.set_defaults(handler=Handler(_commands, "fingerprint"))


def add_diff(sub: Any) -> None:
    p = sub.add_parser(
        "diff",
        help="what differs between two bundles, function by function (exit 0: the same "
        "fingerprint; 1: they differ)",
    )
    p.add_argument("a", metavar="A")
    p.add_argument("b", metavar="B")
    _add_json(p)
    p.set_defaults(handler=Handler(_commands, "diff"))


def add_serve(sub: Any) -> None:
    p = sub.add_parser(
        "serve", help="serve bundles over the Open Inference Protocol (KServe v2 REST)"
    )
    p.add_argument(
        "bundles",
        nargs="+",
        metavar="[NAME=]BUNDLE",
        help="a bundle, served under its function's name and its directory's stem, "
        "or under NAME alone",
    )
    p.add_argument(
        "--host", default="127.0.0.1", help="the address to listen on (default: loopback)"
    )
    rest = p.add_mutually_exclusive_group()
    rest.add_argument(
        "--port",
        type=_values.port,
        default=8000,
        help="the port to listen on (default 8000; 0: any free one)",
    )
    rest.add_argument(
        "--uds",
        metavar="PATH",
        help="listen on a unix socket made at PATH instead of a port (owner-only; "
        "PATH must not exist; removed on exit)",
    )
    grpc = p.add_mutually_exclusive_group()
    grpc.add_argument(
        "--grpc-port",
        type=_values.port,
        default=None,
        metavar="N",
        help="also serve the protocol over gRPC (KServe v2's predict service) on port "
        "N of --host (0: any free one; needs grpcio, the grpc extra)",
    )
    grpc.add_argument(
        "--grpc-uds",
        metavar="PATH",
        help="also serve gRPC, on a unix socket made at PATH (as --uds)",
    )
    p.add_argument(
        "--grpc-max-deadline",
        type=_values.positive_seconds,
        default=60.0,
        metavar="S",
        help="gRPC: the longest a model call may take, whatever the client's deadline (default 60)",
    )
    _add_backend(p, "iree: IREE's CPU runtime, no jax (and no dynamic batching)")
    p.add_argument(
        "--trust-executables",
        action="store_true",
        help="xla and iree: run stored executables (native code) of bundles no --public-key "
        "verified",
    )
    p.add_argument(
        "--max-body-bytes",
        type=_values.positive_int,
        default=64 << 20,
        metavar="N",
        help="refuse larger requests with HTTP 413 (default: 64 MiB)",
    )
    p.add_argument(
        "--max-response-bytes",
        type=_values.positive_int,
        default=64 << 20,
        metavar="N",
        help="refuse, with HTTP 413 before the model runs, a request whose answer from a "
        "function with symbolic dimensions would be larger (default: 64 MiB)",
    )
    p.add_argument(
        "--max-shared-memory",
        type=_values.size_or_zero,
        default=64 << 20,
        metavar="N",
        help="clients may register up to N bytes of system shared memory, over REST and gRPC "
        "alike (the Open Inference Protocol's extension; default 64M; 0: off); offered on "
        "--uds and --grpc-uds (only your user can open them), and on a loopback --host only "
        "with --shared-memory-over-loopback",
    )
    p.add_argument(
        "--shared-memory-over-loopback",
        action="store_true",
        help="offer system shared memory on a loopback --host too: every user of the machine "
        "can then connect, register a /dev/shm file of yours and read it through the model, "
        "or have outputs written into it (without: only on --uds and --grpc-uds)",
    )
    p.add_argument(
        "--read-timeout",
        type=_values.positive_seconds,
        default=30.0,
        metavar="S",
        help="close a connection whose request headers, or refuse (408) a request "
        "whose body, has not arrived within S seconds (default 30)",
    )
    p.add_argument(
        "--max-connections",
        type=_values.positive_int,
        default=512,
        metavar="N",
        help="answer requests beyond N open connections with 503 (default 512)",
    )
    p.add_argument(
        "--frontends",
        type=_values.positive_int,
        default=1,
        metavar="N",
        help="accept and check requests in N processes of their own (front doors, which never "
        "import jax), feeding the one process that holds the device and runs the models "
        "(default 1: one process does both; docs/serving.md)",
    )
    p.add_argument(
        "--access-log",
        action="store_true",
        help="print a line for each request (off by default: it costs the server's event "
        "loop about a third of a health check; /metrics counts every request)",
    )
    p.add_argument(
        "--max-batch-size",
        type=_values.positive_int,
        default=8,
        metavar="N",
        help="combine up to N concurrent requests into one call (1: never; default 8), only "
        "for a function with a batched module or declared independent rows (SPEC.md 2.13), "
        "of a bundle --public-key verified or --trust-batched trusts",
    )
    p.add_argument(
        "--trust-batched",
        action="store_true",
        help="combine requests through the batched modules and declared independent rows of "
        "bundles no --public-key verified (without: their requests run one by one); a "
        "function with neither is never combined",
    )
    p.add_argument(
        "--batch-timeout-ms",
        type=_values.milliseconds,
        default=2.0,
        metavar="MS",
        help="how long a request waits for others to join its batch (default 2)",
    )
    p.add_argument(
        "--max-shapes",
        type=_values.positive_int,
        default=16,
        metavar="N",
        help="symbolic dimensions: keep at most N shapes of a function compiled "
        "(least recently used out; default 16)",
    )
    p.add_argument(
        "--sizes",
        type=_values.sizes,
        action="append",
        default=[],
        metavar="SYMBOL=N[,N...]",
        help="symbolic dimensions: serve only these values of SYMBOL, compiled at "
        "start-up; others get a 400 (repeat for more symbols)",
    )
    _add_trust(p)
    p.set_defaults(handler=Handler(_commands, "serve"))


def add_conformance(sub: Any) -> None:
    p = sub.add_parser("conformance", help="run the conformance suite against an implementation")
    p.add_argument(
        "dir",
        nargs="?",
        default=None,
        help="the cases (default: the ones installed with hlobundle)",
    )
    p.add_argument(
        "--implementation",
        metavar="CMD",
        help="a command speaking the protocol of SPEC.md, 'Conformance' (default: this library)",
    )
    p.add_argument("-k", metavar="TEXT", help="only cases whose name contains TEXT")
    _add_backend(p, "this library's backend to run the valid cases on (default: auto)")
    _add_json(p)
    p.set_defaults(handler=Handler(_commands, "conformance"))


def _add_function(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--function",
        metavar="NAME",
        help="which function of a bundle with several (default: its default function)",
    )


def _add_backend(p: argparse.ArgumentParser, help: str) -> None:
    p.add_argument("--backend", choices=BACKENDS, default="auto", help=help)


def _add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _add_trust(p: argparse.ArgumentParser) -> None:
    trust = p.add_mutually_exclusive_group()
    trust.add_argument(
        "--public-key",
        metavar="PUB.pem",
        help="require a signature by this key (checked before anything runs)",
    )
    trust.add_argument(
        "--certificate-chain",
        nargs="+",
        metavar="CERT.pem",
        help="require a signature by a certificate this chain trusts",
    )

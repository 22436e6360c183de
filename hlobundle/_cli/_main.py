"""The `hlobundle` command line: pack, run, emit, inspect, verify, serve, refresh, compile, sign,
conformance and schema (README.md, "Command line").

Errors print `error [CODE] message` on stderr and exit 1; usage errors exit 2.
Set `HLOBUNDLE_TRACEBACK=1` to see Python tracebacks.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from collections.abc import Sequence
from typing import Any

from .. import _progress
from .._format._errors import HloBundleError
from . import _commands, _pack

EXIT_OK, EXIT_FAIL = 0, 1  # argparse exits 2 on usage errors


def main(argv: Sequence[str] | None = None) -> int:
    # XLA's C++ INFO lines ("PjRt-IFRT device count ...") are not for users; an explicit
    # TF_CPP_MIN_LOG_LEVEL still wins. Set before anything imports jax.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    parser = _parser()
    args = parser.parse_args(argv)
    warnings.formatwarning = lambda message, *_, **__: f"warning: {message}\n"
    # Progress bars for a person at a terminal: never on a pipe, nor beside --json.
    _progress.enable(sys.stderr.isatty() and not getattr(args, "json", False))
    try:
        return int(args.handler(args))
    except KeyboardInterrupt:  # what was being written is removed by its own cleanup
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of our output went away (`| head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAIL
    except HloBundleError as e:
        if os.environ.get("HLOBUNDLE_TRACEBACK"):
            raise
        if getattr(args, "json", False):
            print(json.dumps({"ok": False, "code": e.code, "message": e.message, **e.context()}))
        _print_error(e)
        if e.fatal:  # skip the teardown of a runtime whose state is lost (it would crash)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(EXIT_FAIL)
        return EXIT_FAIL
    finally:
        _progress.enable(False)


def _print_error(e: HloBundleError) -> None:
    from .._read._inspect import shown

    where = ", ".join(f"{k}: {v}" for k, v in e.context().items())
    text = f"error [{e.code}] {e.message}" + (f" ({where})" if where else "")
    print(shown(text), file=sys.stderr)


def _parser() -> argparse.ArgumentParser:
    from .._version import __version__

    parser = argparse.ArgumentParser(
        prog="hlobundle",
        description="Pack, run, emit, inspect, verify, sign, compile and serve StableHLO bundles.",
    )
    parser.add_argument("--version", action="version", version=f"hlobundle {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_pack(sub)
    _add_run(sub)
    p = sub.add_parser(
        "emit", help="write a standalone run.py for a bundle, or a ReactantServer.jl bundle"
    )
    p.add_argument("bundle")
    p.add_argument("--function", metavar="NAME", help="which function of a bundle with several "
                   "(default: its default function)")  # fmt: skip
    p.add_argument("--format", choices=["script", "reactant-server"], default="script",
                   help="script: a run.py (default); reactant-server: the directory -o names, a "
                   "model bundle ReactantServer.jl loads")  # fmt: skip
    p.add_argument("-o", "--output", help="the script's path (default: <bundle>_run.py beside it)")
    p.add_argument(
        "--backend",
        choices=["auto", "enzyme", "xla", "iree"],
        default="auto",
        help="how the script calls the module: xla (needs only jax), enzyme (enzyme-ad), "
        "iree (needs only iree-base-runtime; runs the executable `hlobundle compile` stored), or "
        "auto: enzyme where it is installed here, else xla (default)",
    )
    p.add_argument("--force", action="store_true", help="replace an existing file")
    _add_trust(p)
    p.add_argument("--trust-executables", action="store_true",
                   help="iree: write a script running the stored executable (native code) of a "
                   "bundle no --public-key verified")  # fmt: skip
    p.set_defaults(handler=_commands.emit, parser=p)
    p = sub.add_parser("inspect", help="show a bundle's arguments, results and provenance")
    p.add_argument("bundle")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=_commands.inspect)
    p = sub.add_parser("verify", help="check a bundle's structure and checksums (and signature)")
    p.add_argument("bundle")
    p.add_argument("--quick", action="store_true", help="structure and sizes only, no checksums")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    _add_trust(p)
    p.set_defaults(handler=_commands.verify, parser=p)
    p = sub.add_parser(
        "serve", help="serve bundles over the Open Inference Protocol (KServe v2 REST)"
    )
    p.add_argument("bundles", nargs="+", metavar="[NAME=]BUNDLE",
                   help="a bundle, served under its function's name and its directory's stem, "
                   "or under NAME alone")  # fmt: skip
    p.add_argument(
        "--host", default="127.0.0.1", help="the address to listen on (default: loopback)"
    )
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--backend", choices=["auto", "enzyme", "xla", "iree"], default="auto",
                   help="iree: IREE's CPU runtime, no jax (and no dynamic batching)")  # fmt: skip
    p.add_argument("--trust-executables", action="store_true",
                   help="iree: run stored executables (native code) of bundles no --public-key verified")  # fmt: skip
    p.add_argument("--max-body-bytes", type=int, default=64 << 20, metavar="N",
                   help="refuse larger requests with HTTP 413 (default: 64 MiB)")  # fmt: skip
    p.add_argument("--read-timeout", type=float, default=30.0, metavar="S",
                   help="close a connection whose request headers, or refuse (408) a request "
                   "whose body, has not arrived within S seconds (default 30)")  # fmt: skip
    p.add_argument("--max-connections", type=int, default=512, metavar="N",
                   help="answer requests beyond N open connections with 503 (default 512)")  # fmt: skip
    p.add_argument("--max-batch-size", type=int, default=8, metavar="N",
                   help="combine up to N concurrent requests for a bundle with a trusted batched "
                   "module into one call (1: never; default 8)")  # fmt: skip
    p.add_argument("--trust-batched", action="store_true",
                   help="batch through the batched modules of bundles no --public-key verified "
                   "(without: their requests run one by one on the verified module)")  # fmt: skip
    p.add_argument("--batch-timeout-ms", type=float, default=2.0, metavar="MS",
                   help="how long a request waits for others to join its batch (default 2)")  # fmt: skip
    _add_trust(p)
    p.set_defaults(handler=_commands.serve)
    p = sub.add_parser(
        "refresh", help="rewrite a bundle's portable artifacts for a StableHLO target"
    )
    p.add_argument("bundle")
    p.add_argument("--target-version", metavar="X.Y.Z",
                   help="the StableHLO version to write (default: what pack writes today)")  # fmt: skip
    _add_signing_key(p, "--sign-key", required=False)
    _add_resigning(p)
    p.set_defaults(handler=_commands.refresh, parser=p)
    p = sub.add_parser(
        "compile", help="store ahead-of-time IREE executables in a bundle (extra iree)"
    )
    p.add_argument("bundle")
    p.add_argument("--target", action="append", dest="targets", metavar="TARGET",
                   help="an IREE target: llvm-cpu (default) or vmvx; may be repeated")  # fmt: skip
    p.add_argument("--function", metavar="NAME", help="compile this function of a bundle with "
                   "several alone (default: every function)")  # fmt: skip
    p.add_argument("--cpu", default="generic",
                   help="llvm-cpu's target CPU: generic (default; any CPU of this architecture), "
                   "host, or a name such as znver3 (faster; faults on CPUs without its features)")  # fmt: skip
    _add_signing_key(p, "--sign-key", required=False)
    _add_resigning(p)
    p.set_defaults(handler=_commands.compile_bundle, parser=p)
    p = sub.add_parser("sign", help="sign a bundle (OpenSSF model signing, model.sig)")
    p.add_argument("bundle")
    _add_signing_key(p, "--private-key", required=True)
    p.add_argument("--force", action="store_true", help="replace an existing signature")
    p.set_defaults(handler=_commands.sign)
    p = sub.add_parser("conformance", help="run the conformance suite against an implementation")
    p.add_argument(
        "dir",
        nargs="?",
        default=None,
        help="the cases (default: the ones installed with hlobundle)",
    )
    p.add_argument("--implementation", metavar="CMD",
                   help="a command speaking the protocol of SPEC.md, 'Conformance' (default: this library)")  # fmt: skip
    p.add_argument("-k", metavar="TEXT", help="only cases whose name contains TEXT")
    p.add_argument("--backend", choices=["auto", "enzyme", "xla", "iree"], default="auto",
                   help="this library's backend to run the valid cases on (default: auto)")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=_commands.conformance, parser=p)
    p = sub.add_parser("schema", help="print the manifest's JSON schema")
    p.add_argument("-o", "--output", help="write it to this file instead")
    p.set_defaults(handler=_commands.schema)
    return parser


def _add_pack(sub: Any) -> None:
    p = sub.add_parser("pack", help="write a bundle from an MLIR module and example inputs")
    p.add_argument("module", nargs="?", help="StableHLO/MLIR text file (@main is the entry)")
    p.add_argument(
        "--from-reactant", metavar="[NAME=]PATH", action="append",
        help="the .py that Reactant's export_to_enzymejax wrote, or its directory (instead of "
        "MODULE); repeated as NAME=PATH: one function NAME each, equal weights stored once",
    )  # fmt: skip
    p.add_argument(
        "--from-reactant-server", metavar="DIR",
        help="a ReactantServer.jl model bundle (manifest.yaml, model.mlir, weights.safetensors), "
        "instead of MODULE",
    )  # fmt: skip
    p.add_argument("--batch-size", type=int, metavar="N",
                   help="--from-reactant-server: take this compiled batch size alone (default: "
                   "every one, a function bN each, the smallest the default)")  # fmt: skip
    p.add_argument(
        "--from-jax-export", metavar="[NAME=]BLOB", action="append",
        help="a serialized jax.export.Exported (Exported.serialize()), instead of MODULE; "
        "repeated as NAME=BLOB: one function NAME each",
    )  # fmt: skip
    p.add_argument(
        "--inputs", nargs="+", action="extend", default=[], metavar="FILE",
        help=".npz, .npy (one per argument) or .safetensors; may be repeated",
    )  # fmt: skip
    p.add_argument("-o", "--output", required=True, help="the bundle directory to create")
    p.add_argument("--names", type=_csv, help="argument names, comma-separated, in @main order")
    p.add_argument("--result-names", type=_csv, help="result names, comma-separated")
    p.add_argument(
        "--layout", choices=["auto", "row-major", "column-major"], default="auto",
        help="column-major: the arrays are in Julia's orientation; transpose and flag them. "
        "auto (default): column-major when the arrays' shapes are the tensors' reversed, or "
        "when no shape tells and the arrays are stored in Fortran order (Julia's NPZ.jl); "
        "otherwise row-major, as pack() assumes",
    )  # fmt: skip
    p.add_argument(
        "--role", action="append", default=[], metavar="NAME=ROLE", type=_role,
        help="mark arguments as input, parameter or state; NAME may be a glob ('params_*'); "
        "may be repeated",
    )  # fmt: skip
    p.add_argument(
        "--allow-custom-call", action="append", default=[], metavar="NAME",
        help="accept this custom call target although it looks tied to the producer's process",
    )  # fmt: skip
    p.add_argument(
        "--with-vjp", action="store_true",
        help="also store a backward module (lowered once through enzyme-ad), so that the xla "
        "backend can differentiate the bundle",
    )  # fmt: skip
    p.add_argument("--function", help="the function's name (default: the module's name)")
    p.add_argument("--target-version", help="StableHLO version of the portable artifact")
    p.add_argument("--force", action="store_true", help="replace an existing bundle")
    p.add_argument("--add", action="store_true",
                   help="add the function to the existing bundle -o names (format 2.0), "
                   "packed beside it first; a signed bundle needs --sign-key")  # fmt: skip
    p.add_argument("--default", action="store_true",
                   help="--add: make the (first) added function the bundle's default")  # fmt: skip
    _add_signing_key(p, "--sign-key", required=False)
    _add_resigning(p)
    group = p.add_mutually_exclusive_group()
    group.add_argument(
        "--compute-expected", action="store_true",
        help="run the module once on the inputs and store the results as expected outputs",
    )  # fmt: skip
    group.add_argument(
        "--expected", nargs="+", metavar="FILE",
        help="expected outputs (.npz, .npy, .safetensors), keyed by result name or arr_<k>",
    )  # fmt: skip
    p.set_defaults(handler=_pack.pack, parser=p)


def _add_resigning(p: argparse.ArgumentParser) -> None:
    p.add_argument("--public-key", metavar="PUB.pem",
                   help="a signed bundle's signature must verify with this key before it is "
                   "signed again (default: the --sign-key's own public key)")  # fmt: skip
    p.add_argument("--replace-signature", action="store_true",
                   help="sign again even though the bundle's signature does not verify (take "
                   "the bundle over)")  # fmt: skip


def _add_signing_key(p: argparse.ArgumentParser, flag: str, *, required: bool) -> None:
    p.add_argument(flag, dest="private_key", required=required, metavar="KEY.pem",
                   help="sign with this elliptic-curve private key (SPEC.md, 'Signature')")  # fmt: skip
    p.add_argument("--signing-certificate", metavar="CERT.pem",
                   help="the key's certificate, to sign with a certificate (needs --private-key)")  # fmt: skip
    p.add_argument("--certificate-chain", nargs="+", default=[], metavar="CERT.pem",
                   help="the certificates from the signing certificate up to a root")  # fmt: skip


def _add_trust(p: argparse.ArgumentParser) -> None:
    trust = p.add_mutually_exclusive_group()
    trust.add_argument("--public-key", metavar="PUB.pem",
                       help="require a signature by this key (checked before anything runs)")  # fmt: skip
    trust.add_argument("--certificate-chain", nargs="+", metavar="CERT.pem",
                       help="require a signature by a certificate this chain trusts")  # fmt: skip


def _add_run(sub: Any) -> None:
    p = sub.add_parser("run", help="run a bundle and check it against its expected outputs")
    p.add_argument("bundle")
    p.add_argument("--function", metavar="NAME", help="which function of a bundle with several "
                   "(default: its default function)")  # fmt: skip
    p.add_argument("--inputs", nargs="+", action="extend", metavar="FILE|NAME=FILE",
                   help="inputs to use instead of the stored ones: by key or by NAME=FILE (a file "
                   "of one array); arguments not given keep their stored values")  # fmt: skip
    p.add_argument(
        "--save-outputs", metavar="FILE", help="write the results to .npz or .safetensors"
    )
    p.add_argument(
        "--layout", choices=["stored", "producer"], default="stored",
        help="producer: --inputs and --save-outputs use the producer's orientation (Julia's, "
        "for column-major values)",
    )  # fmt: skip
    p.add_argument("--backend", choices=["auto", "enzyme", "xla", "iree"], default="auto",
                   help="auto: enzyme where installed, else xla; iree: IREE's CPU runtime (extra "
                   "iree), which needs no jax")  # fmt: skip
    p.add_argument("--trust-executables", action="store_true",
                   help="iree: run the bundle's stored executable (native code) although no "
                   "--public-key verified its signature (SPEC.md, 'Executables')")  # fmt: skip
    p.add_argument("--max-memory", type=_size, metavar="BYTES",
                   help="iree: end with an error (LIMIT_EXCEEDED) rather than be killed when the "
                   "process would use more memory (default: the memory available at start; "
                   "suffixes K, M, G)")  # fmt: skip
    p.add_argument(
        "--rtol", type=_tolerance("--rtol"), help="relative tolerance (default: per dtype)"
    )
    p.add_argument(
        "--atol", type=_tolerance("--atol"), help="absolute tolerance (default: per dtype)"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--verify", action="store_true",
        help="check every file's sha256 first and run on exactly the verified bytes (tensor files "
        "are read into memory); module files are always checked",
    )  # fmt: skip
    _add_trust(p)
    p.add_argument("--devices", type=int, metavar="N",
                   help="devices to run a sharded bundle on (default: its mesh's size; 1: unsharded)")  # fmt: skip
    p.add_argument("--distributed", action="store_true",
                   help="call jax.distributed.initialize() first (multi-host; reads JAX_COORDINATOR_ADDRESS, "
                   "JAX_NUM_PROCESSES, JAX_PROCESS_ID)")  # fmt: skip
    p.add_argument(
        "--no-cache", action="store_true",
        help="read and write no persistent compilation cache, JAX's or IREE's (default: a "
        "private $HLOBUNDLE_CACHE_DIR, or ~/.cache/hlobundle; HLOBUNDLE_NO_CACHE=1 also turns "
        "it off)",
    )  # fmt: skip
    p.set_defaults(handler=_commands.run, parser=p)


def _tolerance(flag: str) -> Any:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = -1.0
        if not value >= 0:  # also refuses nan
            raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}") from None
        return value

    parse.__name__ = flag  # argparse names the option in its message
    return parse


def _size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    scale = units.get(text[-1:].upper(), 1)
    digits = text[:-1] if text[-1:].upper() in units else text
    if not digits.isdigit() or int(digits) == 0:
        raise argparse.ArgumentTypeError(f"expected a size in bytes such as 8G, got {text!r}")
    return int(digits) * scale


def _csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",")]


def _role(item: str) -> tuple[str, str]:
    name, sep, role = item.partition("=")
    if not sep or role not in ("input", "parameter", "state"):
        raise argparse.ArgumentTypeError(f"expected NAME=input|parameter|state, got {item!r}")
    return name, role

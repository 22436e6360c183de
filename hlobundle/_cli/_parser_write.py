"""The options of the commands that write bundles: pack, refresh, compile and sign."""

from __future__ import annotations

import argparse
from typing import Any

from . import _pack, _values, _writes


def add_pack(sub: Any) -> None:
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
    p.add_argument("--batch-size", type=_values.positive_int, metavar="N",
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
    p.add_argument("--names", type=_values.csv,
                   help="argument names, comma-separated, in @main order")  # fmt: skip
    p.add_argument("--result-names", type=_values.csv, help="result names, comma-separated")
    p.add_argument(
        "--layout", choices=["auto", "row-major", "column-major"], default="auto",
        help="column-major: the arrays are in Julia's orientation; transpose and flag them. "
        "auto (default): column-major when the arrays' shapes are the tensors' reversed, or "
        "when no shape tells and the arrays are stored in Fortran order (Julia's NPZ.jl); "
        "otherwise row-major, as pack() assumes",
    )  # fmt: skip
    p.add_argument(
        "--role", action="append", default=[], metavar="NAME=ROLE", type=_values.role,
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
    p.add_argument("--target-version", type=_values.target_version, metavar="X.Y.Z",
                   help="StableHLO version of the portable artifact")  # fmt: skip
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
    p.set_defaults(handler=_pack.pack)


def add_refresh(sub: Any) -> None:
    p = sub.add_parser(
        "refresh", help="rewrite a bundle's portable artifacts for a StableHLO target"
    )
    p.add_argument("bundle")
    p.add_argument("--target-version", type=_values.target_version, metavar="X.Y.Z",
                   help="the StableHLO version to write (default: what pack writes today)")  # fmt: skip
    _add_signing_key(p, "--sign-key", required=False)
    _add_resigning(p)
    p.set_defaults(handler=_writes.refresh)


def add_compile(sub: Any) -> None:
    p = sub.add_parser(
        "compile", help="store ahead-of-time IREE executables in a bundle (extra iree)"
    )
    p.add_argument("bundle")
    p.add_argument("--target", action="append", dest="targets", metavar="TARGET",
                   help="an IREE target: llvm-cpu (default) or vmvx; may be repeated")  # fmt: skip
    p.add_argument("--function", metavar="NAME", help="compile this function of a bundle with "
                   "several alone (default: every function)")  # fmt: skip
    p.add_argument("--cpu", default="generic", type=_values.cpu,
                   help="llvm-cpu's target CPU: generic (default; any CPU of this architecture), "
                   "host, or a name such as znver3 (faster; faults on CPUs without its features)")  # fmt: skip
    _add_signing_key(p, "--sign-key", required=False)
    _add_resigning(p)
    p.set_defaults(handler=_writes.compile_bundle)


def add_sign(sub: Any) -> None:
    p = sub.add_parser("sign", help="sign a bundle (OpenSSF model signing, model.sig)")
    p.add_argument("bundle")
    _add_signing_key(p, "--private-key", required=True)
    p.add_argument("--force", action="store_true", help="replace an existing signature")
    p.set_defaults(handler=_writes.sign)


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

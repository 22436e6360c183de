"""The options of the commands that write bundles: pack, refresh, compile and sign."""

from __future__ import annotations

import argparse
import re
from typing import Any

from .._write._options import OPTIONS, Flag
from . import _pack, _values, _writes
from ._common import Handler


def add_pack(sub: Any) -> None:
    p = sub.add_parser("pack", help="write a bundle from an MLIR module and example inputs")
    p.add_argument("module", nargs="?", help="StableHLO/MLIR text file (@main is the entry)")
    p.add_argument(
        "--from-reactant",
        metavar="[NAME=]PATH",
        action="append",
        help="the .py that Reactant's export_to_enzymejax wrote, or its directory (instead of "
        "MODULE); repeated as NAME=PATH: one function NAME each, equal weights stored once",
    )
    p.add_argument(
        "--from-reactant-server",
        metavar="DIR",
        help="a ReactantServer.jl model bundle (manifest.yaml, model.mlir, weights.safetensors), "
        "instead of MODULE",
    )
    _option(p, "batch_size")
    p.add_argument(
        "--from-jax-export",
        metavar="[NAME=]BLOB",
        action="append",
        help="a serialized jax.export.Exported (Exported.serialize()), instead of MODULE; "
        "repeated as NAME=BLOB: one function NAME each",
    )
    p.add_argument(
        "--from-torch-export",
        metavar="MODEL.pt2",
        help="a PyTorch program saved with torch.export.save, instead of MODULE: packed on the "
        "example inputs it was exported with, its expected outputs eager PyTorch's (extra "
        "torch; docs/torch.md)",
    )
    p.add_argument(
        "--inputs",
        nargs="+",
        action="extend",
        default=[],
        metavar="FILE",
        help=".npz, .npy (one per argument) or .safetensors; may be repeated",
    )
    p.add_argument("-o", "--output", required=True, help="the bundle directory to create")
    for name in (
        "names",
        "result_names",
        "layout",
        "roles",
        "allow_custom_calls",
        "with_vjp",
        "function",
        "target_version",
        "force",
        "add",
        "default",
        "max_shard_size",
        "metadata",
        "card",
        "independent_rows",
    ):
        _option(p, name)
    _add_signing_key(p)
    _add_resigning(p)
    _option(p, "expected")
    p.set_defaults(handler=Handler(_pack, "pack"))


def add_refresh(sub: Any) -> None:
    p = sub.add_parser(
        "refresh", help="rewrite a bundle's portable artifacts for a StableHLO target"
    )
    p.add_argument("bundle")
    _option(p, "target_version")
    _add_signing_key(p)
    _add_resigning(p)
    p.set_defaults(handler=Handler(_writes, "refresh"))


def add_reshard(sub: Any) -> None:
    p = sub.add_parser(
        "reshard", help="write a bundle again with its tensor files cut into other shards"
    )
    p.add_argument("bundle")
    p.add_argument("-o", "--output", required=True, help="the bundle directory to create")
    _option(p, "max_shard_size")
    _option(p, "force")
    _option(p, "sign_key")
    _add_certificates(p)
    p.set_defaults(handler=Handler(_writes, "reshard"))


def add_compile(sub: Any) -> None:
    p = sub.add_parser(
        "compile",
        help="store ahead-of-time executables in a bundle: IREE's (extra iree) or XLA's",
        description="Store ahead-of-time executables in a bundle, so that a trusted bundle "
        "runs without compiling. Without --target, compile compiles IREE's llvm-cpu (it needs "
        "the extra iree); for XLA's executable of the platform JAX runs on here, give "
        "--target xla-cpu, xla-tpu, xla-cuda or xla-rocm.",
    )
    p.add_argument("bundle")
    p.add_argument(
        "--target",
        action="append",
        dest="targets",
        metavar="TARGET",
        help="IREE's llvm-cpu (native CPU code; the default without --target, which needs "
        "IREE's compiler, the extra iree) or vmvx (IREE's portable bytecode); or XLA's "
        "executable for the platform JAX runs on here: xla-cpu, xla-tpu, xla-cuda or xla-rocm "
        "(needs only jax); may be repeated",
    )
    p.add_argument(
        "--function",
        metavar="NAME",
        help="compile this function of a bundle with several alone (default: every function)",
    )
    p.add_argument(
        "--cpu",
        default="generic",
        type=_values.cpu,
        help="llvm-cpu's target CPU: generic (default; any CPU of this architecture), "
        "host, or a name such as znver3 (faster; faults on CPUs without its features)",
    )
    p.add_argument(
        "--sizes",
        type=_values.sizes,
        action="append",
        default=[],
        metavar="SYMBOL=N[,N...]",
        help="xla-PLATFORM: store a symbolic function's executables for these values of "
        "SYMBOL (repeat for more symbols: every combination; default: the stored arguments')",
    )
    _add_signing_key(p)
    _add_resigning(p)
    p.set_defaults(handler=Handler(_writes, "compile_bundle"))


def add_sign(sub: Any) -> None:
    p = sub.add_parser("sign", help="sign a bundle (OpenSSF model signing, model.sig)")
    p.add_argument(
        "bundle",
        help="a bundle directory, or oci://HOST/REPO[:TAG|@sha256:DIGEST]: sign it where the "
        "registry holds it, by its digests, and push the signature as a referrer",
    )
    p.add_argument(
        "--private-key",
        required=True,
        metavar="KEY.pem",
        help="sign with this elliptic-curve private key (SPEC.md, 'Signature')",
    )
    _add_certificates(p)
    _option(p, "force")
    p.set_defaults(handler=Handler(_writes, "sign"))


def _add_resigning(p: argparse.ArgumentParser) -> None:
    _option(p, "public_key")
    _option(p, "replace_signature")


def _add_signing_key(p: argparse.ArgumentParser) -> None:
    _option(p, "sign_key")
    _add_certificates(p)


def _add_certificates(p: argparse.ArgumentParser) -> None:
    """The signing key's certificates: the command line's part of a `SigningKey`."""
    p.add_argument(
        "--signing-certificate",
        metavar="CERT.pem",
        help="the key's certificate, to sign with a certificate (needs the key)",
    )
    p.add_argument(
        "--certificate-chain",
        nargs="+",
        default=[],
        metavar="CERT.pem",
        help="the certificates from the signing certificate up to a root",
    )


def _option(p: argparse.ArgumentParser, name: str) -> None:
    """The flags of the writer option `name`, from its definition (`_write/_options.py`): its
    help, its default (or the command's own), and, where it has several flags, a group that
    takes one of them."""
    definition = OPTIONS[name]
    flags = definition.metadata["flags"]
    if not flags:
        raise ValueError(f"the command line offers no flag for the writer option {name!r}")
    group = definition.metadata["group"]
    where: Any = p
    if group is not None:
        where = p.add_argument_group(group)
    elif len(flags) > 1:
        where = p.add_mutually_exclusive_group()
    for flag in flags:
        where.add_argument(flag.flag, **_arguments(flag, definition))


def _arguments(flag: Flag, definition: Any) -> dict[str, Any]:
    """`add_argument`'s keywords for one flag of an option."""
    text = re.sub(r"`([^`]*)`", r"\1", flag.help or definition.metadata["help"])
    kwargs: dict[str, Any] = {
        "help": (text + (f"; {flag.note}" if flag.note else "")).replace("%", "%%")
    }
    for key in ("dest", "action", "metavar", "nargs", "choices"):
        if getattr(flag, key) is not None:
            kwargs[key] = getattr(flag, key)
    if flag.type is not None:
        kwargs["type"] = getattr(_values, flag.type)
    if flag.action in ("append", "extend"):
        kwargs["default"] = []  # what is given is appended to it: none, the option's default
    elif flag.action != "store_true":
        kwargs["default"] = definition.default if flag.default is None else flag.default
    return kwargs

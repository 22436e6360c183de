"""What each command that writes into a bundle does (refresh, compile, sign), once `_main` has
parsed its arguments; `hlobundle pack`, which writes a new one, is `_pack`."""

from __future__ import annotations

import argparse
from pathlib import Path

from .._extras import pip_line
from .._format._errors import BackendUnavailableError
from ._common import (
    EXIT_OK,
    check_certificates,
    option_value,
    output_path,
    resigning_key,
    usage,
)


def refresh(args: argparse.Namespace) -> int:
    from .._write._refresh import refresh as refresh_bundle

    key = resigning_key(args)
    target = refresh_bundle(
        args.bundle,
        target_version=args.target_version,
        sign_key=key,
        public_key=args.public_key,
        replace_signature=args.replace_signature,
    )
    print(f"refreshed {args.bundle}: portable artifacts for StableHLO {target}")
    return EXIT_OK


def reshard(args: argparse.Namespace) -> int:
    from .._write._reshard import reshard as reshard_bundle

    check_certificates(args)
    out = output_path("-o", args.output)
    written = reshard_bundle(
        args.bundle,
        out,
        max_shard_size=args.max_shard_size,
        force=args.force,
        sign_key=option_value(args, "sign_key"),
    )
    print(f"resharded {args.bundle} as {written}")
    return EXIT_OK


def compile_bundle(args: argparse.Namespace) -> int:
    from .._format._fields import made_by
    from .._run import _backends
    from .._write._compile import compile as compile_executables

    targets = _backends.targets()
    unknown = [t for t in args.targets or () if t not in targets]
    if unknown:
        usage(args, f"--target {unknown[0]}: expected one of {', '.join(targets)}")
    key = resigning_key(args)
    if not args.targets:
        _default_target_compiles_here(_backends.targets_here())
    entries = compile_executables(
        args.bundle,
        args.targets or [DEFAULT_TARGET],
        cpu=args.cpu,
        function=args.function,
        sizes=dict(args.sizes),
        sign_key=key,
        public_key=args.public_key,
        replace_signature=args.replace_signature,
    )
    for e in entries:
        where = e.device_kind or f"{e.architecture} cpu {e.cpu}"
        where += "".join(f", {k}={v}" for k, v in sorted((e.sizes or {}).items()))
        print(f"wrote {Path(args.bundle) / e.file} ({made_by(e)}, {e.target}, {where})")
    chosen = f" --function {args.function}" if args.function else ""
    for backend in dict.fromkeys(_backends.compiler(e.target)[0].name for e in entries):
        print(
            f"run it without compiling: hlobundle run {args.bundle}{chosen} --backend {backend} "
            "--public-key PUB.pem (a signed bundle), or --trust-executables"
        )
    return EXIT_OK


DEFAULT_TARGET = "llvm-cpu"  # what `compile` compiles without --target (IREE's)


def _default_target_compiles_here(here: list[str]) -> None:
    """A `BackendUnavailableError` naming the targets this machine compiles for, when it cannot
    compile the default target (IREE's compiler not installed)."""
    if DEFAULT_TARGET not in here:
        raise BackendUnavailableError(
            f"without --target, compile compiles IREE's {DEFAULT_TARGET}, and IREE's compiler is "
            f"not installed here ({pip_line('iree')}). This machine compiles for "
            f"{', '.join(here)}: give --target {here[0]}",
            argument="targets",
        )


def sign(args: argparse.Namespace) -> int:
    from .._write._sign import sign as sign_bundle

    if args.bundle.startswith("oci://"):
        return _sign_in_registry(args)

    who = sign_bundle(
        args.bundle,
        args.private_key,
        signing_certificate=args.signing_certificate,
        certificate_chain=args.certificate_chain,
        force=args.force,
    )
    print(
        f"signed {args.bundle} ({who}); check it with: hlobundle verify {args.bundle} --public-key ..."
    )
    return EXIT_OK


def _sign_in_registry(args: argparse.Namespace) -> int:
    from .._oci._sign import sign_in_registry

    done = sign_in_registry(
        args.bundle,
        args.private_key,
        signing_certificate=args.signing_certificate,
        certificate_chain=args.certificate_chain or (),
    )
    print(f"signed {done.ref} ({done.signer}); signature: referrer {done.referrer}")
    return EXIT_OK

"""What several commands share: exit statuses, usage errors, output paths, and the signing and
trust options."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, NoReturn

from .._format._errors import InputError
from .._write._options import METADATA_FIELDS, OPTIONS

if TYPE_CHECKING:
    from .._run._backends import Backend

EXIT_OK, EXIT_FAIL = 0, 1  # and 2, argparse's, for usage errors (_parser.EXIT_STATUSES)


@dataclasses.dataclass(frozen=True)
class Handler:
    """A command's handler, as the parser holds it (`set_defaults(handler=...)`): a module and a
    name, looked up when the command runs. The parser is built once per process
    (`_parser.parser()`); what the name holds at the call (a test's monkeypatch) is what runs."""

    module: ModuleType
    name: str

    def __post_init__(self) -> None:
        getattr(self.module, self.name)  # a name the module lacks fails the build, not a call

    def __call__(self, args: argparse.Namespace) -> int:
        return int(getattr(self.module, self.name)(args))


def usage(args: argparse.Namespace, message: str) -> NoReturn:
    """End with a usage error (exit 2): what the command line alone shows wrong, found by a
    handler before it reads any file. A value of the wrong form is refused by its `type=`
    (`_values`), an unknown or missing option by argparse: the same message and exit status."""
    parser: argparse.ArgumentParser = args.parser
    parser.error(message)  # the command's usage, `hlobundle CMD: error: message`, exit 2


def output_path(flag: str, path: str) -> Path:
    """An output path whose directory exists, checked before any work (its suffix, a question of
    form, is a usage error: `_values.file_of`)."""
    out = Path(path)
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(
            f"{flag}: the directory {str(parent)!r} does not exist; create it first", path=out
        )
    return out


def trust_of(args: argparse.Namespace) -> Any:
    """The `Trust` that --trust-executables and --trust-batched give."""
    from .._read._trust import Trust

    trust = Trust.NOTHING
    if getattr(args, "trust_executables", False):
        trust |= Trust.EXECUTABLES
    if getattr(args, "trust_batched", False):
        trust |= Trust.BATCHED
    return trust


def trust_options(args: argparse.Namespace) -> dict[str, Any]:
    """`load()`'s public_key / certificate_chain from --public-key / --certificate-chain."""
    if getattr(args, "public_key", None):
        return {"public_key": args.public_key}
    if getattr(args, "certificate_chain", None):
        return {"certificate_chain": args.certificate_chain}
    return {}


def named_bundle(args: argparse.Namespace, arg: str) -> str | tuple[str, str]:
    """`NAME=BUNDLE` as (NAME, BUNDLE); a plain BUNDLE (or one whose path has a '=') as is. A
    NAME= without a name or a path is a usage error."""
    name, sep, path = arg.partition("=")
    if not sep or Path(arg).exists():
        return arg
    if not name or not path:
        usage(args, f"{arg!r}: NAME=PATH needs a name before the '=' and a path after it")
    return name, path


def applies(
    args: argparse.Namespace, flag: str, given: bool, able: Callable[[Backend], bool]
) -> None:
    """A usage error for an option the chosen backend has nothing to do with: one whose
    `Backend` is not `able` (lacks the capability the option is about)."""
    from .._run import _backends

    def named(name: str) -> bool:
        return able(_backends.kind(name))

    if given and not named(args.backend):
        which = " or ".join(n for n in _backends.NAMES if named(n))
        usage(args, f"{flag} applies to --backend {which}, not {args.backend}")


# What an option is about, for `applies`: a capability of the chosen `Backend`.
def runs_jax(backend: Backend) -> bool:
    return backend.jax is not None


def runs_executables(backend: Backend) -> bool:
    return backend.executables is not None


def scripts_executables(backend: Backend) -> bool:
    return backend.executables is not None and backend.executables.scripted


def limits_memory(backend: Backend) -> bool:
    return backend.limit_memory is not None


def check_certificates(args: argparse.Namespace) -> None:
    if not args.private_key and (args.signing_certificate or args.certificate_chain):
        usage(args, "--signing-certificate and --certificate-chain sign with --sign-key")


def resigning_key(args: argparse.Namespace) -> Any:
    check_certificates(args)
    if not args.private_key and (args.public_key or args.replace_signature):
        usage(args, "--public-key and --replace-signature are about signing again: give --sign-key")
    return signing_key_of(args) if args.private_key else None


def signing_key_of(args: argparse.Namespace) -> Any:
    from .._format._signature import SigningKey, paths

    certificate = Path(args.signing_certificate) if args.signing_certificate else None
    return SigningKey(Path(args.private_key), certificate, paths(args.certificate_chain))


def option_value(args: argparse.Namespace, name: str) -> Any:
    """The writer option `name`, read from the parsed flags its definition gives it
    (`_write/_options.py`: each flag's `dest`), as the writer takes it."""
    flags = OPTIONS[name].metadata["flags"]
    given = {
        f.flag: getattr(args, f.dest or f.flag.removeprefix("--").replace("-", "_")) for f in flags
    }
    if name == "roles":  # `--role NAME=ROLE`, repeated
        return dict(given["--role"])
    if name == "expected":
        return "compute" if given["--compute-expected"] else given["--expected"]
    if name == "metadata":  # one flag per field
        fields = dict(zip(METADATA_FIELDS, given.values(), strict=True))
        return {n: v for n, v in fields.items() if v not in (None, [])} or None
    if name == "sign_key":  # the key with its certificates
        return signing_key_of(args) if given["--sign-key"] else None
    (value,) = given.values()
    return value

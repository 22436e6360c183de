"""The `hlobundle` command line: pack, inspect, verify, schema.

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

from ._errors import HloBundleError

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    warnings.formatwarning = lambda msg, cat, *a, **k: f"warning: {msg}\n"
    try:
        return int(args.handler(args))
    except HloBundleError as e:
        if os.environ.get("HLOBUNDLE_TRACEBACK"):
            raise
        if getattr(args, "json", False):
            print(json.dumps({"ok": False, "code": e.code, "message": e.message, **e.context()}))
        _print_error(e)
        return EXIT_FAIL


def _print_error(e: HloBundleError) -> None:
    where = ", ".join(f"{k}: {v}" for k, v in e.context().items())
    print(f"error [{e.code}] {e.message}" + (f" ({where})" if where else ""), file=sys.stderr)


def _parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(
        prog="hlobundle", description="Pack, inspect and verify StableHLO bundles."
    )
    parser.add_argument("--version", action="version", version=f"hlobundle {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_pack(sub)
    p = sub.add_parser("inspect", help="show a bundle's arguments, results and provenance")
    p.add_argument("bundle")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=_inspect)
    p = sub.add_parser("verify", help="check a bundle's structure and checksums")
    p.add_argument("bundle")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=_verify)
    p = sub.add_parser("schema", help="print the manifest's JSON schema")
    p.add_argument("-o", "--output", help="write it to this file instead")
    p.set_defaults(handler=_schema)
    return parser


def _add_pack(sub: Any) -> None:
    p = sub.add_parser("pack", help="write a bundle from an MLIR module and example inputs")
    p.add_argument("module", help="StableHLO/MLIR text file (@main is the entry)")
    p.add_argument(
        "--inputs", nargs="+", action="extend", default=[], metavar="FILE",
        help=".npz, .npy (one per argument) or .safetensors; may be repeated",
    )  # fmt: skip
    p.add_argument("-o", "--output", required=True, help="the bundle directory to create")
    p.add_argument("--names", type=_csv, help="argument names, comma-separated, in @main order")
    p.add_argument("--result-names", type=_csv, help="result names, comma-separated")
    p.add_argument(
        "--layout", choices=["row-major", "column-major"], default="row-major",
        help="column-major: the arrays are in Julia's orientation; transpose and flag them",
    )  # fmt: skip
    p.add_argument(
        "--role", action="append", default=[], metavar="NAME=ROLE", type=_role,
        help="mark an argument as input, parameter or state; may be repeated",
    )  # fmt: skip
    p.add_argument("--function", help="the function's name (default: the module's name)")
    p.add_argument("--target-version", help="StableHLO version of the portable artifact")
    p.add_argument("--force", action="store_true", help="replace an existing bundle")
    p.set_defaults(handler=_pack)


def _csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",")]


def _pack(args: argparse.Namespace) -> int:
    from ._writer import pack_files

    out = pack_files(
        args.module,
        args.inputs,
        args.output,
        names=args.names,
        result_names=args.result_names,
        layout=args.layout.replace("-", "_"),
        roles=dict(args.role),
        function=args.function,
        target_version=args.target_version,
        force=args.force,
    )
    print(f"wrote {out}")
    return EXIT_OK


def _role(item: str) -> tuple[str, str]:
    name, sep, role = item.partition("=")
    if not sep or role not in ("input", "parameter", "state"):
        raise argparse.ArgumentTypeError(f"expected NAME=input|parameter|state, got {item!r}")
    return name, role


def _inspect(args: argparse.Namespace) -> int:
    from ._inspect import render
    from ._reader import load

    bundle = load(args.bundle)
    if args.json:
        print(json.dumps({"path": str(bundle.path), **bundle.manifest.model_dump(mode="json")}))
    else:
        print(render(bundle))
    return EXIT_OK


def _verify(args: argparse.Namespace) -> int:
    from ._reader import load

    bundle = load(args.bundle)
    bundle.verify()
    files = len(bundle.manifest.files)
    if args.json:
        print(json.dumps({"ok": True, "path": str(bundle.path), "files": files}))
    else:
        print(f"ok: {bundle.path} ({files} files, sha256 checked)")
    return EXIT_OK


def _schema(args: argparse.Namespace) -> int:
    from ._schema import schema_text

    text = schema_text()
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return EXIT_OK

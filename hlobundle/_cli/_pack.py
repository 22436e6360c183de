"""`hlobundle pack`: one function from MLIR text, a Reactant export, a ReactantServer.jl bundle
or a jax.export blob, or several as one bundle of functions (format 2.0), or one added (--add)."""

from __future__ import annotations

import argparse
import inspect
from pathlib import Path
from typing import Any

from .._write._options import OPTIONS
from ._common import (
    EXIT_OK,
    check_certificates,
    named_bundle,
    option_value,
    output_path,
    resigning_key,
    usage,
)


def pack(args: argparse.Namespace) -> int:
    modules = [i for i in args.inputs if str(i).lower().endswith(".mlir")]
    sources = [
        x
        for x in (
            args.module,
            args.from_reactant,
            args.from_jax_export,
            args.from_reactant_server,
            args.from_torch_export,
        )
        if x is not None
    ]
    if not sources and len(modules) == 1:
        # `pack --inputs a.npz m.mlir`: --inputs takes every file after it, the module too
        args.module = modules[0]
        args.inputs = [i for i in args.inputs if i != modules[0]]
        sources = [args.module]
    if len(sources) != 1:
        usage(
            args,
            "give one of MODULE, --from-reactant PATH, --from-reactant-server DIR, "
            "--from-jax-export BLOB or --from-torch-export MODEL.pt2",
        )
    if args.batch_size is not None and not args.from_reactant_server:
        usage(args, "--batch-size applies to --from-reactant-server")
    if args.independent_rows is not None and not (args.from_jax_export or args.from_torch_export):
        usage(
            args,
            "--independent-rows applies to --from-jax-export and --from-torch-export "
            "(symbolic shapes)",
        )
    if args.default and not args.add:
        usage(args, "--default applies to --add")
    if not args.add and (args.public_key or args.replace_signature):
        usage(args, "--public-key and --replace-signature apply to --add (signing a bundle again)")
    if args.add and args.force:
        usage(args, "--add rewrites the bundle in place: --force does not apply")
    if args.add and any(card_keywords(args).values()):
        usage(args, "the metadata and --card are the bundle's: give them when it is first packed")
    parts = _parts(args)
    for part in parts:  # every usage error before anything is read or written
        _check_usage(part)
    if len(parts) == 1 and not args.add:
        out, note = _pack_one(parts[0])
        print(f"wrote {out}{note}")
        return EXIT_OK
    return _pack_functions(args, parts)


def _parts(args: argparse.Namespace) -> list[argparse.Namespace]:
    """One `pack` per function: a repeated --from-jax-export or --from-reactant gives one
    each, named by its NAME= (and the options apply to each)."""
    for flag, given in (
        ("--from-jax-export", args.from_jax_export),
        ("--from-reactant", args.from_reactant),
    ):
        if not given:
            continue
        named = [named_bundle(args, item) for item in given]
        if len(named) > 1 and not all(isinstance(n, tuple) for n in named):
            usage(args, f"a repeated {flag} names each function: {flag} NAME=PATH")
        if len(named) > 1 and (args.inputs or args.expected or args.function):
            usage(
                args,
                f"several {flag} take their inputs and names from each source; "
                "--inputs, --expected and --function do not apply",
            )
        key = flag.removeprefix("--").replace("-", "_")
        return [_part(args, key, n) for n in named]
    return [args]


def _part(args: argparse.Namespace, key: str, named: str | tuple[str, str]) -> argparse.Namespace:
    name, path = named if isinstance(named, tuple) else (None, named)
    return argparse.Namespace(**{**vars(args), key: path, "function": name or args.function})


def _pack_one(args: argparse.Namespace) -> tuple[Path, str]:
    """Pack one function (`args.output`), its path and what to say of it."""
    from .._write._pack_files import pack_files
    from .._write._reactant import from_reactant

    if args.from_jax_export:
        return _pack_jax_export(args), ""
    if args.from_reactant_server:
        return _pack_reactant_server(args)
    if args.from_torch_export:
        return _pack_torch_export(args), ""
    options = pack_keywords(args)
    if args.compute_expected or args.with_vjp:  # they run the module: 64-bit values stay 64-bit
        from .._run._process import enable_x64

        enable_x64()
    if args.from_reactant:
        return from_reactant(args.from_reactant, args.output, **options), ""
    layout = args.layout.replace("-", "_")
    return pack_files(args.module, args.inputs, args.output, layout=layout, **options), ""


def pack_keywords(args: argparse.Namespace) -> dict[str, Any]:
    """The writer options of one function's MLIR module or Reactant export, from its flags
    (the layout apart: a Reactant export brings its own)."""
    from .._write._reactant import from_reactant

    return writer_keywords(args, from_reactant)


def writer_keywords(args: argparse.Namespace, writer: Any) -> dict[str, Any]:
    """The options `writer` takes that `hlobundle pack` offers by flags (the layout apart,
    which each source reads its own way), each read where its definition's flags put it
    (`_write/_options.py`)."""
    taken = inspect.signature(writer).parameters
    offered = [n for n in taken if n in OPTIONS and OPTIONS[n].metadata["flags"]]
    return {name: option_value(args, name) for name in offered if name != "layout"}


def card_keywords(args: argparse.Namespace) -> dict[str, Any]:
    """The `metadata` (from its flags, one per field) and `card` options."""
    return {name: option_value(args, name) for name in ("metadata", "card")}


# A function packed to be added to a bundle brings no metadata: it is the bundle's.
_NO_CARD = {"card": None} | {f.dest: None for f in OPTIONS["metadata"].metadata["flags"]}


def _check_usage(args: argparse.Namespace) -> None:
    """The usage errors of one function's options, given its source."""
    check_certificates(args)
    if args.from_reactant and (args.inputs or args.layout != "auto"):
        usage(args, "--from-reactant takes the inputs and layout from the export")
    if args.from_reactant_server:
        _refuse_flags(
            args,
            "--inputs",
            "--expected",
            "--compute-expected",
            "--role",
            "--function",
            because="--from-reactant-server takes names, roles, layout and weights from the bundle",
        )
    if args.from_torch_export:
        _refuse_flags(
            args,
            "--inputs",
            "--expected",
            "--compute-expected",
            "--function",
            "--allow-custom-call",
            because="--from-torch-export takes names, inputs and expected outputs from the "
            "program and eager PyTorch",
            takes_vjp=True,
        )
    if args.from_jax_export:
        _refuse_flags(
            args,
            "--sign-key",
            "--allow-custom-call",
            because="--from-jax-export takes names, results, the VJP and the allowed "
            "custom calls from the Exported",
            hint=" (the arguments' names: hlobundle inspect after packing without --inputs)",
        )


def _pack_functions(args: argparse.Namespace, parts: list[argparse.Namespace]) -> int:
    """Several functions, or some added (--add): the bundle is built whole beside the target
    (`built_beside`; for --add, from a copy of the bundle), each function packed next to it and
    added by `add_function` (which signs it again, as refresh does), and renamed over the
    target only when every function is in: a refused one leaves the target as it was."""
    import shutil

    from .._output._target import built_beside
    from .._read._files import read_manifest
    from .._write._functions import add_function

    target = output_path("-o", args.output)
    if args.add:
        read_manifest(target)  # a bundle, before anything is packed
    key = resigning_key(args)
    unsigned: dict[str, Any] = {
        "private_key": None,
        "signing_certificate": None,
        "certificate_chain": [],
    }
    queue = parts
    with built_beside(target, force=args.force or args.add) as bundle:
        if args.add:  # the bundle as it is (a copy: the reader refuses a second hard link)
            shutil.copytree(target, bundle, symlinks=True)
        else:  # the first function makes the bundle
            _pack_one(
                argparse.Namespace(
                    **{**vars(parts[0]), **unsigned, "output": bundle, "force": False}
                )
            )
            queue = parts[1:]
        trust = {"public_key": args.public_key, "replace_signature": args.replace_signature}
        for i, part in enumerate(queue):
            packed = bundle.with_name(f"{bundle.name}.{i}")  # never the bundle's own name
            _pack_one(
                argparse.Namespace(
                    **{**vars(part), **unsigned, **_NO_CARD, "output": packed, "force": False}
                )
            )
            add_function(
                bundle,
                packed,
                default=args.default and i == 0,
                max_shard_size=args.max_shard_size,
                sign_key=key,
                **trust,
            )
            trust = {}  # from now on, the bundle is signed by the key itself
    from .._format._bundle_manifest import functions_of

    functions = list(functions_of(read_manifest(target)[0])[0])
    if args.add:
        added = functions[len(functions) - len(queue) :]
        print(f"added function{'s' * (len(added) > 1)} {', '.join(added)} to {target}")
    else:
        print(f"wrote {target} (functions {', '.join(functions)})")
    return EXIT_OK


def _refuse_flags(
    args: argparse.Namespace, *extra: str, because: str, hint: str = "", takes_vjp: bool = False
) -> None:
    """A usage error for the first `pack` option a source that brings its own names ignores
    (`takes_vjp`: the source takes --with-vjp all the same)."""
    flags = {
        "--inputs": args.inputs,
        "--names": args.names,
        "--result-names": args.result_names,
        "--expected": args.expected,
        "--compute-expected": args.compute_expected,
        "--with-vjp": args.with_vjp,
        "--function": args.function,
        "--role": args.role,
        "--sign-key": args.private_key,
        "--allow-custom-call": args.allow_custom_call,
    }
    refused = tuple(f for f in _REFUSABLE if not (takes_vjp and f == "--with-vjp")) + extra
    given = [flag for flag, value in flags.items() if value and flag in refused]
    given += ["--layout"] if args.layout != "auto" else []
    if given:
        usage(args, f"{because}; {given[0]} does not apply{hint}")


# What every source that brings its own names refuses; each caller adds its own.
_REFUSABLE = ("--names", "--result-names", "--with-vjp")


def _pack_reactant_server(args: argparse.Namespace) -> tuple[Path, str]:
    from .._write._reactant_server import from_reactant_server

    options = writer_keywords(args, from_reactant_server)
    out = from_reactant_server(args.from_reactant_server, args.output, **options)
    return out, " (the inputs have no stored values: run it with --inputs NAME=FILE)"


def _pack_jax_export(args: argparse.Namespace) -> Path:
    from .._interop._jax_export import read_blob
    from .._run._process import enable_x64
    from .._write._jax_export import from_exported_files

    enable_x64()  # the Exported's own dtypes, 64-bit ones too
    exported, blob = read_blob(args.from_jax_export)
    out = from_exported_files(
        exported,
        args.inputs,
        args.output,
        blob=blob,
        **writer_keywords(args, from_exported_files),
    )
    return out


def _pack_torch_export(args: argparse.Namespace) -> Path:
    from .._write._torch import from_torch_file

    return from_torch_file(
        args.from_torch_export, args.output, **writer_keywords(args, from_torch_file)
    )

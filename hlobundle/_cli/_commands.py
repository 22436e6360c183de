"""What each `hlobundle` command does, once its arguments are parsed (`_main` parses them)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .._format._errors import (
    HloBundleError,
    InputError,
    OutputExistsError,
)

EXIT_OK, EXIT_FAIL = 0, 1


def output_path(flag: str, path: str, suffixes: tuple[str, ...] = ()) -> Path:
    """An output path whose directory exists and whose suffix is known, checked before any work."""
    out = Path(path)
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(
            f"{flag}: the directory {str(parent)!r} does not exist; create it first", path=out
        )
    if suffixes and out.suffix.lower() not in suffixes:
        raise InputError(f"{flag} {str(out)!r}: expected a {' or '.join(suffixes)} file", path=out)
    return out


def pack(args: argparse.Namespace) -> int:
    modules = [i for i in args.inputs if str(i).lower().endswith(".mlir")]
    sources = [x for x in (args.module, args.from_reactant, args.from_jax_export,
                           args.from_reactant_server) if x is not None]  # fmt: skip
    if not sources and len(modules) == 1:
        # `pack --inputs a.npz m.mlir`: --inputs takes every file after it, the module too
        args.module = modules[0]
        args.inputs = [i for i in args.inputs if i != modules[0]]
        sources = [args.module]
    if len(sources) != 1:
        args.parser.error("give one of MODULE, --from-reactant PATH, --from-reactant-server DIR "
                          "or --from-jax-export BLOB")  # fmt: skip
    if args.batch_size is not None and not args.from_reactant_server:
        args.parser.error("--batch-size applies to --from-reactant-server")
    if args.default and not args.add:
        args.parser.error("--default applies to --add")
    if not args.add and (args.public_key or args.replace_signature):
        args.parser.error("--public-key and --replace-signature apply to --add (signing a "
                          "bundle again)")  # fmt: skip
    parts = _parts(args)
    if len(parts) == 1 and not args.add:
        out, note = _pack_one(parts[0])
        print(f"wrote {out}{note}")
        return EXIT_OK
    return _pack_functions(args, parts)


def _parts(args: argparse.Namespace) -> list[argparse.Namespace]:
    """One `pack` per function: a repeated --from-jax-export or --from-reactant gives one
    each, named by its NAME= (and the options apply to each)."""
    for flag, given in (("--from-jax-export", args.from_jax_export),
                        ("--from-reactant", args.from_reactant)):  # fmt: skip
        if not given:
            continue
        named = [_named(item) for item in given]
        if len(named) > 1 and not all(isinstance(n, tuple) for n in named):
            args.parser.error(f"a repeated {flag} names each function: {flag} NAME=PATH")
        if len(named) > 1 and (args.inputs or args.expected or args.function):
            args.parser.error(f"several {flag} take their inputs and names from each source; "
                              "--inputs, --expected and --function do not apply")  # fmt: skip
        key = flag.removeprefix("--").replace("-", "_")
        return [_part(args, key, n) for n in named]
    return [args]


def _part(args: argparse.Namespace, key: str, named: str | tuple[str, str]) -> argparse.Namespace:
    name, path = named if isinstance(named, tuple) else (None, named)
    return argparse.Namespace(**{**vars(args), key: path, "function": name or args.function})


def _pack_one(args: argparse.Namespace) -> tuple[Path, str]:
    """Pack one function (`args.output`), its path and what to say of it."""
    from .._write._reactant import from_reactant
    from .._write._writer import pack_files

    if args.from_jax_export:
        return _pack_jax_export(args), ""
    if args.from_reactant_server:
        return _pack_reactant_server(args)
    if args.from_reactant and (args.inputs or args.layout != "auto"):
        args.parser.error("--from-reactant takes the inputs and layout from the export")
    options = dict(
        names=args.names,
        result_names=args.result_names,
        roles=dict(args.role),
        function=args.function,
        target_version=args.target_version,
        force=args.force,
        expected="compute" if args.compute_expected else args.expected,
        allow_custom_calls=args.allow_custom_call,
        with_vjp=args.with_vjp,
    )
    if args.private_key:
        options["sign_key"] = _signing_key(args)
    elif args.signing_certificate or args.certificate_chain:
        args.parser.error("--signing-certificate and --certificate-chain sign with --sign-key")
    if args.compute_expected or args.with_vjp:  # they run the module: 64-bit values stay 64-bit
        from .._run._process import enable_x64

        enable_x64()
    if args.from_reactant:
        return from_reactant(args.from_reactant, args.output, **options), ""
    layout = args.layout.replace("-", "_")
    return pack_files(args.module, args.inputs, args.output, layout=layout, **options), ""


def _pack_functions(args: argparse.Namespace, parts: list[argparse.Namespace]) -> int:
    """Several functions, or one added (--add): each packed into a scratch directory beside
    the bundle, then added to it by `add_function` (which signs it again, as refresh does)."""
    import shutil
    import tempfile

    from .._read._files import read_manifest
    from .._write._functions import add_function

    target = output_path("-o", args.output)
    if args.add:
        if args.force:
            args.parser.error("--add rewrites the bundle in place: --force does not apply")
        read_manifest(target)  # a bundle, before anything is packed
    elif target.exists() and not args.force:
        raise OutputExistsError(f"{str(target)!r} already exists; pass --force to replace it",
                                path=target)  # fmt: skip
    key = _resigning_key(args)
    unsigned = {"private_key": None, "signing_certificate": None, "certificate_chain": []}
    scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".add", dir=target.parent))
    created = False
    try:
        queue = parts
        if not args.add:  # the first function makes the bundle
            _pack_one(argparse.Namespace(**{**vars(parts[0]), **unsigned, "output": target}))
            created, queue = True, parts[1:]
        trust = {"public_key": args.public_key, "replace_signature": args.replace_signature}
        for i, part in enumerate(queue):
            packed = scratch / str(i)
            _pack_one(argparse.Namespace(**{**vars(part), **unsigned, "output": packed,
                                            "force": False}))  # fmt: skip
            add_function(target, packed, default=args.default and i == 0, sign_key=key, **trust)
            trust = {}  # from now on, the bundle is signed by the key itself
    except BaseException:
        if created:  # a bundle of some of the functions is no bundle asked for
            shutil.rmtree(target, ignore_errors=True)
        raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)  # made above
    functions = [f.name for f in read_manifest(target)[0].functions]  # type: ignore[union-attr]
    if args.add:
        added = functions[len(functions) - len(queue) :]
        print(f"added function{'s' * (len(added) > 1)} {', '.join(added)} to {target}")
    else:
        print(f"wrote {target} (functions {', '.join(functions)})")
    return EXIT_OK


def _refuse_flags(args: argparse.Namespace, *extra: str, because: str, hint: str = "") -> None:
    """A usage error for the first `pack` option a source that brings its own names ignores."""
    flags = {"--inputs": args.inputs, "--names": args.names, "--result-names": args.result_names,
             "--expected": args.expected, "--compute-expected": args.compute_expected,
             "--with-vjp": args.with_vjp, "--function": args.function,
             "--role": args.role, "--sign-key": args.private_key}  # fmt: skip
    given = [flag for flag, value in flags.items() if value and flag in _REFUSABLE + extra]
    given += ["--layout"] if args.layout != "auto" else []
    if given:
        args.parser.error(f"{because}; {given[0]} does not apply{hint}")


# What every source that brings its own names refuses; each caller adds its own.
_REFUSABLE = ("--names", "--result-names", "--with-vjp")


def _pack_reactant_server(args: argparse.Namespace) -> tuple[Path, str]:
    from .._write._reactant_server import from_reactant_server

    _refuse_flags(args, "--inputs", "--expected", "--compute-expected", "--role", "--function",
                  because="--from-reactant-server takes names, roles, layout and weights from "
                  "the bundle")  # fmt: skip
    options: dict[str, Any] = {"force": args.force, "target_version": args.target_version}
    if args.private_key:
        options["sign_key"] = _signing_key(args)
    out = from_reactant_server(args.from_reactant_server, args.output,
                               batch_size=args.batch_size, **options)  # fmt: skip
    return out, " (the inputs have no stored values: run it with --inputs NAME=FILE)"


def _pack_jax_export(args: argparse.Namespace) -> Path:
    from .._write._jax_export import from_exported_files, read_blob

    _refuse_flags(args, "--sign-key", because="--from-jax-export takes names, results and the "
                  "VJP from the Exported", hint=" (the arguments' names: hlobundle inspect "
                  "after packing without --inputs)")  # fmt: skip
    from .._run._process import enable_x64

    enable_x64()  # the Exported's own dtypes, 64-bit ones too
    exported, blob = read_blob(args.from_jax_export)
    out = from_exported_files(exported, args.inputs, args.output, blob=blob,
                              roles=dict(args.role), force=args.force,
                              target_version=args.target_version,
                              expected="compute" if args.compute_expected else args.expected,
                              **({"function": args.function} if args.function else {}))  # fmt: skip
    return out


def run(args: argparse.Namespace) -> int:
    from .._run import _cache

    with _cache.turned_off(args.no_cache):  # every cache: IREE's in the runner, JAX's here
        return _run_bundle(args)


def _run_bundle(args: argparse.Namespace) -> int:
    from .._format._manifest import needs_x64
    from .._read._inputs import read_files
    from .._read._reader import load
    from .._run import _run

    save = args.save_outputs and output_path(
        "--save-outputs", args.save_outputs, (".npz", ".safetensors")
    )
    from .._run import _backends

    bundle = load(args.bundle, verify=args.verify, **_trust(args)).select(args.function)
    kind = _backends.kind(args.backend)
    _applies(args, "--trust-executables", args.trust_executables, "STORED_EXECUTABLES")
    _applies(args, "--max-memory", args.max_memory is not None, "limit_memory")
    if kind.JAX:
        _start_jax(args, needs_x64(bundle.manifest))
    else:
        if args.distributed or args.devices not in (None, 1):
            args.parser.error(
                f"--backend {kind.NAME} runs one device: no --distributed or --devices"
            )
        kind.limit_memory(args.max_memory)
    given = read_files(args.inputs) if args.inputs else None
    producer = args.layout == "producer"
    report, outputs = _run.run(
        bundle,
        given,
        backend=args.backend,
        rtol=args.rtol,
        atol=args.atol,
        producer_layout=producer,
        devices=args.devices,
        trust_executables=args.trust_executables,
    )
    if save:
        _run.save_outputs(save, bundle, outputs, producer_layout=producer)
    if args.json:
        print(json.dumps(report.to_json()))
    else:
        print(_run.render(report, bundle.path))
    return EXIT_OK if report.ok else EXIT_FAIL


def _applies(args: argparse.Namespace, flag: str, given: bool, capability: str) -> None:
    """A usage error for an option the chosen backend has nothing to do with: one whose backend
    module lacks `capability` (a true attribute, or a function)."""
    from .._run import _backends

    def able(name: str) -> bool:
        return bool(getattr(_backends.kind(name), capability, False))

    if given and not able(args.backend):
        which = " or ".join(n for n in _backends.NAMES if able(n))
        args.parser.error(f"{flag} applies to --backend {which}, not {args.backend}")


def _start_jax(args: argparse.Namespace, x64: bool) -> None:
    from .._run._process import configure_jax

    configure_jax(x64=x64, distributed=args.distributed)


def emit(args: argparse.Namespace) -> int:
    from .._emit._emit import emit_script, script_backend
    from .._read._reader import load

    if args.format == "reactant-server":
        return _emit_reactant_server(args)
    if args.output:
        output_path("-o", args.output)
    _applies(args, "--trust-executables", args.trust_executables, "STORED_EXECUTABLES")
    bundle = load(args.bundle, **_trust(args)).select(args.function)
    path = args.output or default_script_path(bundle.path)
    backend = script_backend(bundle, args.backend)
    emit_script(bundle, path, backend=backend, force=args.force,
                trust_executables=args.trust_executables)  # fmt: skip
    print(f"wrote {path} (backend {backend}; run it with: python {path})")
    return EXIT_OK


def _emit_reactant_server(args: argparse.Namespace) -> int:
    from .._emit._reactant_server import emit_reactant_server
    from .._read._reader import load

    if not args.output:
        args.parser.error("--format reactant-server writes the directory -o names")
    if args.backend != "auto" or args.trust_executables or args.force:
        args.parser.error(
            "--format reactant-server takes none of --backend, --trust-executables, --force"
        )
    out = emit_reactant_server(load(args.bundle, **_trust(args)), output_path("-o", args.output),
                               function=args.function)  # fmt: skip
    print(f"wrote {out} (a ReactantServer.jl model bundle named {out.name!r})")
    return EXIT_OK


def default_script_path(bundle: Any) -> str:
    return str(bundle.parent / f"{bundle.name.removesuffix('.hlobundle')}_run.py")


def inspect(args: argparse.Namespace) -> int:
    from .._read._inspect import render, summarize

    summary = summarize(args.bundle)
    refusal = _refusal(args.bundle)
    if args.json:
        if refusal is not None:
            raise refusal
        print(json.dumps(_inspect_json(summary)))
    else:
        print(render(summary))
        if refusal is not None:
            print("the reader refuses this bundle (load, run and verify fail):")
            raise refusal
    return EXIT_OK


def _inspect_json(summary: Any) -> dict[str, Any]:
    """The manifest as JSON, with the op histograms; a 2.0 bundle's functions each say whether
    they are the default, and the tensors several functions share are listed."""
    from .._read._inspect import shared_tensors

    dump = summary.bundle_manifest.model_dump(mode="json")
    if not summary.several:
        return {"path": str(summary.path), **dump, "ops": summary.ops, "signer": summary.signer}
    for entry in dump["functions"]:
        entry["default"] = entry["name"] == summary.default
        entry["ops"] = summary.function_ops[entry["name"]]
    shared = [{"file": f, "key": k, "functions": names} for f, k, names in shared_tensors(summary)]
    return {"path": str(summary.path), **dump, "shared_tensors": shared, "signer": summary.signer}


def _refusal(path: str) -> HloBundleError | None:
    """What `load()` refuses in the bundle (its modules parsed and checked), or None."""
    from .._read._reader import load

    try:
        load(path)
    except HloBundleError as e:
        return e
    return None


def verify(args: argparse.Namespace) -> int:
    from .._format._signature import SIGNATURE_NAME
    from .._read._reader import load

    trust = _trust(args)
    if trust and args.quick:
        args.parser.error("a signature covers every file's sha256: --quick cannot check it")
    bundle = load(args.bundle)
    if not args.quick:
        bundle.verify(in_memory=False, **trust)  # nothing runs after: no private copies
    files = len(bundle.manifest.files)
    checked = "sizes and structure checked" if args.quick else "sha256 checked"
    if bundle.signer:
        checked += f", signed by {bundle.signer}"
    elif bundle.signed:
        checked += (
            f", signed: its {SIGNATURE_NAME} was not checked "
            "(give --public-key or --certificate-chain to check it)"
        )
    if args.json:
        report = {"ok": True, "path": str(bundle.path), "files": files, "quick": args.quick,
                  "signed": bundle.signed, "signer": bundle.signer}  # fmt: skip
        print(json.dumps(report))
    else:
        print(f"ok: {bundle.path} ({files} files, {checked})")
    return EXIT_OK


def _trust(args: argparse.Namespace) -> dict[str, Any]:
    """`load()`'s public_key / certificate_chain from --public-key / --certificate-chain."""
    if getattr(args, "public_key", None):
        return {"public_key": args.public_key}
    if getattr(args, "certificate_chain", None):
        return {"certificate_chain": args.certificate_chain}
    return {}


def serve(args: argparse.Namespace) -> int:
    from .._serve._server import require_extra

    require_extra()
    from .._serve._models import load_models
    from .._serve._server import listening

    if args.max_batch_size < 1 or args.batch_timeout_ms < 0:
        raise InputError("--max-batch-size must be at least 1 and --batch-timeout-ms not negative")
    if args.read_timeout <= 0 or args.max_connections < 1 or args.max_body_bytes < 1:
        raise InputError("--read-timeout, --max-connections and --max-body-bytes must be positive")
    _applies(args, "--trust-executables", args.trust_executables, "STORED_EXECUTABLES")
    with listening(args.host, args.port) as sock:  # before anything compiles
        models = load_models([_named(b) for b in args.bundles], backend=args.backend,
                             max_batch=args.max_batch_size,
                             trust_executables=args.trust_executables,
                             trust_batched=args.trust_batched, **_trust(args))  # fmt: skip
        _serve_on(sock, models, args)
    return EXIT_OK


def _named(arg: str) -> str | tuple[str, str]:
    """`NAME=BUNDLE` as (NAME, BUNDLE); a plain BUNDLE (or one whose path has a '=') as is."""
    name, sep, path = arg.partition("=")
    return (name, path) if sep and not Path(arg).exists() else arg


def _serve_on(sock: Any, models: dict[str, Any], args: argparse.Namespace) -> None:
    import signal

    from .._serve._app import app
    from .._serve._server import Limits, banner, server

    limits = Limits(args.max_body_bytes, args.read_timeout, args.max_connections)
    print(banner(models, args.host, sock.getsockname()[1]), flush=True)
    # uvicorn drains in-flight requests on SIGTERM, then raises the signal again for the handler
    # it found: make that one return, so that a drained server exits 0.
    signal.signal(signal.SIGTERM, lambda *_: None)
    served = app(models, max_body=limits.max_body, max_batch=args.max_batch_size,
                 batch_timeout_s=args.batch_timeout_ms / 1000,
                 read_timeout_s=limits.read_timeout_s)  # fmt: skip
    server(served, args.host, args.port, limits).run(sockets=[sock])


def refresh(args: argparse.Namespace) -> int:
    from .._write._refresh import refresh as refresh_bundle

    if not args.private_key and (args.signing_certificate or args.certificate_chain):
        args.parser.error("--signing-certificate and --certificate-chain sign with --sign-key")
    key = _resigning_key(args)
    target = refresh_bundle(args.bundle, target_version=args.target_version, sign_key=key,
                            public_key=args.public_key,
                            replace_signature=args.replace_signature)  # fmt: skip
    print(f"refreshed {args.bundle}: portable artifacts for StableHLO {target}")
    return EXIT_OK


def compile_bundle(args: argparse.Namespace) -> int:
    from .._write._compile import compile as compile_executables

    if not args.private_key and (args.signing_certificate or args.certificate_chain):
        args.parser.error("--signing-certificate and --certificate-chain sign with --sign-key")
    key = _resigning_key(args)
    entries = compile_executables(args.bundle, args.targets or ["llvm-cpu"], cpu=args.cpu,
                                  function=args.function, sign_key=key, public_key=args.public_key,
                                  replace_signature=args.replace_signature)  # fmt: skip
    for e in entries:
        print(f"wrote {Path(args.bundle) / e.file} (IREE {e.compiler_version}, {e.target}, "
              f"{e.architecture} cpu {e.cpu})")  # fmt: skip
    print(f"run it without a compiler: hlobundle run {args.bundle} --backend iree --public-key "
          "PUB.pem (a signed bundle), or --trust-executables")  # fmt: skip
    return EXIT_OK


def _resigning_key(args: argparse.Namespace) -> Any:
    if not args.private_key and (args.public_key or args.replace_signature):
        args.parser.error("--public-key and --replace-signature are about signing again: "
                          "give --sign-key")  # fmt: skip
    return _signing_key(args) if args.private_key else None


def _signing_key(args: argparse.Namespace) -> Any:
    from .._format._signature import SigningKey, paths

    certificate = Path(args.signing_certificate) if args.signing_certificate else None
    return SigningKey(Path(args.private_key), certificate, paths(args.certificate_chain))


def sign(args: argparse.Namespace) -> int:
    from .._write._sign import sign as sign_bundle

    who = sign_bundle(args.bundle, args.private_key, signing_certificate=args.signing_certificate,
                      certificate_chain=args.certificate_chain, force=args.force)  # fmt: skip
    print(
        f"signed {args.bundle} ({who}); check it with: hlobundle verify {args.bundle} --public-key ..."
    )
    return EXIT_OK


def conformance(args: argparse.Namespace) -> int:
    import dataclasses
    import shlex
    from pathlib import Path

    from . import _conformance

    if args.implementation and args.backend != "auto":
        args.parser.error("--backend chooses this library's backend; --implementation runs another")
    from .._run import _backends

    if _backends.kind(args.backend).JAX:
        from .._run._process import enable_x64

        enable_x64()
    command = shlex.split(args.implementation) if args.implementation else None
    root = Path(args.dir) if args.dir else _conformance.INSTALLED
    selected = [c for c in _conformance.cases(root) if not args.k or args.k in c.name]
    outcomes = [_conformance.run_case(c, command, args.backend) for c in selected]
    ok = all(o.passed or o.refused for o in outcomes)
    if args.json:
        cases = [{**dataclasses.asdict(o), "result": o.result} for o in outcomes]
        print(json.dumps({"ok": ok, "cases": cases}))
    else:
        print(_conformance.render(outcomes))
    return EXIT_OK if ok else EXIT_FAIL


def schema(args: argparse.Namespace) -> int:
    from .._format._schema import schema_text

    text = schema_text()
    if args.output:
        from .._write._atomic import write_file_atomically

        write_file_atomically(output_path("-o", args.output), text.encode("utf-8"))
    else:
        sys.stdout.write(text)
    return EXIT_OK

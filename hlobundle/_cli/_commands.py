"""What each `hlobundle` command does, once its arguments are parsed (`_main` parses them)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from .._format._errors import DevicesUnavailableError, HloBundleError, InputError

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
    from .. import pack_files, pack_reactant  # the public surface: it registers the runner

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
    if args.from_jax_export:
        return _pack_jax_export(args)
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
        import jax

        jax.config.update("jax_enable_x64", True)
    if args.from_reactant:
        out = pack_reactant(args.from_reactant, args.output, **options)
    else:
        layout = args.layout.replace("-", "_")
        out = pack_files(args.module, args.inputs, args.output, layout=layout, **options)
    print(f"wrote {out}")
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
_REFUSABLE = ("--names", "--result-names", "--with-vjp", "--function")


def _pack_reactant_server(args: argparse.Namespace) -> int:
    from .. import pack  # noqa: F401  (the public surface: it registers the runner)
    from .._write._reactant_server import from_reactant_server

    _refuse_flags(args, "--inputs", "--expected", "--compute-expected", "--role",
                  because="--from-reactant-server takes names, roles, layout and weights from "
                  "the bundle")  # fmt: skip
    options: dict[str, Any] = {"force": args.force, "target_version": args.target_version}
    if args.private_key:
        options["sign_key"] = _signing_key(args)
    out = from_reactant_server(args.from_reactant_server, args.output,
                               batch_size=args.batch_size, **options)  # fmt: skip
    print(f"wrote {out} (the inputs have no stored values: run it with --inputs NAME=FILE)")
    return EXIT_OK


def _pack_jax_export(args: argparse.Namespace) -> int:
    from .. import from_exported  # noqa: F401  (the public surface: it registers the runner)
    from .._write._jax_export import from_exported_files, read_blob

    _refuse_flags(args, "--sign-key", because="--from-jax-export takes names, results and the "
                  "VJP from the Exported", hint=" (the arguments' names: hlobundle inspect "
                  "after packing without --inputs)")  # fmt: skip
    import jax

    jax.config.update("jax_enable_x64", True)  # the Exported's own dtypes, 64-bit ones too
    exported, blob = read_blob(args.from_jax_export)
    out = from_exported_files(exported, args.inputs, args.output, blob=blob,
                              roles=dict(args.role), force=args.force,
                              target_version=args.target_version,
                              expected="compute" if args.compute_expected else args.expected)  # fmt: skip
    print(f"wrote {out}")
    return EXIT_OK


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
    bundle = load(args.bundle, verify=args.verify, **_trust(args)).select(args.function)
    if args.backend == "iree":
        if args.distributed or args.devices not in (None, 1):
            args.parser.error("--backend iree runs one device: no --distributed or --devices")
        from .._run._backends import _iree

        _iree.limit_memory(args.max_memory)
    else:
        if args.max_memory is not None:
            args.parser.error("--max-memory applies to --backend iree")
        if args.trust_executables:
            args.parser.error("--trust-executables applies to --backend iree")
        _start_jax(args, needs_x64(bundle.manifest))
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


def _start_jax(args: argparse.Namespace, x64: bool) -> None:
    import jax

    if x64:
        jax.config.update("jax_enable_x64", True)
    _enable_compilation_cache(jax)
    if args.distributed:
        _initialize_distributed(jax)


def _initialize_distributed(jax: Any) -> None:
    """`jax.distributed.initialize` from JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES, JAX_PROCESS_ID."""

    env = os.environ
    if "JAX_CPU_COLLECTIVES_IMPLEMENTATION" not in env:  # CPU processes talk over gloo
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    try:
        jax.distributed.initialize(
            coordinator_address=env.get("JAX_COORDINATOR_ADDRESS"),
            num_processes=int(env["JAX_NUM_PROCESSES"]) if "JAX_NUM_PROCESSES" in env else None,
            process_id=int(env["JAX_PROCESS_ID"]) if "JAX_PROCESS_ID" in env else None,
        )
    except (ValueError, RuntimeError) as e:
        raise DevicesUnavailableError(
            f"jax.distributed.initialize() failed: {e}. Set JAX_COORDINATOR_ADDRESS (host:port of "
            "process 0), JAX_NUM_PROCESSES and JAX_PROCESS_ID on every host",
        ) from None


def _enable_compilation_cache(jax: Any) -> None:
    """JAX's persistent compilation cache, for every compiled program, in our private cache
    directory; off (whatever JAX was configured with) when there is none or caching is off.
    XLA reads its entries unchecked: they are trusted as this user's own files (SPEC.md
    section 8, "Compile caches")."""
    from .._run import _cache

    where = _cache.directory("jax")
    if where is None:
        jax.config.update("jax_enable_compilation_cache", False)
        return
    jax.config.update("jax_enable_compilation_cache", True)
    jax.config.update("jax_compilation_cache_dir", str(where))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def emit(args: argparse.Namespace) -> int:
    from .._emit._emit import emit_script, script_backend
    from .._read._reader import load

    if args.format == "reactant-server":
        return _emit_reactant_server(args)
    if args.output:
        output_path("-o", args.output)
    if args.trust_executables and args.backend != "iree":
        args.parser.error("--trust-executables applies to --backend iree")
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
    out = emit_reactant_server(load(args.bundle, **_trust(args)), output_path("-o", args.output))
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
        dump = summary.manifest.model_dump(mode="json")
        print(json.dumps({"path": str(summary.path), **dump, "ops": summary.ops,
                          "signer": summary.signer}))  # fmt: skip
    else:
        print(render(summary))
        if refusal is not None:
            print("the reader refuses this bundle (load, run and verify fail):")
            raise refusal
    return EXIT_OK


def _refusal(path: str) -> HloBundleError | None:
    """What `load()` refuses in the bundle (its modules parsed and checked), or None."""
    from .._read._reader import load

    try:
        load(path)
    except HloBundleError as e:
        return e
    return None


def verify(args: argparse.Namespace) -> int:
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
    if args.trust_executables and args.backend != "iree":
        raise InputError(
            "--trust-executables applies to --backend iree", argument="trust_executables"
        )
    if args.trust_batched and args.backend == "iree":
        raise InputError("--trust-batched applies to the jax backends: iree does not batch",
                         argument="trust_batched")  # fmt: skip
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
                                  sign_key=key, public_key=args.public_key,
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
    if args.backend != "iree":
        import jax

        jax.config.update("jax_enable_x64", True)
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

"""What each command that reads or runs bundles does (run, emit, inspect, verify, serve,
conformance, schema), once `_main` has parsed its arguments; `_writes` has those that write."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._format._errors import HloBundleError, InputError
from ._common import (
    EXIT_FAIL,
    EXIT_OK,
    applies,
    limits_memory,
    named_bundle,
    output_path,
    runs_executables,
    runs_jax,
    scripts_executables,
    trust_of,
    trust_options,
    usage,
)

if TYPE_CHECKING:
    from .._run._backends import Backend
    from .._run._process import Start


def run(args: argparse.Namespace) -> int:
    from .._read import _cache

    with _cache.turned_off(args.no_cache):  # every cache: IREE's in the runner, JAX's here
        return _run_bundle(args)


def _run_bundle(args: argparse.Namespace) -> int:
    from .._run import _backends
    from .._run._process import devices_started

    applies(args, "--trust-executables", args.trust_executables, runs_executables)
    applies(args, "--max-memory", args.max_memory is not None, limits_memory)
    applies(args, "--distributed", args.distributed, runs_jax)  # the others run one device
    applies(args, "--devices", args.devices not in (None, 1), runs_jax)
    save = output_path("--save-outputs", args.save_outputs) if args.save_outputs else None
    # The one place the name becomes a backend; the run is handed the object.
    backend = _backends.resolve(_backends.for_forward_calls(args.backend))
    # The JAX runtime starts while the bundle is read and verified (issue 66, 3); a
    # distributed run initializes jax.distributed first.
    with devices_started(backend.jax is not None and not args.distributed) as start:
        return _run_resolved(args, backend, save, start)


def _run_resolved(
    args: argparse.Namespace, backend: Backend, save: Path | None, start: Start
) -> int:
    from .._format._fields import needs_x64
    from .._format._paths import is_remote
    from .._read._inputs import read_files
    from .._remote._load import load
    from .._run import _run

    functions = [args.function] if args.function and is_remote(args.bundle) else None
    bundle = load(args.bundle, functions=functions, verify=args.verify, **trust_options(args))
    bundle = bundle.select(args.function)
    if backend.jax is not None:
        _start_jax(args, needs_x64(bundle.manifest))
    elif backend.limit_memory is not None:
        backend.limit_memory(args.max_memory)
    given = read_files(args.inputs) if args.inputs else None
    if start.under_way():  # the module's walk for the check's precision (a TPU's), meanwhile
        _run.lowest_asked(bundle)
    start.wait()  # a runtime that could not start: DEVICES_UNAVAILABLE
    producer = args.layout == "producer"
    report, outputs = _run.run(
        bundle,
        given,
        backend=backend,
        rtol=args.rtol,
        atol=args.atol,
        producer_layout=producer,
        devices=args.devices,
        trust=trust_of(args),
        precision=args.precision,
    )
    if save:
        _run.save_outputs(save, bundle, outputs, producer_layout=producer)
    if args.json:
        print(json.dumps(report.to_json(), allow_nan=False))
    else:
        print(_run.render(report, bundle.remote or bundle.path))
    return EXIT_OK if report.ok else EXIT_FAIL


def _start_jax(args: argparse.Namespace, x64: bool) -> None:
    from .._run._process import configure_jax

    configure_jax(x64=x64, distributed=args.distributed)


def emit(args: argparse.Namespace) -> int:
    from .._emit._emit import emit_script, refuse_remote, script_backend
    from .._remote._load import load

    if args.format == "reactant-server":
        return _emit_reactant_server(args)
    refuse_remote(args.bundle)
    if args.output:
        output_path("-o", args.output)
    applies(args, "--trust-executables", args.trust_executables, scripts_executables)
    bundle = load(args.bundle, **trust_options(args)).select(args.function)
    path = args.output or default_script_path(bundle.path)
    try:
        backend = script_backend(bundle, args.backend)
    except InputError as e:  # the option is wrong for this bundle, not the bundle: a usage error
        if e.argument != "backend":
            raise
        usage(args, e.message)
    emit_script(
        bundle,
        path,
        backend=backend,
        force=args.force,
        trust=trust_of(args),
        bundle_path=args.bundle_path,
    )
    how = _AUTO_SCRIPT if backend == "auto" else backend
    print(f"wrote {path} (backend {how}; run it with: python {path})")
    return EXIT_OK


# What an `auto` script does where it runs (`_emit/run_template.py`).
_AUTO_SCRIPT = "auto: enzyme where enzyme_ad imports when it runs, else xla, which needs jax alone"


def _emit_reactant_server(args: argparse.Namespace) -> int:
    from .._emit._reactant_server import emit_reactant_server
    from .._remote._load import load

    if not args.output:
        usage(args, "--format reactant-server writes the directory -o names")
    script_options = (
        args.backend != "auto",
        args.trust_executables,
        args.force,
        args.bundle_path != "relative",
    )
    if any(script_options):
        usage(
            args,
            "--format reactant-server takes none of --backend, --trust-executables, "
            "--force, --bundle-path",
        )
    out = emit_reactant_server(
        load(args.bundle, **trust_options(args)),
        output_path("-o", args.output),
        function=args.function,
    )
    print(f"wrote {out} (a ReactantServer.jl model bundle named {out.name!r})")
    return EXIT_OK


def default_script_path(bundle: Any) -> str:
    return str(bundle.parent / f"{bundle.name.removesuffix('.hlobundle')}_run.py")


def inspect(args: argparse.Namespace) -> int:
    from .._format._paths import is_remote
    from .._read._inspect import render, summarize
    from .._remote._load import EVERY, load

    if is_remote(args.bundle):  # fetched and checked as `run` does; its local view is read
        summary, refusal = summarize(load(args.bundle, functions=EVERY).path), None
    else:
        summary, refusal = summarize(args.bundle), _refusal(args.bundle)
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


def fingerprint(args: argparse.Namespace) -> int:
    from .._remote._load import EVERY, load
    from .._terminal._display import shown

    bundle = load(args.bundle, functions=EVERY)
    names = [args.function] if args.function is not None else bundle.functions
    prints = {name: bundle.fingerprint(name) for name in names}
    whole = None if args.function is not None else bundle.fingerprint()
    if args.json:
        print(
            json.dumps({"bundle": whole, "functions": prints} if whole else {"functions": prints})
        )
        return EXIT_OK
    if whole is not None:
        print(f"{whole}  (bundle)")
    for name, value in prints.items():
        print(f"{value}  {shown(name)}")
    return EXIT_OK


def diff(args: argparse.Namespace) -> int:
    from .._read._diff import diff as differences
    from .._read._diff import render
    from .._remote._load import EVERY, load

    found = differences(load(args.a, functions=EVERY), load(args.b, functions=EVERY))
    print(json.dumps(found, allow_nan=False) if args.json else render(found, args.a, args.b))
    return EXIT_OK if found["same"] else EXIT_FAIL


def verify(args: argparse.Namespace) -> int:
    from .._format._paths import is_remote
    from .._format._signature import SIGNATURE_NAME
    from .._remote._load import EVERY, load

    trust = trust_options(args)
    if trust and args.quick:
        usage(args, "a signature covers every file's sha256: --quick cannot check it")
    if is_remote(args.bundle):  # its signature is checked as it loads; then every byte
        bundle = load(args.bundle, functions=EVERY, **trust)
        trust = {}
    else:
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
        report = {
            "ok": True,
            "path": bundle.remote or str(bundle.path),
            "files": files,
            "quick": args.quick,
            "signed": bundle.signed,
            "signer": bundle.signer,
        }
        print(json.dumps(report))
    else:
        print(f"ok: {bundle.remote or bundle.path} ({files} files, {checked})")
    return EXIT_OK


def serve(args: argparse.Namespace) -> int:
    from .._serve import require_extra

    applies(args, "--trust-executables", args.trust_executables, runs_executables)
    named = [named_bundle(args, b) for b in args.bundles]
    require_extra()
    _loopback_only(args)  # after the extra: it asks _serve
    from .._serve._models import load_models

    if args.grpc_port is not None or args.grpc_uds is not None:
        from .._serve import require_grpc

        require_grpc()
        if args.frontends > 1 and args.grpc_uds is not None:
            usage(
                args,
                "--grpc-uds needs --frontends 1 (front doors share a gRPC port: --grpc-port)",
            )
    with _listening(args) as sock:  # before anything compiles
        _check_grpc(args)
        models = load_models(
            named,
            backend=args.backend,
            max_batch=args.max_batch_size,
            trust=trust_of(args),
            max_shapes=args.max_shapes,
            sizes=dict(args.sizes),
            max_response_bytes=args.max_response_bytes,
            **trust_options(args),
        )
        if args.frontends > 1:
            return _serve_through_doors(sock, models, args)
        _serve_on(sock, models, args)
    return EXIT_OK


def _listening(args: argparse.Namespace) -> Any:
    """The socket REST listens on (a context manager): `--uds`'s, or `--host`'s `--port`."""
    from .._serve import _server, _uds

    if args.uds is not None:
        return _uds.listening(args.uds)
    return _server.listening(args.host, args.port, shared=args.frontends > 1)


def _check_grpc(args: argparse.Namespace) -> None:
    """Refuse `--grpc-port` in use, or a `--grpc-uds` that cannot be made, before compiling."""
    if args.grpc_port is not None:
        from .._serve._grpc import check_port

        check_port(args.host, args.grpc_port)
    elif args.grpc_uds is not None:
        from .._serve import _uds

        _uds.check(args.grpc_uds, "--grpc-uds")


def _serve_on(sock: Any, models: dict[str, Any], args: argparse.Namespace) -> None:
    import signal

    from .._serve._app import app
    from .._serve._server import Limits, banner, event_loop, run, server

    limits = Limits(args.max_body_bytes, args.read_timeout, args.max_connections)
    port = None if args.uds is not None else sock.getsockname()[1]
    # A SIGTERM before uvicorn's own handlers (the start lines are out: a client may stop the
    # server at once) is noted, and stops it as soon as it runs; uvicorn drains on one, then
    # raises it again for the handler it found, which then changes nothing: a drained server
    # exits 0.
    stop: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    print(banner(models, args.host, port, args.uds), flush=True)
    served = app(
        models,
        max_body=limits.max_body,
        max_batch=args.max_batch_size,
        batch_timeout_s=args.batch_timeout_ms / 1000,
        read_timeout_s=limits.read_timeout_s,
        max_shared_memory=_shared_memory(args),
    )
    loop = None  # uvicorn's own, unless gRPC's server starts on it first
    if args.grpc_port is not None or args.grpc_uds is not None:
        loop = event_loop()
        served = _with_grpc(served, models, limits, args, loop)
    running = server(served, args.host, args.port, limits, args.uds, args.access_log)
    signal.signal(signal.SIGTERM, lambda *_: setattr(running, "should_exit", True))
    running.should_exit = bool(stop)
    run(running, sock, loop)


def _serve_through_doors(sock: Any, models: dict[str, Any], args: argparse.Namespace) -> int:
    """`--frontends N`: this process holds the device and runs the models; N front doors
    accept and check the requests (`_serve._device_loop`), REST and with `--grpc-port` gRPC,
    each port shared by them all (kept here meanwhile). Their metrics add up in files of a
    directory made here, and removed on exit."""
    import contextlib
    import dataclasses
    import shutil
    import tempfile

    from .._serve import _app, _device_loop, _frontdoor, _server
    from .._serve._spec import Described

    metrics_dir = tempfile.mkdtemp(prefix="hlobundle-serve-metrics-")
    try:
        with contextlib.ExitStack() as kept:
            grpc_port = None
            if args.grpc_port is not None:
                grpc = kept.enter_context(_server.listening(args.host, args.grpc_port, shared=True))
                grpc_port = grpc.getsockname()[1]
            limits = _app.Limits(
                args.max_body_bytes,
                args.read_timeout,
                args.max_batch_size,
                args.batch_timeout_ms / 1000,
                0,  # system shared memory: a region registered with one front door only
                metrics_dir,
            )
            port = None if args.uds is not None else sock.getsockname()[1]
            doors = _frontdoor.Settings(
                {name: Described(m) for name, m in models.items()},
                dataclasses.replace(limits, max_batch=1),
                _server.Limits(args.max_body_bytes, args.read_timeout, args.max_connections),
                -1,
                args.host,
                port or 0,
                args.uds,
                sock.fileno() if args.uds is not None else None,
                args.access_log,
                grpc_port,
                args.grpc_max_deadline,
            )

            def started(pids: list[int]) -> None:
                print(_server.banner(models, args.host, port, args.uds), flush=True)
                if grpc_port is not None:
                    where = f"{args.host}:{grpc_port}"
                    print(f"serving gRPC (inference.GRPCInferenceService) at {where}", flush=True)
                print(
                    f"front doors: {args.frontends} (pids {' '.join(map(str, pids))})", flush=True
                )

            code = _device_loop.serve(_app.App(models, limits), doors, args.frontends, started)
    finally:
        shutil.rmtree(metrics_dir, ignore_errors=True)
    return EXIT_OK if code == 0 else EXIT_FAIL


def _loopback_only(args: argparse.Namespace) -> None:
    """A usage error for `--shared-memory-over-loopback` on a --host that is not loopback,
    where the extension is never offered (it would be silently off)."""
    from .._serve._shm import offered

    if args.shared_memory_over_loopback and not offered(args.host, None, True):
        usage(args, f"--shared-memory-over-loopback needs a loopback --host, not {args.host}")


def _shared_memory(args: argparse.Namespace) -> int:
    """The bytes of system shared memory clients may register: only on `--uds`, or on a
    loopback `--host` with `--shared-memory-over-loopback`; 0 turns the extension off."""
    from .._serve._shm import offered

    over_loopback = args.shared_memory_over_loopback
    return args.max_shared_memory if offered(args.host, args.uds, over_loopback) else 0


def _with_grpc(
    served: Any, models: dict[str, Any], limits: Any, args: argparse.Namespace, loop: Any
) -> Any:
    """The app `served`, with the gRPC server started beside it on `loop`, uvicorn's to be
    (drained in its lifespan)."""
    from .._serve import _grpc

    regions = _grpc.regions_for(
        served,
        args.host,
        args.grpc_uds,
        args.max_shared_memory,
        args.shared_memory_over_loopback,
    )
    service = _grpc.Service(models, served, limits.max_body, args.grpc_max_deadline, regions)
    grpc_server = _grpc.GrpcServer(
        service,
        args.host,
        args.grpc_port or 0,
        limits.max_connections,
        uds=args.grpc_uds,
        loop=loop,
    )
    port = grpc_server.start()
    where = f"unix:{args.grpc_uds}" if args.grpc_uds is not None else f"{args.host}:{port}"
    print(f"serving gRPC (inference.GRPCInferenceService) at {where}", flush=True)
    return _grpc.with_grpc(served, grpc_server)


def conformance(args: argparse.Namespace) -> int:
    import dataclasses
    import shlex

    from . import _conformance

    if args.implementation and args.backend != "auto":
        usage(args, "--backend chooses this library's backend; --implementation runs another")
    from .._run import _backends

    if _backends.kind(args.backend).jax is not None:
        from .._run._process import enable_x64

        enable_x64()
    command = shlex.split(args.implementation) if args.implementation else None
    root = Path(args.dir) if args.dir else _conformance.INSTALLED
    found = _conformance.cases(root)
    selected = [c for c in found if not args.k or args.k in c.name]
    if not selected:  # no case run is no case passed
        raise InputError(
            f"-k {args.k!r} matches none of the {len(found)} cases under {str(root)!r}", path=root
        )
    outcomes = [_conformance.run_case(c, command, args.backend) for c in selected]
    ok = all(o.passed or o.refused or o.skipped for o in outcomes)
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
        from .._file_io._durable import write_file_atomically

        write_file_atomically(output_path("-o", args.output), text.encode("utf-8"))
    else:
        sys.stdout.write(text)
    return EXIT_OK

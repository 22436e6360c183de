"""Shared test helpers: bundles made with JAX, and access to ../shared fixtures."""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import jax
import ml_dtypes
import numpy as np
import pytest

import hlobundle

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "conformance"))
import generate  # noqa: E402  (conformance/generate.py: the cases' generator)

FIXTURES = ROOT.parent / "shared" / "fixtures" / "reactant"

ALL_DTYPES = [
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "complex64",
    "complex128",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e4m3fnuz",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "float8_e4m3b11fnuz",
    "float8_e3m4",
    "float8_e4m3",
    "int4",
    "uint4",
    "int2",
    "uint2",
    "float4_e2m1fn",
]


def np_dtype(name: str) -> np.dtype:
    return np.dtype(getattr(ml_dtypes, name, None) or name)


def sample(shape: tuple[int, ...], dtype: str, seed: int = 0) -> np.ndarray:
    """Deterministic values that are exactly representable in `dtype` (the conformance cases')."""
    return generate.values(shape, dtype, seed)


def lowered_text(fn: Any, *args: Any) -> str:
    return jax.jit(fn, keep_unused=True).lower(*args).as_text()


_SLICES = "(?:slice|real_dynamic_slice|dynamic_slice|gather|dynamic_gather)"


def slices_of_concatenates(text: str) -> list[str]:
    """The lines of a module's text where a slice takes a `stablehlo.concatenate`'s result (in
    the same function: SSA names are a function's own), pretty or generic form: `slice`, or
    what jax writes for one where a dimension is symbolic (`real_dynamic_slice`, a gather)."""
    joined, found = set(), []
    for line in text.splitlines():
        if "func.func" in line:
            joined = set()
        made = re.match(r"\s*(%[\w#]+) = \"?stablehlo\.concatenate", line)
        if made:
            joined.add(made.group(1))
        sliced = re.search(f'"?stablehlo\\.{_SLICES}"?\\(?\\s*(%[\\w#]+)', line)
        if sliced and sliced.group(1) in joined:
            found.append(line.strip())
    return found


def identity_module(*arrays: np.ndarray) -> str:
    """A module whose @main returns its arguments (JAX-made)."""
    return lowered_text(lambda *xs: xs, *arrays)


def pack_identity(tmp_path: Path, *arrays: np.ndarray, name: str = "b", **kwargs: Any) -> Path:
    return hlobundle.pack(identity_module(*arrays), list(arrays), tmp_path / name, **kwargs)


def once_per_program(make: Any) -> Any:
    """`make(fn, *args)`, made once for each function and its arguments' dtypes and shapes:
    what a module fixture builds once (a bundle, a reference) for every backend and test that
    only reads it."""
    done: dict[tuple[Any, ...], Any] = {}

    def of(fn: Any, *args: Any) -> Any:
        key = (fn, *((np.dtype(a.dtype).name, np.shape(a)) for a in args))
        if key not in done:
            done[key] = make(fn, *args)
        return done[key]

    return of


def small_bundle(tmp_path: Path, name: str = "b") -> Path:
    """A two-argument, one-result bundle: y = relu(x @ w)."""
    x = sample((4, 3), "float32", 1)
    w = sample((3, 2), "float32", 2)
    return hlobundle.export(lambda x, w: jax.nn.relu(x @ w), x, w, out=tmp_path / name)


def copy_of(bundle: Path, where: Path) -> Path:
    """A copy of `bundle` in `where`, of the same name (modes and times as written): a module's
    tests that damage or edit a bundle each get their own copy of one it wrote once."""
    return Path(shutil.copytree(bundle, where / bundle.name, symlinks=True))


def two_functions(tmp_path: Path, name: str = "two") -> Path:
    """A 2.0 bundle of `predict(w, x)` (the default) and `loss(w, x, y)`, sharing the parameter
    `w`, with a symbolic batch dimension `b`."""
    import jax.numpy as jnp

    w = np.linspace(-1, 1, 24, dtype=np.float32).reshape(8, 3)
    x, y = np.ones((5, 8), np.float32), np.zeros((5, 3), np.float32)
    out, roles = tmp_path / name, {"w": "parameter"}
    hlobundle.export(
        lambda w, x: jnp.tanh(x @ w),
        w,
        x,
        out=out,
        name="predict",
        roles=roles,
        shapes_specs=(None, "b, 8"),
    )
    hlobundle.export(
        lambda w, x, y: ((x @ w - y) ** 2).mean(),
        w,
        x,
        y,
        out=out,
        name="loss",
        roles=roles,
        shapes_specs=(None, "b, 8", "b, 3"),
        add=True,
    )
    return out


def edit_manifest(bundle: Path, edit: Any) -> None:
    path = bundle / "manifest.json"
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


needs_fixtures = pytest.mark.skipif(
    not FIXTURES.is_dir(), reason="../shared/fixtures/reactant is absent (a user's clone)"
)


def _enzyme_installed() -> bool:
    from hlobundle._run import _backends

    return _backends.kind("enzyme").available()


ENZYME = _enzyme_installed()
INSTALLED_BACKENDS = ("enzyme", "xla") if ENZYME else ("xla",)
needs_enzyme = pytest.mark.skipif(
    not ENZYME, reason="enzyme-ad is not installed (its wheels exist only for Python 3.11)"
)


def relu_module_text():
    """A Reactant-like module whose private function is called @relu."""
    return (
        "module @reactant_f {\n"
        "  func.func private @relu(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
        "    %c = stablehlo.constant dense<1.0> : tensor<4xf32>\n"
        "    %y = stablehlo.add %x, %c : tensor<4xf32>\n"
        "    return %y : tensor<4xf32>\n  }\n"
        "  func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
        "    %y = call @relu(%x) : (tensor<4xf32>) -> tensor<4xf32>\n"
        "    return %y : tensor<4xf32>\n  }\n}\n"
    )


def rehash(bundle: Path, name: str) -> None:
    """Make the manifest's size and sha256 of `name` match the file again, after an edit."""
    from hlobundle._write._atomic import sha256_file

    path = bundle / name
    size, digest = path.stat().st_size, sha256_file(path)
    edit_manifest(bundle, lambda m: m["files"][name].update(size=size, sha256=digest))


def cli(*args: Any, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run `hlobundle ARGS` in this process (its `main()`), capturing its output and exit status.

    With `env`, or where the process boundary is the thing tested, use `cli_process`.
    """
    import contextlib
    import io
    import warnings

    if env:
        return cli_process(*args, env=env)
    from hlobundle._cli._main import main

    out, err = io.StringIO(), io.StringIO()
    formatwarning = warnings.formatwarning
    try:
        with (
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
            warnings.catch_warnings(),
        ):
            warnings.simplefilter("always")  # printed, as in a process of its own
            warnings.showwarning = lambda m, c, f, n, file=None, line=None: sys.stderr.write(
                warnings.formatwarning(m, c, f, n, line)
            )
            try:
                code = main([str(a) for a in args])
            except SystemExit as e:  # argparse: usage errors exit 2
                code = e.code if isinstance(e.code, int) else 1
    finally:
        warnings.formatwarning = formatwarning
    return subprocess.CompletedProcess(
        ["hlobundle", *map(str, args)], code, out.getvalue(), err.getvalue()
    )


def cli_process(*args: Any, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run `python -m hlobundle ARGS` in a subprocess, capturing its output."""
    return subprocess.run(
        [sys.executable, "-m", "hlobundle", *map(str, args)],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )


def assert_close(got: Any, want: Any, rtol: float = 1e-5) -> None:
    """Pytrees agree leaf by leaf, to `rtol` relative to each leaf's largest magnitude (>= 1)."""
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want), strict=True):
        g, w = np.asarray(g), np.asarray(w)
        scale = max(1.0, float(np.max(np.abs(w), initial=0.0)))
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * scale)


def without_modules(tmp_path: Path, *names: str) -> dict[str, str]:
    """An environment for `cli_process` in which `names` (top-level packages) do not import, as
    where their extra is not installed: a sitecustomize sets `sys.modules[name] = None`."""
    where = tmp_path / "blocked"
    where.mkdir(exist_ok=True)
    (where / "sitecustomize.py").write_text(
        f"import sys\nfor name in {list(names)!r}:\n    sys.modules[name] = None\n"
    )
    path = os.pathsep.join(p for p in (str(where), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path}


class ChildProcess:
    """Runs requests in one long-lived child process, each answered as `subprocess.run` would
    answer a process of its own (returncode, stdout, stderr), without the start of Python and
    jax (about 0.5-1 s) each time: `tests/cli_child.py` runs `hlobundle ARGS` commands one
    after another; `tests/script_zygote.py` runs `python SCRIPT ARGS` in a fork of itself.

    A request that ends the child (a signal, an abort) is answered with its status, as
    `cli_process`'s would be (a negative returncode for a signal), and the next request starts
    a fresh child. Call `close()` when done."""

    def __init__(self, scratch: Path, script: str, *options: str) -> None:
        self._command = [sys.executable, str(ROOT / "tests" / script), *options]
        self._scratch, self._proc, self._count = scratch, None, 0

    def __call__(self, *args: Any, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        if self._proc is None:
            self._proc = subprocess.Popen(
                self._command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
            )
        self._count += 1
        out, err = (self._scratch / f"{self._count}.{n}" for n in ("out", "err"))
        argv = [str(a) for a in args]
        try:
            request = {
                "args": argv,
                "out": str(out),
                "err": str(err),
                "cwd": str(cwd or os.getcwd()),
            }
            self._proc.stdin.write(json.dumps(request))
            self._proc.stdin.write("\n")
            self._proc.stdin.flush()
            answer = self._proc.stdout.readline()
        except BrokenPipeError:  # the child ended before it read the request
            answer = ""
        if answer:
            code = json.loads(answer)["returncode"]
        else:  # the request ended the child: its status is the request's
            code = self._proc.wait()
            self.close()
        text = [p.read_text(errors="replace") if p.exists() else "" for p in (out, err)]
        return subprocess.CompletedProcess(argv, code, *text)

    def close(self) -> None:
        if self._proc is not None:
            try:
                self._proc.stdin.close()
            except BrokenPipeError:
                pass
            self._proc.wait()
            self._proc.stdout.close()
            self._proc = None


# The `hlobundle` a shell finds first on its PATH (CliZygote): its request to the zygote, with
# the shell's descriptors 0-2; the signals the shell sends it (`kill`), sent on to the fork; and
# the zygote's answer as its own exit status. A command of a registry (push, pull, an oci://
# bundle) or of signatures (sign, a key) runs in a fork of the warm zygote that imported their
# libraries too (oras and requests, model-signing and sigstore: 0.25 and 0.45 CPU-s a fork
# where each imported them), a server as CliZygote.start runs it; one run without an extra
# (CLI_ZYGOTE_BLOCKED) in a fork of the zygote itself, which imported none of them.
_CLI_SHIM = """#!{python} -SE
import json, os, signal, socket, sys
args = sys.argv[1:]
warm = []
if "CLI_ZYGOTE_BLOCKED" not in os.environ:
    if args[:1] == ["serve"]:
        warm = {server!r}
    elif args[:1] in (["push"], ["pull"], ["sign"]) or any(
        a.startswith("oci://") or a in ("--public-key", "--private-key") for a in args
    ):
        warm = {registry_and_signing!r}
with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
    s.connect({socket!r})
    request = {{"argv": sys.argv, "cwd": os.getcwd(), "env": dict(os.environ), "start": True}}
    if warm:
        request["warm"] = warm
    socket.send_fds(s, [json.dumps(request).encode()], [0, 1, 2])
    pid = json.loads(s.recv(1 << 16))["pid"]
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        if signal.getsignal(sig) is not signal.SIG_IGN:  # as the shell left it for a command
            signal.signal(sig, lambda sig, _: os.kill(pid, sig))
    code = json.loads(s.recv(1 << 16))["returncode"]
if code < 0:  # ended by a signal: end by the same
    signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
sys.exit(code)
"""


class CliZygote:
    """A directory whose `hlobundle`, first on a shell's PATH, runs each command in a fork of one
    process that imported jax and the command once (`tests/cli_zygote.py`), with the shell's
    descriptors, directory and environment, as a process of its own: the docs' sh blocks
    (test_readme's `_bash`) call it dozens of times, each without the start of Python and jax
    (about 0.3 s, 1 s with jax). A signal the shell sends the command (`kill $!`) is sent on
    to its fork; one that cannot be (SIGKILL, SIGSTOP) needs the installed command instead
    (`_bash(..., forked=False)`). Started at the first `bin_dir()`; call `close()` when done."""

    def __init__(self, scratch: Path) -> None:
        self._scratch, self._proc = scratch, None

    def bin_dir(self) -> Path:
        if self._proc is None:
            where = self._scratch / "zygote.sock"
            self._proc = subprocess.Popen(
                [sys.executable, str(ROOT / "tests" / "cli_zygote.py"), str(where)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert self._proc.stdout.readline() == "ready\n", "the CLI zygote did not start"
            shim = self._scratch / "bin" / "hlobundle"
            shim.parent.mkdir()
            shim.write_text(
                _CLI_SHIM.format(
                    python=sys.executable,
                    socket=str(where),
                    server=list(_SERVER_MODULES),
                    registry_and_signing=list(_REGISTRY_AND_SIGNING_MODULES),
                )
            )
            shim.chmod(0o755)
        return self._scratch / "bin"

    def run(
        self, *args: Any, env: dict[str, str] | None = None, blocked: tuple[str, ...] = ()
    ) -> subprocess.CompletedProcess[str]:
        """`hlobundle ARGS` in a fork, in this environment with `env`, answered as `cli_process`
        answers: where what the test checks is read when the command runs (the cache's place,
        JAX's cache settings, HLOBUNDLE_TRACEBACK), not when Python and jax start. `blocked`:
        top-level modules the command runs without, as `without_modules` makes them for a
        process of its own (none an extra's is imported by the zygote; one that were would
        fail the command)."""
        blocking = {"CLI_ZYGOTE_BLOCKED": ",".join(blocked)} if blocked else {}
        return subprocess.run(
            [str(self.bin_dir() / "hlobundle"), *map(str, args)],
            capture_output=True,
            text=True,
            env={**os.environ, **(env or {}), **blocking},
        )

    def start(
        self,
        *args: Any,
        source: str | None = None,
        stdin: Any = None,
        stdout: Any = None,
        stderr: Any = None,
        env: dict[str, str] | None = None,
        cwd: Path | str | None = None,
        text: bool = False,
    ) -> Forked:
        """`python -m hlobundle ARGS` started as `subprocess.Popen` starts it, with the same
        `stdin`, `stdout`, `stderr` (PIPE, DEVNULL, None, STDOUT for stderr), `env`, `cwd` and
        `text`, but as a fork of the zygote (a `serve`: of its zygote that imported a server's
        modules too): its handle (`Forked`) answers as a Popen does, and
        its pid is the command's own process (a signal sent to it reaches the command). With
        `source`, `python -c SOURCE ARGS` instead. Where what a test checks is how a fresh
        interpreter starts (its imports, the environment read as jax is imported), start one."""
        self.bin_dir()
        ours, theirs = _stdio(stdin, stdout, stderr, text)
        request: dict[str, Any] = {
            "argv": [str(self._scratch / "bin" / "hlobundle"), *map(str, args)],
            "cwd": str(cwd or os.getcwd()),
            "env": dict(os.environ if env is None else env),
            "start": True,
        }
        if source is not None:
            request["source"] = source
        if args[:1] == ("serve",):  # from the zygote's fork that imported a server's modules
            request["warm"] = list(_SERVER_MODULES)
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            conn.connect(str(self._scratch / "zygote.sock"))
            socket.send_fds(conn, [json.dumps(request).encode()], [fd for fd, _ in theirs])
            pid = json.loads(conn.recv(1 << 16))["pid"]
        except BaseException:
            conn.close()
            for pipe in ours:
                if pipe is not None:
                    pipe.close()
            raise
        finally:
            for fd, ours_only in theirs:
                if ours_only:
                    os.close(fd)
        return Forked(request["argv"], pid, conn, *ours)

    def close(self) -> None:
        if self._proc is not None:
            self._proc.stdin.close()
            self._proc.wait()
            self._proc.stdout.close()
            self._proc = None


# What `hlobundle serve` imports after the zygote's own (the serve extra's libraries among them,
# and what uvicorn imports as it starts): a fork that runs a server starts from a zygote of the
# zygote that imported them too (0.15 CPU-s a server where each fork imported these).
_SERVER_MODULES = (
    "hlobundle._cli._commands",
    "hlobundle._serve._app",
    "hlobundle._serve._models",
    "hlobundle._serve._server",
    "hlobundle._serve._shm_http",
    "hlobundle._serve._uds",
    "hlobundle._run._precision",
    "jax.experimental.multihost_utils",
    "jaxlib.mlir.dialects.mhlo",
    "orjson",
    "prometheus_client",
    "starlette.applications",
    "uvicorn.main",
    "uvicorn.lifespan.on",
    "uvicorn.loops.uvloop",
    "uvicorn.protocols.http.httptools_impl",
    "uvicorn.protocols.websockets.auto",
)


# What a command of a registry or of signatures imports after the zygote's own (the oci and
# sign extras' libraries among them), for the shim's warm zygote.
_REGISTRY_AND_SIGNING_MODULES = (
    "hlobundle._oci._push",
    "hlobundle._oci._pull",
    "hlobundle._remote._load",
    "hlobundle._bundle_io._signing",
    "model_signing.hashing",
    "model_signing.manifest",
    "model_signing.signing",
    "model_signing.verifying",
)


def _stdio(stdin: Any, stdout: Any, stderr: Any, text: bool) -> tuple[list[Any], list[Any]]:
    """For `CliZygote.start`: this process's ends of the pipes asked for (file objects, or
    None), and the child's descriptors 0-2, each with whether it is ours to close once sent."""
    ours: list[Any] = []
    theirs: list[tuple[int, bool]] = []
    for fd, spec in enumerate((stdin, stdout, stderr)):
        if spec == subprocess.PIPE:
            read, write = os.pipe()
            mine, child = (write, read) if fd == 0 else (read, write)
            mode = ("w" if fd == 0 else "r") + ("" if text else "b")
            ours.append(open(mine, mode, **({"buffering": 0} if fd == 0 and not text else {})))
            theirs.append((child, True))
        elif spec == subprocess.DEVNULL:
            ours.append(None)
            theirs.append((os.open(os.devnull, os.O_RDWR), True))
        elif spec == subprocess.STDOUT and fd == 2:
            ours.append(None)
            theirs.append((theirs[1][0], False))
        elif spec is None:
            ours.append(None)
            theirs.append((fd, False))
        else:  # a descriptor, or a file
            ours.append(None)
            theirs.append((spec if isinstance(spec, int) else spec.fileno(), False))
    return ours, theirs


class Forked:
    """A command started in a fork of the CLI zygote (`CliZygote.start`), answering as a
    `subprocess.Popen` does: `pid`, `returncode`, `stdin`/`stdout`/`stderr` (the pipes asked
    for), `poll`, `wait`, `communicate`, `send_signal`, `terminate`, `kill`. Its exit status
    comes from the zygote, whose child it is, on the connection that started it."""

    def __init__(
        self, args: list[str], pid: int, conn: socket.socket, stdin: Any, stdout: Any, stderr: Any
    ) -> None:
        self.args, self.pid, self._conn = args, pid, conn
        self.stdin, self.stdout, self.stderr = stdin, stdout, stderr
        self.returncode: int | None = None
        self._read: dict[str, Any] = {}
        self._readers: list[threading.Thread] = []

    def poll(self) -> int | None:
        return self.wait(0) if self._ended(0) else None

    def _ended(self, timeout: float | None) -> bool:
        return self.returncode is not None or bool(select.select([self._conn], [], [], timeout)[0])

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not self._ended(timeout):
                raise subprocess.TimeoutExpired(self.args, timeout)
            self.returncode = json.loads(self._conn.recv(1 << 16))["returncode"]
            self._conn.close()
        return self.returncode

    def communicate(self, input: Any = None, timeout: float | None = None) -> tuple[Any, Any]:
        """Popen's: `input` written to its stdin, which is closed; its stdout and stderr read to
        their ends (each in a thread); its exit status waited for; (stdout, stderr)."""
        if not self._readers:
            if self.stdin is not None:
                with contextlib.suppress(BrokenPipeError):
                    if input:
                        self.stdin.write(input)
                    self.stdin.close()
            for name in ("stdout", "stderr"):
                pipe = getattr(self, name)
                if pipe is not None:
                    self._readers.append(
                        threading.Thread(target=self._read_to_end, args=(name, pipe), daemon=True)
                    )
                    self._readers[-1].start()
        deadline = None if timeout is None else time.monotonic() + timeout
        for reader in self._readers:
            reader.join(None if deadline is None else max(0, deadline - time.monotonic()))
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout)
        self.wait(None if deadline is None else max(0, deadline - time.monotonic()))
        return self._read.get("stdout"), self._read.get("stderr")

    def _read_to_end(self, name: str, pipe: Any) -> None:
        with pipe:
            self._read[name] = pipe.read()

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


CLI_ZYGOTE: CliZygote  # the session's, set by conftest.py


def new_key(where: Path) -> tuple[Path, Path]:
    """A fresh P-256 key pair as PEM files: (private, public)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    private, public = where / "key.pem", where / "key.pub.pem"
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return private, public


def functions_over_weights(out: Path, count: int, width: int = 48_000) -> Path:
    """`count` functions `fK(p, x) = tanh(x @ p["wK"]) * K`, each over its own weight of
    8 x `width` float32 (1.5 MB at the default: two chunks), all in one weights file, with a
    symbolic batch `b`; `f0` is the default."""
    import jax.numpy as jnp

    x = np.ones((2, 8), np.float32)
    for k in range(count):
        w = np.linspace(-1, 1, 8 * width, dtype=np.float32).reshape(8, width) * (k + 1)
        hlobundle.export(
            lambda p, x, k=k: jnp.tanh(x @ p[f"w{k}"]) * k,
            {f"w{k}": w},
            x,
            out=out,
            name=f"f{k}",
            roles={"p": "parameter"},
            shapes_specs=(None, "b, 8"),
            add=k > 0,
        )
    return out


LM = ROOT / "examples" / "lm.hlobundle"


def lm_calls() -> list[tuple[str, dict[str, np.ndarray], dict[str, np.ndarray]]]:
    """The language model's `prefill` of one prompt of 5 tokens, then `decode` of its next
    token: for each, the function's name, its inputs and its results from the in-process call
    (`Bundle.function`), by the names an inference protocol gives them."""
    b = hlobundle.load(LM)
    params = b.select("prefill").example_args()[0]
    tokens = np.random.default_rng(0).integers(32, 127, (1, 5)).astype(np.int32)
    logits, cache = b.function("xla", name="prefill")(params, tokens)
    token = np.asarray(logits).argmax(-1).astype(np.int32)
    cache = {k: np.asarray(v) for k, v in cache.items()}
    next_logits, next_cache = b.function("xla", name="decode")(params, cache, token)

    def named(logits: Any, cache: dict[str, Any]) -> dict[str, np.ndarray]:
        return {"result_0": np.asarray(logits)} | {
            f"result_1_{k}": np.asarray(cache[k]) for k in ("k", "pos", "v")
        }

    decode_inputs = {f"cache_{k}": cache[k] for k in ("k", "pos", "v")} | {"token": token}
    return [
        ("prefill", {"tokens": tokens}, named(logits, cache)),
        ("decode", decode_inputs, named(next_logits, next_cache)),
    ]


COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"  # jax/_src/dispatch.py
_compiles: list[str] = []


def _count_compile(event: str, duration: float, **kwargs: object) -> None:
    if event == COMPILE_EVENT:
        _compiles.append(event)


jax.monitoring.register_event_duration_secs_listener(_count_compile)


def compiled_during(call) -> tuple[object, int]:
    """`call()`'s result and how many XLA compiles it made (jax's monitoring event)."""
    before = len(_compiles)
    result = call()
    return result, len(_compiles) - before


def triton_shm() -> Any:
    """tritonclient.utils.shared_memory, which finds its C library through pkg_resources,
    gone from setuptools 81: where it is missing, a stand-in with the one function it calls,
    present only while the module is imported."""
    import importlib
    import importlib.resources
    import types

    try:
        import pkg_resources  # noqa: F401
    except ImportError:
        stand_in = types.ModuleType("pkg_resources")
        stand_in.resource_filename = lambda package, name: str(  # type: ignore[attr-defined]
            importlib.resources.files(package) / name
        )
        sys.modules["pkg_resources"] = stand_in
        try:
            return importlib.import_module("tritonclient.utils.shared_memory")
        finally:
            del sys.modules["pkg_resources"]
    return importlib.import_module("tritonclient.utils.shared_memory")


@contextlib.contextmanager
def shm_regions() -> Any:
    """`make(size)`: a region made with tritonclient's utilities (a /dev/shm file of ours,
    mode 0600), as (its key, its handle); each destroyed on leaving."""
    import uuid

    shm, made = triton_shm(), []

    def make(size: int) -> tuple[str, Any]:
        key = f"hlobundle-test-{uuid.uuid4().hex}"
        made.append(shm.create_shared_memory_region(key, "/" + key, size))
        return key, made[-1]

    try:
        yield make
    finally:
        for handle in made:
            shm.destroy_shared_memory_region(handle)


def held_open(path: str) -> int:
    """How many of this process's descriptors are open on `path` (Linux's /proc)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}") == path
        except OSError:  # the listing's own descriptor, closed since
            pass
    return count

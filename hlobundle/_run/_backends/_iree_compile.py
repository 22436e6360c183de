"""The IREE compiler (extra `iree`): a bundle's checked portable artifact to an IREE module
(`.vmfb`), for `hlobundle compile` (stored executables, SPEC.md "Executables") and for the iree
backend's compile cache. The one place that runs `iree-compile`.

The compiler is a C++ program that was never hardened against hostile input, so it runs as a
child process with a time and address-space limit (as the portable-artifact reader does): a
crash, a hang or an error becomes a coded `BackendUnsupportedError` naming the reason. What IREE
is known not to run is refused before it is asked (`refusal`).
"""

from __future__ import annotations

import hashlib
import platform
import re
import subprocess
import sys
from typing import TYPE_CHECKING

from ..._extras import pip_line
from ..._format import _limits
from ..._format._errors import BackendUnavailableError, BackendUnsupportedError, InputError
from ..._format._fields import CPU_NAME
from . import _installed
from ._backend import Compiled

if TYPE_CHECKING:
    from ..._format._manifest import Manifest

UNAVAILABLE = (
    f"the iree backend needs IREE's compiler and runtime, the iree extra: {pip_line('iree')} "
    "(iree-base-compiler and iree-base-runtime; wheels for Python 3.11 and newer)"
)
# What each target is for; `hlobundle compile --target`. Both run on the CPU (IREE's local
# drivers): llvm-cpu is native code, vmvx IREE's portable bytecode (slow, but not native code).
TARGETS = ("llvm-cpu", "vmvx")
# Element types IREE 3.13 does not compile for the CPU (tried: SPEC.md, "Executables").
UNSUPPORTED_DTYPES = frozenset(
    {
        "int2",
        "uint2",
        "int4",
        "uint4",
        "float4_e2m1fn",
        "float8_e3m4",
        "float8_e4m3",
        "float8_e4m3b11fnuz",
    }
)
# Without it, IREE demotes f64 to f32 (and c128 to c64): results would silently lose precision.
BASE_FLAGS = ("--iree-input-type=stablehlo", "--iree-input-demote-f64-to-f32=false")


def compiler_version() -> str:
    from iree.compiler.version import VERSION

    return str(VERSION)


def refusal(manifest: Manifest) -> str | None:
    """Why IREE cannot run this bundle, known before compiling it; None when it may."""
    if manifest.mesh is not None:
        return "it is sharded over a device mesh, and the iree backend runs one device"
    lacking = sorted({v.dtype for v in manifest.tensors()} & UNSUPPORTED_DTYPES)
    if lacking:
        return f"IREE does not compile the element type(s) {lacking} for the CPU"
    if manifest.module.allowed_custom_calls:
        return (
            f"it has custom calls {manifest.module.allowed_custom_calls[:5]}, which only "
            "XLA implements"
        )
    return None


def check_supported(manifest: Manifest) -> None:
    why = refusal(manifest)
    if why is not None:
        raise BackendUnsupportedError(
            f"the iree backend cannot run this bundle: {why}. Use --backend xla "
            "(SPEC.md, 'Executables')"
        )


def flags(target: str, cpu: str) -> tuple[str, ...]:
    """The compiler's command-line flags for a target (recorded in the manifest)."""
    if target not in TARGETS:
        raise InputError(f"--target must be one of {TARGETS}, got {target!r}", argument="target")
    if not re.fullmatch(CPU_NAME, cpu):
        raise InputError(
            f"--cpu must be generic, host or a CPU name such as znver3 (letters, digits, _.+-; "
            f"at most 64), got {cpu!r}",
            argument="cpu",
        )
    chosen = [*BASE_FLAGS, f"--iree-hal-target-backends={target}"]
    if target == "llvm-cpu":
        chosen.append(f"--iree-llvmcpu-target-cpu={cpu}")
    return tuple(chosen)


def cache_key(portable: bytes, target: str, cpu: str, machine: str) -> str:
    """Names a compiled module by everything it depends on: source, flags, compiler, machine."""
    parts = [hashlib.sha256(portable).hexdigest(), compiler_version(), *flags(target, cpu), machine]
    text = "\n".join(parts)
    return hashlib.sha256(text.encode()).hexdigest()


def compile_portable(
    portable: bytes, manifest: Manifest, *, target: str = "llvm-cpu", cpu: str = "generic"
) -> Compiled:
    """Compile a (checked) portable artifact for `target`; `cpu` is llvm-cpu's target CPU
    (`generic` runs on any CPU of this architecture, `host` only on CPUs like this one)."""
    if not _installed.iree_compiler():
        raise BackendUnavailableError(UNAVAILABLE)
    check_supported(manifest)
    chosen = flags(target, cpu)
    vmfb = _run_compiler(portable, chosen)
    return Compiled(
        vmfb,
        "iree",
        target,
        cpu if target == "llvm-cpu" else "generic",
        chosen,
        compiler_version(),
        platform.machine(),
    )


def _run_compiler(portable: bytes, chosen: tuple[str, ...]) -> bytes:
    from iree.compiler.tools.binaries import find_tool

    limit = str(_limits.CHILD_MEMORY_BYTES)
    command = [
        sys.executable,
        "-I",  # isolated: nothing from the working directory, the environment or user site
        "-S",  # no site: it needs the standard library only (a start 20 ms of CPU cheaper)
        "-c",
        _LIMIT_AND_EXEC,
        limit,
        find_tool("iree-compile"),
        "-",
        *chosen,
        "-o",
        "-",
    ]
    try:
        done = subprocess.run(
            command,
            input=portable,
            capture_output=True,
            check=False,
            timeout=_limits.COMPILE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        raise BackendUnsupportedError(
            f"iree-compile did not finish within {_limits.COMPILE_TIMEOUT_S} s"
        ) from None
    if done.returncode != 0 or not done.stdout:
        raise BackendUnsupportedError(
            f"IREE cannot compile this bundle: {_first_error(done)}. Use --backend xla"
        )
    return done.stdout


# Limits the child's address space and core dumps, then becomes the compiler. (A `preexec_fn`
# would do the same, but it makes subprocess fork a multi-threaded process, which can deadlock.)
_LIMIT_AND_EXEC = (
    "import os, resource, sys\n"
    "limit, hard = int(sys.argv[1]), resource.getrlimit(resource.RLIMIT_AS)[1]\n"
    "limit = limit if hard == resource.RLIM_INFINITY else min(limit, hard)\n"
    "resource.setrlimit(resource.RLIMIT_AS, (limit, limit))\n"
    "resource.setrlimit(resource.RLIMIT_CORE, (0, 0))\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


def _first_error(done: subprocess.CompletedProcess[bytes]) -> str:
    if done.returncode < 0:
        return f"iree-compile died with signal {-done.returncode}"
    lines = done.stderr.decode("utf-8", "replace").splitlines()
    error = next((line for line in lines if "error:" in line), lines[0] if lines else "")
    message = error.split("error:", 1)[-1].strip() or f"exit status {done.returncode}"
    return message[:300]

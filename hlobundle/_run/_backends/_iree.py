"""The iree backend (extra `iree`): the bundle's `@main` on IREE's CPU runtime, with NumPy arrays
in and out and no jax import. The one place that imports `iree.runtime`.

The module comes from one of two places (SPEC.md, "Executables"):

- a stored executable (`compiled/<target>.vmfb`), only when the bundle is trusted (its signature
  verified with the caller's key, or `trust=Trust.EXECUTABLES`) and it was compiled from this
  module's portable artifact by this IREE version for this machine's architecture: an
  executable is native code, which no hash check makes safe to run;
- otherwise the checked portable artifact, compiled in a child process (`_iree_compile`)
  and kept in a private persistent cache (`_cache`), each entry named by source, flags,
  compiler version and CPU, and checked against its own digest before it is used.

It is not a JAX function: no jit, grad or vmap (use the xla or enzyme backend for those).
"""

from __future__ import annotations

import hashlib
import platform
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..._format import _dtypes
from ..._format._errors import (
    BackendUnavailableError,
    BackendUnsupportedError,
    InputError,
    LimitError,
    TransformError,
)
from ..._read import _cache
from ..._read._trust import Trust
from .. import _binding, _shapes
from . import _installed, _iree_compile
from ._backend import Backend, Compiled, Executables, Script

if TYPE_CHECKING:
    from ..._format._manifest import Executable
    from ..._read._reader import Bundle

NAME = "iree"
DRIVER = "local-task"  # IREE's multi-threaded CPU driver; it runs llvm-cpu and vmvx modules

# SPEC.md's dtype names to IREE's HAL element types (by attribute name).
_ELEMENT_TYPES = {
    "bool": "BOOL_8",
    "int8": "SINT_8",
    "int16": "SINT_16",
    "int32": "SINT_32",
    "int64": "SINT_64",
    "uint8": "UINT_8",
    "uint16": "UINT_16",
    "uint32": "UINT_32",
    "uint64": "UINT_64",
    "float16": "FLOAT_16",
    "bfloat16": "BFLOAT_16",
    "float32": "FLOAT_32",
    "float64": "FLOAT_64",
    "complex64": "COMPLEX_64",
    "complex128": "COMPLEX_128",
    "float8_e4m3fn": "FLOAT_8_E4M3_FN",
    "float8_e5m2": "FLOAT_8_E5M2",
    "float8_e4m3fnuz": "FLOAT_8_E4M3_FNUZ",
    "float8_e5m2fnuz": "FLOAT_8_E5M2_FNUZ",
    "float8_e8m0fnu": "FLOAT_8_E8M0_FNU",
}


def element_type_name(dtype: str) -> str:
    """IREE's HAL element type (`iree.runtime.HalElementType`'s attribute) for a SPEC dtype."""
    return _ELEMENT_TYPES[dtype]


def runtime_version() -> str:
    from iree.runtime.version import VERSION

    return str(VERSION)


def usable(entry: Executable, bundle: Bundle) -> str | None:
    """Why a stored executable cannot be used here; None when it can (trust aside)."""
    source = bundle.modules["module"].portable_sha256
    checks = [
        (entry.compiler == "iree", f"it was made by {entry.compiler!r}"),
        (entry.target in _iree_compile.TARGETS, f"target {entry.target!r} is not a CPU target"),
        (
            entry.architecture == platform.machine(),
            f"it is for {entry.architecture}, this machine is {platform.machine()}",
        ),
        (
            entry.compiler_version == runtime_version(),
            f"it was compiled by IREE {entry.compiler_version}, the runtime is {runtime_version()}",
        ),
        (entry.source_sha256 == source, "it was compiled from another portable artifact"),
    ]
    return next((why for ok, why in checks if not ok), None)


def make(
    bundle: Bundle,
    *,
    donate: Any = (),
    devices: int | None = None,
    trust: Trust = Trust.NOTHING,
    max_shapes: int = _shapes.DEFAULT_MAX_SHAPES,
) -> IreeFunction:
    """The backend's function (`_backends`' interface)."""
    if donate or (devices or 1) > 1:
        raise InputError(
            "the iree backend runs one device and copies its arguments: donate and devices "
            "are not available on it",
            argument="donate" if donate else "devices",
        )
    return IreeFunction(bundle, trust=trust, max_shapes=max_shapes)


class IreeFunction:
    """The bundle's `@main` on IREE: NumPy arrays in (by position, name or pytree), NumPy arrays
    out, in the manifest's `output_tree` when it has one."""

    backend = NAME
    jax_function = False  # NumPy arrays in and out: no jit, grad or vmap

    def __init__(
        self,
        bundle: Bundle,
        *,
        trust: Trust = Trust.NOTHING,
        max_shapes: int = _shapes.DEFAULT_MAX_SHAPES,
    ) -> None:
        if not _installed.iree_runtime():
            raise BackendUnavailableError(_iree_compile.UNAVAILABLE)
        _iree_compile.check_supported(bundle.manifest)
        self.bundle = bundle
        self.manifest = bundle.manifest
        # IREE's runtime does not check that dynamic sizes agree: a symbolic function's call
        # shapes are proven against the module before it runs (`_shapes`, SPEC.md 2.8).
        self._prover = _shapes.Prover(bundle, max_shapes) if self.manifest.symbolic else None
        if self._prover is None and _shapes.needs_proof(bundle):  # static: proven once, before
            # IREE compiles it (its runtime ignores jax's shape assertions, which refinement
            # evaluates or refuses); other static modules need no jaxlib import
            _shapes.prove_static(bundle)
        vmfb, self.source = _module_bytes(bundle, Trust.EXECUTABLES in trust or bundle.trusted)
        self._main = _load(vmfb)

    def __repr__(self) -> str:
        return f"<hlobundle function {self.manifest.function!r} backend=iree ({self.source})>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        flat = _binding.bind(self.manifest, args, kwargs, stored=self.bundle.tensor)
        return _binding.structure(self.manifest, self.call_flat(*flat))

    def prove_shapes(self, shapes: Sequence[Sequence[int]]) -> None:
        """Prove a call's argument shapes against the module, without running it (SPEC.md 2.8)."""
        if self._prover is not None:
            self._prover.prove(shapes)

    def call_flat(self, *flat: Any) -> tuple[np.ndarray, ...]:
        """Call with one array per argument in manifest order; returns one array per result."""
        from iree import runtime as rt

        arguments = self.manifest.arguments
        if len(flat) != len(arguments):
            raise _binding.count_error(arguments, len(flat))
        if any(type(x).__name__.endswith("Tracer") for x in flat):  # without importing jax
            raise TransformError(
                "the iree backend runs outside JAX, with NumPy arrays: it cannot be traced by "
                "jax.jit, jax.grad or jax.vmap. Use bundle.function('xla') (or 'enzyme') there"
            )
        device = rt.get_device(DRIVER)
        checked = [
            _binding.check_value(x, a, i)
            for i, (x, a) in enumerate(zip(flat, arguments, strict=True))
        ]
        proof = None
        if self._prover is not None:
            proof = self._prover.prove([np.shape(x) for x in checked])
        views = [
            _to_device(rt, device, x, a.dtype) for x, a in zip(checked, arguments, strict=True)
        ]
        try:
            out = self._main(*views)
        except MemoryError:
            raise _out_of_memory("std::bad_alloc") from None
        except (RuntimeError, ValueError, IndexError) as e:
            reason = " ".join(str(e).split())[:300]
            if "RESOURCE_EXHAUSTED" in reason:
                raise _out_of_memory(reason) from None
            raise BackendUnsupportedError(
                f"IREE's runtime failed to run the module: {reason}"
            ) from None
        out = out if isinstance(out, tuple) else () if out is None else (out,)
        _shapes.check_results(self.manifest, proof, out)
        return tuple(
            _to_host(x, r.dtype, r.shape) for x, r in zip(out, self.manifest.results, strict=True)
        )


def _out_of_memory(reason: str) -> LimitError:
    if _limited:  # what IREE holds is not given back: lift our cap, so that the error is told
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (_limited[0], _limited[1]))
    error = LimitError(
        f"IREE's runtime ran out of memory running the module ({reason[:200]}). IREE keeps the "
        "work of every iteration of a loop whose condition it computes on the host until the "
        "call returns, so a long loop can need memory in proportion to its trip count; run it "
        "with --backend xla (SPEC.md, 'Executables')"
    )
    error.fatal = True  # IREE's runtime crashes in its teardown after an allocation failed
    return error


def limit_memory(limit: int | None = None) -> int:
    """Cap this process's address space at `limit` bytes (default: what it has mapped now plus
    three quarters of the memory available), so that a module IREE's runtime cannot run in the
    memory there is ends in a coded error, not in the kernel's out-of-memory killer. For a
    process of hlobundle's own (`hlobundle run --backend iree`); a library never calls it.

    **Returns:** the limit set."""
    import resource

    if limit is None:  # leave a quarter of what is available to the rest of the machine
        available = _proc_kib("/proc/meminfo", "MemAvailable:") * 3 // 4
        limit = (_proc_kib("/proc/self/status", "VmSize:") + available) * 1024
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = limit if hard == resource.RLIM_INFINITY else min(limit, hard)
    if limit > 0:
        _limited[:] = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    return limit


_limited: list[int] = []  # the address-space limits before limit_memory(), once it ran


def _proc_kib(path: str, key: str) -> int:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            line = next((line for line in f if line.startswith(key)), "")
    except OSError:
        return 0
    parts = line.split()
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


def _module_bytes(bundle: Bundle, trusted: bool) -> tuple[bytes, str]:
    """The module to run and where it came from (a stored executable, the cache, the compiler)."""
    for entry in bundle.manifest.executables or []:
        if trusted and usable(entry, bundle) is None:
            data = bundle.executable(entry.target)
            if data is not None:
                return data, f"stored executable {entry.file}"
    portable = bundle.portable_artifact
    if not _installed.iree_compiler():
        raise BackendUnavailableError(
            "the bundle has no stored executable this runtime may run (a trusted one, compiled by "
            f"this IREE version for this machine), and IREE's compiler is not installed: "
            f"{_iree_compile.UNAVAILABLE}"
        )
    # Compiled for this CPU ("host"), so the key names this CPU too: a cache shared by machines
    # with other CPUs must not hand them code with instructions they lack.
    key = _iree_compile.cache_key(portable, "llvm-cpu", "host", _host_cpu())
    where = _cache.directory(_cache.IREE)
    cached = _cache.read(where, key) if where is not None else None
    if cached is not None:
        return cached, "compile cache"
    compiled = _iree_compile.compile_portable(portable, bundle.manifest, cpu="host")
    if where is not None:
        _cache.write(where, key, compiled.data)
    return compiled.data, "compiled"


def _compile_executable(bundle: Bundle, *, target: str, cpu: str) -> Compiled:
    return _iree_compile.compile_portable(
        bundle.portable_artifact, bundle.manifest, target=target, cpu=cpu
    )


def _host_cpu() -> str:
    """What distinguishes this CPU for code compiled for it: architecture and feature flags."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            flags = next((line for line in f if line.startswith(("flags", "Features"))), "")
    except OSError:
        flags = ""
    return f"{platform.machine()} {platform.processor()} {flags.strip()}"


def _load(vmfb: bytes) -> Any:
    from iree import runtime as rt

    try:
        context = rt.SystemContext(config=rt.Config(device=rt.get_device(DRIVER)))
        module = rt.VmModule.copy_buffer(context.instance, vmfb)
        context.add_vm_module(module)
        return context.modules[module.name]["main"]
    except (RuntimeError, ValueError, IndexError, KeyError) as e:
        reason = " ".join(str(e).split())[:300]
        raise BackendUnsupportedError(
            f"IREE's runtime cannot load this bundle's module: {reason}. Use --backend xla"
        ) from None


def _to_device(rt: Any, device: Any, x: Any, dtype: str) -> Any:
    """A NumPy array as a buffer view of IREE's element type for `dtype`, bytes copied as they are."""
    x = np.asarray(x, order="C")  # ascontiguousarray would make a 0-d array 1-d
    element = getattr(rt.HalElementType, element_type_name(dtype))
    raw = x.reshape(-1).view(np.uint8) if x.size else np.zeros(0, np.uint8)
    buffer = device.allocator.allocate_buffer_copy(
        memory_type=rt.MemoryType.DEVICE_LOCAL,
        allowed_usage=rt.BufferUsage.DEFAULT,
        device=device,
        buffer=raw,
    )
    return rt.HalBufferView(buffer, list(x.shape), element)


def _to_host(x: Any, dtype: str, shape: Sequence[int | str]) -> np.ndarray:
    """A result's bytes, as the manifest's dtype and shape (IREE maps exotic types to bytes).
    A symbolic dimension (format 2.0) stays dynamic in IREE's module: its size is the one the
    result's buffer view reports, every static dimension the manifest's."""
    host = np.asarray(x.to_host(), order="C")
    want = _dtypes.BY_NAME[dtype].numpy
    dims = tuple(x.shape) if any(isinstance(d, str) for d in shape) else ()
    sizes = tuple(d if isinstance(d, int) else dims[k] for k, d in enumerate(shape))
    return host.reshape(-1).view(np.uint8).view(want).reshape(sizes).copy()


def _script(bundle: Bundle, trust: Trust) -> Script:
    """An IREE script runs a stored executable: one this runtime can use, checked, and only
    of a trusted bundle (an executable is native code)."""
    if not bundle.manifest.executables:  # nothing to trust yet: say what to do first
        raise InputError(
            f"{bundle.path} has no stored executable for an iree script to run; compile "
            f"first: store one with: hlobundle compile {bundle.path}",
            argument="backend",
        )
    if not (Trust.EXECUTABLES in trust or bundle.trusted):
        raise InputError(
            "an iree script runs the bundle's stored executable, which is native code: verify "
            "the bundle's signature (--public-key) or pass --trust-executables "
            "(trust=hlobundle.Trust.EXECUTABLES)",
            argument="trust",
        )
    reasons = []
    for entry in bundle.manifest.executables or []:
        why = usable(entry, bundle)
        if why is None:
            executable = bundle.executable(entry.target)
            assert executable is not None, "executable() finds the manifest's own entry"
            return _script_of(bundle, entry, executable)
        reasons.append(f"{entry.file}: {why}")
    raise InputError(
        f"{bundle.path} has no executable this IREE runtime can run"
        + (f" ({'; '.join(reasons)})" if reasons else "")
        + f": store one with: hlobundle compile {bundle.path}",
        argument="backend",
    )


def _script_of(bundle: Bundle, entry: Executable, data: bytes) -> Script:
    m = bundle.manifest
    dtypes = sorted({v.dtype for v in m.tensors()})
    slots = {
        "EXECUTABLE_FILE": entry.file,
        "EXECUTABLE_SHA256": hashlib.sha256(data).hexdigest(),
        "IREE_VERSION": entry.compiler_version,
        "ELEMENT_TYPES": {d: element_type_name(d) for d in dtypes},
    }
    return Script("run_iree_template.py", slots, (), "NumPy")


BACKEND = Backend(
    name=NAME,
    unavailable=_iree_compile.UNAVAILABLE,
    available=_installed.iree_runtime,
    make=make,
    script=_script,
    executables=Executables(
        targets=_iree_compile.TARGETS,
        compile_for=_compile_executable,
        check_target=_iree_compile.flags,
        here=lambda: _iree_compile.TARGETS if _installed.iree_compiler() else (),
        scripted=True,
    ),
    limit_memory=limit_memory,
)

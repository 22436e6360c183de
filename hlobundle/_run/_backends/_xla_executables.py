"""XLA's stored executables (SPEC.md 2.7): the bundle's function compiled by XLA for one
device of one platform, in PJRT's own serialization (`_compat.serialize_executable`, what JAX's
persistent compilation cache stores), so that a trusted bundle's first call runs without
compiling.

An executable is bound to its key: the portable artifact it was compiled from (`source_sha256`),
the platform (`target` xla-PLATFORM), the device kind, the topology (one device), jaxlib's
version and, on a TPU, libtpu's, the host's architecture and, for the CPU platform, the host's
CPU (XLA compiles for its features). It runs only where every part matches, only from a bundle
the user trusts (its key verified it, or `Trust.EXECUTABLES`), and only in calls on concrete
arrays (eager ones): under `jax.jit`, `grad` or `vmap` the function is traced and compiled with
what surrounds it. Anything else falls back to compiling, saying why once.

A function with symbolic dimensions has one executable per `sizes` (its symbols' values) that
it was compiled for. Every executable runs only on arguments of the shapes it takes, read from
its own HLO module when it is loaded (`_compat.parameter_shapes`) and compared with what its
entry gives: the manifest chooses an executable, it never vouches for one (a relabelled entry
would otherwise run an executable at shapes of the same byte size but another meaning).
"""

from __future__ import annotations

import hashlib
import platform
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ... import _compat
from ..._format import _symbolic
from ..._format._errors import HloBundleWarning, InputError
from ..._interop._jax_export import exported_for, value_avals
from ._backend import Compiled

if TYPE_CHECKING:
    from ..._format._manifest import Executable, Manifest
    from ..._read._reader import Bundle
    from .._shapes import Shapes

PLATFORMS = ("cpu", "tpu", "cuda", "rocm")
TARGETS = tuple(f"xla-{p}" for p in PLATFORMS)
SUFFIX = ".pjrt"
TOPOLOGY = "1"  # one device: what an unsharded function's executable runs on
_said: set[str] = set()  # the fallbacks already told, once each


@dataclass(frozen=True)
class Key:
    """What an XLA executable runs under: this machine's, or an entry's."""

    target: str
    device_kind: str
    topology: str
    compiler_version: str
    libtpu_version: str | None
    architecture: str
    cpu: str


def here() -> Key:
    """This process's key: its default JAX device's platform and kind, its versions, its host."""
    import jax
    import jaxlib

    device = jax.devices()[0]
    return Key(
        target=f"xla-{device.platform}",
        device_kind=str(device.device_kind),
        topology=TOPOLOGY,
        compiler_version=jaxlib.__version__,
        libtpu_version=_libtpu_version() if device.platform == "tpu" else None,
        architecture=platform.machine(),
        cpu=_host_cpu() if device.platform == "cpu" else "generic",
    )


def key_of(entry: Executable) -> Key:
    return Key(
        target=entry.target,
        device_kind=entry.device_kind or "",
        topology=entry.topology or "",
        compiler_version=entry.compiler_version,
        libtpu_version=entry.libtpu_version,
        architecture=entry.architecture,
        cpu=entry.cpu,
    )


def _libtpu_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("libtpu")
    except PackageNotFoundError:
        return None


def _host_cpu() -> str:
    """The CPU XLA compiled for: a digest of its architecture and feature flags (code for one
    CPU may use instructions another lacks)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            flags = next((line for line in f if line.startswith(("flags", "Features"))), "")
    except OSError:
        flags = ""
    features = " ".join(sorted(flags.partition(":")[2].split()))
    digest = hashlib.sha256(f"{platform.machine()} {features}".encode()).hexdigest()
    return f"host-{digest[:16]}"


def check_target(target: str, cpu: str) -> None:
    """An `InputError` for a target this process cannot compile for (before any work): XLA
    compiles for the platform JAX runs on here."""
    ours = here().target
    if target != ours:
        raise InputError(
            f"--target {target}: XLA compiles for the platform JAX runs on here, {ours}; "
            f"compile on a machine of that platform",
            argument="targets",
        )


def compile_executable(
    bundle: Bundle, *, target: str, cpu: str, sizes: Mapping[str, int] | None = None
) -> Compiled:
    """The function compiled by XLA for this process's default device, as the xla backend's
    eager call runs it (the arguments `@main` reads, in manifest order; a symbolic function's
    at the symbols' values `sizes`), serialized by PJRT."""
    check_target(target, cpu)
    _check_compilable(bundle.manifest, sizes)
    key = here()
    return Compiled(
        data=_compat.serialize_executable(_compat.compile_uncached(lowered(bundle, sizes))),
        compiler="xla",
        target=key.target,
        cpu=key.cpu,
        flags=(),
        compiler_version=key.compiler_version,
        architecture=key.architecture,
        suffix=SUFFIX,
        device_kind=key.device_kind,
        topology=key.topology,
        libtpu_version=key.libtpu_version,
    )


def lowered(bundle: Bundle, sizes: Mapping[str, int] | None = None) -> Any:
    """The function's eager call lowered for this process's default device: `@main` of the
    arguments it reads (`jax.stages.Lowered`); a symbolic function's at `sizes`."""
    import jax

    from .._function import _with_zeros_for_unused

    manifest = bundle.manifest
    exported = exported_for(manifest, bundle.portable_artifact)
    used = used_arguments(bundle)
    call = _with_zeros_for_unused(lambda *flat: tuple(exported.call(*flat)), manifest, used)
    shapes = argument_shapes(manifest, used, sizes or {})
    avals = value_avals(manifest, manifest.arguments)
    specs = [
        jax.ShapeDtypeStruct(shape, avals[i].dtype) for i, shape in zip(used, shapes, strict=True)
    ]
    return jax.jit(call, keep_unused=True).lower(*specs)


def used_arguments(bundle: Bundle) -> list[int]:
    """The arguments an eager call passes, as `BundleFunction` passes them: those `@main`
    reads, or every one of a symbolic function."""
    unused = frozenset() if bundle.manifest.symbolic else bundle.signature.unused
    return [i for i in range(len(bundle.manifest.arguments)) if i not in unused]


def argument_shapes(manifest: Manifest, used: Sequence[int], sizes: Mapping[str, int]) -> Shapes:
    """The shapes of the arguments `used` at the symbols' values `sizes`."""
    return tuple(_symbolic.evaluate(manifest.arguments[i].shape, sizes) for i in used)


def _check_compilable(manifest: Manifest, sizes: Mapping[str, int] | None) -> None:
    if manifest.mesh is not None:
        raise InputError(
            f"function {manifest.function!r} has a device mesh: an XLA executable is stored "
            "for one device (SPEC.md 2.7)",
            argument="targets",
        )
    if manifest.symbolic and not sizes:
        raise InputError(
            f"function {manifest.function!r} has symbolic shapes: an XLA executable is stored "
            "for given values of its symbols (--sizes SYMBOL=N[,N...], SPEC.md 2.7)",
            argument="sizes",
        )


def usable(entry: Executable, bundle: Bundle, key: Key) -> str | None:
    """Why a stored XLA executable cannot run here; None when it can (trust aside)."""
    theirs = key_of(entry)
    for field in Key.__dataclass_fields__:
        if getattr(theirs, field) != getattr(key, field):
            return f"its {field} is {getattr(theirs, field)!r}, here {getattr(key, field)!r}"
    if entry.source_sha256 != bundle.modules["module"].portable_sha256:
        return "it was compiled from another portable artifact"
    return None


def stored(bundle: Bundle, trusted: bool) -> Stored | None:
    """The trusted bundle's XLA executables for this machine, loaded on this process's default
    device; None when there is none to use. Their bytes are hashed before jaxlib parses them
    (`Bundle.executable`)."""
    entries = [e for e in bundle.manifest.executables or [] if e.compiler == "xla"]
    if not entries or not trusted or bundle.manifest.mesh:
        return None
    key = here()
    reasons = {e.file: usable(e, bundle, key) for e in entries}
    chosen = [e for e in entries if reasons[e.file] is None]
    if not chosen:
        _say_once(
            f"{bundle.manifest.function}: no stored XLA executable runs here "
            f"({'; '.join(f'{f}: {why}' for f, why in reasons.items())}); compiling the "
            "portable artifact instead"
        )
        return None
    import jax

    device = jax.devices()[0]
    runs: dict[Shapes, tuple[str, Any]] = {}
    for entry in chosen:
        got = _loaded(bundle, entry, device)
        if got is not None:
            runs.setdefault(got[0], (entry.file, got[1]))
    return Stored(bundle, runs, device) if runs else None


def _loaded(bundle: Bundle, entry: Executable, device: Any) -> tuple[Shapes, Any] | None:
    """An entry's executable loaded, and the argument shapes it takes, read from the
    executable itself; None, said once, when PJRT refuses its bytes or those shapes are not
    what the entry says it was compiled for (its `sizes` in the function's shapes)."""
    data = bundle.executable(entry.target, entry.sizes)
    if data is None:  # `bundle.executable` reads what the manifest lists, as `entry` is
        return None
    where = f"{bundle.manifest.function}: the stored XLA executable {entry.file}"
    try:
        loaded = _compat.deserialize_executable(data, device)
    except RuntimeError as e:  # PJRT refused the bytes: compile, as for a key of another machine
        reason = " ".join(str(e).split())[:200]
        _say_once(f"{where} does not load here ({reason}); compiling the portable artifact instead")
        return None
    manifest = bundle.manifest
    used = used_arguments(bundle)
    want = argument_shapes(manifest, used, entry.sizes or {})
    avals = value_avals(manifest, manifest.arguments)
    dtypes = [np.dtype(avals[i].dtype) for i in used]
    got = _compat.parameter_shapes(loaded)
    if [(s, np.dtype(d)) for s, d in got] != list(zip(want, dtypes, strict=True)):
        shown = ", ".join(f"{np.dtype(d).name}{list(s)}" for s, d in got)
        _say_once(
            f"{where} takes arguments {shown}, not the {_at(entry)} its entry gives "
            f"({', '.join(f'{d.name}{list(s)}' for s, d in zip(want, dtypes, strict=True))}); "
            "not run, compiling the portable artifact instead"
        )
        return None
    return want, loaded


def _at(entry: Executable) -> str:
    if not entry.sizes:
        return "shapes"
    return "shapes at " + ", ".join(f"{k}={v}" for k, v in sorted(entry.sizes.items()))


class Stored:
    """A function's stored XLA executables that run here, each under the argument shapes read
    from it: an eager call runs the one for its shapes, and compiles (saying so once) for
    shapes none was compiled for."""

    def __init__(self, bundle: Bundle, runs: dict[Shapes, tuple[str, Any]], device: Any) -> None:
        manifest = bundle.manifest
        self.function = manifest.function
        self._declared = [
            (manifest.arguments[i].name, manifest.arguments[i].shape)
            for i in used_arguments(bundle)
        ]
        self._runs = runs
        self._device = device
        self._told = False
        files = sorted(file for file, _ in runs.values())
        self.source = f"stored executable{'s' if len(files) > 1 else ''} {', '.join(files)}"

    def run(self, flat: Sequence[Any]) -> tuple[list[Any], str] | None:
        """The results of the executable for `flat`'s shapes, and its file; None (compile)
        when none was compiled for them."""
        import jax

        shapes = tuple(tuple(int(n) for n in x.shape) for x in flat)
        found = self._runs.get(shapes)
        if found is None:
            self._tell(shapes)
            return None
        file, loaded = found
        return list(loaded.execute([jax.device_put(x, self._device) for x in flat])), file

    def _tell(self, shapes: Shapes) -> None:
        if not self._told:
            self._told = True
            warnings.warn(
                f"{self.function}: no stored XLA executable at {self._sizes(shapes)} "
                f"({self.source}: other sizes); compiling the portable artifact for these "
                "sizes and any other (said once)",
                HloBundleWarning,
                stacklevel=4,
            )

    def _sizes(self, shapes: Shapes) -> str:
        """The symbols' values that a call's shapes bind, as `b=3`."""
        env = _symbolic.solved(self._declared, shapes)
        return ", ".join(f"{k}={v}" for k, v in sorted(env.items())) or "these shapes"


def _say_once(message: str) -> None:
    if message not in _said:
        _said.add(message)
        warnings.warn(message, HloBundleWarning, stacklevel=4)

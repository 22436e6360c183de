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
"""

from __future__ import annotations

import hashlib
import platform
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ... import _compat
from ..._format._errors import HloBundleWarning, InputError
from ..._interop._jax_export import exported_for, value_avals
from ._backend import Compiled

if TYPE_CHECKING:
    from ..._format._manifest import Executable, Manifest
    from ..._read._reader import Bundle

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


def compile_executable(bundle: Bundle, *, target: str, cpu: str) -> Compiled:
    """The function compiled by XLA for this process's default device, as the xla backend's
    eager call runs it (the arguments `@main` reads, in manifest order), serialized by PJRT."""
    check_target(target, cpu)
    _check_compilable(bundle.manifest)
    key = here()
    return Compiled(
        data=_compat.serialize_executable(_compat.compile_uncached(lowered(bundle))),
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


def lowered(bundle: Bundle) -> Any:
    """The function's eager call lowered for this process's default device: `@main` of the
    arguments it reads (`jax.stages.Lowered`)."""
    import jax

    from .._function import _with_zeros_for_unused

    manifest = bundle.manifest
    exported = exported_for(manifest, bundle.portable_artifact)
    used = [i for i in range(len(manifest.arguments)) if i not in bundle.signature.unused]
    call = _with_zeros_for_unused(lambda *flat: tuple(exported.call(*flat)), manifest, used)
    avals = value_avals(manifest, manifest.arguments)
    return jax.jit(call, keep_unused=True).lower(*[avals[i] for i in used])


def _check_compilable(manifest: Manifest) -> None:
    if manifest.symbolic or manifest.mesh is not None:
        raise InputError(
            f"function {manifest.function!r} has "
            f"{'symbolic shapes' if manifest.symbolic else 'a device mesh'}: an XLA executable "
            "is stored for one static shape on one device (SPEC.md 2.7)",
            argument="targets",
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


def stored(bundle: Bundle, trusted: bool) -> tuple[Callable[..., list[Any]], str] | None:
    """A call of the trusted bundle's XLA executable for this machine (the flat arguments
    `@main` reads, on this process's default device), and where it came from; None when there
    is none to use. Its bytes are hashed before jaxlib parses them (`Bundle.executable`)."""
    entries = [e for e in bundle.manifest.executables or [] if e.compiler == "xla"]
    if not entries or not trusted or bundle.manifest.symbolic or bundle.manifest.mesh:
        return None
    key = here()
    reasons = {e.file: usable(e, bundle, key) for e in entries}
    chosen = next((e for e in entries if reasons[e.file] is None), None)
    if chosen is None:
        _say_once(
            f"{bundle.manifest.function}: no stored XLA executable runs here "
            f"({'; '.join(f'{f}: {why}' for f, why in reasons.items())}); compiling the "
            "portable artifact instead"
        )
        return None
    data = bundle.executable(chosen.target)
    if data is None:  # `bundle.executable` reads what the manifest lists, as `chosen` is
        return None
    import jax

    device = jax.devices()[0]
    try:
        loaded = _compat.deserialize_executable(data, device)
    except RuntimeError as e:  # PJRT refused the bytes: compile, as for a key of another machine
        reason = " ".join(str(e).split())[:200]
        _say_once(
            f"{bundle.manifest.function}: the stored XLA executable {chosen.file} does not load "
            f"here ({reason}); compiling the portable artifact instead"
        )
        return None

    def call(*flat: Any) -> list[Any]:
        return list(loaded.execute([jax.device_put(x, device) for x in flat]))

    return call, f"stored executable {chosen.file}"


def _say_once(message: str) -> None:
    if message not in _said:
        _said.add(message)
        warnings.warn(message, HloBundleWarning, stacklevel=4)

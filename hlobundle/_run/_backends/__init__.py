"""The backends: one room each, behind this one door.

Each backend's room builds one `Backend` object (`_backend.py`), which offers everything the
rest of the house needs from it: its function of a bundle and its emitted script, which every
backend answers, and its capabilities, each None where it has none: what it traces and
differentiates (`jax`), its stored executables (`executables`), a cap on memory
(`limit_memory`). Nothing outside this folder imports a backend's room or asks which backend
it holds by name: it asks the object what it can do. Two services are one room's alone, and
the door calls them there: the exporter (`exported`, xla's) and the primal of a module text
(`text_primal`, enzyme's).

`resolve(name)` picks one: `xla` (a `jax.export.Exported` of the stored portable artifact; needs
only jax), `enzyme` (enzyme-ad's `hlo_call` on the module text), `iree` (IREE's CPU runtime), or
`auto` (enzyme when it imports, else xla; xla for a forward run, `for_forward_calls`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeGuard, get_args

from ..._format._errors import BackendUnavailableError, BackendUnsupportedError, InputError
from ._backend import Backend, Compiled, Executables, JaxFunctions, Script
from ._jax_script import either

if TYPE_CHECKING:
    from ..._format._manifest import Manifest
    from ..._read._reader import Bundle
    from ..._read._trust import Trust

__all__ = [
    "NAMES",
    "Backend",
    "BackendName",
    "Compiled",
    "Executables",
    "JaxFunctions",
    "Script",
]

# The one list of backend names: type hints use `BackendName`, the CLI's choices `NAMES`.
BackendName = Literal["auto", "enzyme", "xla", "iree"]
NAMES: tuple[str, ...] = get_args(BackendName)
_AUTO = ("enzyme", "xla")  # what `auto` picks, in order of preference: the first available
_FORWARD: BackendName = "xla"  # what `auto` is for a forward run: it needs only jax
_ROOMS = {"xla": "._xla", "enzyme": "._enzyme", "iree": "._iree"}


def _backend(name: str) -> Backend:
    backend: Backend = importlib.import_module(_ROOMS[name], __name__).BACKEND
    return backend


def _checked(name: str) -> BackendName:
    if not _is_name(name):
        raise InputError(f"backend must be one of {NAMES}, got {name!r}", argument="backend")
    return name


def _is_name(name: str) -> TypeGuard[BackendName]:
    return name in NAMES


def resolve(name: str, manifest: Manifest | None = None) -> Backend:
    """The backend for `name` (one of NAMES), available here; `auto` picks one that can run
    `manifest`'s function (one lowered for several platforms needs `platforms`)."""
    if _checked(name) == "auto":
        able = [b for b in map(_backend, _AUTO) if _passes_platform(b) or not _platforms(manifest)]
        return next((b for b in able if b.available()), able[-1])
    backend = _backend(name)
    if not backend.available():
        raise BackendUnavailableError(backend.unavailable)
    return backend


def _platforms(manifest: Manifest | None) -> bool:
    return manifest is not None and bool(manifest.platforms)


def _passes_platform(backend: Backend) -> bool:
    """Whether `backend` runs a function lowered for several platforms (SPEC.md 2.14)."""
    return backend.jax is not None and backend.jax.platforms


def refuse_platforms(backend: Backend, manifest: Manifest) -> None:
    """A BackendUnsupportedError when `backend` cannot run `manifest`'s function, lowered for
    several platforms (SPEC.md 2.14)."""
    if _platforms(manifest) and not _passes_platform(backend):
        able = [n for n in NAMES if n != "auto" and _passes_platform(_backend(n))]
        raise BackendUnsupportedError(
            f"{manifest.function} is lowered for several platforms {manifest.platforms}: @main "
            f"takes the platform's index, which the {backend.name} backend does not pass; use "
            f"backend={able[0]!r}"
        )


def kind(name: str) -> Backend:
    """The backend for `name`, whether or not it can run here (what it can do, for checking
    options before anything is loaded); `auto` is what a forward run uses."""
    return _backend(for_forward_calls(name))


def for_forward_calls(name: str) -> BackendName:
    """The backend a forward run (`hlobundle run`) uses for `name`: `auto` is xla, which needs
    only jax; enzyme-ad's import (about 0.15 s and 270 MB) buys derivatives, which a forward
    run never takes."""
    chosen = _checked(name)
    return _FORWARD if chosen == "auto" else chosen


def for_script(name: str, manifest: Manifest) -> Backend:
    """The backend an emitted script for `manifest`'s function uses for `name`: a script
    outside JAX needs no backend installed here; `auto` is what `run` would choose; symbolic
    shapes (SPEC.md 2.8) only on a backend whose script can call them; none for a function
    lowered for several platforms (2.14), which the scripts do not select among."""
    if manifest.platforms:
        raise InputError(
            f"function {manifest.function!r} is lowered for several platforms "
            f"{manifest.platforms} (SPEC.md 2.14), which an emitted script does not select "
            "among: run it with hlobundle.load(B).function('xla')",
            argument="bundle",
        )
    if not manifest.symbolic:
        chosen = kind(name)
        return chosen if chosen.jax is None else resolve(name)
    able = [n for n in NAMES if n == "auto" or _scripts_symbolic(_backend(n))]
    if name not in able:
        raise InputError(
            f"function {manifest.function!r} has symbolic shapes (SPEC.md 2.8), which an "
            f"emitted {name} script cannot call: emit it with --backend "
            f"{' or '.join(n for n in able if n != 'auto')}",
            argument="backend",
        )
    return kind(name)


def _scripts_symbolic(backend: Backend) -> bool:
    """Whether `backend`'s emitted script can call symbolic shapes (SPEC.md 2.8)."""
    return backend.jax is not None and backend.jax.symbolic_scripts


def script(name: str, bundle: Bundle, trust: Trust) -> Script:
    """What `emit` writes for backend `name` (`for_script`); `auto`, where both JAX backends'
    scripts can call the function, is one script of both that picks when it runs (enzyme where
    enzyme_ad imports, else xla), so that it runs with jax alone wherever it was emitted."""
    if script_name(name, bundle.manifest) == "auto":
        return either(*(_backend(n).script(bundle, trust) for n in _AUTO))
    return for_script(name, bundle.manifest).script(bundle, trust)


def script_name(name: str, manifest: Manifest) -> str:
    """The backend an emitted script of `manifest`'s function names: `auto` (it picks when it
    runs) where `name` is auto and the function has static shapes, else `for_script`'s."""
    chosen = for_script(name, manifest)
    return "auto" if _checked(name) == "auto" and not manifest.symbolic else chosen.name


def exported(bundle: Bundle) -> Any:
    """`Bundle.to_exported()`: the bundle as a `jax.export.Exported` (the xla backend's
    function is one)."""
    from ._xla import to_exported

    return to_exported(bundle)


def text_primal(manifest: Manifest, text: str) -> Callable[..., Sequence[Any]]:
    """A JAX-differentiable function of the flat arguments running the module `text` (the
    primal whose backward module `with_vjp=True` lowers), through the backend that
    differentiates a module's text, enzyme."""
    from . import _enzyme

    if not _enzyme.BACKEND.available():
        raise BackendUnavailableError(
            "--with-vjp (with_vjp=True) lowers the backward module of a module text through "
            "enzyme-ad, which is not installed (wheels exist for Python 3.11 only). For a JAX "
            "function, hlobundle.export(..., with_vjp=True) needs only jax"
        )
    return _enzyme.text_primal(manifest, text)


def _compilers() -> list[tuple[Backend, Executables]]:
    """The backends that compile and run stored executables (`hlobundle compile`)."""
    return [(b, b.executables) for b in map(_backend, _ROOMS) if b.executables is not None]


def targets() -> list[str]:
    """Every target `hlobundle compile` compiles for, on this machine or another."""
    return [t for _, e in _compilers() for t in e.targets]


def targets_here() -> list[str]:
    """The targets `hlobundle compile` compiles for on this machine: IREE's where its compiler
    is installed, XLA's for the platform JAX runs on here."""
    return [t for _, e in _compilers() for t in e.here()]


def compiler(target: str) -> tuple[Backend, Executables]:
    """The backend that compiles executables for `target` (`hlobundle compile`), and its
    `executables`, or an `InputError` naming the targets there are."""
    chosen = next((c for c in _compilers() if target in c[1].targets), None)
    if chosen is None:
        raise InputError(f"--target must be one of {targets()}, got {target!r}", argument="target")
    return chosen

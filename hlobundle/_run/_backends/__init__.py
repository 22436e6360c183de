"""The backends: one room each, behind one small interface.

A backend module has:

- `NAME`: what `function(backend=...)` and `run --backend` call it;
- `JAX`: whether its functions are JAX functions (jit, grad and vmap them; 64-bit values need
  `jax_enable_x64`), or run outside JAX with NumPy arrays in and out (iree);
- `STORED_EXECUTABLES`: whether it runs a bundle's stored executables (SPEC.md 2.7);
- `available()`: whether it can run here (its imports work);
- `make(bundle, *, donate, devices, trust_executables)`: the bundle's function on it, an object
  with `backend` (its NAME), `jax_function` (as `JAX`), `call_flat(*flat)` (one array per
  argument in, one per result out) and `__call__` (positional, named or pytree arguments).
  The JAX backends make a `BundleFunction` from their `implementation(bundle)`, with
  `install_rules()` and `check_derivatives(bundle, args)`.

`resolve(name)` picks one: `xla` (a `jax.export.Exported` of the stored portable artifact; needs
only jax), `enzyme` (enzyme-ad's `hlo_call` on the module text), `iree` (IREE's CPU runtime), or
`auto` (enzyme when it imports, else xla; xla for a forward run, `for_forward_calls`). Nothing outside this folder asks which one it holds:
it asks the module or the function what it can do.
"""

from __future__ import annotations

from types import ModuleType

from ..._format._errors import BackendUnavailableError, InputError

JAX_NAMES = ("auto", "enzyme", "xla")
NAMES = (*JAX_NAMES, "iree")


def _module(name: str) -> ModuleType:
    if name == "xla":
        from . import _xla

        return _xla
    if name == "iree":
        from . import _iree

        return _iree
    from . import _enzyme

    return _enzyme


def resolve(name: str) -> ModuleType:
    """The backend module for `name` (one of NAMES), available here."""
    if name not in NAMES:
        raise InputError(f"backend must be one of {NAMES}, got {name!r}", argument="backend")
    if name == "auto":
        return _module("enzyme") if _module("enzyme").available() else _module("xla")
    backend = _module(name)
    if not backend.available():
        raise BackendUnavailableError(backend.UNAVAILABLE)
    return backend


def for_forward_calls(name: str) -> str:
    """The backend a forward run (`hlobundle run`) uses for `name`: `auto` is xla, which needs
    only jax; enzyme-ad's import (about 0.15 s and 270 MB) buys derivatives, which a forward
    run never takes."""
    return "xla" if name == "auto" else name


def kind(name: str) -> ModuleType:
    """The backend module for `name`, whether or not it can run here (what it can do, for
    checking options before anything is loaded)."""
    if name not in NAMES:
        raise InputError(f"backend must be one of {NAMES}, got {name!r}", argument="backend")
    return _module("xla" if name == "auto" else name)

"""The backends: one room each, behind one small interface.

A backend module has:

- `NAME`: what `function(backend=...)` and `run --backend` call it;
- `available()`: whether it can run here (its imports work);
- `install_rules()`: the JAX transformation rules its calls need, once per process;
- `implementation(bundle)`: a function of the flat arguments returning the flat results, to be
  jitted by `BundleFunction`;
- `check_derivatives(bundle, args)`: refuse, before tracing, derivatives it cannot compute.

`resolve(name)` picks one: `xla` (a `jax.export.Exported` of the stored portable artifact; needs
only jax), `enzyme` (enzyme-ad's `hlo_call` on the module text), or `auto` (enzyme when it imports,
else xla).

`iree` (`_iree`) is the one backend outside JAX: IREE's runtime with NumPy arrays in and out, so it
has its own function class (`_iree.IreeFunction`) instead of `implementation`.
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
    from . import _enzyme

    return _enzyme


def resolve(name: str) -> ModuleType:
    """The JAX backend module for `name` (one of JAX_NAMES)."""
    if name not in JAX_NAMES:
        raise InputError(f"backend must be one of {NAMES}, got {name!r}", argument="backend")
    if name == "auto":
        return _module("enzyme") if _module("enzyme").available() else _module("xla")
    backend = _module(name)
    if not backend.available():
        raise BackendUnavailableError(backend.UNAVAILABLE)
    return backend

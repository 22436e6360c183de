"""Whether a backend's libraries are installed here, found without importing the backends'
rooms (each asks about the others' only to say what to try instead)."""

from __future__ import annotations

import importlib.util


def enzyme_ad() -> bool:
    """enzyme-ad's JAX bindings import (they exist for Python 3.11 only)."""
    try:
        import enzyme_ad.jax  # noqa: F401
    except ImportError:
        return False
    return True


def iree_runtime() -> bool:
    """IREE's runtime imports; its compiler is needed only where no stored executable is used."""
    return _found("iree.runtime")


def iree_compiler() -> bool:
    return _found("iree.compiler")


def _found(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # find_spec imports the parent package: `iree` itself is missing
        return False

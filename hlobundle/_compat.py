"""Every private symbol of jax and enzyme-ad that hlobundle uses, in one place.

They are checked with jax 0.10.2 (Python 3.11) and 0.12 (Python 3.12+, where enzyme-ad does not
install), and with enzyme-ad 0.0.16 (../shared/notes/runtime-facts.md);
when either moves, this is the file to read first. Each accessor imports lazily, so that importing
hlobundle never imports jax. This module imports nothing of the package (a leaf of the layers).
"""

from __future__ import annotations

import dataclasses
from typing import Any


def jax_core() -> Any:
    from jax._src import core

    return core


def batching() -> Any:
    from jax._src.interpreters import batching

    return batching


def partial_eval() -> Any:
    from jax._src.interpreters import partial_eval

    return partial_eval


def ad() -> Any:
    from jax._src.interpreters import ad

    return ad


def mlir_lowering() -> Any:
    """`jax._src.interpreters.mlir`: `_lowerings`, `_platform_specific_lowerings`, `lower_fun`."""
    from jax._src.interpreters import mlir

    return mlir


def call_exported_p() -> Any:
    """The primitive a `jax.export.Exported.call` binds."""
    from jax._src.export._export import call_exported_p

    return call_exported_p


def refine_polymorphic_shapes(module: Any) -> Any:
    """jax's own shape refinement: a module whose `@main` has static argument types but uses
    dynamic shapes inside (a symbolic function lowered at concrete shapes) made static."""
    from jax._src.interpreters import mlir

    return mlir.refine_polymorphic_shapes(module)


def flatten_axes(*args: Any) -> Any:
    from jax._src.api_util import flatten_axes

    return flatten_axes(*args)


def enzyme_primitives() -> Any:
    """enzyme-ad's primitives (`_enzyme_primal_p`, `_enzyme_shadow_aug_p`, ...)."""
    from enzyme_ad.jax import primitives

    return primitives


def new_exported(fields: dict[str, Any]) -> Any:
    """A `jax.export.Exported` from its dataclass fields, including private ones; fields the
    installed jax does not have are left out (jax 0.8 lacks the named-sharding fields)."""
    from jax import export

    known = {f.name for f in dataclasses.fields(export.Exported)}
    return export.Exported(**{k: v for k, v in fields.items() if k in known})

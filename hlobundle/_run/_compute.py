"""What the writer runs before a bundle exists: a module's outputs on example values
(`expected="compute"`), and a text module as a differentiable JAX function (the primal whose
backward module `with_vjp=True` lowers, through enzyme-ad). The writer imports this (layers:
_format < _read < _run < _write)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from .._format._manifest import Manifest


def outputs(manifest: Manifest, portable: bytes, values: list[Any]) -> list[np.ndarray]:
    """The results of the portable artifact on `values`."""
    from .._interop._jax_export import exported_for
    from ._function import check_x64

    check_x64(manifest)
    return [np.asarray(x) for x in exported_for(manifest, portable).call(*values)]


def where() -> tuple[str, str, str]:
    """The platform, device kind and jaxlib version `outputs` computes with (jax's default
    device)."""
    import jax
    import jaxlib

    device = jax.devices()[0]
    return device.platform, device.device_kind, jaxlib.__version__


def primal(manifest: Manifest, text: str) -> Callable[..., Sequence[Any]]:
    """A JAX-differentiable function of the flat arguments running the module `text`."""
    from ._backends import text_primal
    from ._function import check_x64

    primal = text_primal(manifest, text)  # unavailable: said before x64
    check_x64(manifest)
    return primal

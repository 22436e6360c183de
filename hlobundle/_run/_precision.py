"""`precision="highest"` (`run --precision highest`, SPEC.md 2.15): the bundle's modules with
every dot and convolution op asking for HIGHEST, as a view of the bundle that the JAX backends
prepare and run. The stored files and their parsed forms are never changed: each form is
parsed again from its bytes, rewritten with the `jaxlib.mlir` bindings, and written as text
and as a portable artifact for the stored target version."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
from typing import TYPE_CHECKING

from .._format import _mlir, _precision
from .._format._errors import InputError

if TYPE_CHECKING:
    from .._read._modules import StoredModule
    from .._read._reader import Bundle

CHOICES = ("highest",)


def check(precision: str | None) -> None:
    if precision is not None and precision not in CHOICES:
        raise InputError(
            f"precision must be None (as the module asks) or 'highest', got {precision!r}",
            argument="precision",
        )


def at_highest(bundle: Bundle) -> Bundle:
    """A view of the (selected) bundle whose modules ask for HIGHEST; `bundle` is unchanged."""
    view = copy.copy(bundle)
    view.modules = {key: _rewritten(stored) for key, stored in bundle.modules.items()}
    return view


def _rewritten(stored: StoredModule) -> StoredModule:
    module = _mlir.parse(stored.text_bytes, path=stored.text_file)  # a parse of its own
    _precision.at_highest(module)
    text = str(module).encode()
    portable = _mlir.to_portable(module, stored.target_version, path=stored.portable_file)
    return dataclasses.replace(
        stored,
        text_bytes=text,
        text_sha256=hashlib.sha256(text).hexdigest(),
        portable=portable,
        portable_sha256=hashlib.sha256(portable).hexdigest(),
        same_program=True,  # both written here from one module
        verdict_key=None,  # never recorded as the stored bytes' verdict
        _parsed=module,
    )

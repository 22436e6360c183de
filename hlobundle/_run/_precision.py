"""`precision="highest"` (`run --precision highest`, SPEC.md 2.15): the bundle's modules with
every dot and convolution op asking for HIGHEST, as a view of the bundle that the JAX backends
prepare and run. The stored files and their parsed forms are never changed: each form is
parsed again from its bytes, rewritten with the `jaxlib.mlir` bindings, and written as text
and as a portable artifact for the stored target version. A dot_general with an explicit
algorithm keeps it, and its precision (`_precision_rewrite.py`): the view warns, and `run`
reports it."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import warnings
from typing import TYPE_CHECKING

from .._format._errors import HloBundleWarning, InputError
from .._parse import _mlir
from . import _precision_rewrite

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
    rewrites = {key: _rewritten(stored) for key, stored in bundle.modules.items()}
    view.modules = {key: stored for key, (stored, _) in rewrites.items()}
    note = kept({key: n for key, (_, n) in rewrites.items()})
    if note:
        warnings.warn(note, HloBundleWarning, stacklevel=4)
    return view


def kept(counts: dict[str, int]) -> str | None:
    """What the rewrite left (`counts`: each form's dot_general ops with an explicit algorithm),
    as `run` reports it; None when it left nothing."""
    where = [f"{n} in {key}" for key, n in counts.items() if n]
    if not where:
        return None
    total = sum(counts.values())
    ops, they = ("ops", "they compute") if total > 1 else ("op", "it computes")
    return (
        f"precision 'highest' leaves {total} dot_general {ops} ({', '.join(where)}) as stored: "
        "an explicit algorithm (jax.lax.DotAlgorithmPreset) already says its op's precision, "
        f"and StableHLO allows one only with a DEFAULT precision_config; {they} at that "
        "algorithm's precision, counted as DEFAULT (SPEC.md 2.15)"
    )


def kept_in(view: Bundle) -> str | None:
    """`kept` of a view `at_highest` made, read again from its modules."""
    return kept(
        {
            key: _precision_rewrite.with_algorithm(stored.parsed)
            for key, stored in view.modules.items()
        }
    )


def _rewritten(stored: StoredModule) -> tuple[StoredModule, int]:
    module = _mlir.parse(stored.text_bytes, path=stored.text_file)  # a parse of its own
    rewrite = _precision_rewrite.at_highest(module, path=stored.text_file)
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
    ), rewrite.kept

"""A bundle's expected results (SPEC.md 2.5): given by the producer, checked like inputs, or
computed once from the example inputs by running the module.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._format import _dtypes
from .._format._errors import InputError
from .._format._manifest import ExpectedFrom, Manifest, TensorRef
from .._parse import _main_signature
from .._read import _inputs
from .._run import _compute
from ._plan import EXPECTED_FILE


def add_expected(
    manifest: Manifest,
    arrays: dict[str, dict[str, tuple[np.ndarray, Any]]],
    portable: bytes,
    expected: Any,
    *,
    already_permuted: bool,
    here: bool = False,
) -> Manifest:
    """Store expected results: given (like inputs, keyed by result name) or computed once.
    Computed here, or given with `here` (computed by this process's jax), they record where
    (`expected_from`)."""
    rows = [_dtypes.BY_NAME[r.dtype] for r in manifest.results]
    if isinstance(expected, str) or here:
        manifest = manifest.model_copy(update={"expected_from": expected_from(portable)})
    if isinstance(expected, str):
        values = _compute_expected(manifest, arrays, portable, expected)
    else:
        ordered = _inputs.assign(expected, [r.name for r in manifest.results])
        given = [item for item in ordered if item is not None]
        assert len(given) == len(ordered), "assign() leaves out only the `optional`: none here"
        values = [
            _inputs.check(
                item,
                _main_signature.TensorType(
                    # None: a symbolic dimension, which check() leaves to the values' shapes
                    tuple(None if isinstance(d, str) else d for d in r.shape),  # type: ignore[misc]
                    row,
                ),
                name=r.name,
                path=f"results[{k}]",
                column_major=r.layout == "column_major" and not already_permuted,
                what="expected result",
            )
            for k, (item, r, row) in enumerate(zip(given, manifest.results, rows, strict=True))
        ]
    stored = arrays.setdefault(EXPECTED_FILE, {})
    results = []
    for r, row, value in zip(manifest.results, rows, values, strict=True):
        stored[r.name] = (np.asarray(value), row)
        results.append(r.model_copy(update={"expected": TensorRef(file=EXPECTED_FILE, key=r.name)}))
    return manifest.model_copy(update={"results": results})


def expected_from(portable: bytes) -> ExpectedFrom | None:
    """Where `_compute` computes (SPEC.md 2.15), or None on a CPU: what a bundle that records
    nothing means, so that a CPU's bundles keep the oldest format version that expresses them."""
    platform, kind, jaxlib_version = _compute.where()
    if platform == "cpu":
        return None
    from .._parse import _mlir
    from .._run import _precision_rewrite

    precision = _precision_rewrite.lowest_asked(
        _mlir.from_portable(portable)
    )  # written by this process
    return ExpectedFrom.model_validate(
        {
            "platform": platform,
            "device_kind": kind,
            "jaxlib_version": jaxlib_version,
            "precision": precision,
        }
    )


def _compute_expected(
    manifest: Manifest,
    arrays: dict[str, dict[str, tuple[np.ndarray, Any]]],
    portable: bytes,
    how: str,
) -> list[np.ndarray]:
    if how != "compute":
        raise InputError(f"expected must be arrays or 'compute', got {how!r}", argument="expected")
    refs = [a.value for a in manifest.arguments if a.value is not None]
    if len(refs) != len(manifest.arguments):
        raise InputError(
            "computing expected outputs needs example inputs for every argument",
            argument="expected",
        )
    values = [arrays[ref.file][a.name][0] for a, ref in zip(manifest.arguments, refs, strict=True)]
    return _compute.outputs(manifest, portable, values)

"""How results are compared with expected ones (SPEC.md section 7): one rule for the runner, the
conformance suite and (as a standalone copy, tested against this one) the emitted script."""

from __future__ import annotations

import numpy as np

from . import _dtypes


def default_tolerance(dtype: str) -> float:
    """rtol = atol for a result of this dtype: `max(1e-5, 8 * eps)`, exact for ints and bools."""
    import ml_dtypes

    if dtype.startswith("complex"):
        dtype = "float32" if dtype == "complex64" else "float64"
    if "float" not in dtype:
        return 0.0
    return max(1e-5, 8 * float(ml_dtypes.finfo(_dtypes.BY_NAME[dtype].numpy).eps))


def widen(x: np.ndarray) -> np.ndarray:
    """`x` as float64 or complex128, where every dtype of the table compares exactly."""
    return np.atleast_1d(np.asarray(x)).astype(np.complex128 if x.dtype.kind == "c" else np.float64)


def agree(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> bool:
    """Whether two results agree within the tolerances; NaNs agree with NaNs."""
    return bool(np.allclose(widen(got), widen(want), rtol=rtol, atol=atol, equal_nan=True))


def max_abs_diff(got: np.ndarray, want: np.ndarray) -> float:
    a, b = widen(got), widen(want)
    return float(np.max(np.where(np.isnan(a) & np.isnan(b), 0.0, np.abs(a - b)), initial=0.0))

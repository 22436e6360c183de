"""How results are compared with expected ones (SPEC.md 2.15 and 7): one rule for the runner,
the conformance suite and the emitted script. Whether an element agrees is
`_format/_agreement`'s, whose text the scripts carry; the tolerance the scripts derive is a standalone copy of this one's,
tested against it (tests/test_precision.py).

The base tolerance is a few ulps of the result's dtype. Where the expected outputs were
computed and where this run computes are not the same computation (another platform, device
kind, jaxlib or precision: another XLA, or another device, sums a contraction in another order,
and may round its operands to fewer bits, as a TPU's DEFAULT precision does), `widening` gives
the sum of both sides' unit roundoffs `u`, float32's own at the least, and each floating
result's atol becomes `2 * u * max|expected|` (SPEC.md 2.15).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .._format import _agreement, _dtypes

F32_ROUNDOFF = 2.0**-24
# Unit roundoff of a float32 dot's or convolution's operands, by platform and the precision the
# op asks for (jax.lax.Precision's documentation): a TPU computes DEFAULT in one bfloat16 pass
# (8 significant bits) and HIGH in three (about 16); a GPU uses TensorFloat-32 (11 bits) where
# it has it. HIGHEST, and every other platform (a CPU ignores the precision), is float32.
ROUNDOFF = {
    ("tpu", "DEFAULT"): 2.0**-8,
    ("tpu", "HIGH"): 2.0**-16,
    ("cuda", "DEFAULT"): 2.0**-11,
    ("cuda", "HIGH"): 2.0**-11,
    ("rocm", "DEFAULT"): 2.0**-11,
    ("rocm", "HIGH"): 2.0**-11,
}
# A platform whose float32 arithmetic is not IEEE's has a unit roundoff of its own at every
# precision: a TPU's HIGHEST contraction is made of bfloat16 passes and its elementwise
# functions are approximations (on a TPU v5e, tanh off by 7.8e-5 and exp by 4.5e-6 relative
# to float64, where float32's own is 6e-8). Measured there at HIGHEST against a CPU's float32
# (SPEC.md 2.15): the language model's results by up to 366 u S (u = 2^-24), 1.43 times 2^-16 S,
# as DEFAULT's one bfloat16 pass measured 1.46 u S at its own u.
PLATFORM_ROUNDOFF = {"tpu": 2.0**-16}
# The first-order bound of one dot of rounded operands: each product a*b is off by at most
# (1 + u)^2 - 1, about 2u, of |a*b|; max|expected| stands for the sum of |a*b| along the contraction.
FACTOR = 2.0


@dataclass(frozen=True)
class Computed:
    """Where a side of the comparison was computed: the platform (jax's name), the device kind
    when known, the lowest precision its dot and convolution ops asked for (None: the module
    has none, or no precision matters), and the jaxlib whose XLA computed it (None: not known,
    or not jaxlib's XLA: IREE, another implementation)."""

    platform: str
    device_kind: str | None
    precision: str | None
    jaxlib_version: str | None = None

    @property
    def roundoff(self) -> float:
        """The unit roundoff of its dot and convolution operands, as its precision asks."""
        return ROUNDOFF.get((self.platform, self.precision or "HIGHEST"), F32_ROUNDOFF)

    @property
    def arithmetic(self) -> float:
        """The unit roundoff its results are computed with: its operands', or, where its module
        has dot or convolution ops (a precision), its platform's float32 where that is not
        IEEE's (a TPU's), whichever is larger. A module without them claims no floor: a
        platform's claim alone buys no widening (SPEC.md 2.15)."""
        if self.precision is None:
            return self.roundoff
        return max(self.roundoff, PLATFORM_ROUNDOFF.get(self.platform, F32_ROUNDOFF))

    def describe(self) -> str:
        kind = f" ({self.device_kind})" if self.device_kind else ""
        asked = self.precision or "float32"
        u = self.arithmetic
        bits = "full float32" if u <= F32_ROUNDOFF else f"u = {u:.3g}"
        return f"{self.platform}{kind} with {self.jaxlib()} at {asked} ({bits})"

    def jaxlib(self) -> str:
        return f"jaxlib {self.jaxlib_version}" if self.jaxlib_version else "an unknown XLA"


# What a bundle that records nothing means: computed on a CPU, where every precision is full.
CPU = Computed("cpu", None, None)


def widening(expected: Computed, run: Computed) -> float:
    """`u` of SPEC.md 2.15: 0 when both sides are the same computation (`differences` finds
    none); else the sum of their unit roundoffs (`arithmetic`), each float32's at the least:
    each side's result is within `2 u S` of the exact one, so two computations differ by
    their sum."""
    if not differences(expected, run):
        return 0.0
    return expected.arithmetic + run.arithmetic


def differences(expected: Computed, run: Computed) -> list[str]:
    """What makes two sides other computations, in words (empty: the same one). A jaxlib is the
    same only where both are known and equal; a device kind counts only off a CPU, where jax's
    says nothing ("cpu") and one not recorded is unknown; precision counts as each side's
    roundoff, since a CPU computes every precision at float32."""
    said = []
    if expected.platform != run.platform:
        said.append(f"platform {expected.platform} / {run.platform}")
    elif expected.platform != "cpu" and (
        expected.device_kind is None or expected.device_kind != run.device_kind
    ):
        said.append(f"device kind {expected.device_kind} / {run.device_kind}")
    if expected.jaxlib_version is None or expected.jaxlib_version != run.jaxlib_version:
        said.append(f"{expected.jaxlib()} / {run.jaxlib()}")
    if expected.roundoff != run.roundoff:
        said.append(
            f"dot operands' unit roundoff {expected.roundoff:.3g} / {run.roundoff:.3g} "
            f"(precision {expected.precision} / {run.precision})"
        )
    return said


def default_tolerance(dtype: str) -> float:
    """rtol = atol for a result of this dtype: `max(1e-5, 8 * eps)`, exact for ints and bools."""
    import ml_dtypes

    if dtype.startswith("complex"):
        dtype = "float32" if dtype == "complex64" else "float64"
    if "float" not in dtype:
        return 0.0
    return max(1e-5, 8 * float(ml_dtypes.finfo(_dtypes.BY_NAME[dtype].numpy).eps))


def tolerance(
    dtype: str, want: np.ndarray, u: float, rtol: float | None, atol: float | None
) -> tuple[float, float]:
    """(rtol, atol) for one result: those given, else the dtype's, atol widened by `u`."""
    base = default_tolerance(dtype)
    return (base if rtol is None else rtol), (widened(base, want, u) if atol is None else atol)


def widened(atol: float, want: np.ndarray, u: float) -> float:
    """`atol`, or `FACTOR * u * max|want|` over want's finite elements where that is larger
    (a floating result: an exact one, atol 0, is never widened)."""
    if not u or not atol:
        return atol
    finite = np.abs(widen(want))
    finite = finite[np.isfinite(finite)]
    return max(atol, FACTOR * u * float(finite.max(initial=0.0)))


def widen(x: np.ndarray) -> np.ndarray:
    """`x` as float64 or complex128, or a 64-bit integer as it is (`_agreement.widened`): where
    every dtype of the table compares exactly."""
    return np.atleast_1d(_agreement.widened(x))


@dataclass(frozen=True)
class Worst:
    """The element furthest beyond its tolerance: where, the two values, |got - want|, what was
    allowed there (`atol + rtol * |want|`), and why they do not agree, in words (an infinity or
    a NaN fails whatever was allowed)."""

    index: list[int]
    got: Any
    expected: Any
    diff: float
    allowed: float
    why: str

    def told(self) -> str:
        """Its two values and why they do not agree."""
        values = f"got {_shown(self.got)}, expected {_shown(self.expected)}"
        return f"{values}, {self.why}" if np.isfinite(self.diff) else f"{values}: {self.why}"


def _shown(x: Any) -> str:
    return f"{complex(*x):.6g}" if isinstance(x, list) else f"{x}" if type(x) is int else f"{x:.6g}"


def compare(
    got: np.ndarray, want: np.ndarray, rtol: float, atol: float
) -> tuple[bool, float, Worst | None]:
    """Whether two results agree (SPEC.md 2.15, `_agreement`), the largest |got - want| among
    the elements where both are finite, and the worst element when they do not: the one whose
    difference most exceeds its own tolerance, which need not be where the difference is
    largest, and any that is not the same infinity or NaN before every finite one."""
    a, b = np.broadcast_arrays(widen(got), widen(want))
    largest = _agreement.largest_difference(a, b)
    found = _agreement.mismatch(a, b, rtol, atol)
    if found is None:
        return True, largest, None
    flat, g, w = found
    shape = np.shape(want) if np.size(want) == a.size else a.shape
    index = [int(i) for i in np.unravel_index(flat, shape)]
    diff = float(_agreement.difference(g, w)) if np.isfinite(g) and np.isfinite(w) else np.inf
    allowed = float(_agreement.allowance(w, rtol, atol))
    why = _agreement.unmatched(g, w) or (
        f"|diff| {diff:.3g} > allowed {allowed:.3g} = atol + rtol * |expected|"
    )
    return False, largest, Worst(index, _scalar(g), _scalar(w), diff, allowed, why)


def _scalar(x: Any) -> Any:
    if isinstance(x, complex | np.complexfloating):
        return [float(x.real), float(x.imag)]
    return int(x) if isinstance(x, np.integer) else float(x)


def agree(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> bool:
    """Whether two results agree within the tolerances (SPEC.md 2.15)."""
    return compare(got, want, rtol, atol)[0]

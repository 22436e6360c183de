"""Whether a result agrees with its expected value, element by element (SPEC.md 2.15): the one
definition that the library's check (`_run/_tolerance.compare`), `run`, the conformance runner and
the emitted scripts use. The scripts import nothing of the package: `emit` writes the functions
below the marker into each one (`_emit/_template.py`), so they use nothing but NumPy.

IEEE's special values are met before any arithmetic: `inf - inf` is NaN, and NaN is never
"greater than the allowance", so a difference compared with an allowance lets an expected
infinity agree with anything. NaN agrees with NaN and an infinity with the same infinity, and
nothing else with either, whatever the allowance; only finite values are compared by size.

Arrays come widened to float64 or complex128 (`widened`), where every dtype of the table is
exact but int64 and uint64, which float64 rounds beyond 2**53 (2**53 + 1 became 2**53 and an
exact result off by one agreed): those stay integers, and their differences are Python ints.
"""

import numpy as np

# --- shared: from here on, written into each script ----------------------------------------------


def widened(x):
    """An array as float64, or complex128 when complex, where its values are all exact; int64
    and uint64 as they are (`difference` subtracts them exactly)."""
    x = np.asarray(x)
    if x.dtype.kind in "iu" and x.dtype.itemsize == 8:
        return x
    return x.astype(np.complex128 if x.dtype.kind == "c" else np.float64)


def difference(got, want):
    """|got - want| for each element, as float64 (complex128's as its modulus): of 64-bit
    integers computed as Python ints, exact, so that no difference wraps or rounds to 0."""
    if _exact(got) or _exact(want):
        got, want = np.asarray(got), np.asarray(want)
        if got.dtype == want.dtype:  # high - low modulo 2**64 is itself: it is less than that
            low, high = np.minimum(got, want), np.maximum(got, want)
            with np.errstate(over="ignore"):
                wrapped = high.astype(np.uint64) - low.astype(np.uint64)
            return np.asarray(wrapped, dtype=np.float64)
        exact = got.astype(object) - want.astype(object)  # Python ints
        return np.asarray(np.abs(exact), dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        return np.abs(got - want)


def _exact(x):
    return np.asarray(x).dtype.kind in "biu"


def same(got, want):
    """Where two arrays hold the same value, NaN for NaN (each part of a complex value apart)."""
    if np.iscomplexobj(got) or np.iscomplexobj(want):
        return same(np.real(got), np.real(want)) & same(np.imag(got), np.imag(want))
    return (got == want) | (np.isnan(got) & np.isnan(want))


def excess(got, want, rtol, atol):
    """By how much each element's |got - want| exceeds its allowance `atol + rtol * |want|`
    (arrays widened to float64 or complex128): 0 where the two are the same, inf where either
    is not finite and they are not, whatever the allowance. An element agrees where this is
    <= 0 (never where it is NaN). `rtol` scales |want|: an expected 0 has no relative allowance,
    an infinite rtol included."""
    allowed = allowance(want, rtol, atol)
    with np.errstate(invalid="ignore", over="ignore"):
        over = np.where(np.isposinf(allowed), -np.inf, difference(got, want) - allowed)
    finite = np.isfinite(got) & np.isfinite(want)
    return np.where(same(got, want), 0.0, np.where(finite, over, np.inf))


def allowance(want, rtol, atol):
    """`atol + rtol * |want|` for each element, where an expected 0 has no relative allowance
    (not `inf * 0`, NaN, when rtol is infinite)."""
    with np.errstate(invalid="ignore", over="ignore"):
        magnitude = np.abs(want.astype(np.float64) if _exact(want) else want)
        return atol + np.where(magnitude == 0, 0.0, rtol * magnitude)


def mismatch(got, want, rtol, atol):
    """None where every element agrees; else the worst element, the one furthest beyond its own
    allowance (one that is not the same non-finite value first): (flat index, got, want)."""
    beyond = np.atleast_1d(excess(got, want, rtol, atol))
    failing = ~(beyond <= 0)
    if not failing.any():
        return None
    flat = int(np.argmax(np.where(failing, np.nan_to_num(beyond, nan=np.inf), -np.inf)))
    return flat, np.ravel(got)[flat], np.ravel(want)[flat]


def unmatched(got, want):
    """Why one element that is not the same as the expected one fails whatever the allowance,
    or None when both are finite (and only their difference's size decides)."""
    if np.isinf(want) or (np.isinf(got) and not np.isnan(want)):
        return "an infinity agrees only with the same infinity (SPEC.md 2.15)"
    if np.isnan(want) or np.isnan(got):
        return "NaN agrees only with NaN (SPEC.md 2.15)"
    return None


def largest_difference(got, want):
    """The largest |got - want| among the elements where both are finite (0 where none is):
    an infinity or NaN elsewhere would hide every other element's difference."""
    finite = np.isfinite(got) & np.isfinite(want)
    return float(np.max(np.where(finite, difference(got, want), 0.0), initial=0.0))

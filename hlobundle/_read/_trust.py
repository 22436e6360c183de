"""`Trust`: what a caller trusts in a bundle that no key of theirs verified.

A bundle whose signature verified with the caller's key (`load(..., public_key=...)`) is trusted
whole (`Bundle.trusted`). Otherwise its hashes prove only that its files are the ones its own
manifest lists, which an attacker writes too: what runs as native code, or what a producer
claims without a proof, runs only when the caller says so, one kind at a time.
"""

from __future__ import annotations

import enum
import warnings


class Trust(enum.Flag):
    """What to trust in a bundle that no key of yours verified (combine them with `|`).

    - `Trust.NOTHING` (the default): only what hlobundle checks itself runs.
    - `Trust.EXECUTABLES`: its stored executables (native code, SPEC.md "Executables") run on
      the iree backend, and an emitted iree script runs them; XLA's run the xla backend's eager
      calls.
    - `Trust.BATCHED`: `serve` runs its batched module (SPEC.md 2.6) over requests combined in
      one batch, trusting the producer's claim that rows are independent.
    """

    NOTHING = 0
    EXECUTABLES = enum.auto()
    BATCHED = enum.auto()


def trust_from(trust: Trust, trust_executables: bool | None, where: str) -> Trust:
    """`trust`, with the boolean keyword it replaced (`trust_executables=True`, before 2.1)
    folded in, warning that the keyword goes in 3.0."""
    if not isinstance(trust, Trust):
        from .._format._errors import InputError

        raise InputError(
            f"{where}: trust must be a hlobundle.Trust (Trust.EXECUTABLES, ...), got "
            f"{type(trust).__name__}",
            argument="trust",
        )
    if trust_executables is None:
        return trust
    warnings.warn(
        f"{where}(trust_executables=...) is now {where}(trust=hlobundle.Trust.EXECUTABLES); the "
        "keyword goes in hlobundle 3.0",
        DeprecationWarning,
        stacklevel=3,
    )
    return trust | Trust.EXECUTABLES if trust_executables else trust

"""hlobundle in Ray Data (docs/deploy.md, "Ray Data"): `BundlePredictor` is a callable class for
`Dataset.map_batches`, for offline batch inference over a dataset. A row holds one call's
arguments, in columns named after the function's inputs; the results come back as columns named
after its results, and every other column passes through unchanged (a row's id, say):

    ds.map_batches(BundlePredictor, fn_constructor_kwargs={"bundle": "oci://..."},
                   concurrency=2, batch_format="numpy")

Each row is one call, unless the bundle's function can combine calls (a batched module, or a
symbolic batch along which rows concatenate) and a key verified the bundle or
`trust_batched=True`: then a batch of rows is one call."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from .._format._errors import HloBundleError, InputError
from ._models import checked_inputs, open_function

__all__ = ["BundlePredictor"]


class BundlePredictor:
    """One function of a bundle, called on batches of rows (a dict of column arrays)."""

    def __init__(
        self,
        bundle: str | os.PathLike[str],
        function: str | None = None,
        *,
        trust_batched: bool = False,
        public_key: str | os.PathLike[str] | None = None,
        certificate_chain: Sequence[str | os.PathLike[str]] | None = None,
    ) -> None:
        self.served = open_function(
            bundle,
            function,
            trust_batched=trust_batched,
            public_key=public_key,
            certificate_chain=certificate_chain,
        )

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        inputs = list(self.served.inputs)
        missing = [n for n in inputs if n not in batch]
        if missing:
            raise InputError(
                f"the batch has no column(s) {missing}; it has {sorted(batch)[:20]}",
                argument=missing[0],
            )
        rows = len(batch[inputs[0]]) if inputs else len(next(iter(batch.values()), []))
        calls = [checked_inputs(self.served, {n: batch[n][i] for n in inputs}) for i in range(rows)]
        if self.served.batchable and rows > 1:
            answers = list(self.served.call_many(calls))
        else:
            answers = [self.served(given) for given in calls]
        for answer in answers:
            if isinstance(answer, HloBundleError):
                raise answer
        out = {k: v for k, v in batch.items() if k not in self.served.inputs}
        results: list[dict[str, np.ndarray]] = [a for a in answers if isinstance(a, dict)]
        for r in self.served.bundle.results:
            out[r.name] = (
                np.stack([np.asarray(a[r.name]) for a in results])
                if results
                else (np.zeros((0, *[d if isinstance(d, int) else 0 for d in r.shape])))
            )
        return out

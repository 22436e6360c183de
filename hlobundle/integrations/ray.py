"""hlobundle in Ray (docs/deploy.md, "Ray Data", "Ray Serve"): `serve_deployment` is a Ray Serve
application of one function, and `BundlePredictor` a callable class for
`Dataset.map_batches`, for offline batch inference over a dataset. A row holds one call's
arguments, in columns named after the function's inputs; the results come back as columns named
after its results, and every other column passes through unchanged (a row's id, say):

    ds.map_batches(BundlePredictor, fn_constructor_kwargs={"bundle": "oci://..."},
                   concurrency=2, batch_format="numpy")

Each row is one call, unless the bundle's function can combine calls (a batched module, or a
symbolic batch along which rows concatenate) and a key verified the bundle or
`trust_batched=True`: then a batch of rows is one call."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._format._errors import HloBundleError, InputError
from .._serve._protocol import RequestError
from ._models import checked_inputs, open_function

__all__ = ["BundlePredictor", "serve_deployment"]


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


def serve_deployment(
    bundle: str | os.PathLike[str],
    function: str | None = None,
    *,
    num_replicas: int = 1,
    max_batch_size: int = 1,
    batch_wait_timeout_s: float = 0.005,
    trust_batched: bool = False,
    public_key: str | os.PathLike[str] | None = None,
) -> Any:
    """A Ray Serve application of one function of `bundle`, `num_replicas` replicas each with
    the bundle loaded: a POST of an Open Inference Protocol request body (JSON, or the binary
    tensor extension) to its route gets the protocol's response. With `max_batch_size` above 1,
    `serve.batch` combines concurrent requests in one call, which needs the function to combine
    calls and trust (a key, or `trust_batched`), as `hlobundle serve --max-batch-size` does:
    otherwise every request runs alone. `serve.run(serve_deployment(...), route_prefix="/m")`."""
    from ray import serve
    from starlette.responses import JSONResponse, Response

    from .._serve._protocol import HEADER_LENGTH, parse_request, read_inputs
    from .._serve._responses import response, wanted

    @serve.deployment(num_replicas=num_replicas)
    class BundleDeployment:
        def __init__(self) -> None:
            self.served = open_function(
                bundle, function, trust_batched=trust_batched, public_key=public_key
            )
            self.combine = max_batch_size > 1 and self.served.batchable

        async def __call__(self, request: Any) -> Any:
            served = self.served
            try:
                body = await request.body()
                parsed, binary = parse_request(body, request.headers.get(HEADER_LENGTH))
                given = read_inputs(parsed, binary, served.inputs)
                served.check_shapes(given)
                want = wanted(parsed, [r.name for r in served.bundle.results])
                if self.combine:
                    outputs = await self.batched(given)
                else:
                    outputs = await asyncio.to_thread(served, given)
                if isinstance(outputs, HloBundleError):
                    raise outputs
            except RequestError as e:
                return JSONResponse({"error": f"[{e.code}] {e.message}"}, status_code=e.status)
            except HloBundleError as e:
                return JSONResponse({"error": f"[{e.code}] {e.message}"}, status_code=400)
            dtypes = {r.name: r.dtype for r in served.bundle.results}
            text, headers = response(
                served.name, served.version, parsed.get("id"), outputs, want, dtypes
            )
            return Response(text, headers=headers)

        @serve.batch(
            max_batch_size=max(max_batch_size, 1), batch_wait_timeout_s=batch_wait_timeout_s
        )
        async def batched(self, many: list[dict[str, np.ndarray]]) -> list[Any]:
            return list(await asyncio.to_thread(self.served.call_many, many))

    return BundleDeployment.bind()  # type: ignore[attr-defined]

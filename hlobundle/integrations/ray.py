"""hlobundle in Ray (docs/deploy.md, "Ray Data", "Ray Serve"): `serve_deployment` is a Ray Serve
application of one function, and `BundlePredictor` a callable class for
`Dataset.map_batches`, for offline batch inference over a dataset. A row holds one call's
arguments, in columns named after the function's inputs; the results come back as columns named
after its results, and every other column passes through unchanged (a row's id, say):

    ds.map_batches(BundlePredictor, fn_constructor_kwargs={"bundle": "oci://..."},
                   concurrency=2, batch_format="numpy")

Each row is one call, unless the bundle's function can combine calls (a batched module, or rows
declared independent, SPEC.md 2.13) and a key verified the bundle or `trust_batched=True`:
then a batch of rows is one call."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import numpy as np

from .._format._errors import HloBundleError, InputError
from .._serve._protocol import RequestError
from .._serve._served import DEFAULT_MAX_RESPONSE_BYTES, Served
from ._engines import missing
from ._models import checked_inputs, open_function

__all__ = ["BundlePredictor", "serve_deployment"]


class BundlePredictor:
    """One function of a bundle, called on batches of rows (a dict of column arrays); a row
    whose answer would exceed `max_response_bytes` (a symbolic function's), or whose symbol
    goes beyond the values it holds, is refused before the function runs (docs/serving.md)."""

    def __init__(
        self,
        bundle: str | os.PathLike[str],
        function: str | None = None,
        *,
        trust_batched: bool = False,
        public_key: str | os.PathLike[str] | None = None,
        certificate_chain: Sequence[str | os.PathLike[str]] | None = None,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        self.served = open_function(
            bundle,
            function,
            trust_batched=trust_batched,
            public_key=public_key,
            certificate_chain=certificate_chain,
            max_response_bytes=max_response_bytes,
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
    max_body_bytes: int = 64 << 20,
    read_timeout_s: float = 30.0,
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
) -> Any:
    """A Ray Serve application of one function of `bundle`, `num_replicas` replicas each with
    the bundle loaded: a POST of an Open Inference Protocol request body (JSON, or the binary
    tensor extension) to its route gets the protocol's response, and the same refusals as
    `hlobundle serve`: a body over `max_body_bytes` or the model's own bound (64 KiB + 64 bytes
    per input value) is refused before it is read whole (413 `LIMIT_EXCEEDED`), one that has not
    arrived within `read_timeout_s` gets 408, and one whose answer would exceed
    `max_response_bytes` (a symbolic function's), or whose symbol goes beyond the values it
    sends, 413 before the function runs. With `max_batch_size` above 1, `serve.batch`
    combines concurrent requests, each checked alone first, in one call where `serve
    --max-batch-size` would (a batched module or declared independent rows, and trust: a key,
    or `trust_batched`): otherwise every request runs alone.
    `serve.run(serve_deployment(...), route_prefix="/m")`."""
    try:
        from ray import serve
    except ImportError as e:  # the ray extra is not installed
        missing("ray", __name__, e)

    @serve.deployment(num_replicas=num_replicas)
    class BundleDeployment:
        def __init__(self) -> None:
            served = open_function(
                bundle,
                function,
                trust_batched=trust_batched,
                public_key=public_key,
                max_response_bytes=max_response_bytes,
            )
            combine = self.batched if max_batch_size > 1 and served.batchable else None
            self.endpoint = Endpoint(served, max_body_bytes, read_timeout_s, combine)

        async def __call__(self, request: Any) -> Any:
            return await self.endpoint(request)

        @serve.batch(
            max_batch_size=max(max_batch_size, 1), batch_wait_timeout_s=batch_wait_timeout_s
        )
        async def batched(self, many: list[dict[str, np.ndarray]]) -> list[Any]:
            return list(await asyncio.to_thread(self.endpoint.served.call_many, many))

    return BundleDeployment.bind()  # type: ignore[attr-defined]


class Endpoint:
    """One replica's answer to a request (a Starlette `Request`), as `hlobundle serve` answers:
    the body read within its bound and deadline, decoded and checked alone, called (through
    `batched` where requests combine), and the protocol's response or a coded refusal."""

    def __init__(
        self,
        served: Served,
        max_body: int,
        read_timeout_s: float,
        batched: Callable[[dict[str, np.ndarray]], Awaitable[Any]] | None = None,
    ) -> None:
        self.served, self.batched = served, batched
        self.limit = min(max_body, served.max_request_bytes)
        self.read_timeout_s = read_timeout_s

    async def __call__(self, request: Any) -> Any:
        from starlette.responses import JSONResponse, Response

        from .._serve._app import decoded_body, encoded
        from .._serve._body import read_body
        from .._serve._protocol import HEADER_LENGTH

        served, headers = self.served, request.headers
        try:
            declared = headers.get("content-length")
            body = await read_body(request.receive, declared, self.limit, self.read_timeout_s)
            given = await asyncio.to_thread(decoded_body, served, body, headers.get(HEADER_LENGTH))
            if self.batched is not None:
                outputs = await self.batched(given.given)
            else:
                outputs = await asyncio.to_thread(served, given.given)
            if isinstance(outputs, HloBundleError):
                raise outputs
            text, extra = await asyncio.to_thread(encoded, served, given, outputs)
        except RequestError as e:
            return JSONResponse({"error": e.message, "code": e.code}, status_code=e.status)
        except HloBundleError as e:  # the function refused the inputs: the client's to fix
            error = {"error": e.message, "code": e.code, **e.context()}
            return JSONResponse(error, status_code=400)
        return Response(text, headers=extra)

"""hlobundle as an MLServer custom runtime (docs/deploy.md, "MLServer"): a model whose
`model-settings.json` says `"implementation": "hlobundle.integrations.mlserver.HloBundleRuntime"`
and `"parameters": {"uri": BUNDLE}` serves one function of that bundle (a path, relative to the
folder of `model-settings.json` as for MLServer's own runtimes, `oci://` or `https://`) over MLServer's REST and gRPC, with MLServer's adaptive batching where the function
allows it. `parameters.extra` may give `function`, `public_key`, `trust_batched` and
`max_response_bytes` (a symbolic function's answer, at most: 64 MiB by default, as `serve`).

MLServer's adaptive batching merges requests by the shapes they declare, before `predict` sees
them, and splits the answer back by those shapes: a client whose shape lies about its data
would get another client's rows. So under adaptive batching each request is checked alone
first (its shapes against its data and the function, its dtypes, its shapes' proof), in front
of MLServer's batcher, and joins the others only once it passed, its data as its checked array.
That needs the runtime in MLServer's own process (`"parallel_workers": 0` in `settings.json`):
a worker of MLServer's pool sees only the merged request, so there a batching model does not
load, and says so.

MLServer's default worker process starts with the uvloop the `mlserver` extra installs (before
0.22; with 0.22 and 0.23 it fails: "There is no current event loop")."""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from .._format._errors import HloBundleError
from .._serve._app import DEFAULT_MAX_BODY, DEFAULT_READ_TIMEOUT_S
from .._serve._protocol import BY_DTYPE, RequestError
from .._serve._spec import DEFAULT_MAX_RESPONSE_BYTES, request_bound
from ._engines import missing
from ._models import BoundedBody, WireTensor, decoded_inputs, open_function

try:
    from mlserver import MLModel
    from mlserver.errors import InvalidModelURI, MLServerError
    from mlserver.types import InferenceRequest, InferenceResponse, RequestInput, ResponseOutput
    from mlserver.utils import get_model_uri
except ImportError as e:  # the mlserver extra is not installed
    missing("mlserver", __name__, e)

__all__ = ["HloBundleRuntime", "main"]

# The attribute MLServer's `load_batching` sets on a model it batches (mlserver.batching.hooks),
# before the model's `load`: its batcher then holds the model's `predict`.
_BATCHER = "__adaptive_batching__"

_Predict = Callable[[InferenceRequest], Awaitable[InferenceResponse]]


class HloBundleRuntime(MLModel):
    """One function of a bundle, served by MLServer."""

    async def load(self) -> bool:
        params = self.settings.parameters
        extra: dict[str, Any] = dict(getattr(params, "extra", None) or {})
        try:  # as MLServer's runtimes: a relative path from model-settings.json's folder
            uri = await get_model_uri(self.settings)
        except InvalidModelURI as e:
            raise MLServerError(f"model {self.name!r}: parameters.uri: {e}") from None
        batching = self._batching()
        try:
            self._served = await asyncio.to_thread(
                open_function,
                uri,
                extra.get("function"),
                batching=batching,
                trust_batched=bool(extra.get("trust_batched", False)),
                public_key=extra.get("public_key"),
                max_response_bytes=extra.get("max_response_bytes", DEFAULT_MAX_RESPONSE_BYTES),
            )
        except HloBundleError as e:
            raise MLServerError(f"model {self.name!r}: [{e.code}] {e.message}") from None
        unsendable = [
            f"{r.name} ({r.dtype})"
            for r in self._served.bundle.manifest.results
            if BY_DTYPE.get(r.dtype) in (None, "BF16")
        ]
        if unsendable:  # MLServer answers in JSON only: every request would fail
            raise MLServerError(
                f"model {self.name!r}: [INPUT_INVALID] MLServer answers in JSON, which has no "
                f"datatype for results {unsendable}: serve it with hlobundle serve (binary "
                "tensors), or export the function with float32 results"
            )
        # Merged requests were each bounded alone (`_checked_alone`): their sum is not refused.
        self._as_json = not batching
        if batching:  # in front of MLServer's batcher, which holds the unwrapped `predict`
            self.predict = self._each_alone(self.predict)  # type: ignore[method-assign,assignment]
        return True

    def _batching(self) -> bool:
        """Whether MLServer batches this model (as `load_batching` decides), which it can do
        soundly only where this runtime sees each request before MLServer merges them."""
        settings = self.settings
        if (settings.max_batch_size or 0) <= 1 or (settings.max_batch_time or 0) <= 0:
            return False
        if not hasattr(self, _BATCHER):
            raise MLServerError(
                f"model {self.name!r}: [INPUT_INVALID] MLServer's adaptive batching merges "
                "requests by their declared shapes before a worker process sees them, so no "
                'request could be checked alone: set "parallel_workers": 0 in settings.json '
                "(the runtime then checks each request before it is merged), or max_batch_size "
                "to 1"
            )
        return True

    def _each_alone(self, batched: _Predict) -> _Predict:
        """`batched` (MLServer's batcher), given only requests checked alone, their data the
        checked arrays (so that requests of nested and flat data merge alike)."""

        async def predict(payload: InferenceRequest) -> InferenceResponse:
            with _coded():
                payload = await asyncio.to_thread(self._checked_alone, payload)
            return await batched(payload)

        return predict

    def _checked_alone(self, payload: InferenceRequest) -> InferenceRequest:
        given = decoded_inputs(self._served, map(_wire, payload.inputs))
        self._served.prove_alone(given)
        inputs = [
            RequestInput(
                name=name,
                shape=list(array.shape),
                datatype=BY_DTYPE[array.dtype.name],
                data=array.ravel().tolist(),
            )
            for name, array in given.items()
        ]
        return payload.model_copy(update={"inputs": inputs})

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        with _coded():
            given = [_wire(i) for i in payload.inputs]
            results = await asyncio.to_thread(self._call, given)
        return InferenceResponse(
            model_name=self.name,
            model_version=self.version,
            outputs=[_output(name, array) for name, array in results.items()],
        )

    def _call(self, given: list[WireTensor]) -> dict[str, np.ndarray]:
        return self._served(decoded_inputs(self._served, given, as_json=self._as_json))


def _wire(given: RequestInput) -> WireTensor:
    """An input as MLServer received it (gRPC's raw_input_contents it has already unpacked
    into values), for `serve`'s decoder, never its codecs."""
    datatype = getattr(given.datatype, "value", given.datatype)  # MLServer's enum
    return WireTensor(given.name, datatype, given.shape, getattr(given.data, "root", given.data))


@contextmanager
def _coded() -> Iterator[None]:
    """A refusal as MLServer's coded error (its status, `[CODE] message`)."""
    try:
        yield
    except RequestError as e:
        raise MLServerError(f"[{e.code}] {e.message}", status_code=e.status) from None
    except HloBundleError as e:
        raise MLServerError(f"[{e.code}] {e.message}", status_code=400) from None
    except (ValueError, TypeError) as e:  # MLServer's decoding of a malformed input
        raise MLServerError(f"[INPUT_INVALID] {e}", status_code=400) from None


def _output(name: str, array: np.ndarray) -> ResponseOutput:
    """A result as the protocol gives it: its own shape (NumpyCodec would make a vector a
    column), its datatype, its values."""
    datatype = BY_DTYPE.get(array.dtype.name)
    if datatype is None or datatype == "BF16":
        raise RequestError(500, f"result {name!r} of dtype {array.dtype} cannot be sent as JSON")
    return ResponseOutput(
        name=name, datatype=datatype, shape=list(array.shape), data=array.ravel().tolist()
    )


# POST /v2/models/{name}[/versions/{version}]/...: the model a request is for.
_MODEL_PATH = re.compile(r"/v2/models/(?P<model>[^/]+)/")


def main(argv: Sequence[str] | None = None) -> None:
    """`python -m hlobundle.integrations.mlserver DIR`: `mlserver start DIR`, with `hlobundle
    serve`'s limits on each bundle model's REST requests: a body over the model's bound (64
    KiB + 64 bytes per input value, at most `--max-body-bytes`) or slower than
    `--read-timeout-s` is refused (413 or 408 `LIMIT_EXCEEDED`) before MLServer parses it."""
    parser = argparse.ArgumentParser(prog="python -m hlobundle.integrations.mlserver")
    parser.add_argument("folder", help="the model repository (settings.json, model folders)")
    parser.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY)
    parser.add_argument("--read-timeout-s", type=float, default=DEFAULT_READ_TIMEOUT_S)
    args = parser.parse_args(argv)
    asyncio.run(_start(args.folder, args.max_body_bytes, args.read_timeout_s))


async def _start(folder: str, max_body: int, read_timeout_s: float) -> None:
    from mlserver.cli.serve import load_settings
    from mlserver.server import MLServer

    settings, models = await load_settings(folder)
    bounds = {m.name: min(max_body, await _bound(m)) for m in models}

    def limit(path: str) -> int:
        found = _MODEL_PATH.match(path)
        return bounds.get(found["model"], max_body) if found else max_body

    server = MLServer(settings)
    # MLServer builds its REST app here, and its middleware when the first request comes.
    server._rest_server._app.add_middleware(BoundedBody, limit=limit, read_timeout_s=read_timeout_s)
    await server.start(models)


async def _bound(settings: Any) -> int:
    """The request bound of a model this runtime serves (`Served.max_request_bytes`), from its
    bundle's manifest; none (`sys.maxsize`) for another runtime's, or where the bundle cannot
    be read here (its own load then says why)."""
    import hlobundle

    try:
        if not issubclass(settings.implementation, HloBundleRuntime):
            return sys.maxsize
        extra = dict(getattr(settings.parameters, "extra", None) or {})
        bundle = hlobundle.load(await get_model_uri(settings)).select(extra.get("function"))
    except (HloBundleError, MLServerError, TypeError):
        return sys.maxsize
    m = bundle.manifest
    return request_bound(a.shape for a in m.arguments if a.role == "input")


if __name__ == "__main__":  # the module's own classes, which model-settings.json names, not
    from hlobundle.integrations.mlserver import main as imported  # copies made in __main__

    imported()

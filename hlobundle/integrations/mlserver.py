"""hlobundle as an MLServer custom runtime (docs/deploy.md, "MLServer"): a model whose
`model-settings.json` says `"implementation": "hlobundle.integrations.mlserver.HloBundleRuntime"`
and `"parameters": {"uri": BUNDLE}` serves one function of that bundle (a path, `oci://` or
`https://`) over MLServer's REST and gRPC, with MLServer's adaptive batching where the function
allows it. `parameters.extra` may give `function`, `public_key` and `trust_batched`.

MLServer 1.7.1 needs `"parallel_workers": 0` in its `settings.json` here: its default of one
worker process fails to start with uvloop 0.23 ("There is no current event loop")."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.errors import MLServerError
from mlserver.types import InferenceRequest, InferenceResponse, ResponseOutput

from .._format._errors import HloBundleError
from .._serve._protocol import BY_DTYPE, RequestError
from ._models import checked_inputs, open_function

__all__ = ["HloBundleRuntime"]


class HloBundleRuntime(MLModel):
    """One function of a bundle, served by MLServer."""

    async def load(self) -> bool:
        params = self.settings.parameters
        extra: dict[str, Any] = dict(getattr(params, "extra", None) or {})
        uri = getattr(params, "uri", None)
        if not uri:
            raise MLServerError(f"model {self.name!r}: parameters.uri names no bundle")
        try:
            self._served = await asyncio.to_thread(
                open_function,
                uri,
                extra.get("function"),
                batching=(self.settings.max_batch_size or 0) > 1,
                trust_batched=bool(extra.get("trust_batched", False)),
                public_key=extra.get("public_key"),
            )
        except HloBundleError as e:
            raise MLServerError(f"model {self.name!r}: [{e.code}] {e.message}") from None
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        try:
            given = {i.name: NumpyCodec.decode_input(i) for i in payload.inputs}
            results = await asyncio.to_thread(self._call, given)
        except RequestError as e:
            raise MLServerError(f"[{e.code}] {e.message}", status_code=e.status) from None
        except HloBundleError as e:
            raise MLServerError(f"[{e.code}] {e.message}", status_code=400) from None
        except (ValueError, TypeError) as e:  # MLServer's decoding of a malformed input
            raise MLServerError(f"[INPUT_INVALID] {e}", status_code=400) from None
        return InferenceResponse(
            model_name=self.name,
            model_version=self.version,
            outputs=[_output(name, array) for name, array in results.items()],
        )

    def _call(self, given: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self._served(checked_inputs(self._served, given))


def _output(name: str, array: np.ndarray) -> ResponseOutput:
    """A result as the protocol gives it: its own shape (NumpyCodec would make a vector a
    column), its datatype, its values."""
    datatype = BY_DTYPE.get(array.dtype.name)
    if datatype is None or datatype == "BF16":
        raise RequestError(500, f"result {name!r} of dtype {array.dtype} cannot be sent as JSON")
    return ResponseOutput(
        name=name, datatype=datatype, shape=list(array.shape), data=array.ravel().tolist()
    )

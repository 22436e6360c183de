"""hlobundle as a KServe custom predictor (docs/deploy.md, "KServe"): `HloBundleModel` is a
`kserve.Model` serving one function of a bundle (a path, `oci://` or `https://`) over KServe's
v2 REST and gRPC protocol, and `python -m hlobundle.integrations.kserve --model_name NAME
--bundle REF` starts it as KServe's model server does.

KServe 0.21's servers bind every interface (REST 0.0.0.0, gRPC [::]), with no option to bind
one: in a pod that is what the cluster needs; on a shared machine, run it in a network
namespace of its own (`unshare --net`, as the tests do) or behind a firewall."""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import Sequence

import numpy as np

from .._format._errors import HloBundleError
from .._serve._app import DEFAULT_MAX_BODY, DEFAULT_READ_TIMEOUT_S
from .._serve._protocol import BY_DTYPE, RequestError
from .._serve._served import DEFAULT_MAX_RESPONSE_BYTES
from ._engines import missing
from ._models import BoundedBody, WireTensor, decoded_inputs, open_function

try:
    from kserve import Model, ModelServer
    from kserve.errors import InvalidInput
    from kserve.protocol.infer_type import InferInput, InferOutput, InferRequest, InferResponse
except ImportError as e:  # the kserve extra is not installed
    missing("kserve", __name__, e)

__all__ = ["HloBundleModel", "main"]


class HloBundleModel(Model):
    """One function of a bundle, served by KServe's model server; a request is refused before
    the function runs where its answer would exceed `max_response_bytes` (a symbolic
    function's), or a symbol goes beyond the values it sends (docs/serving.md)."""

    def __init__(
        self,
        name: str,
        bundle: str | os.PathLike[str],
        function: str | None = None,
        *,
        public_key: str | os.PathLike[str] | None = None,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        super().__init__(name)
        self._bundle, self._function, self._public_key = bundle, function, public_key
        self._max_response_bytes = max_response_bytes
        self.load()

    def load(self) -> bool:
        self._served = open_function(
            self._bundle,
            self._function,
            public_key=self._public_key,
            max_response_bytes=self._max_response_bytes,
        )
        self.ready = True
        return True

    async def predict(
        self,
        payload: InferRequest,
        headers: dict[str, str] | None = None,
        response_headers: dict[str, str] | None = None,
    ) -> InferResponse:
        binary = bool(payload.use_binary_outputs)  # gRPC raw inputs, or REST's binary_data_output
        try:
            given = [_wire(i) for i in payload.inputs]
            results = await asyncio.to_thread(self._call, given, binary)
        except (RequestError, HloBundleError) as e:
            raise InvalidInput(f"[{e.code}] {e.message}") from None
        outputs = []
        for name, array in results.items():
            datatype = BY_DTYPE[array.dtype.name]
            output = InferOutput(name=name, shape=list(array.shape), datatype=datatype)
            output.set_data_from_numpy(np.ascontiguousarray(array), binary_data=binary)
            outputs.append(output)
        return InferResponse(
            response_id=payload.id or "",
            model_name=self.name,
            infer_outputs=outputs,
            from_grpc=payload.from_grpc,
            use_binary_outputs=binary,
        )

    def _call(self, given: list[WireTensor], binary: bool) -> dict[str, np.ndarray]:
        return self._served(decoded_inputs(self._served, given, as_json=not binary))


def _wire(given: InferInput) -> WireTensor:
    """An input as KServe received it (REST's binary data it has already made JSON values;
    gRPC's raw_input_contents it keeps as bytes), for `serve`'s decoder, never its own."""
    raw = given._raw_data  # what KServe's own `as_numpy` reads first
    return WireTensor(given.name, given.datatype, given.shape, given.data, raw)


def main(argv: Sequence[str] | None = None) -> None:
    """Start KServe's model server with one bundle's function (its REST and gRPC ports from
    KServe's own flags, `--http_port` and `--grpc_port`), with `hlobundle serve`'s limits: a
    REST body over the model's bound (64 KiB + 64 bytes per input value, at most
    `--max_body_bytes`) or slower than `--read_timeout_s` is refused (413 or 408
    `LIMIT_EXCEEDED`) before KServe parses it; a gRPC message over it, by grpc."""
    import kserve.model_server

    parser = argparse.ArgumentParser(prog="python -m hlobundle.integrations.kserve")
    parser.add_argument("--model_name", required=True)
    parser.add_argument("--bundle", required=True, help="a path, oci:// or https://")
    parser.add_argument("--function", default=None)
    parser.add_argument("--public_key", default=None)
    parser.add_argument("--http_port", type=int, default=8080)
    parser.add_argument("--grpc_port", type=int, default=8081)
    parser.add_argument("--max_body_bytes", type=int, default=DEFAULT_MAX_BODY)
    parser.add_argument("--read_timeout_s", type=float, default=DEFAULT_READ_TIMEOUT_S)
    parser.add_argument("--max_response_bytes", type=int, default=DEFAULT_MAX_RESPONSE_BYTES)
    args = parser.parse_args(argv)
    model = HloBundleModel(
        args.model_name,
        args.bundle,
        args.function,
        public_key=args.public_key,
        max_response_bytes=args.max_response_bytes,
    )
    limit = min(args.max_body_bytes, model._served.max_request_bytes)
    # KServe's app and flags are module-level: its REST app takes the middleware before it
    # starts, and its gRPC server reads its flags when it starts.
    kserve.model_server.app.add_middleware(
        BoundedBody, limit=lambda path: limit, read_timeout_s=args.read_timeout_s
    )
    kserve.model_server.args.grpc_max_receive_message_length = limit
    ModelServer(http_port=args.http_port, grpc_port=args.grpc_port).start([model])


if __name__ == "__main__":
    main()

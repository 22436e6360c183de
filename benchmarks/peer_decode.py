"""One engine's decoding of an inference request, warm, in process, with that engine's own code:
`python peer_decode.py ENGINE BUNDLE JSON_BODY BINARY_BODY HEADER_LENGTH REPS` prints the median
seconds of decoding the JSON body and the binary body (the Open Inference Protocol's tensor
extension; 0 where the engine has none over REST) into the input's array, as one JSON object.

Run by peers.py with the python of each engine's environment (their pins clash):
- hlobundle: `_app.decoded_body` (orjson, then every check `serve` makes against the function);
- mlserver: what its REST route does, orjson's parse and its pydantic `InferenceRequest`, then
  `NumpyCodec.decode_input`;
- kserve: what its REST route does, its pydantic `InferenceRequest` from the body, then
  `InferRequest.from_inference_request` and `as_numpy`; binary, `InferRequest.from_bytes`."""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path


def median_s(fn: Callable[[], object], reps: int) -> float:
    fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def decoders(engine: str, bundle: str, body: bytes, binary: bytes, length: int) -> dict:
    if engine == "hlobundle":
        from hlobundle._serve import _app
        from hlobundle._serve._models import load_models

        (served, *_) = load_models([bundle], backend="xla").values()
        return {
            "json": lambda: _app.decoded_body(served, body, None),
            "binary": lambda: _app.decoded_body(served, binary, str(length)),
        }
    if engine == "mlserver":
        import orjson
        from mlserver.codecs import NumpyCodec
        from mlserver.types import InferenceRequest

        def mlserver_json() -> object:
            request = InferenceRequest.model_validate(orjson.loads(body))
            return NumpyCodec.decode_input(request.inputs[0])

        return {"json": mlserver_json}
    if engine == "kserve":
        from kserve.protocol.infer_type import InferRequest
        from kserve.protocol.rest.v2_datamodels import InferenceRequest

        def kserve_json() -> object:
            request = InferenceRequest.model_validate_json(body)
            return InferRequest.from_inference_request(request, "lenet").inputs[0].as_numpy()

        def kserve_binary() -> object:
            return InferRequest.from_bytes(binary, length, "lenet").inputs[0].as_numpy()

        return {"json": kserve_json, "binary": kserve_binary}
    raise SystemExit(f"unknown engine {engine!r}")


def main() -> None:
    engine, bundle, body_file, binary_file, length, reps = sys.argv[1:]
    fns = decoders(
        engine,
        bundle,
        Path(body_file).read_bytes(),
        Path(binary_file).read_bytes(),
        int(length),
    )
    print(json.dumps({k: median_s(fn, int(reps)) for k, fn in fns.items()}))


if __name__ == "__main__":
    main()

"""Ray's scaling of a bundle (issue 36), run with the python of Ray's environment (`.venv-ray`,
whose pins clash with ours): `python ray_scaling.py BUNDLE OUT.json [--quick]`.

BUNDLE is the LeNet with a symbolic batch (peers.py writes it). On a local Ray of this
machine's CPUs, loopback only:
- Ray Data: rows of one image each, scored by `BundlePredictor` (trusted, so a batch of rows is
  one call) with 2 actors, against the same predictor over the same batches in this one
  process, with no Ray at all;
- Ray Serve: 8 client threads posting the same JSON request to `serve_deployment` with 2
  replicas, against 1 replica."""

from __future__ import annotations

import http.client
import json
import os
import sys
import time

import numpy as np
from peers import free_port, in_threads  # this folder's; the engines' side by side

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # keep every node on 127.0.0.1
CLIENTS = 8


def data_rows_per_s(bundle: str, images: np.ndarray, workers: int | None) -> float:
    """Rows per second: `workers` actors of Ray Data, or None for this process alone."""
    import ray

    from hlobundle.integrations.ray import BundlePredictor

    batch = 64
    if workers is None:
        predictor = BundlePredictor(bundle, trust_batched=True)
        start = time.perf_counter()
        for i in range(0, len(images), batch):
            predictor({"images": images[i : i + batch]})
        return len(images) / (time.perf_counter() - start)
    ds = ray.data.from_numpy(images).rename_columns({"data": "images"}).materialize()
    start = time.perf_counter()
    scored = ds.map_batches(
        BundlePredictor,
        fn_constructor_kwargs={"bundle": bundle, "trust_batched": True},
        concurrency=workers,
        num_cpus=1,
        batch_size=batch,
        batch_format="numpy",
    ).count()
    assert scored == len(images)
    return len(images) / (time.perf_counter() - start)


def serve_requests_per_s(bundle: str, replicas: int, body: bytes, each: int) -> float:
    from ray import serve

    from hlobundle.integrations.ray import serve_deployment

    serve.run(serve_deployment(bundle, num_replicas=replicas), name="m", route_prefix="/m")
    port = _PORT
    failed: list[str] = []

    def client() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port)
        for _ in range(each):
            conn.request("POST", "/m", body, {"Content-Type": "application/json"})
            r = conn.getresponse()
            r.read()
            if r.status != 200:
                failed.append(str(r.status))

    client()  # warm
    spent = in_threads(client, CLIENTS)
    serve.delete("m")
    if failed:
        raise RuntimeError(f"{len(failed)} requests failed: {failed[:3]}")
    return CLIENTS * each / spent


_PORT = free_port()


def main() -> None:
    import ray
    from ray import serve

    bundle, out, quick = sys.argv[1], sys.argv[2], "--quick" in sys.argv[3:]
    rows = 2_000 if quick else 20_000
    images = np.random.default_rng(0).random(
        (rows, 1, 1, 28, 28), dtype=np.float32
    )  # a row: one call of b = 1
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": _PORT})
    try:
        data_rows_per_s(bundle, images[:256], 2)  # warm: the actors' start, jax's compile
        one = data_rows_per_s(bundle, images, None)
        two = data_rows_per_s(bundle, images, 2)
        x = images[:4, 0]
        body = json.dumps(
            {
                "inputs": [
                    {
                        "name": "images",
                        "shape": list(x.shape),
                        "datatype": "FP32",
                        "data": x.ravel().tolist(),
                    }
                ]
            }
        ).encode()
        each = 25 if quick else 150
        serve_one = serve_requests_per_s(bundle, 1, body, each)
        serve_two = serve_requests_per_s(bundle, 2, body, each)
    finally:
        serve.shutdown()
        ray.shutdown()
    with open(out, "w") as f:
        json.dump(
            {
                "data_one_process": one,
                "data_two_workers": two,
                "serve_1": serve_one,
                "serve_2": serve_two,
                "rows": rows,
                "cpus": os.cpu_count(),
            },
            f,
        )


if __name__ == "__main__":
    main()

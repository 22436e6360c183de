"""hlobundle in Ray Data (hlobundle.integrations.ray), on a real local Ray cluster of two nodes
started here (`ray.cluster_utils.Cluster`, one CPU each): 10,000 rows scored with the results of
the in-process call, and a worker node killed in the middle of a job loses no row and
duplicates none.

Ray's pins clash with this project's test environment: `.ci/run` runs this module in an
environment of its own (`.venv-ray`); elsewhere it skips unless ray is installed."""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

import hlobundle

if importlib.util.find_spec("ray") is None:
    pytest.skip("ray is not installed (.ci/run: .venv-ray)", allow_module_level=True)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.subprocess,
    # Ray starts its node processes with fork from this process, which has imported jax (the
    # conftest does): jax warns at every fork; the nodes run no jax of this process.
    pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),  # Ray Data's own, of its config
]
# Three logical CPUs a node, two an actor: one actor on each node, one CPU left for tasks.
LOOPBACK = {"node_ip_address": "127.0.0.1", "num_cpus": 3}
ACTOR_CPUS = 2
# Ray turns a loopback address into the machine's own on Linux, unless told this is a cluster
# of one machine (as on macOS): then every node and the driver keep to 127.0.0.1.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"

ROWS = 10_000


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    """`y = tanh(x @ w)` for one row x of 8 floats: 3 results."""
    import jax.numpy as jnp

    w = np.linspace(-1, 1, 24, dtype=np.float32).reshape(8, 3)
    out = tmp_path_factory.mktemp("ray") / "row.hlobundle"
    return hlobundle.export(
        lambda w, x: jnp.tanh(x @ w), w, np.ones(8, np.float32), out=out, roles={"w": "parameter"}
    )


@pytest.fixture(scope="module")
def cluster():
    import ray
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={**LOOPBACK, "include_dashboard": False})
    worker = c.add_node(**LOOPBACK)
    ray.init(address=c.address, log_to_driver=False)
    c.wait_for_nodes()
    try:
        yield c, worker
    finally:
        ray.shutdown()
        c.shutdown()


def _docs_block(section: str, name: str):
    """The function `name` that docs/deploy.md's python block under `### section` defines."""
    from helpers import ROOT
    from test_readme import FENCE

    text = (ROOT / "docs" / "deploy.md").read_text().split(f"### {section}\n", 1)[1]
    code = next(c for language, c in FENCE.findall(text) if language == "python")
    scope: dict = {}
    exec(compile(code, "docs/deploy.md", "exec"), scope)  # the docs' own code, no input's
    return scope[name]


def _docs_score():
    return _docs_block("Ray Data", "score")


def _rows(n: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"id": np.arange(n), "x": rng.standard_normal((n, 8)).astype(np.float32)}


def _expected(bundle, x: np.ndarray) -> np.ndarray:
    b = hlobundle.load(bundle)
    w = b.tensor("w")
    return np.tanh(x @ w)


def test_ray_data_scores_ten_thousand_rows_with_the_in_process_results(bundle, cluster):
    import ray

    rows = _rows(ROWS)
    ds = ray.data.from_items([{"id": int(i), "x": rows["x"][i]} for i in range(ROWS)])
    scored = _docs_score()(ds, str(bundle)).take_all()  # docs/deploy.md's block, as written
    assert len(scored) == ROWS
    got = {int(r["id"]): r["result"] for r in scored}
    assert sorted(got) == list(range(ROWS))
    want = _expected(bundle, rows["x"])
    np.testing.assert_allclose(np.stack([got[i] for i in range(ROWS)]), want, rtol=1e-5, atol=1e-6)


def test_a_worker_node_killed_mid_job_loses_no_row_and_duplicates_none(bundle, cluster):
    """The worker node, which holds one of the two actors (each takes two of a node's three
    CPUs), is removed as soon as the first scored batch arrives, and a new node joins: its
    actor and its tasks run again there, and every row comes back once."""
    import ray

    from hlobundle.integrations.ray import BundlePredictor

    c, worker = cluster
    n = ROWS
    rows = _rows(n)
    ds = ray.data.from_items([{"id": int(i), "x": rows["x"][i]} for i in range(n)])
    ds = ds.repartition(100)
    scored = ds.map_batches(
        BundlePredictor,
        fn_constructor_kwargs={"bundle": str(bundle)},
        concurrency=2,
        num_cpus=ACTOR_CPUS,
        batch_size=20,
        batch_format="numpy",
    )
    got: list[int] = []
    results = {}
    killed_after = None
    for batch in scored.iter_batches(batch_size=None, batch_format="numpy"):
        got += [int(i) for i in batch["id"]]
        results.update(zip((int(i) for i in batch["id"]), batch["result"], strict=True))
        if killed_after is None:
            killed_after = len(got)
            c.remove_node(worker)
            c.add_node(**LOOPBACK)
    assert killed_after is not None and killed_after < n // 2  # killed mid-job
    assert sorted(got) == list(range(n))  # none lost, none twice
    want = _expected(bundle, rows["x"])
    np.testing.assert_allclose(np.stack([results[i] for i in range(n)]), want, rtol=1e-5, atol=1e-6)


def test_ray_data_scores_the_lenet_and_the_language_model_row_by_row(cluster):
    """Rows of image batches through the shipped LeNet; rows of prompts through `prefill`,
    then the next token of each through `decode`: every row's results are its in-process
    call's."""
    import ray
    from helpers import LM, ROOT, assert_close, lm_calls

    from hlobundle.integrations.ray import BundlePredictor

    path = ROOT / "examples" / "lenet5.hlobundle"
    lenet = hlobundle.load(path)
    (image,) = [a.name for a in lenet.arguments if a.role == "input"]
    want = {lenet.results[0].name: np.asarray(lenet.function("xla")(*lenet.example_args()))}
    calls = [(path, None, {image: lenet.tensor(image)}, want)]
    calls += [(LM, function, inputs, results) for function, inputs, results in lm_calls()]
    for bundle, function, inputs, results in calls:
        rows = [{"id": i, **inputs} for i in range(4)]
        scored = ray.data.from_items(rows).map_batches(
            BundlePredictor,
            fn_constructor_kwargs={"bundle": str(bundle), "function": function},
            concurrency=1,
            batch_size=2,
            batch_format="numpy",
        )
        got = scored.take_all()
        assert sorted(r["id"] for r in got) == list(range(4))
        for row in got:
            for name, value in results.items():
                assert_close(row[name], value)


@pytest.fixture(scope="module")
def symbolic(tmp_path_factory):
    """`y = tanh(x @ w)` for x of shape (b, 8), rows declared independent: requests
    concatenate along b."""
    import jax.numpy as jnp

    w = np.linspace(-1, 1, 24, dtype=np.float32).reshape(8, 3)
    out = tmp_path_factory.mktemp("ray-serve") / "batch.hlobundle"
    return hlobundle.export(
        lambda w, x: jnp.tanh(x @ w),
        w,
        np.ones((2, 8), np.float32),
        out=out,
        roles={"w": "parameter"},
        shapes_specs=(None, "b, 8"),
        independent_rows="b",
    )


@pytest.fixture(scope="module")
def center(tmp_path_factory):
    """`center(x) = x - mean(x, axis=0)` for x of shape (b, 8): rows that depend on each other,
    not declared independent."""
    import jax.numpy as jnp

    out = tmp_path_factory.mktemp("ray-center") / "center.hlobundle"
    x = np.ones((2, 8), np.float32)
    return hlobundle.export(lambda x: x - jnp.mean(x, axis=0), x, out=out, shapes_specs=("b, 8",))


def _center_calls() -> list[np.ndarray]:
    return [np.arange(24, dtype=np.float32).reshape(3, 8) * (k + 1) for k in range(4)]


def test_ray_data_never_joins_rows_not_declared_independent_trusted(center):
    """Four calls of a trusted function whose rows depend on each other, in one batch of Ray
    Data rows: each row's result is its own call's, not one that mixes the others' rows."""
    from hlobundle.integrations.ray import BundlePredictor

    calls = _center_calls()
    scored = BundlePredictor(str(center), trust_batched=True)({"x": np.stack(calls)})
    fn = hlobundle.load(center).function("xla")
    for x, got in zip(calls, scored["result"], strict=True):
        np.testing.assert_array_equal(got, np.asarray(fn(x)))


def _request(headers: dict[str, str], chunks: list[bytes], delay_s: float = 0.0):
    """A Starlette request of `chunks` (arriving `delay_s` apart), and the chunks it read."""
    import asyncio

    from starlette.requests import Request

    read: list[bytes] = []

    async def receive():
        await asyncio.sleep(delay_s)
        chunk = chunks[len(read)]
        read.append(chunk)
        return {"type": "http.request", "body": chunk, "more_body": len(read) < len(chunks)}

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
    }
    return Request(scope, receive), read


def _answer(endpoint, request) -> tuple[int, dict]:
    import asyncio
    import json

    response = asyncio.run(endpoint(request))
    return response.status_code, json.loads(response.body)


@pytest.fixture(scope="module")
def endpoint(bundle):
    from hlobundle.integrations._models import open_function
    from hlobundle.integrations.ray import Endpoint

    return Endpoint(open_function(str(bundle)), max_body=64 << 20, read_timeout_s=0.5)


def test_ray_serve_refuses_a_body_over_the_model_s_bound_before_reading_it(endpoint):
    """The model takes 8 values: its bound is 64 KiB + 64 bytes a value, as `serve`'s. A body
    declared at 80 MiB is refused (413 LIMIT_EXCEEDED) before a byte is read; one without a
    length, as soon as it crosses the bound."""
    limit = endpoint.served.max_request_bytes
    assert limit == (64 << 10) + 64 * 8
    request, read = _request({"content-length": str(80 << 20)}, [b" " * (1 << 20)] * 80)
    status, body = _answer(endpoint, request)
    assert (status, body["code"]) == (413, "LIMIT_EXCEEDED") and read == []
    assert f"over the limit of {limit} bytes" in body["error"]
    request, read = _request({}, [b" " * (16 << 10)] * 5120)
    status, body = _answer(endpoint, request)
    assert (status, body["code"]) == (413, "LIMIT_EXCEEDED") and len(read) == 5


def test_ray_serve_refuses_a_body_that_arrives_too_slowly(endpoint):
    request, _ = _request({}, [b"{"] * 10, delay_s=0.2)  # 2 s for a deadline of 0.5 s
    status, body = _answer(endpoint, request)
    assert (status, body["code"]) == (408, "LIMIT_EXCEEDED")


@pytest.fixture(scope="module")
def serve_port(cluster):
    import socket

    from ray import serve

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    yield port
    serve.shutdown()


def _infer(port: int, route: str, x: np.ndarray | dict[str, np.ndarray]) -> tuple[int, dict]:
    """POST an inference request of `x` (the input "x", or one array per input name)."""
    import json
    import urllib.error
    import urllib.request

    given = x if isinstance(x, dict) else {"x": x}
    body = {
        "inputs": [
            {
                "name": name,
                "datatype": "INT32" if a.dtype == np.int32 else "FP32",
                "shape": list(a.shape),
                "data": a.ravel().tolist(),
            }
            for name, a in given.items()
        ]
    }
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/{route}", data=json.dumps(body).encode(), method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_ray_serve_answers_over_http_from_two_replicas(bundle, serve_port):
    from concurrent.futures import ThreadPoolExecutor

    from ray import serve

    serve.run(_docs_block("Ray Serve", "application")(str(bundle)), name="row", route_prefix="/row")
    xs = [np.full(8, k / 7, np.float32) for k in range(16)]
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda x: _infer(serve_port, "row", x), xs))
    for x, (status, body) in zip(xs, answers, strict=True):
        assert status == 200, body
        (out,) = body["outputs"]
        assert (out["name"], out["shape"]) == ("result", [3])
        np.testing.assert_allclose(out["data"], _expected(bundle, x), rtol=1e-5, atol=1e-6)
    status, body = _infer(serve_port, "row", np.zeros(5, np.float32))
    assert status == 400 and body["code"] == "INPUT_INVALID"
    assert body["error"].startswith("input 'x': shape [5]")
    status, body = _infer(serve_port, "row", np.zeros(20_000, np.float32))  # 64 KiB over 8 values
    assert status == 413 and body["code"] == "LIMIT_EXCEEDED", body


def test_ray_serve_with_batching_gives_each_request_its_own_rows(symbolic, serve_port):
    from concurrent.futures import ThreadPoolExecutor

    from ray import serve

    from hlobundle.integrations.ray import serve_deployment

    app = serve_deployment(str(symbolic), max_batch_size=8, trust_batched=True)
    serve.run(app, name="batch", route_prefix="/batch")
    xs = [np.full((k + 1, 8), k / 10, np.float32) for k in range(8)]
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda x: _infer(serve_port, "batch", x), xs))
    for x, (status, body) in zip(xs, answers, strict=True):
        assert status == 200, body
        (out,) = body["outputs"]
        assert out["shape"] == [len(x), 3]  # each request its own rows back
        np.testing.assert_allclose(
            np.reshape(out["data"], out["shape"]), _expected(symbolic, x), rtol=1e-5, atol=1e-6
        )


def test_ray_serve_with_batching_never_joins_rows_not_declared_independent(center, serve_port):
    """Four concurrent clients of a trusted function whose rows depend on each other, under a
    batch wait that would join them: each gets exactly its own call's answer."""
    from concurrent.futures import ThreadPoolExecutor

    from ray import serve

    from hlobundle.integrations.ray import serve_deployment

    app = serve_deployment(
        str(center), max_batch_size=4, batch_wait_timeout_s=2, trust_batched=True
    )
    serve.run(app, name="center", route_prefix="/center")
    calls = _center_calls()
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda x: _infer(serve_port, "center", x), calls))
    serve.delete("center")
    fn = hlobundle.load(center).function("xla")
    for x, (status, body) in zip(calls, answers, strict=True):
        assert status == 200, body
        (out,) = body["outputs"]
        np.testing.assert_array_equal(np.reshape(out["data"], out["shape"]), np.asarray(fn(x)))


def test_ray_serve_answers_with_the_lenet_and_the_language_model(serve_port):
    """The shipped LeNet, and the language model's `prefill` and `decode` (which takes the
    cache `prefill` returned), each an application: the results are the in-process call's."""
    from helpers import LM, ROOT, assert_close, lm_calls
    from ray import serve

    from hlobundle.integrations.ray import serve_deployment

    lenet = hlobundle.load(ROOT / "examples" / "lenet5.hlobundle")
    (image,) = [a.name for a in lenet.arguments if a.role == "input"]
    want = {lenet.results[0].name: np.asarray(lenet.function("xla")(*lenet.example_args()))}
    calls = [("lenet", {image: lenet.tensor(image)}, want), *lm_calls()]
    for route, inputs, results in calls:
        bundle, function = (lenet.path, None) if route == "lenet" else (LM, route)
        serve.run(serve_deployment(str(bundle), function), name=route, route_prefix=f"/{route}")
        status, body = _infer(serve_port, route, inputs)
        serve.delete(route)  # its replica's CPU back to the cluster
        assert status == 200, body
        got = {o["name"]: np.reshape(o["data"], o["shape"]) for o in body["outputs"]}
        assert sorted(got) == sorted(results)
        for name, value in results.items():
            assert_close(got[name].astype(value.dtype), value)

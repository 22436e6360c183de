"""`_serve._app.App`: each route a method over the app's own state (its models, limits, metrics
and batchers), which a test drives alone: no server, no routing, no client."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
from helpers import lowered_text

import hlobundle

pytest.importorskip("starlette", reason="the serve extra is not installed")

from hlobundle._serve._app import App, Limits  # noqa: E402
from hlobundle._serve._models import load_models  # noqa: E402


@pytest.fixture(scope="module")
def doubles(tmp_path_factory):
    x = np.zeros(3, np.float32)
    out = tmp_path_factory.mktemp("doubles") / "doubles"
    bundle = hlobundle.pack(lowered_text(lambda x: 2 * x, x), [x], out, names=["x"])
    return load_models([bundle], backend="xla")


def _infer(app: App, name: str, body: bytes, version: str | None = None) -> list[dict]:
    """The ASGI messages `app.infer` sends for one POST of `body`, called alone."""
    sent: list[dict] = []
    scope = {"type": "http", "headers": [(b"content-length", str(len(body)).encode())]}

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message):
        sent.append(message)

    asyncio.run(app.infer(scope, receive, send, name, version))
    return sent


def test_infer_alone_answers_and_counts_in_its_app_s_metrics(doubles):
    app, name = App(doubles, Limits()), next(iter(doubles))
    x = {"name": "x", "shape": [3], "datatype": "FP32", "data": [1, 2, 3]}
    body = json.dumps({"inputs": [x]}).encode()
    start, answer = _infer(app, name, body)
    assert start["status"] == 200, answer
    assert json.loads(answer["body"])["outputs"][0]["data"] == [2, 4, 6]
    start, answer = _infer(app, name, body, version="9")
    assert start["status"] == 404 and b"not '9'" in answer["body"], answer
    counted = app.metrics.text().decode()
    assert f'hlobundle_requests_total{{model="{name}",status="200"}} 1.0' in counted
    assert f'hlobundle_requests_total{{model="{name}",status="404"}} 1.0' in counted
    # another app's state is its own
    assert "hlobundle_requests_total{" not in App(doubles, Limits()).metrics.text().decode()

"""A tiny registry on loopback that serves what a test gives it, and misbehaves as told: the
hostile registry of tests/test_oci_hostile.py. It speaks just enough of the distribution
spec for a pull (GET /v2/, manifests and blobs by reference, Range, the referrers API's 404)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import ssl
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class Fake:
    """What the fake serves: `manifests` by tag or digest, `blobs` by digest; `hooks` by path
    (`/v2/<repo>/blobs/<digest>`) take the request over. `seen` records each request. With
    `basic` ("USER:PASSWORD"), every request without those Basic credentials is answered 401."""

    def __init__(self) -> None:
        self.manifests: dict[str, tuple[bytes, str]] = {}
        self.blobs: dict[str, bytes] = {}
        self.hooks: dict[str, Callable[[BaseHTTPRequestHandler], None]] = {}
        self.seen: list[tuple[str, str, dict[str, str]]] = []
        self.host = ""
        self.basic: str | None = None

    def add_manifest(self, document: dict | bytes, *tags: str, media_type: str = MANIFEST) -> str:
        raw = document if isinstance(document, bytes) else json.dumps(document).encode()
        digest = digest_of(raw)
        for name in (digest, *tags):
            self.manifests[name] = (raw, media_type)
        return digest

    def add_blob(self, data: bytes) -> str:
        self.blobs[digest_of(data)] = data
        return digest_of(data)

    def ref(self, repository: str = "repo", tail: str = ":v1") -> str:
        return f"oci://{self.host}/{repository}{tail}"


def artifact(
    bundle: Path, fake: Fake, *, edit: Callable[[dict], Any] | None = None, tag: str = "v1"
) -> str:
    """Serve `bundle` as hlobundle pushes it (its layers and config), the manifest changed by
    `edit` first; the manifest's digest."""
    from hlobundle._oci import _artifact

    listed = json.loads((bundle / "manifest.json").read_text())["files"]
    layers = [_artifact.layer(n, e["size"], e["sha256"]) for n, e in sorted(listed.items())]
    for name in listed:
        fake.add_blob((bundle / name).read_bytes())
    raw = (bundle / "manifest.json").read_bytes()
    fake.add_blob(raw)
    layers.append(_artifact.layer("manifest.json", len(raw), hashlib.sha256(raw).hexdigest()))
    config = _artifact.config("lenet5", "1.1", layers)
    fake.add_blob(config)
    document = json.loads(_artifact.manifest(config, digest_of(config), layers, "1.1"))
    if edit is not None:
        edit(document)
        if (document["config"].get("digest"), document["config"].get("size")) == (
            digest_of(config),
            len(config),
        ):  # the layers' own config
            config = _artifact.config(
                "lenet5", "1.1", [e for e in document["layers"] if isinstance(e, dict)]
            )
            fake.add_blob(config)
            document["config"].update(digest=digest_of(config), size=len(config))
    return fake.add_manifest(document, tag)


class _Handler(BaseHTTPRequestHandler):
    fake: Fake
    protocol_version = "HTTP/1.1"
    # An answer's headers and body leave at once: with Nagle's algorithm, the body waited for
    # the client's delayed acknowledgement of the headers, about 40 ms an answer.
    disable_nagle_algorithm = True

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        self._answer(body=True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._answer(body=False)

    def do_POST(self) -> None:  # noqa: N802 (an upload: what a hook answers, else 404)
        self._answer(body=True)

    do_PUT = do_PATCH = do_POST

    def _answer(self, body: bool) -> None:
        fake = self.fake
        path = self.path.split("?")[0]
        fake.seen.append((self.command, path, dict(self.headers)))
        if fake.basic and self.headers.get("Authorization") != _basic(fake.basic):
            return self.send(401, b"", {"WWW-Authenticate": 'Basic realm="fake"'})
        if path in fake.hooks:
            return fake.hooks[path](self)
        if path == "/v2/":
            return self.send(200, b"{}")
        parts = path.split("/")
        if len(parts) >= 5 and parts[-2] == "manifests" and parts[-1] in fake.manifests:
            raw, kind = fake.manifests[parts[-1]]
            return self.send(
                200,
                raw if body else b"",
                {"Content-Type": kind, "Docker-Content-Digest": digest_of(raw)},
            )
        if len(parts) >= 5 and parts[-2] == "blobs" and parts[-1] in fake.blobs:
            data = fake.blobs[parts[-1]]
            start = _range_start(self.headers.get("Range"))
            if start:
                return self.send(
                    206,
                    data[start:],
                    {"Content-Range": f"bytes {start}-{len(data) - 1}/{len(data)}"},
                )
            return self.send(200, data if body else b"")
        self.send(404, b'{"errors":[{"code":"NOT_FOUND","message":"not here"}]}')

    def send(
        self,
        status: int,
        data: bytes,
        headers: dict[str, str] | None = None,
        length: int | None = None,
    ) -> None:
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(data) if length is None else length))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)


def _basic(credentials: str) -> str:
    import base64

    return "Basic " + base64.b64encode(credentials.encode()).decode()


def _range_start(header: str | None) -> int:
    if not header or not header.startswith("bytes="):
        return 0
    return int(header[6:].split("-")[0])


@contextlib.contextmanager
def serving(
    fake: Fake | None = None, address: str = "127.0.0.1", tls: ssl.SSLContext | None = None
) -> Iterator[Fake]:
    fake = fake or Fake()
    handler = type("Handler", (_Handler,), {"fake": fake})
    server = ThreadingHTTPServer((address, 0), handler)
    if tls:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    server.daemon_threads = True
    server.handle_error = lambda request, address: None  # a client that hung up, as told to
    fake.host = f"{address}:{server.server_address[1]}"
    thread = threading.Thread(
        target=server.serve_forever, args=(0.02,), daemon=True
    )  # quick shutdown
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()


def pull_refused(
    tmp_path: Path, fake: Any, error: type[Exception], match: str, **options: Any
) -> Any:
    """The error `pull` of `fake`'s reference raises (of type `error`, matching `match`),
    having written nothing."""
    import pytest

    import hlobundle

    out = tmp_path / "out" / "got.hlobundle"
    out.parent.mkdir(exist_ok=True)
    with pytest.raises(error, match=match) as caught:
        hlobundle.pull(fake.ref(), out, **options)
    assert list(out.parent.iterdir()) == [], "something was written"
    return caught.value

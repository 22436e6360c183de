"""A hostile registry gets nowhere (docs/distribution.md, "What pull refuses"): each kind of lie
gets a coded HloBundleError naming the reference, digest or path, and nothing is written
outside DIR, nor anything left half-written beside it. The registry is `oci_fake.Fake`."""

from __future__ import annotations

import json
import time

import pytest
from helpers import ROOT
from oci_fake import artifact, digest_of, pull_refused, serving

import hlobundle

pytest.importorskip("oras", reason="the oci extra (oras) is not installed")

EXAMPLE = ROOT / "examples" / "lenet5.hlobundle"
WEIGHTS = "weights.safetensors"


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """The fake registry, and a store of this test's own: nothing pulled before is reused."""
    monkeypatch.setenv("HLOBUNDLE_CACHE_DIR", str(tmp_path / "cache"))
    with serving() as running:
        yield running


def _layer(document, name):
    return next(
        e for e in document["layers"] if e["annotations"]["org.opencontainers.image.title"] == name
    )


def _weights_digest():
    return digest_of((EXAMPLE / WEIGHTS).read_bytes())


def test_the_fake_serves_a_good_artifact(fake, tmp_path):
    digest = artifact(EXAMPLE, fake)
    assert hlobundle.pull(fake.ref(), tmp_path / "ok.hlobundle").digest == digest
    tags = [p for m, p, _ in fake.seen if p.endswith("/manifests/v1")]
    assert tags == ["/v2/repo/manifests/v1"]  # the tag is resolved once, then digests only


def test_wrong_blob_bytes(fake, tmp_path):
    artifact(EXAMPLE, fake)
    data = bytearray(fake.blobs[_weights_digest()])
    data[-1] ^= 1
    fake.blobs[_weights_digest()] = bytes(data)
    e = pull_refused(tmp_path, fake, hlobundle.errors.BlobDigestError, "weights.safetensors")
    assert e.code == "REGISTRY_DIGEST_MISMATCH" and e.digest == _weights_digest()
    assert e.ref and "@sha256:" in e.ref


def test_a_manifest_whose_bytes_are_not_its_digest(fake, tmp_path):
    digest = artifact(EXAMPLE, fake)
    raw, kind = fake.manifests[digest]
    fake.manifests[digest] = (raw + b" ", kind)
    with pytest.raises(hlobundle.errors.BlobDigestError, match="has the digest"):
        hlobundle.pull(fake.ref("repo", "@" + digest), tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_a_tag_whose_digest_header_lies(fake, tmp_path):
    artifact(EXAMPLE, fake)
    raw, _ = fake.manifests["v1"]
    fake.hooks["/v2/repo/manifests/v1"] = lambda h: h.send(
        200,
        raw,
        {
            "Content-Type": "application/vnd.oci.image.manifest.v1+json",
            "Docker-Content-Digest": "sha256:" + "0" * 64,
        },
    )
    pull_refused(
        tmp_path, fake, hlobundle.errors.BlobDigestError, "says the manifest v1 has the digest"
    )


def test_an_oversized_manifest(fake, tmp_path):
    fake.add_manifest(b"{" + b" " * (5 << 20) + b"}", "v1")
    pull_refused(tmp_path, fake, hlobundle.errors.RegistryLimitError, "limit is 4194304")


def test_an_oversized_manifest_without_a_length_is_cut_off(fake, tmp_path):
    def endless(h):
        h.send_response(200)
        h.send_header("Content-Type", "application/vnd.oci.image.manifest.v1+json")
        h.end_headers()  # no Content-Length: the body ends when the connection does
        h.close_connection = True
        for _ in range(8):
            h.wfile.write(b" " * (1 << 20))

    fake.hooks["/v2/repo/manifests/v1"] = endless
    pull_refused(tmp_path, fake, hlobundle.errors.RegistryLimitError, "over the limit")


def test_an_oversized_config(fake, tmp_path):
    artifact(EXAMPLE, fake, edit=lambda d: d["config"].update(size=5 << 20))
    pull_refused(tmp_path, fake, hlobundle.errors.RegistryLimitError, "the config is 5242880 bytes")


def test_a_config_longer_than_declared(fake, tmp_path):
    def grow(document):
        config = b'{"modelfs": {"diff_ids": []}}' + b" " * 100
        document["config"].update(digest=fake.add_blob(config), size=10)

    artifact(EXAMPLE, fake, edit=grow)
    pull_refused(tmp_path, fake, hlobundle.errors.RegistryLimitError, "config")


@pytest.mark.parametrize("title", ["../x", "/etc/x", "a/../../x", "a\\b", ""])
def test_an_unsafe_title(fake, tmp_path, title):
    def unsafe(document):
        _layer(document, WEIGHTS)["annotations"]["org.opencontainers.image.title"] = title

    artifact(EXAMPLE, fake, edit=unsafe)
    e = pull_refused(tmp_path, fake, hlobundle.errors.UnsafePathError, "file name")
    assert e.path == title and fake.host in e.message
    assert not (tmp_path / "x").exists()


def test_a_duplicated_title(fake, tmp_path):
    artifact(EXAMPLE, fake, edit=lambda d: d["layers"].append(dict(_layer(d, WEIGHTS))))
    pull_refused(
        tmp_path,
        fake,
        hlobundle.errors.ArtifactInvalidError,
        "two layers are titled 'weights.safetensors'",
    )


def test_a_layer_the_bundle_manifest_does_not_list(fake, tmp_path):
    def extra(document):
        entry = dict(
            _layer(document, WEIGHTS), annotations={"org.opencontainers.image.title": "extra.bin"}
        )
        document["layers"].append(entry)

    artifact(EXAMPLE, fake, edit=extra)
    e = pull_refused(tmp_path, fake, hlobundle.errors.FileUnlistedError, "extra.bin")
    assert e.path == "extra.bin"


def test_a_listed_file_the_artifact_lacks(fake, tmp_path):
    artifact(EXAMPLE, fake, edit=lambda d: d["layers"].remove(_layer(d, WEIGHTS)))
    pull_refused(tmp_path, fake, hlobundle.errors.FileMissingError, "lists 'weights.safetensors'")


def test_a_layer_whose_digest_is_not_the_listed_sha256(fake, tmp_path):
    other = digest_of(b"other")
    fake.add_blob(b"other")
    artifact(EXAMPLE, fake, edit=lambda d: _layer(d, WEIGHTS).update(digest=other))
    e = pull_refused(
        tmp_path, fake, hlobundle.errors.HashMismatchError, "the bundle's manifest says sha256:"
    )
    assert e.path == WEIGHTS
    # a remote load too, before it asks for the layer's blob
    with pytest.raises(hlobundle.errors.HashMismatchError, match="manifest says sha256:") as e:
        hlobundle.load(fake.ref())
    assert e.value.path == WEIGHTS
    assert not [p for _, p, _ in fake.seen if p.endswith(other)], "the blob was asked for"


def test_a_compressed_layer_and_an_index_are_not_bundles(fake, tmp_path):
    artifact(
        EXAMPLE,
        fake,
        edit=lambda d: _layer(d, WEIGHTS).update(
            mediaType="application/vnd.oci.image.layer.v1.tar+gzip"
        ),
    )
    pull_refused(tmp_path, fake, hlobundle.errors.ArtifactInvalidError, "uncompressed")
    fake.add_manifest(
        {"schemaVersion": 2, "manifests": []},
        "v1",
        media_type="application/vnd.oci.image.index.v1+json",
    )
    pull_refused(tmp_path, fake, hlobundle.errors.ArtifactInvalidError, "image index")


def test_a_blob_that_never_ends_is_read_only_to_its_declared_size(fake, tmp_path):
    artifact(EXAMPLE, fake)
    sent = []

    def endless(h):
        h.send_response(200)
        h.end_headers()
        h.close_connection = True
        try:
            while len(sent) < 10_000:  # ~640 MiB if nobody stopped reading
                h.wfile.write(b"\0" * 65536)
                sent.append(1)
        except OSError:
            pass

    fake.hooks[f"/v2/repo/blobs/{_weights_digest()}"] = endless
    started = time.monotonic()
    e = pull_refused(
        tmp_path,
        fake,
        (hlobundle.errors.RegistryLimitError, hlobundle.errors.BlobDigestError),
        "weights.safetensors",
    )
    assert e.code in ("REGISTRY_LIMIT_EXCEEDED", "REGISTRY_DIGEST_MISMATCH")
    assert time.monotonic() - started < 20
    assert len(sent) < 1000  # the client hung up after the declared 189,448 bytes


@pytest.mark.slow
def test_a_slow_server_times_out(fake, tmp_path):
    artifact(EXAMPLE, fake)
    fake.hooks[f"/v2/repo/blobs/{_weights_digest()}"] = lambda h: time.sleep(3)
    started = time.monotonic()
    pull_refused(
        tmp_path,
        fake,
        hlobundle.errors.RegistryUnreachableError,
        "sent nothing for 0.5 s",
        timeout=0.5,
    )
    took = time.monotonic() - started  # two waits of 0.5 s (about 1 s), not some multiple
    assert 0.5 <= took < 1.8, f"refused after {took:.2f} s, the timeout 0.5 s"


def _cut_once(fake, then):
    """The example served, its weights blob's first answer half the body, then the connection
    drops; every later request is answered by `then(h, data, start)`. The blob's bytes, and
    the Range header of each request, in order (filled as they come)."""
    artifact(EXAMPLE, fake)
    data = fake.blobs[_weights_digest()]
    calls: list[str | None] = []

    def cut(h):
        calls.append(h.headers.get("Range"))
        if len(calls) == 1:
            h.send_response(200)
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data[: len(data) // 2])
            h.close_connection = True
            return
        then(h, data, int(calls[-1][6:].split("-")[0]))

    fake.hooks[f"/v2/repo/blobs/{_weights_digest()}"] = cut
    return data, calls


def test_an_answer_cut_off_is_resumed_by_range(fake, tmp_path):
    data, calls = _cut_once(
        fake,
        lambda h, data, start: h.send(
            206, data[start:], {"Content-Range": f"bytes {start}-{len(data) - 1}/{len(data)}"}
        ),
    )
    hlobundle.pull(fake.ref(), tmp_path / "ok.hlobundle")
    assert calls == [None, f"bytes={len(data) // 2}-"]
    assert (tmp_path / "ok.hlobundle" / WEIGHTS).read_bytes() == data


@pytest.mark.slow
def test_a_redirect_off_the_registry_only_for_blobs_and_without_credentials(
    fake, tmp_path, monkeypatch
):
    artifact(EXAMPLE, fake)
    data = fake.blobs[_weights_digest()]
    monkeypatch.setenv("HLOBUNDLE_REGISTRY_AUTH", "user:password")

    def ask(h):  # the registry wants basic auth for everything
        if h.headers.get("Authorization") is None:
            return h.send(401, b"", {"WWW-Authenticate": 'Basic realm="fake"'})
        return None

    with serving() as other:
        other.add_blob(data)
        redirect = f"http://{other.host}/storage/{_weights_digest()}"
        other.hooks[f"/storage/{_weights_digest()}"] = lambda h: h.send(200, data)
        fake.hooks[f"/v2/repo/blobs/{_weights_digest()}"] = lambda h: (
            ask(h) or h.send(307, b"", {"Location": redirect})
        )
        fake.hooks["/v2/repo/manifests/v1"] = lambda h: (
            ask(h)
            or h.send(
                200,
                fake.manifests["v1"][0],
                {"Content-Type": "application/vnd.oci.image.manifest.v1+json"},
            )
        )
        hlobundle.pull(fake.ref(), tmp_path / "ok.hlobundle")
        assert [headers.get("Authorization") for _, _, headers in other.seen] == [None]
        assert any(h.get("Authorization") == "Basic dXNlcjpwYXNzd29yZA==" for _, _, h in fake.seen)

        fake.hooks["/v2/repo/manifests/v1"] = lambda h: h.send(
            307, b"", {"Location": f"http://{other.host}/v2/repo/manifests/v1"}
        )
        pull_refused(
            tmp_path,
            fake,
            hlobundle.errors.RegistryProtocolError,
            "only a blob download may be redirected",
        )


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    pytest.importorskip("model_signing", reason="the sign extra (model-signing) is not installed")
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    d = tmp_path_factory.mktemp("keys")
    (d / "a.pub").write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return d


def _fallback(fake, digest, manifests):
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": manifests,
    }
    fake.add_manifest(index, digest.replace(":", "-"), media_type=index["mediaType"])


def _referrer(fake, subject, kind, layer):
    """An artifact manifest of type `kind` whose one layer is the descriptor `layer` and whose
    subject is the manifest `subject`: its digest."""
    return fake.add_manifest(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "artifactType": kind,
            "config": {
                "mediaType": "application/vnd.oci.empty.v1+json",
                "digest": fake.add_blob(b"{}"),
                "size": 2,
            },
            "layers": [layer],
            "subject": {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": subject,
                "size": 1,
            },
        }
    )


@pytest.mark.slow
def test_a_referrer_that_is_not_a_signature(fake, tmp_path, keys):
    digest = artifact(EXAMPLE, fake)
    sbom = "application/vnd.example.sbom"
    not_sig = _referrer(
        fake, digest, sbom, {"mediaType": sbom, "digest": fake.add_blob(b"sbom"), "size": 4}
    )
    listed = {
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "digest": not_sig,
        "size": 1,
        "artifactType": "application/vnd.dev.sigstore.bundle.v0.3+json",
    }
    _fallback(fake, digest, [listed])
    e = pull_refused(
        tmp_path,
        fake,
        hlobundle.errors.ArtifactInvalidError,
        "listed as a signature but its artifactType",
        public_key=keys / "a.pub",
    )
    assert e.digest == not_sig
    _fallback(fake, digest, [dict(listed, artifactType="application/vnd.example.sbom")])
    pull_refused(
        tmp_path,
        fake,
        hlobundle.errors.UnsignedError,
        "has no signature",
        public_key=keys / "a.pub",
    )


def test_an_index_of_a_thousand_referrers(fake, tmp_path, keys):
    digest = artifact(EXAMPLE, fake)
    many = [
        {
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": digest_of(str(i).encode()),
            "size": 1,
            "artifactType": "application/vnd.dev.sigstore.bundle.v0.3+json",
        }
        for i in range(1000)
    ]
    _fallback(fake, digest, many)
    pull_refused(
        tmp_path,
        fake,
        hlobundle.errors.RegistryLimitError,
        "1000 referrers; the limit is 256",
        public_key=keys / "a.pub",
    )


def test_errors_name_the_reference_in_the_cli(fake, tmp_path):
    from helpers import cli

    artifact(EXAMPLE, fake, edit=lambda d: d["layers"].remove(_layer(d, WEIGHTS)))
    r = cli("pull", fake.ref(), "-o", tmp_path / "x", "--json")
    assert r.returncode == 1
    report = json.loads(r.stdout)
    assert report["code"] == "FILE_MISSING" and report["path"] == WEIGHTS
    assert fake.host in report["message"]


@pytest.mark.slow
def test_a_bearer_token_from_the_realm_the_challenge_names(fake, tmp_path, monkeypatch):
    import base64

    artifact(EXAMPLE, fake)
    monkeypatch.setenv("HLOBUNDLE_REGISTRY_AUTH", "user:password")
    with serving() as tokens:
        asked = []

        def token(h):
            asked.append((h.headers.get("Authorization"), h.path))
            h.send(
                200, json.dumps({"token": "t0ken"}).encode(), {"Content-Type": "application/json"}
            )

        tokens.hooks["/token"] = token
        challenge = (
            f'Bearer realm="http://{tokens.host}/token",service="fake",scope="repository:repo:pull"'
        )

        def guarded(h):
            if h.headers.get("Authorization") != "Bearer t0ken":
                return h.send(401, b"", {"WWW-Authenticate": challenge})
            raw, kind = fake.manifests["v1"]
            return h.send(200, raw, {"Content-Type": kind})

        fake.hooks["/v2/repo/manifests/v1"] = guarded
        hlobundle.pull(fake.ref(), tmp_path / "ok.hlobundle")
        basic = "Basic " + base64.b64encode(b"user:password").decode()
        assert asked == [(basic, "/token?service=fake&scope=repository%3Arepo%3Apull")]

        monkeypatch.setenv("HLOBUNDLE_REGISTRY_AUTH", "user:wrong")
        tokens.hooks["/token"] = lambda h: h.send(401, b"{}")
        pull_refused(tmp_path, fake, hlobundle.errors.RegistryAuthError, "gives no token")


def test_credentials_go_to_a_token_service_over_https_only(fake, tmp_path, monkeypatch):
    artifact(EXAMPLE, fake)
    monkeypatch.setenv("HLOBUNDLE_REGISTRY_AUTH", "user:password")
    challenge = 'Bearer realm="http://tokens.example/token",service="fake"'
    fake.hooks["/v2/repo/manifests/v1"] = lambda h: h.send(
        401, b"", {"WWW-Authenticate": challenge}
    )
    pull_refused(
        tmp_path, fake, hlobundle.errors.RegistryAuthError, "credentials go only to an https:// one"
    )


class _Answer:
    """What `_auth` reads of an HTTP answer."""

    def __init__(self, status: int, headers: dict, content: bytes = b""):
        self.status_code, self.headers, self.content = status, headers, content


def test_the_authentication_alone_sends_credentials_to_an_https_token_service_only(monkeypatch):
    """`_auth.Auth` without a registry: a challenge naming a plain-HTTP token service is refused
    before anything is sent (oras' own token exchange sends it the password); one naming an
    https:// service is sent the user and password, and its token answers the next request."""
    from hlobundle._oci._auth import Auth
    from hlobundle._oci._ref import parse

    monkeypatch.setenv("HLOBUNDLE_REGISTRY_AUTH", "user:password")
    sent = []

    def send(method, url, **kwargs):
        sent.append((method, url, kwargs["headers"].get("Authorization")))
        return _Answer(200, {}, b'{"token": "t0ken"}')

    auth = Auth(parse("registry.example/repo:v1"), send, asked_insecure=False)
    plain = 'Bearer realm="http://tokens.example/token",service="registry.example"'
    with pytest.raises(hlobundle.errors.RegistryAuthError, match="only to an https:// one"):
        auth.answer(_Answer(401, {"WWW-Authenticate": plain}))
    assert sent == [] and auth.authorization is None
    auth.answer(_Answer(401, {"WWW-Authenticate": plain.replace("http:", "https:")}))
    assert sent == [("GET", "https://tokens.example/token", "Basic dXNlcjpwYXNzd29yZA==")]
    assert auth.authorization == "Bearer t0ken"


@pytest.mark.parametrize("token", ["sn\u2603w", "t0ken\r\nX-Injected: 1", "t0 ken"])
def test_a_token_that_is_no_header_value_is_refused(fake, tmp_path, token):
    """A token service answering a token that cannot be sent as it is in an Authorization
    header (a character outside Latin-1: a UnicodeEncodeError from http.client, a traceback; a
    line break or a space, which would send something else than the token, or be refused as
    "cannot be reached" with the token echoed): a RegistryAuthError that does not repeat it."""
    artifact(EXAMPLE, fake)
    with serving() as tokens:
        tokens.hooks["/token"] = lambda h: h.send(200, json.dumps({"token": token}).encode())
        challenge = f'Bearer realm="http://{tokens.host}/token",service="fake"'
        fake.hooks["/v2/repo/manifests/v1"] = lambda h: h.send(
            401, b"", {"WWW-Authenticate": challenge}
        )
        e = pull_refused(tmp_path, fake, hlobundle.errors.RegistryAuthError, "not a bearer token")
    assert token not in e.message


def test_a_token_of_the_users_that_is_no_header_value_is_refused(monkeypatch):
    """The same for a token the user gives ($HLOBUNDLE_REGISTRY_AUTH): a coded error naming
    where it came from, not a UnicodeEncodeError when it is sent."""
    from hlobundle._oci._auth import Auth
    from hlobundle._oci._ref import parse

    monkeypatch.setenv("HLOBUNDLE_REGISTRY_AUTH", "sn\u2603w")
    auth = Auth(parse("registry.example/repo:v1"), None, asked_insecure=False)
    challenge = 'Bearer realm="https://tokens.example/token"'
    with pytest.raises(hlobundle.errors.RegistryAuthError, match=r"REGISTRY_AUTH \(a token\)"):
        auth.answer(_Answer(401, {"WWW-Authenticate": challenge}))
    assert auth.authorization is None


def test_a_registry_that_ignores_ranges_is_read_again_from_the_start(fake, tmp_path):
    artifact(EXAMPLE, fake)
    data = fake.blobs[_weights_digest()]
    calls = []

    def cut_then_whole(h):
        calls.append(h.headers.get("Range"))
        if len(calls) == 1:
            h.send_response(200)
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data[:1000])
            h.close_connection = True
            return
        h.send(200, data)  # the Range asked for is ignored

    fake.hooks[f"/v2/repo/blobs/{_weights_digest()}"] = cut_then_whole
    hlobundle.pull(fake.ref(), tmp_path / "ok.hlobundle")
    assert calls == [None, "bytes=1000-"]
    assert (tmp_path / "ok.hlobundle" / WEIGHTS).read_bytes() == data


def test_push_to_a_digest_that_is_not_the_artifacts(fake, tmp_path):
    with pytest.raises(hlobundle.errors.RegistryRefError, match="not the sha256:0000"):
        hlobundle.push(EXAMPLE, fake.ref("repo", "@sha256:" + "0" * 64))


def test_without_a_registry_ci_fails_and_elsewhere_skips(monkeypatch, tmp_path):
    import oci_registry as registry

    monkeypatch.setattr(registry.shutil, "which", lambda name: None)
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("HLOBUNDLE_CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="docker-registry is not installed"):
        with registry.serve(tmp_path):
            pass
    monkeypatch.setenv("HLOBUNDLE_CI", "1")
    with pytest.raises(pytest.fail.Exception, match="CI .* needs it"):
        with registry.serve(tmp_path):
            pass


@pytest.mark.slow  # a drip for most of a second, by design
def test_a_registry_that_drips_a_blob_is_cut_off(fake, tmp_path, monkeypatch):
    """A byte every 50 ms keeps every read inside its timeout; the rate over a window (here
    0.5 s instead of 30) does not."""
    from hlobundle._oci import _network

    monkeypatch.setattr(_network, "RATE_WINDOW_S", 0.5)
    artifact(EXAMPLE, fake)
    data = fake.blobs[_weights_digest()]

    def drip(h):
        h.send_response(200)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        try:
            for i in range(len(data)):
                h.wfile.write(data[i : i + 1])
                h.wfile.flush()
                time.sleep(0.05)
        except OSError:
            pass

    fake.hooks[f"/v2/repo/blobs/{_weights_digest()}"] = drip
    started = time.monotonic()
    pull_refused(
        tmp_path, fake, hlobundle.errors.RegistryUnreachableError, "slower than", timeout=1
    )
    took = time.monotonic() - started  # within a few windows, not at some multiple of one
    assert took < 5 * 0.5, f"cut off after {took:.2f} s, the window 0.5 s"


def test_an_encoded_manifest_is_refused_not_decompressed(fake, tmp_path):
    import gzip

    artifact(EXAMPLE, fake)
    bomb = gzip.compress(bytes(64 << 20), compresslevel=9)

    def encoded(h):
        h.send_response(200)
        h.send_header("Content-Type", "application/vnd.oci.image.manifest.v1+json")
        h.send_header("Content-Encoding", "gzip")
        h.send_header("Content-Length", str(len(bomb)))
        h.end_headers()
        h.wfile.write(bomb)

    fake.hooks["/v2/repo/manifests/v1"] = encoded
    pull_refused(tmp_path, fake, hlobundle.errors.RegistryProtocolError, "Content-Encoding 'gzip'")


@pytest.mark.slow  # a drip for most of a second, by design
@pytest.mark.parametrize("where", ["size-line", "trailer"])
def test_a_drip_inside_one_read_is_cut_off(fake, tmp_path, monkeypatch, where):
    """A chunked body whose bytes drip into a chunk's size line, or into trailer lines after
    the last chunk: http.client reads them inside one read, so no piece of the body comes to
    be counted; the watchdog shuts the connection down after a window (here 0.5 s)."""
    from hlobundle._oci import _network

    monkeypatch.setattr(_network, "RATE_WINDOW_S", 0.5)
    artifact(EXAMPLE, fake)
    data = fake.blobs[_weights_digest()]
    stop = time.monotonic() + 15

    def drip(h):
        h.send_response(200)
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        try:
            if where == "size-line":
                h.wfile.write(b"%x;" % len(data))
            else:
                h.wfile.write(b"%x\r\n" % 100 + data[:100] + b"\r\n0\r\n")
            while time.monotonic() < stop:
                h.wfile.write(b"a" if where == "size-line" else b"X-A: b\r\n")
                h.wfile.flush()
                time.sleep(0.05)
        except OSError:
            pass
        h.close_connection = True

    fake.hooks[f"/v2/repo/blobs/{_weights_digest()}"] = drip
    started = time.monotonic()
    pull_refused(
        tmp_path, fake, hlobundle.errors.RegistryUnreachableError, "slower than", timeout=1
    )
    took = time.monotonic() - started  # within a few windows, not at some multiple of one
    assert took < 5 * 0.5, f"cut off after {took:.2f} s, the window 0.5 s"


def test_a_pointer_naming_a_path_with_a_nul_byte_is_ignored(fake, tmp_path):
    """The store's record of where a pull put a file, rewritten to hold a NUL byte: the next
    pull fetches the file (a NUL in a path is no file), not a ValueError."""
    artifact(EXAMPLE, fake)
    digest = _weights_digest().removeprefix("sha256:")
    hlobundle.pull(fake.ref(), tmp_path / "first.hlobundle")
    (tmp_path / "cache" / "located" / digest).write_bytes(b"0\n/tmp/a\0b")
    again = hlobundle.pull(fake.ref(), tmp_path / "second.hlobundle")
    size = (EXAMPLE / WEIGHTS).stat().st_size
    assert (
        again.reused
        == sum(p.stat().st_size for p in EXAMPLE.iterdir() if p.name != "manifest.json") - size
    )


def _same_length_other_bytes(raw: bytes) -> bytes:
    """Other bytes of the same length that still parse as JSON: a space made a tab (the same
    document), or, in compact JSON, the version 1.1 made 1.2."""
    other = raw.replace(b": ", b":\t", 1) if b": " in raw else raw.replace(b'"1.1"', b'"1.2"', 1)
    assert other != raw and len(other) == len(raw)
    json.loads(other)
    return other


def test_a_manifest_json_layer_of_other_bytes_is_refused_by_a_remote_load(fake):
    """`load("oci://...")` reads manifest.json from its layer in memory (`fetch_small`): the
    digest pinned in the OCI manifest is all that ties those bytes, and with them every file's
    sha256, to the reference. Other bytes of the same length, the same JSON, are refused."""
    artifact(EXAMPLE, fake)
    digest = digest_of((EXAMPLE / "manifest.json").read_bytes())
    fake.blobs[digest] = _same_length_other_bytes(fake.blobs[digest])
    with pytest.raises(
        hlobundle.errors.BlobDigestError, match="manifest.json .* has the digest"
    ) as e:
        hlobundle.load(fake.ref())
    assert e.value.code == "REGISTRY_DIGEST_MISMATCH" and e.value.digest == digest


def test_a_config_of_other_bytes_is_refused_by_a_pull(fake, tmp_path):
    digest = artifact(EXAMPLE, fake)
    document = json.loads(fake.manifests[digest][0])
    config = document["config"]["digest"]
    fake.blobs[config] = _same_length_other_bytes(fake.blobs[config])
    e = pull_refused(tmp_path, fake, hlobundle.errors.BlobDigestError, "config .* has the digest")
    assert e.code == "REGISTRY_DIGEST_MISMATCH" and e.digest == config


def test_an_answer_that_keeps_breaking_off_is_given_up_after_a_few_resumes(fake, tmp_path):
    """Each answer (the first, then every resumption by range) ends after 1 KiB: the pull
    gives up after MAX_RESUMES resumptions, saying so, rather than resuming for as long as
    the registry keeps sending a little."""
    from hlobundle._oci import _blobs

    artifact(EXAMPLE, fake)
    data = fake.blobs[_weights_digest()]
    calls = []

    def short(h):
        calls.append(h.headers.get("Range"))
        start = int(calls[-1][6:].split("-")[0]) if calls[-1] else 0
        h.send_response(206 if start else 200)
        if start:
            h.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        h.send_header("Content-Length", str(len(data) - start))
        h.end_headers()
        h.wfile.write(data[start : start + 1024])
        h.close_connection = True

    fake.hooks[f"/v2/repo/blobs/{_weights_digest()}"] = short
    e = pull_refused(tmp_path, fake, hlobundle.errors.HloBundleError, "ended after")
    assert e.code == "REGISTRY_UNREACHABLE", e.code  # each answer broke off
    assert f"{_blobs.MAX_RESUMES + 1} times" in str(e)
    assert len(calls) == _blobs.MAX_RESUMES + 1


def test_a_resumption_answered_from_another_byte_ispull_refused(fake, tmp_path):
    """A Range request from the byte where the answer broke off, answered with a 206 from byte
    0: the bytes would be appended at the wrong place. Refused, naming the Content-Range."""
    data, calls = _cut_once(
        fake,
        lambda h, data, start: h.send(
            206, data, {"Content-Range": f"bytes 0-{len(data) - 1}/{len(data)}"}
        ),
    )
    e = pull_refused(
        tmp_path, fake, hlobundle.errors.RegistryProtocolError, "was answered with Content-Range"
    )
    assert e.code == "REGISTRY_PROTOCOL" and calls == [None, f"bytes={len(data) // 2}-"]


def test_a_referrer_whose_signature_layer_claims_too_many_bytes_is_refused_unfetched(
    fake, tmp_path, keys
):
    """A signature over MAX_SIGNATURE_BYTES by its descriptor is refused before its blob is
    asked for: a registry cannot make the puller hold more than the limit."""
    from hlobundle._format import _limits
    from hlobundle._oci._referrers import SIGSTORE_BUNDLE

    digest = artifact(EXAMPLE, fake)
    blob = fake.add_blob(b"x" * 16)
    too_big = {
        "mediaType": SIGSTORE_BUNDLE,
        "digest": blob,
        "size": _limits.MAX_SIGNATURE_BYTES + 1,
    }
    signature = _referrer(fake, digest, SIGSTORE_BUNDLE, too_big)
    listed = {
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "digest": signature,
        "size": 1,
        "artifactType": SIGSTORE_BUNDLE,
    }
    _fallback(fake, digest, [listed])
    e = pull_refused(
        tmp_path,
        fake,
        hlobundle.errors.RegistryLimitError,
        f"the signature is {_limits.MAX_SIGNATURE_BYTES + 1} bytes",
        public_key=keys / "a.pub",
    )
    assert e.code == "REGISTRY_LIMIT_EXCEEDED"
    assert not [p for _, p, _ in fake.seen if p.endswith(blob)], "the blob was asked for"

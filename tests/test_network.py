"""The network rules (SPEC.md section 8, docs/security.md, docs/distribution.md): every answer
from any host the client talks to (a registry, its token service, a host a blob is redirected
to, a bundle's HTTP server) is read through one bounded, rate-watched, identity-encoded path;
a host is judged as urllib3 will connect to it; credentials go only where the user sent them,
never from `~/.netrc`, and no proxy or certificate authority comes from the environment unless
named. The registry is `oci_fake.Fake`."""

from __future__ import annotations

import json
import time

import pytest
from helpers import ROOT, cli
from http_static import gzip_bomb
from oci_fake import artifact, digest_of, pull_refused, serving

import hlobundle

pytest.importorskip("oras", reason="the oci extra (oras) is not installed")

EXAMPLE = ROOT / "examples" / "lenet5.hlobundle"
WEIGHTS = "weights.safetensors"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """The fake registry, serving the example; a store of this test's own, an empty HOME."""
    monkeypatch.setenv("HLOBUNDLE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    with serving() as running:
        artifact(EXAMPLE, running)
        yield running


def _bearer(fake, realm: str) -> None:
    """The registry asks for a token from `realm` before it serves the manifest."""
    challenge = f'Bearer realm="{realm}",service="fake",scope="repository:repo:pull"'

    def guarded(h):
        if h.headers.get("Authorization") != "Bearer t0ken":
            return h.send(401, b"", {"WWW-Authenticate": challenge})
        raw, kind = fake.manifests["v1"]
        return h.send(200, raw, {"Content-Type": kind})

    fake.hooks["/v2/repo/manifests/v1"] = guarded


def _weights_digest():
    return digest_of((EXAMPLE / WEIGHTS).read_bytes())


# ---- the token exchange is read as every other answer


@pytest.mark.slow
def test_a_token_service_that_sends_a_gzip_bomb_is_refused_not_inflated(fake, tmp_path):
    bomb = gzip_bomb()  # 64 MiB of zeros in 65 KB
    with serving() as tokens:

        def token(h):
            h.send(200, bomb, {"Content-Type": "application/json", "Content-Encoding": "gzip"})

        tokens.hooks["/token"] = token
        _bearer(fake, f"http://{tokens.host}/token")
        pull_refused(
            tmp_path, fake, hlobundle.errors.RegistryProtocolError, "Content-Encoding 'gzip'"
        )


@pytest.mark.slow  # a drip for most of a second, by design
def test_a_token_service_that_drips_is_cut_off(fake, tmp_path, monkeypatch):
    """A byte every 50 ms keeps each read inside --timeout; the rate over a window (here
    0.5 s) does not."""
    from hlobundle._oci import _network

    monkeypatch.setattr(_network, "RATE_WINDOW_S", 0.5)
    stop = time.monotonic() + 10
    with serving() as tokens:

        def drip(h):
            h.send_response(200)
            h.send_header("Content-Length", "100000")
            h.end_headers()
            try:
                while time.monotonic() < stop:
                    h.wfile.write(b" ")
                    h.wfile.flush()
                    time.sleep(0.05)
            except OSError:
                pass

        tokens.hooks["/token"] = drip
        _bearer(fake, f"http://{tokens.host}/token")
        started = time.monotonic()
        pull_refused(
            tmp_path, fake, hlobundle.errors.RegistryUnreachableError, "slower than", timeout=1
        )
        took = time.monotonic() - started
        assert took < 5 * 0.5, f"cut off after {took:.2f} s, the window 0.5 s"


@pytest.mark.slow  # a drip for most of a second, by design
def test_a_token_service_that_drips_its_headers_is_cut_off(fake, tmp_path, monkeypatch):
    """Header lines a byte at a time: http.client reads them inside one call, each byte well
    within --timeout; the answer's headers must have come within --timeout + RATE_WINDOW_S."""
    from hlobundle._oci import _network

    monkeypatch.setattr(_network, "RATE_WINDOW_S", 0.5)
    stop = time.monotonic() + 10
    with serving() as tokens:

        def drip(h):
            h.send_response(200)
            h.flush_headers()
            try:
                while time.monotonic() < stop:
                    h.wfile.write(b"X")
                    h.wfile.flush()
                    time.sleep(0.05)
            except OSError:
                pass
            h.close_connection = True

        tokens.hooks["/token"] = drip
        _bearer(fake, f"http://{tokens.host}/token")
        started = time.monotonic()
        pull_refused(
            tmp_path, fake, hlobundle.errors.RegistryUnreachableError, "headers", timeout=1
        )
        took = time.monotonic() - started
        assert took < 1 + 5 * 0.5, f"cut off after {took:.2f} s, the deadline 1.5 s"


# ---- a host is the host urllib3 connects to


@pytest.fixture
def trap():
    """A server on 127.0.0.2 (loopback, but not a name the client calls loopback): whatever
    reaches it went somewhere the client should not have sent it."""
    try:
        with serving(address="127.0.0.2") as running:
            yield running
    except OSError:
        pytest.skip("127.0.0.2 cannot be bound here")


def test_a_realm_whose_host_hides_behind_a_backslash_gets_no_credentials(
    fake, tmp_path, monkeypatch, trap
):
    """`http://127.0.0.2:P\\@127.0.0.1/token`: urlsplit reads the host 127.0.0.1 (loopback,
    plain HTTP allowed), urllib3 connects to 127.0.0.2:P."""
    monkeypatch.setenv("HLOBUNDLE_REGISTRY_AUTH", "user:password")
    trap.hooks["/token"] = lambda h: h.send(200, b'{"token": "t0ken"}')
    _bearer(fake, f"http://{trap.host}\\@127.0.0.1/token")
    pull_refused(tmp_path, fake, hlobundle.errors.RegistryAuthError, "127.0.0.2")
    assert trap.seen == []


def test_a_blob_redirect_whose_host_hides_behind_a_backslash_ispull_refused(fake, tmp_path, trap):
    data = fake.blobs[_weights_digest()]
    trap.hooks["/x"] = lambda h: h.send(200, data)
    fake.hooks[f"/v2/repo/blobs/{_weights_digest()}"] = lambda h: h.send(
        307, b"", {"Location": f"http://{trap.host}\\@127.0.0.1/x"}
    )
    pull_refused(
        tmp_path, fake, hlobundle.errors.RegistryProtocolError, "plain HTTP \\(http://127.0.0.2:"
    )
    assert trap.seen == []


# ---- credentials and proxies come only from where the user named them


def test_a_netrc_default_entry_is_never_sent(fake, tmp_path):
    """`~/.netrc`'s `default` matches every host: requests would send it to the registry and
    to a host a blob is redirected to."""
    netrc = tmp_path / "home" / ".netrc"
    netrc.write_text("default login someone password secret\n")
    netrc.chmod(0o600)
    data = fake.blobs[_weights_digest()]
    with serving() as other:
        other.hooks["/storage"] = lambda h: h.send(200, data)
        fake.hooks[f"/v2/repo/blobs/{_weights_digest()}"] = lambda h: h.send(
            307, b"", {"Location": f"http://{other.host}/storage"}
        )
        hlobundle.pull(fake.ref(), tmp_path / "ok.hlobundle")
        assert [p for _, p, _ in other.seen] == ["/storage"]
        sent = [h.get("Authorization") for _, _, h in fake.seen + other.seen]
    assert sent == [None] * len(sent)


@pytest.fixture
def proxies_in_environment(monkeypatch):
    """Every proxy variable names a trap."""
    with serving() as trap:
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
            monkeypatch.setenv(name, f"http://{trap.host}")
            monkeypatch.setenv(name.lower(), f"http://{trap.host}")
        for name in ("NO_PROXY", "no_proxy"):
            monkeypatch.delenv(name, raising=False)
        yield trap


def test_proxies_from_the_environment_are_not_used(fake, tmp_path, proxies_in_environment):
    hlobundle.pull(fake.ref(), tmp_path / "ok.hlobundle")
    assert hlobundle.load(fake.ref()).remote
    assert proxies_in_environment.seen == []


@pytest.fixture
def off_loopback():
    """The fake registry on 127.0.0.2, not a name the client calls loopback (so reached
    through a proxy; plain HTTP with --insecure), serving the example."""
    try:
        context = serving(address="127.0.0.2")
        registry = context.__enter__()
    except OSError:
        pytest.skip("127.0.0.2 cannot be bound here")
    try:
        artifact(EXAMPLE, registry)
        yield registry
    finally:
        context.__exit__(None, None, None)


def test_a_proxy_named_on_purpose_is_used(off_loopback, tmp_path, monkeypatch):
    """HLOBUNDLE_PROXY: every request to a host off loopback goes through it (here a fake that
    answers 404 to all); tests/test_proxy.py has a real one, and the loopback hosts."""
    with serving() as proxy:
        monkeypatch.setenv("HLOBUNDLE_PROXY", f"http://{proxy.host}")
        with pytest.raises(hlobundle.errors.RegistryNotFoundError):
            hlobundle.pull(off_loopback.ref(), tmp_path / "via.hlobundle", insecure=True)
    assert [p for _, p, _ in proxy.seen] == [f"http://{off_loopback.host}/v2/repo/manifests/v1"]
    assert off_loopback.seen == []


@pytest.mark.parametrize(
    "proxy",
    [
        "http://us:s3cret@127.0.0.1:99999",
        "http://us:s3cret@[::1",
        "http://us:s3cret@:9",
        "us:s3cret@127.0.0.1:99999",
        "http://us:s3cret://x@127.0.0.1:99999",
    ],
    ids=["port", "bracket", "no_host", "no_scheme", "scheme_in_password"],
)
def test_a_proxy_that_is_no_url_is_a_coded_error_that_never_shows_its_password(monkeypatch, proxy):
    """The independent attack of issue 64: requests' message for a proxy URL it cannot parse
    quoted it whole ("Failed to parse: http://us:s3cret@..."), password and all, into the
    error a terminal or a CI log shows. The proxy is checked before any request, and shown
    without its user and password (as `hop` shows it)."""
    monkeypatch.setenv("HLOBUNDLE_PROXY", proxy)
    with pytest.raises(hlobundle.errors.RegistryUnreachableError) as e:
        hlobundle.load("https://127.0.0.2:9/b.hlobundle/")
    assert "s3cret" not in str(e.value) and "HLOBUNDLE_PROXY" in str(e.value), e.value
    monkeypatch.delenv("HLOBUNDLE_PROXY")
    r = cli("inspect", "https://127.0.0.2:9/b.hlobundle/", "--proxy", proxy)
    assert r.returncode == 1 and "s3cret" not in r.stdout + r.stderr, r.stderr
    assert "--proxy" in r.stderr, r.stderr


@pytest.mark.parametrize(
    ("url", "loopback"),
    [
        ("http://LOCALHOST:5000/", True),
        ("http://[::1]:5000/", True),
        ("http://127.0.0.1/", True),
        ("http://localhost\\@example.com/", True),  # where urllib3 connects
        ("http://example.com\\@localhost/", False),
        ("http://127.0.0.2/", False),
        ("http://127.1/", False),
        ("http://2130706433/", False),
        ("http://0x7f000001/", False),
        ("http://0.0.0.0/", False),
        ("http://localhost./", False),
        ("http://localhost%2e/", False),
        ("http://[::ffff:127.0.0.1]/", False),
        ("http://[0:0:0:0:0:0:0:1]/", False),
    ],
)
def test_only_the_three_loopback_names_skip_the_proxy_and_allow_plain_http(
    monkeypatch, url, loopback
):
    """The independent attack of issue 64, on the loopback spellings: another spelling of a
    loopback address is judged as a host off loopback (plain HTTP refused, the proxy used),
    never the other way, so no spelling gets the loopback's allowances by accident (held)."""
    from hlobundle._oci import _network

    monkeypatch.setenv("HLOBUNDLE_PROXY", "http://proxy.example:3128")
    hop = _network.hop(_network.origin(url), insecure=False)
    assert (hop.allowed, hop.credentials, hop.proxy is None) == (loopback,) * 3, hop


@pytest.fixture
def private_ca(tmp_path, monkeypatch):
    """A throwaway certificate authority, and a TLS context of a server it certified for
    127.0.0.1 and 127.0.0.2; none of the CA variables is set."""
    pytest.importorskip("cryptography")
    from http_static import throwaway_ca

    for name in ("HLOBUNDLE_CA_FILE", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE", "CURL_CA_BUNDLE"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "ca").mkdir()
    return throwaway_ca(tmp_path / "ca", "127.0.0.1", "127.0.0.2")


@pytest.mark.parametrize("variable", ["HLOBUNDLE_CA_FILE", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE"])
def test_an_https_bundle_behind_a_private_ca(private_ca, tmp_path, monkeypatch, variable):
    from http_static import StaticServer

    ca, tls = private_ca
    monkeypatch.setenv("HLOBUNDLE_CACHE_DIR", str(tmp_path / "cache"))
    server = StaticServer(ROOT / "examples", tls=tls)
    try:
        url = server.url + "lenet5.hlobundle/"
        with pytest.raises(hlobundle.errors.RegistryUnreachableError, match="TLS|SSL"):
            hlobundle.load(url)
        monkeypatch.setenv(variable, str(ca))
        assert hlobundle.load(url).remote == url
    finally:
        server.close()


def test_a_registry_behind_a_private_ca(private_ca, tmp_path, monkeypatch):
    """127.0.0.2 is not a name the client calls loopback: the registry is spoken to in HTTPS."""
    ca, tls = private_ca
    monkeypatch.setenv("HLOBUNDLE_CACHE_DIR", str(tmp_path / "cache"))
    try:
        context = serving(address="127.0.0.2", tls=tls)
        registry = context.__enter__()
    except OSError:
        pytest.skip("127.0.0.2 cannot be bound here")
    try:
        artifact(EXAMPLE, registry)
        with pytest.raises(hlobundle.errors.RegistryUnreachableError, match="TLS|SSL"):
            hlobundle.pull(registry.ref(), tmp_path / "no.hlobundle")
        monkeypatch.setenv("HLOBUNDLE_CA_FILE", str(ca))
        hlobundle.pull(registry.ref(), tmp_path / "ok.hlobundle")
    finally:
        context.__exit__(None, None, None)


def test_a_ca_variable_naming_nothing_is_a_coded_error(monkeypatch, tmp_path):
    monkeypatch.setenv("HLOBUNDLE_CA_FILE", str(tmp_path / "absent.pem"))
    with pytest.raises(hlobundle.errors.RegistryUnreachableError, match="HLOBUNDLE_CA_FILE"):
        hlobundle.load("https://127.0.0.1:9/b.hlobundle/")


def test_the_system_store_when_asked(monkeypatch):
    import ssl

    from hlobundle._oci import _network

    monkeypatch.setenv("HLOBUNDLE_CA_FILE", "system")
    paths = ssl.get_default_verify_paths()
    assert _network.certificate_authority() == (paths.cafile or paths.capath or True)


# ---- an upload stays on the registry


def test_an_upload_location_on_another_host_ispull_refused(fake, tmp_path):
    """The registry answers the upload's POST with a Location on another host: nothing is
    sent there (the bundle's bytes, nor the registry's credentials)."""
    with serving() as other:

        def start(h):
            h.send(202, b"", {"Location": f"http://{other.host}/upload/1"})

        fake.hooks["/v2/repo/blobs/uploads/"] = start
        fake.blobs.clear()  # else push finds each blob there, and uploads none
        with pytest.raises(
            hlobundle.errors.RegistryProtocolError, match="only a blob download may leave"
        ):
            hlobundle.push(EXAMPLE, fake.ref("repo", ":v2"))
        assert other.seen == []


# ---- every request, listed


def _accept_uploads(fake) -> None:
    """The fake takes a push: an upload session at /v2/repo/blobs/uploads/1, and the manifest."""

    def accept(h):
        h.rfile.read(int(h.headers.get("Content-Length") or 0))
        status = 201 if h.command == "PUT" else 202
        h.send(status, b"", {"Location": "/v2/repo/blobs/uploads/1", "Range": "0-0"})

    for path in ("/v2/repo/blobs/uploads/", "/v2/repo/blobs/uploads/1", "/v2/repo/manifests/v2"):
        fake.hooks[path] = accept


def test_every_request_goes_through_the_one_bounded_session(
    fake, tmp_path, monkeypatch, proxies_in_environment
):
    """A pull that exchanges a token and follows a blob redirect to another host, a push with
    its uploads, remote loads of oci:// and http://: each request is listed, and each went
    through `_network`'s session: its timeout, no redirect followed by requests, no proxy
    (though the environment names one), identity asked, streamed so that only the bounded
    reader reads it."""
    import requests
    from http_static import StaticServer

    from hlobundle._oci import _network

    sent = []
    send = requests.Session.send

    def recording(self, request, **kwargs):
        sent.append((self, request, kwargs))
        return send(self, request, **kwargs)

    monkeypatch.setattr(requests.Session, "send", recording)
    data = fake.blobs[_weights_digest()]
    with serving() as tokens, serving() as other:
        tokens.hooks["/token"] = lambda h: h.send(200, b'{"token": "t0ken"}')
        _bearer(fake, f"http://{tokens.host}/token")
        other.hooks["/storage"] = lambda h: h.send(200, data)
        fake.hooks[f"/v2/repo/blobs/{_weights_digest()}"] = lambda h: h.send(
            307, b"", {"Location": f"http://{other.host}/storage"}
        )
        hlobundle.pull(fake.ref(), tmp_path / "ok.hlobundle", timeout=7)
        hlobundle.load(fake.ref(), timeout=7)
        server = StaticServer(ROOT / "examples")
        try:
            hlobundle.load(server.url + "lenet5.hlobundle/", timeout=7)
        finally:
            server.close()
        fake.blobs.clear()
        _accept_uploads(fake)
        hlobundle.push(EXAMPLE, fake.ref("repo", ":v2"), timeout=7)
    kinds = set()
    for session, request, kwargs in sent:
        assert isinstance(session, _network._session_class()), request.url
        assert kwargs["timeout"] == 7 and kwargs["stream"] is True, request.url
        assert kwargs["allow_redirects"] is False and kwargs["proxies"] == {}, request.url
        assert request.headers["Accept-Encoding"] == "identity", request.url
        kinds.add(_kind(request.method, request.url, tokens.host, other.host))
    assert kinds == {"token", "manifest", "blob", "redirected blob", "upload", "file"}
    assert proxies_in_environment.seen == []


def _kind(method: str, url: str, tokens: str, other: str) -> str:
    if tokens in url:
        return "token"
    if other in url:
        return "redirected blob"
    if "/blobs/uploads/" in url or method == "PUT":
        return "upload"
    if "/manifests/" in url or "/referrers/" in url:
        return "manifest"
    return "blob" if "/blobs/" in url else "file"


def test_no_module_but_the_network_one_makes_a_session():
    """Every request goes through `_network.session()`: no other module makes a requests
    session or calls requests' own functions."""
    import re

    forbidden = re.compile(
        r"requests\.(Session|get|post|put|patch|head|request)\b|urlopen|http\.client"
    )
    found = [
        str(p.relative_to(ROOT))
        for p in sorted((ROOT / "hlobundle").rglob("*.py"))
        if p.name != "_network.py"
        and not p.is_relative_to(ROOT / "hlobundle" / "_serve")
        and forbidden.search(p.read_text())
    ]
    assert found == []


# ---- a pulled manifest whose names cannot all be written


def test_a_manifest_listing_a_file_and_a_file_inside_it_is_path_unsafe(fake, tmp_path):
    import hashlib
    import shutil

    bundle = tmp_path / "nested.hlobundle"
    shutil.copytree(EXAMPLE, bundle)
    listed = json.loads((bundle / "manifest.json").read_text())
    for name, data in (("extra", b"a"), ("extra/x", b"b")):
        listed["files"][name] = {"size": 1, "sha256": hashlib.sha256(data).hexdigest()}
    (bundle / "manifest.json").write_text(json.dumps(listed))
    (bundle / "extra").write_bytes(b"a")
    fake.blobs.clear()
    fake.manifests.clear()
    _serve_listed(bundle, fake, {"extra/x": b"b"})
    e = pull_refused(tmp_path, fake, hlobundle.errors.UnsafePathError, "extra/x")
    assert e.code == "PATH_UNSAFE"


def _serve_listed(bundle, fake, extra: dict[str, bytes]) -> None:
    """Serve `bundle`'s manifest with every listed file as a layer; `extra` gives the bytes of
    names that are not files in `bundle`."""
    import hashlib

    from hlobundle._oci import _artifact

    listed = json.loads((bundle / "manifest.json").read_text())["files"]
    layers = []
    for name, entry in sorted(listed.items()):
        data = extra[name] if name in extra else (bundle / name).read_bytes()
        fake.add_blob(data)
        layers.append(_artifact.layer(name, entry["size"], entry["sha256"]))
    raw = (bundle / "manifest.json").read_bytes()
    fake.add_blob(raw)
    layers.append(_artifact.layer("manifest.json", len(raw), hashlib.sha256(raw).hexdigest()))
    config = _artifact.config("lenet5", "1.1", layers)
    fake.add_blob(config)
    document = json.loads(_artifact.manifest(config, digest_of(config), layers, "1.1"))
    fake.add_manifest(document, "v1")


def test_the_command_line_names_a_private_ca_and_a_proxy(
    private_ca, tmp_path, monkeypatch, off_loopback
):
    """`--ca-file` and `--proxy`, on every command that talks to the network: what the user
    named for one command, over the variables, and nothing after it."""
    from helpers import cli
    from http_static import StaticServer

    ca, tls = private_ca
    monkeypatch.setenv("HLOBUNDLE_CACHE_DIR", str(tmp_path / "cache"))
    server = StaticServer(ROOT / "examples", tls=tls)
    try:
        url = server.url + "lenet5.hlobundle/"
        r = cli("verify", url)
        assert r.returncode == 1 and "REGISTRY_UNREACHABLE" in r.stderr, r.stderr
        r = cli("verify", url, "--ca-file", str(ca))
        assert r.returncode == 0, r.stderr
        r = cli("inspect", url, "--ca-file", str(tmp_path / "absent.pem"))
        assert r.returncode == 1 and "--ca-file names the certificate authority" in r.stderr
        monkeypatch.setenv("HLOBUNDLE_CA_FILE", str(tmp_path / "absent.pem"))
        assert cli("verify", url, "--ca-file", str(ca)).returncode == 0  # the option wins
        monkeypatch.delenv("HLOBUNDLE_CA_FILE")
    finally:
        server.close()
    with serving() as proxy:
        out = tmp_path / "via.hlobundle"
        r = cli(
            "pull", off_loopback.ref(), "-o", out, "--insecure", "--proxy", f"http://{proxy.host}"
        )
        assert r.returncode == 1 and "REGISTRY_NOT_FOUND" in r.stderr, r.stderr
    assert [p for _, p, _ in proxy.seen] == [f"http://{off_loopback.host}/v2/repo/manifests/v1"]
    assert off_loopback.seen == []


@pytest.mark.slow
def test_a_head_answer_has_no_body_to_bound():
    """A HEAD answer's Content-Length is the size of what a GET would send (a blob's, when push
    asks whether the registry has it): not a body over the answers' bound. A push of a bundle
    with a file over 4 MiB failed there (REGISTRY_LIMIT_EXCEEDED)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from hlobundle._oci import _network

    big = _network.MAX_ANSWER_BYTES + 128

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_HEAD(self) -> None:  # noqa: N802 (http.server's name)
            self.send_response(200)
            self.send_header("Content-Length", str(big))
            self.end_headers()

        def do_GET(self) -> None:  # noqa: N802
            self.do_HEAD()  # and no body: the client refuses it by its Content-Length

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/v2/r/blobs/sha256:" + "0" * 64
    try:
        with _network.session("test") as session:
            answer = session.head(url)
            assert answer.status_code == 200 and int(answer.headers["Content-Length"]) == big
            assert answer.content == b""
            with pytest.raises(hlobundle.errors.RegistryLimitError):
                session.get(url)  # the same size as a body is over the bound
    finally:
        httpd.shutdown()
        httpd.server_close()

"""A proxy named on purpose (`--proxy`, HLOBUNDLE_PROXY; SPEC.md section 8, "The network"):
every judgement about a destination is made about the hop the connection really makes. A
loopback host is reached directly, never through the proxy (as Docker's, oras' and skopeo's
clients do); every other host through it; and a credential never crosses the proxy in clear
(plain HTTP, which the proxy reads as it is): over HTTPS the proxy sees a CONNECT and TLS.

The proxy is a real one (`forward_proxy.py`, a process of its own) that forwards what it is
asked and logs every request line and header it sees."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT, cli
from oci_fake import artifact, serving

import hlobundle

pytest.importorskip("oras", reason="the oci extra (oras) is not installed")

EXAMPLE = ROOT / "examples" / "lenet5.hlobundle"
CREDENTIALS = "user:password"
BASIC = "Basic " + base64.b64encode(CREDENTIALS.encode()).decode()


class Proxy:
    """`forward_proxy.py` running; `seen()`: what it logged, in order."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.process = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("forward_proxy.py")), str(log)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        self.url = f"http://127.0.0.1:{int(self.process.stdout.readline())}"

    def seen(self) -> list[dict]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def requests(self) -> list[str]:
        return [entry["request"].rsplit(" ", 1)[0] for entry in self.seen()]

    def credentials_seen(self) -> list[str]:
        """Every Authorization header the proxy read (in clear)."""
        return [
            value
            for entry in self.seen()
            for key, value in entry["headers"].items()
            if key.lower() == "authorization"
        ]

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(10)
        assert self.process.stdout is not None
        self.process.stdout.close()


@pytest.fixture
def proxy(tmp_path, monkeypatch):
    """The proxy, named in HLOBUNDLE_PROXY; every other proxy variable unset; a store of the
    test's own and the registry's credentials in HLOBUNDLE_REGISTRY_AUTH."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    monkeypatch.setenv("HLOBUNDLE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HLOBUNDLE_REGISTRY_AUTH", CREDENTIALS)
    running = Proxy(tmp_path / "proxy.log")
    monkeypatch.setenv("HLOBUNDLE_PROXY", running.url)
    try:
        yield running
    finally:
        running.close()


@pytest.fixture
def guarded():
    """The fake registry on 127.0.0.1, serving the example to Basic credentials only."""
    with serving() as fake:
        artifact(EXAMPLE, fake)
        fake.basic = CREDENTIALS
        yield fake


def _other_host(**options):
    """A context serving on 127.0.0.2, not a name the client calls loopback; a skip where it
    cannot be bound."""
    try:
        context = serving(address="127.0.0.2", **options)
        return context, context.__enter__()
    except OSError:
        pytest.skip("127.0.0.2 cannot be bound here")


# ---- a loopback host is reached directly


@pytest.mark.parametrize("how", ["pull", "load", "pull --proxy"])
def test_a_loopback_registry_is_reached_directly_never_through_the_proxy(
    guarded, proxy, tmp_path, monkeypatch, how
):
    """Before: every request, its Basic credentials in clear, went to the proxy."""
    if how == "pull":
        hlobundle.pull(guarded.ref(), tmp_path / "got.hlobundle")
    elif how == "load":
        assert hlobundle.load(guarded.ref()).remote
    else:
        monkeypatch.delenv("HLOBUNDLE_PROXY")
        out = tmp_path / "got.hlobundle"
        r = cli("pull", guarded.ref(), "-o", out, "--proxy", proxy.url)
        assert r.returncode == 0, r.stderr
    assert proxy.credentials_seen() == []
    assert proxy.requests() == []
    assert BASIC in [h.get("Authorization") for _, _, h in guarded.seen]  # it asked, was told


def test_a_bundle_s_loopback_http_server_is_reached_directly(proxy):
    from http_static import StaticServer

    server = StaticServer(ROOT / "examples")
    try:
        url = server.url + "lenet5.hlobundle/"
        assert hlobundle.load(url).remote == url
    finally:
        server.close()
    assert proxy.requests() == []


@pytest.mark.slow
def test_a_push_to_a_loopback_registry_never_goes_through_the_proxy(proxy, tmp_path, monkeypatch):
    """The real registry, asking for a user and password: `push --proxy` and `push --image`."""
    from oci_registry import PASSWORD, USER, serve

    monkeypatch.delenv("HLOBUNDLE_PROXY")
    monkeypatch.setenv("HLOBUNDLE_REGISTRY_AUTH", f"{USER}:{PASSWORD}")
    with serve(tmp_path / "registry", auth=True) as registry:
        for extra in ([], ["--image"]):
            r = cli("push", EXAMPLE, registry.ref("proxied"), "--proxy", proxy.url, *extra)
            assert r.returncode == 0, r.stderr
    assert proxy.credentials_seen() == []
    assert proxy.requests() == []


# ---- every other host through the proxy; a credential never in clear


@pytest.fixture
def private_ca(tmp_path, monkeypatch):
    pytest.importorskip("cryptography")
    from http_static import throwaway_ca

    (tmp_path / "ca").mkdir()
    ca, tls = throwaway_ca(tmp_path / "ca", "127.0.0.1", "127.0.0.2")
    monkeypatch.setenv("HLOBUNDLE_CA_FILE", str(ca))
    return tls


@pytest.mark.slow
def test_an_https_registry_off_loopback_is_reached_through_the_proxy_in_tls(
    proxy, private_ca, tmp_path
):
    """The proxy sees the CONNECT, then TLS: not a request line, not a credential."""
    context, fake = _other_host(tls=private_ca)
    try:
        artifact(EXAMPLE, fake)
        fake.basic = CREDENTIALS
        hlobundle.pull(fake.ref(), tmp_path / "got.hlobundle")
    finally:
        context.__exit__(None, None, None)
    requests = proxy.requests()
    assert requests and set(requests) == {f"CONNECT {fake.host}"}, requests
    assert proxy.credentials_seen() == []
    assert BASIC in [h.get("Authorization") for _, _, h in fake.seen]


@pytest.mark.slow
def test_plain_http_off_loopback_through_the_proxy_carries_no_credentials(proxy, tmp_path):
    """With --insecure the registry is spoken to in plain HTTP, through the proxy: anonymous
    requests go; when the registry asks for credentials, they are refused before any is
    looked up. Before: the proxy read the Basic credentials."""
    context, fake = _other_host()
    try:
        artifact(EXAMPLE, fake)
        hlobundle.pull(fake.ref(), tmp_path / "anonymous.hlobundle", insecure=True)
        assert proxy.requests()[0] == f"GET http://{fake.host}/v2/repo/manifests/v1"
        fake.basic = CREDENTIALS
        with pytest.raises(hlobundle.errors.RegistryAuthError, match="in clear through the proxy"):
            hlobundle.pull(fake.ref(), tmp_path / "refused.hlobundle", insecure=True)
        with pytest.raises(hlobundle.errors.RegistryUnreachableError, match="TLS"):
            hlobundle.pull(fake.ref(), tmp_path / "tls.hlobundle")  # no --insecure: HTTPS
    finally:
        context.__exit__(None, None, None)
    assert proxy.credentials_seen() == []
    assert not (tmp_path / "refused.hlobundle").exists()


def test_a_token_service_off_loopback_in_plain_http_through_the_proxy_is_sent_nothing(
    guarded, proxy, tmp_path
):
    """The loopback registry (reached directly) names a token service on another host in
    plain HTTP, allowed by --insecure: the user and password would cross the proxy in clear.
    Before: the proxy read them."""
    context, tokens = _other_host()
    try:
        tokens.hooks["/token"] = lambda h: h.send(200, b'{"token": "t0ken"}')
        challenge = f'Bearer realm="http://{tokens.host}/token",service="fake"'
        guarded.basic = None
        guarded.hooks["/v2/repo/manifests/v1"] = lambda h: h.send(
            401, b"", {"WWW-Authenticate": challenge}
        )
        with pytest.raises(hlobundle.errors.RegistryAuthError, match="in clear through the proxy"):
            hlobundle.pull(guarded.ref(), tmp_path / "got.hlobundle", insecure=True)
    finally:
        context.__exit__(None, None, None)
    assert proxy.credentials_seen() == []
    assert proxy.requests() == [] and tokens.seen == []

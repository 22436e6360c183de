"""The one way hlobundle talks HTTP (SPEC.md section 8, "The network"): every request to a
registry, its token service, a host a blob is redirected to, or a bundle's HTTP server goes
through a `Session` from `session()`, and every answer's body through `arriving()`.

A `Session` has a timeout on every request, follows no redirect, retries nothing, keeps no
cookie, asks for `Accept-Encoding: identity` and refuses any other encoding before a byte is
decoded, and reads an answer its caller wanted whole (`stream=False`, as oras asks for an
upload's answers) through the bounded reader, never past MAX_ANSWER_BYTES. It trusts nothing
from the environment (`trust_env` off: no `~/.netrc`, no proxy variables, no
`REQUESTS_CA_BUNDLE` read behind the user's back); what the user names on purpose is read
here: a certificate authority (HLOBUNDLE_CA_FILE, else REQUESTS_CA_BUNDLE, else SSL_CERT_FILE;
`system` for OpenSSL's own store) and a proxy (HLOBUNDLE_PROXY), which every request but
one to a loopback host goes through (`hop`: what a destination may be sent is judged of the
connection the request really makes).

A host is judged by `origin()`, as requests prepares the URL and urllib3 connects to it, never
by another parser's reading of it (`http://A\\@B/` is A to urllib3 and B to urlsplit).
"""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import ssl
import threading
from collections.abc import Iterator
from typing import Any, NamedTuple

from .._extras import pip_line
from .._format._errors import (
    BackendUnavailableError,
    RegistryLimitError,
    RegistryProtocolError,
    RegistryUnreachableError,
)

TIMEOUT_S = 30.0  # for a connection, and between two reads of an answer
MAX_ANSWER_BYTES = 4 << 20  # an answer read whole: a token, an upload's answer
LOOPBACK = frozenset({"localhost", "127.0.0.1", "[::1]"})
CA_VARIABLES = ("HLOBUNDLE_CA_FILE", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE")
PROXY_VARIABLE = "HLOBUNDLE_PROXY"

# A server that sends a byte just inside each read's timeout would hold a pull or a load for
# ever: fewer than MIN_RATE bytes a second of the body over any RATE_WINDOW_S seconds ends it
# (curl's --speed-limit and --speed-time), whether the reads return pieces slowly or a read
# never returns (the bytes dripping into a chunk's size line or a trailer, which http.client
# reads inside one read): a watchdog shuts the connection down.
MIN_RATE = 1024
RATE_WINDOW_S = 30.0


class Origin(NamedTuple):
    """Where a URL's request goes: its scheme, host (an IPv6 address in brackets) and port."""

    scheme: str
    host: str
    port: int | None

    @property
    def loopback(self) -> bool:
        return self.host in LOOPBACK

    def __str__(self) -> str:
        return f"{self.scheme}://{self.host}" + (f":{self.port}" if self.port else "")


def _require_requests() -> None:
    """The pip line where requests is not installed: every command that reaches the network
    comes here first (`origin`, `session`)."""
    try:
        import requests  # noqa: F401
    except ImportError as e:
        raise BackendUnavailableError(
            f"registries and remote bundles need the oci extra (requests): {pip_line('oci')} ({e})"
        ) from None


def origin(url: str) -> Origin | None:
    """The origin of `url` as requests prepares it and urllib3 parses it (what is connected
    to), or None for a URL requests would not send."""
    _require_requests()
    import requests
    from urllib3.util import parse_url

    try:
        prepared = requests.Request("GET", url).prepare().url or ""
        parts = parse_url(prepared)
    except (requests.exceptions.RequestException, ValueError):
        return None
    if parts.scheme not in ("http", "https") or not parts.host:
        return None
    return Origin(parts.scheme, parts.host.lower(), parts.port)


class Hop(NamedTuple):
    """What a request to `origin` really does (SPEC.md section 8): the connection it makes, to
    `proxy` or straight to `origin` (proxy None); whether it may be made at all (`allowed`);
    whether a credential (Basic, a token) may travel in it (`credentials`); `why` not. Over
    HTTPS the certificate checked is `origin`'s, through a proxy too (a CONNECT tunnel)."""

    origin: Origin
    proxy: str | None
    allowed: bool
    credentials: bool
    why: str


def hop(where: Origin, insecure: bool) -> Hop:
    """The one judgement of a destination, made about the hop the connection makes. A loopback
    host is reached directly, never through a proxy (as Docker's, oras' and skopeo's clients
    do: the proxy would talk to its own loopback); any other through the proxy the user named.
    Plain HTTP only to a loopback host, or when the user asked for it (`insecure`). A
    credential only where the scheme is allowed, and never in plain HTTP through a proxy,
    which reads it as it is (over HTTPS a proxy is asked to CONNECT and sees only TLS)."""
    proxy = proxy_for(where)
    if where.scheme == "http" and not (insecure or where.loopback):
        why = "plain HTTP only to a loopback host or with --insecure (insecure=True)"
        return Hop(where, proxy, False, False, why)
    if where.scheme == "http" and proxy:
        why = (
            f"a credential for {where} would go in clear through the proxy "
            f"{shown_proxy(proxy)} (plain HTTP, which it reads as it is): through a proxy, "
            "credentials go only over https:// (a loopback host is reached directly)"
        )
        return Hop(where, proxy, True, False, why)
    return Hop(where, proxy, True, True, "")


def session(ref: str, timeout: float = TIMEOUT_S) -> Any:
    """A new `Session`; its errors name `ref` (assign `.ref` to change it)."""
    return _session_class()(ref, timeout)


# What a command line named (`--ca-file`, `--proxy`), over the variables, while it runs.
_NAMED: dict[str, str] = {}


@contextlib.contextmanager
def named(ca_file: str | None = None, proxy: str | None = None) -> Iterator[None]:
    """The certificate authority and proxy the user named for the requests made inside, over
    CA_VARIABLES and PROXY_VARIABLE (`hlobundle --ca-file`, `--proxy`)."""
    saved = dict(_NAMED)
    _NAMED.update({k: v for k, v in (("--ca-file", ca_file), ("--proxy", proxy)) if v})
    try:
        yield
    finally:
        _NAMED.clear()
        _NAMED.update(saved)


def certificate_authority() -> str | bool:
    """What TLS answers are verified against (requests' `verify`): the file or directory that
    `--ca-file` or the first of CA_VARIABLES names; `system`: OpenSSL's default store; else
    requests' own (certifi)."""
    given = [("--ca-file", _NAMED["--ca-file"])] if "--ca-file" in _NAMED else []
    for name, value in given + [(n, os.environ.get(n, "")) for n in CA_VARIABLES]:
        if not value:
            continue
        if value == "system" and name in ("--ca-file", CA_VARIABLES[0]):
            paths = ssl.get_default_verify_paths()
            return paths.cafile or paths.capath or True
        if not os.path.exists(value):
            where = name if name.startswith("--") else f"${name}"
            raise RegistryUnreachableError(
                f"{where} names the certificate authority {value[:200]!r}, which is not there"
            )
        return value
    return True


def proxy_for(where: Origin) -> str | None:
    """The proxy a request to `where` goes through: the one the user named (`--proxy`, else
    HLOBUNDLE_PROXY), except to a loopback host, which is reached directly; else None."""
    if where.loopback:
        return None
    return _NAMED.get("--proxy") or os.environ.get(PROXY_VARIABLE) or None


def proxies(url: str) -> dict[str, str]:
    """requests' `proxies` for a request to `url`: its hop's proxy (`proxy_for`), else none."""
    where = origin(url)
    proxy = proxy_for(where) if where else None
    return {"http": proxy, "https": proxy} if proxy else {}


def shown_proxy(proxy: str) -> str:
    """The proxy's URL as an error shows it: without a user and password it may hold."""
    scheme, sep, rest = proxy.rpartition("://")
    return f"{scheme}{sep}{rest.rpartition('@')[2]}"[:200]


@functools.cache
def _session_class() -> type:
    _require_requests()
    import requests

    class Session(requests.Session):
        """requests' session, bounded as the module says."""

        def __init__(self, ref: str, timeout: float) -> None:
            super().__init__()
            self.ref, self.timeout = ref, timeout
            self.trust_env = False
            from http.cookiejar import DefaultCookiePolicy

            self.cookies.set_policy(DefaultCookiePolicy(allowed_domains=[]))
            self.verify = certificate_authority()
            adapter = _adapter_class()(timeout + RATE_WINDOW_S)
            self.mount("http://", adapter)
            self.mount("https://", adapter)

        def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
            kwargs["timeout"] = self.timeout
            kwargs["allow_redirects"] = False
            kwargs["proxies"] = proxies(url)  # the session's own are none
            whole = not kwargs.get("stream")
            kwargs["stream"] = True
            kwargs["headers"] = {**(kwargs.get("headers") or {}), "Accept-Encoding": "identity"}
            what = f"{method} {url[:200]}"
            response = _sent(
                lambda: super(Session, self).request(method, url, *args, **kwargs), what, self
            )
            refuse_encoded(response, what, self.ref)
            if method.upper() == "HEAD":  # no body, whatever size its Content-Length says
                response.close()
                response._content = b""
            elif whole:
                with response:
                    response._content = read_bounded(
                        response, MAX_ANSWER_BYTES, f"answer to {what}", self.ref
                    )
            return response

    return Session


@functools.cache
def _adapter_class() -> type:
    """requests' adapter, whose connections cut an answer off when its status line and headers
    have not all come within `headers_within` seconds (http.client reads them in one call, in
    which the rate of `arriving()` is not watched)."""
    import requests
    from urllib3 import connection, connectionpool

    class Deadline:
        headers_within = TIMEOUT_S + RATE_WINDOW_S

        def getresponse(self, *args: Any, **kwargs: Any) -> Any:
            self.cut = False  # a connection is reused, or made again in the same object
            timer = threading.Timer(self.headers_within, self._cut)
            timer.daemon = True
            timer.start()
            try:
                response = super().getresponse(*args, **kwargs)  # type: ignore[misc]
            except broken() as e:
                if self.cut:
                    raise _HeadersTooSlow(self.headers_within) from e
                raise
            finally:
                timer.cancel()
            if self.cut:  # the shutdown read as the headers' end
                response.close()  # and with it the socket its reader holds
                raise _HeadersTooSlow(self.headers_within)
            return response

        cut = False

        def _cut(self) -> None:
            self.cut = True
            sock = getattr(self, "sock", None)
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    @functools.cache
    def pools(within: float) -> dict[str, type]:
        made = {}
        for scheme, pool, conn in (
            ("http", connectionpool.HTTPConnectionPool, connection.HTTPConnection),
            ("https", connectionpool.HTTPSConnectionPool, connection.HTTPSConnection),
        ):
            timed = type(f"Timed{conn.__name__}", (Deadline, conn), {"headers_within": within})
            made[scheme] = type(f"Timed{pool.__name__}", (pool,), {"ConnectionCls": timed})
        return made

    class Adapter(requests.adapters.HTTPAdapter):
        def __init__(self, headers_within: float) -> None:
            self.headers_within = headers_within
            super().__init__(max_retries=0)

        def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
            super().init_poolmanager(*args, **kwargs)
            self.poolmanager.pool_classes_by_scheme = pools(self.headers_within)

        def proxy_manager_for(self, proxy: str, **kwargs: Any) -> Any:
            manager = super().proxy_manager_for(proxy, **kwargs)
            manager.pool_classes_by_scheme = pools(self.headers_within)
            return manager

    return Adapter


class _HeadersTooSlow(OSError):
    def __init__(self, within: float) -> None:
        super().__init__(f"the answer's headers did not all come within {within:g} s")


def _sent(send: Any, what: str, session: Any) -> Any:
    """`send()`'s answer; a coded error for one that never came."""
    import requests

    where = what.split(" ", 1)[1]
    try:
        return send()
    except requests.exceptions.SSLError as e:
        raise RegistryUnreachableError(
            f"{where}: TLS failed ({short(e)}); a server on plain HTTP needs --insecure "
            "(insecure=True), one whose certificate a private authority signed needs "
            "$HLOBUNDLE_CA_FILE",
            ref=session.ref,
        ) from None
    except requests.exceptions.Timeout:
        raise RegistryUnreachableError(
            f"{where} sent nothing for {session.timeout:g} s ({what.split(' ', 1)[0]})",
            ref=session.ref,
        ) from None
    except requests.exceptions.RequestException as e:
        raise RegistryUnreachableError(
            f"{where} cannot be reached ({short(e)})", ref=session.ref
        ) from None


# ---- reading an answer


class _Watchdog:
    """Shuts `response`'s connection down when fewer than MIN_RATE bytes a second were
    `counted` over the last RATE_WINDOW_S seconds."""

    def __init__(self, response: Any) -> None:
        connection = getattr(response.raw, "connection", None)
        self.sock = getattr(connection, "sock", None)
        self.counted, self.tripped = 0, False
        self._done = threading.Event()
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        seen = 0
        while not self._done.wait(RATE_WINDOW_S):
            if self.counted - seen < MIN_RATE * RATE_WINDOW_S:
                self.tripped = True
                if self.sock is not None:
                    with contextlib.suppress(OSError):
                        self.sock.shutdown(socket.SHUT_RDWR)  # the blocked read returns
                return
            seen = self.counted

    def stop(self) -> None:
        self._done.set()


def arriving(response: Any, size: int, what: str, ref: str) -> Iterator[bytes]:
    """An answer's body as it arrives: what is there, up to `size` bytes a piece (urllib3's
    `read1`; a plain read waits for all `size`), refused (RegistryUnreachableError) when it
    comes slower than MIN_RATE bytes a second over RATE_WINDOW_S seconds. A broken connection
    raises one of `broken()`."""
    read = getattr(response.raw, "read1", None)
    pieces = iter(lambda: read(size), b"") if read else response.iter_content(size)
    watchdog = _Watchdog(response)
    try:
        for piece in pieces:
            if watchdog.tripped:
                break
            watchdog.counted += len(piece)
            yield piece
    except broken():
        if not watchdog.tripped:
            raise
    finally:
        watchdog.stop()
    if watchdog.tripped:
        raise RegistryUnreachableError(
            f"the {what} arrives slower than {MIN_RATE} bytes/s over {RATE_WINDOW_S:g} s "
            f"({watchdog.counted} bytes in all)",
            ref=ref,
        )


def broken() -> tuple[type[BaseException], ...]:
    """What reading an answer raises when its connection breaks off or times out."""
    import requests
    from urllib3.exceptions import HTTPError

    return (requests.exceptions.RequestException, HTTPError, OSError)


def refuse_encoded(response: Any, what: str, ref: str) -> None:
    """An answer with a Content-Encoding (identity was asked: a digest is over the bytes as
    stored) is refused before any of it is decoded: a gzip bomb never inflates."""
    encoding = response.headers.get("Content-Encoding", "").strip()
    if encoding.lower() not in ("", "identity"):
        response.close()
        raise RegistryProtocolError(
            f"the answer to {what[:200]} comes with Content-Encoding {encoding[:40]!r}, though "
            "identity was asked: refused, not decoded",
            ref=ref,
        )


def read_bounded(response: Any, limit: int, what: str, ref: str) -> bytes:
    """An answer's body, refused (RegistryLimitError) past `limit` bytes, before or while read."""
    declared = response.headers.get("Content-Length", "")
    if declared.isdigit() and int(declared) > limit:
        raise RegistryLimitError(
            f"the {what} is {int(declared)} bytes; the limit is {limit}", ref=ref
        )
    chunks, total = [], 0
    try:
        for chunk in arriving(response, 1 << 16, what, ref):
            total += len(chunk)
            if total > limit:
                raise RegistryLimitError(f"the {what} is over the limit of {limit} bytes", ref=ref)
            chunks.append(chunk)
    except broken() as e:
        raise RegistryUnreachableError(f"reading the {what}: {short(e)}", ref=ref) from None
    return b"".join(chunks)


def short(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return text if len(text) <= 300 else text[:300] + "..."

"""The registry client: oras' `Registry` (its uploads and blob checks) over the one bounded
session of `_network` (a timeout, no redirect but a blob's, no retry that sleeps, nothing from
the environment), a 401 answered by `_auth` (credentials looked up when the registry asks and
sent to it alone, and to the token service its challenge names), and every status turned into a
coded error naming the reference.
"""

from __future__ import annotations

import functools
import hashlib
import json
from typing import Any
from urllib.parse import urljoin, urlsplit

from .._extras import pip_line
from .._format._errors import (
    BackendUnavailableError,
    BlobDigestError,
    HloBundleError,
    RegistryAuthError,
    RegistryNotFoundError,
    RegistryProtocolError,
    RegistryUnreachableError,
)
from . import _network
from ._auth import Auth
from ._network import TIMEOUT_S, read_bounded, short
from ._ref import Reference

MAX_MANIFEST_BYTES = 4 << 20  # a manifest, config or referrers index
MAX_ERROR_BYTES = 64 << 10  # what an error answer's body is read for its message
MAX_REDIRECTS = 5
UPLOAD_CHUNK = 16 << 20  # a PATCH of a chunked upload: what push holds in memory at once
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
INDEX = "application/vnd.oci.image.index.v1+json"


def _oras() -> Any:
    try:
        import oras.provider
    except ImportError as e:
        raise BackendUnavailableError(
            f"push and pull need the oci extra (oras): {pip_line('oci')} ({e})"
        ) from None
    return oras


@functools.cache
def _registry_class() -> type:
    """oras' Registry, asking the client for every request."""
    oras = _oras()

    class Registry(oras.provider.Registry):  # type: ignore[name-defined]
        client: Client

        def do_request(
            self,
            url: str,
            method: str = "GET",
            data: Any = None,
            headers: dict | None = None,
            json: Any = None,
            stream: bool = False,
        ) -> Any:
            return self.client.request(
                method, url, headers=headers, data=data, json=json, stream=stream
            )

    return Registry


class Client:
    """One repository of one registry, for one command. Plain HTTP only with `insecure`, or to
    a loopback host (localhost, 127.0.0.1, [::1]); what the registry may be sent is judged of
    the hop its requests make (`_network.hop`: straight to a loopback host, else through the
    proxy the user named)."""

    def __init__(self, ref: Reference, *, insecure: bool = False, timeout: float = TIMEOUT_S):
        self.session = _network.session(str(ref), timeout)
        self.auth = Auth(ref, self._send, asked_insecure=insecure)
        self.ref = ref
        self.asked_insecure = insecure  # plain HTTP anywhere; loopback alone needs no asking
        self.insecure = insecure or _loopback(ref.host)
        self.scheme = "http" if self.insecure else "https"
        self.origin = _network.origin(f"{self.scheme}://{ref.host}/")
        self.hop = _network.hop(self.origin, insecure) if self.origin else None
        self.registry = _registry_class()(hostname=ref.host, insecure=self.insecure)
        self.registry.client = self
        self.registry.session = self.registry.auth.session = self.session
        self.container = self.registry.get_container(f"{ref.host}/{ref.repository}:latest")

    @property
    def ref(self) -> Reference:
        return self._ref

    @ref.setter
    def ref(self, ref: Reference) -> None:
        self._ref = ref
        self.session.ref = str(ref)  # what the session's errors name
        self.auth.ref = ref  # and the authentication's

    def close(self) -> None:
        """Close the connections the session keeps open."""
        self.session.close()

    # ---- requests to the registry

    def url(self, kind: str, reference: str) -> str:
        """`/v2/<repository>/<kind>/<reference>` on the registry (kind: manifests, blobs, referrers)."""
        return f"{self.scheme}://{self.ref.host}/v2/{self.ref.repository}/{kind}/{reference}"

    def request(
        self,
        method: str,
        url: str,
        *,
        headers: dict | None = None,
        data: Any = None,
        json: Any = None,
        stream: bool = False,
    ) -> Any:
        """A request to the registry, authenticated when it asks (once per challenge)."""
        self._on_registry(url)
        headers = dict(headers or {})
        for _ in range(3):
            if self.auth.authorization:
                headers["Authorization"] = self.auth.authorization
            response = self._send(method, url, headers=headers, data=data, json=json, stream=stream)
            if response.status_code != 401:
                break
            response.close()
            self._credentials_may_go()
            self.auth.answer(response)
        if response.status_code in (401, 403):
            raise RegistryAuthError(
                f"{self.ref.host} refuses {method} {urlsplit(url).path} ({response.status_code})"
                f"{self.auth.whose()}",
                ref=str(self.ref),
            )
        return response

    def _credentials_may_go(self) -> None:
        """A RegistryAuthError, before any credential is looked up, where the registry's hop
        may not carry one (`_network.hop`)."""
        if self.hop is None or not self.hop.credentials:
            why = self.hop.why if self.hop else "its address cannot be judged"
            raise RegistryAuthError(
                f"{self.ref.host} asks for credentials; {why}", ref=str(self.ref)
            )

    def _send(self, method: str, url: str, **kwargs: Any) -> Any:
        return self.session.request(method, url, **kwargs)

    def _on_registry(self, url: str) -> None:
        where = _network.origin(url)
        if where is None or where != self.origin:
            raise RegistryProtocolError(
                f"{self.ref.host} sent the client to {where or repr(url[:200])}; only a blob "
                "download may leave the registry",
                ref=str(self.ref),
            )

    # ---- what the commands call

    def check(self, response: Any, what: str, ok: tuple[int, ...] = (200, 201, 202, 204)) -> None:
        """A coded error for an answer that is not one of `ok`, naming `what` was asked."""
        status = response.status_code
        if status in ok:
            return
        detail = _error_text(response)
        where = f"{self.ref.host}/{self.ref.repository}"
        if status == 404:
            raise RegistryNotFoundError(f"{where} has no {what} ({detail})", ref=str(self.ref))
        if 300 <= status < 400:
            raise RegistryProtocolError(
                f"{where} redirects the request for {what} ({status}, to "
                f"{response.headers.get('Location', '')[:200]!r}); only a blob download may be "
                "redirected",
                ref=str(self.ref),
            )
        error = RegistryUnreachableError if status >= 500 else RegistryProtocolError
        raise error(f"{where} answers {status} for {what} ({detail})", ref=str(self.ref))

    def get_manifest(self, reference: str, accept: list[str]) -> tuple[bytes, str, str]:
        """A manifest's bytes (at most MAX_MANIFEST_BYTES), media type and digest; asked by a
        digest, the bytes must have it; the registry's Docker-Content-Digest must agree."""
        what = f"manifest {reference}"
        response = self.request(
            "GET",
            self.url("manifests", reference),
            headers={"Accept": ", ".join(accept)},
            stream=True,
        )
        with response:
            self.check(response, what)
            raw = read_bounded(response, MAX_MANIFEST_BYTES, what, str(self.ref))
            media_type = response.headers.get("Content-Type", "").split(";")[0].strip()
            said = response.headers.get("Docker-Content-Digest")
        digest = "sha256:" + hashlib.sha256(raw).hexdigest()
        if reference.startswith("sha256:") and digest != reference:
            raise BlobDigestError(
                f"the manifest asked by {reference} has the digest {digest}",
                ref=str(self.ref),
                digest=reference,
            )
        if said and said.startswith("sha256:") and said != digest:
            raise BlobDigestError(
                f"{self.ref.host} says the manifest {reference} has the digest {said[:80]}; "
                f"its bytes have {digest}",
                ref=str(self.ref),
                digest=digest,
            )
        return raw, media_type, digest

    def put_manifest(self, raw: bytes, media_type: str, reference: str) -> Any:
        """PUT a manifest (or index) under a tag or its digest; the answer (its OCI-Subject
        header says whether the registry keeps referrers itself)."""
        response = self.request(
            "PUT", self.url("manifests", reference), data=raw, headers={"Content-Type": media_type}
        )
        with response:
            self.check(response, f"manifest {reference} (PUT)")
        digest = "sha256:" + hashlib.sha256(raw).hexdigest()
        said = response.headers.get("Docker-Content-Digest")
        if said and said != digest:
            raise RegistryProtocolError(
                f"{self.ref.host} stored the manifest as {said[:80]}; its bytes are {digest}",
                ref=str(self.ref),
                digest=digest,
            )
        return response

    def upload(self, path: str, descriptor: dict, what: str) -> None:
        """Upload one file as the blob `descriptor` names (oras: skipped when the registry has
        it; else a chunked upload, UPLOAD_CHUNK bytes at a time). The registry checks the digest."""
        try:
            response = self.registry.upload_blob(
                path, self.container, descriptor, do_chunked=True, chunk_size=UPLOAD_CHUNK
            )
        except ValueError as e:  # oras' own check of a PATCH's answer, or no upload session
            raise RegistryProtocolError(
                f"uploading {what} ({descriptor['digest']}): {short(e)}",
                ref=str(self.ref),
                digest=descriptor["digest"],
            ) from None
        self.check(
            response, f"upload of {what} ({descriptor['digest']})"
        )  # (oras' own, if it had it)

    def open_blob(self, digest: str, start: int = 0, end: int | None = None) -> Any:
        """A streaming answer for a blob, from byte `start` on, to `end` (excluded) when given
        (a Range request). Redirects are followed (at most MAX_REDIRECTS) as the distribution
        spec allows for blobs: to another host without credentials, and to plain HTTP only
        where plain HTTP is allowed."""
        headers = {}
        if start or end is not None:
            headers["Range"] = f"bytes={start}-{'' if end is None else end - 1}"
        url = self.url("blobs", digest)
        response = self.request("GET", url, headers=headers, stream=True)
        for _ in range(MAX_REDIRECTS):
            if response.status_code not in (301, 302, 303, 307, 308):
                return response
            response.close()
            url = urljoin(url, response.headers.get("Location", ""))
            target = _network.origin(url)
            if target is None:
                raise RegistryProtocolError(
                    f"the blob {digest} is redirected to {url[:200]!r}",
                    ref=str(self.ref),
                    digest=digest,
                )
            if not _network.hop(target, self.asked_insecure).allowed:
                raise RegistryProtocolError(
                    f"the blob {digest} is redirected to plain HTTP ({target}); "
                    "allowed only with --insecure",
                    ref=str(self.ref),
                    digest=digest,
                )
            if target == self.origin:
                response = self.request("GET", url, headers=headers, stream=True)
            else:  # another host: never the registry's credentials
                response = self._send("GET", url, headers=headers, stream=True)
        if response.status_code in (301, 302, 303, 307, 308):
            raise RegistryProtocolError(
                f"the blob {digest} is redirected more than {MAX_REDIRECTS} times",
                ref=str(self.ref),
                digest=digest,
            )
        return response


def _loopback(host: str) -> bool:
    """Whether the registry `host` (HOST[:PORT]) is a loopback host, as `_network` judges it."""
    where = _network.origin(f"https://{host}/")
    return where is not None and where.loopback


def _error_text(response: Any) -> str:
    """The registry's error message (its OCI errors JSON, or text), short and bounded."""
    raw = response._content if isinstance(response._content, bytes) else b""
    if not raw:
        try:
            raw = read_bounded(response, MAX_ERROR_BYTES, "error answer", "")
        except HloBundleError:  # too long, too slow, broken off: its status says enough
            raw = b""
    try:
        errors = json.loads(raw).get("errors") or []
        text = "; ".join(f"{e.get('code', '')}: {e.get('message', '')}" for e in errors[:5])
    except (ValueError, AttributeError, TypeError, RecursionError):
        text = raw.decode("utf-8", "replace")
    return (text.strip() or f"HTTP {response.status_code}")[:300]

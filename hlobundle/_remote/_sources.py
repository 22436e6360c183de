"""Where a remote bundle's bytes come from: an OCI registry (`oci://`, the artifact `push`
writes) or any HTTP server that honours Range (`https://HOST/PATH/B.hlobundle/`). A source
gives the manifest's bytes (bounded) and byte ranges of listed files (exactly the bytes asked
for, or the whole file where a server ignores Range); it checks nothing of what they mean:
the loader checks every byte against the manifest before it keeps it."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any
from urllib.parse import quote, urlsplit

from .._format import _limits
from .._format._errors import (
    HashMismatchError,
    ManifestTooLargeError,
    RegistryLimitError,
    RegistryNotFoundError,
    RegistryProtocolError,
    RegistryRefError,
    RegistryUnreachableError,
)
from .._format._fields import MANIFEST_NAME
from .._format._signature import MAX_SIGNATURE_BYTES, SIGNATURE_NAME

TIMEOUT_S = 30.0  # for a connection, and between two reads of an answer
PIECE = 1 << 20  # what is read from an answer at once
MAX_URL_CHARS = 2048


def stem(text: str) -> str:
    """A remote bundle's short name: the last component of its URL or repository, without a
    tag, a digest or `.hlobundle` (what `serve` names it by)."""
    last = text.rstrip("/").rsplit("/", 1)[-1]
    return last.split("@", 1)[0].split(":", 1)[0].removesuffix(".hlobundle")


class Source:
    """A remote bundle's bytes. `ref`: what errors name."""

    ref: str

    def manifest(self) -> bytes:
        raise NotImplementedError

    def signatures(self) -> list[bytes]:
        """The candidate signatures (model.sig's bytes), unverified."""
        raise NotImplementedError

    def check_listed(self, name: str, size: int, sha256: str) -> None:
        """What the source says of a listed file agrees with the manifest (nothing to say: an
        HTTP server lists nothing)."""

    def pieces(
        self, name: str, size: int, begin: int, end: int
    ) -> tuple[int, Generator[bytes, None, None]]:
        """Bytes `[begin, end)` of the listed file `name` (of `size` bytes), in pieces: the
        offset they start at (`begin`, or 0 where the server sent the whole file instead)."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Source:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_source(text: str, *, insecure: bool, timeout: float) -> Source:
    if text.startswith("oci://"):
        return OciSource(text, insecure=insecure, timeout=timeout)
    return HttpSource(text, insecure=insecure, timeout=timeout)


# ---- any HTTP server that honours Range


class HttpSource(Source):
    """`https://HOST/PATH/B.hlobundle/`: the bundle's files under that URL, by their listed
    names, through the one bounded session (`_network`): no redirect is followed (a server
    that sends one is refused), plain HTTP only to a loopback host or with `insecure`, no
    cookies, no credentials."""

    def __init__(self, url: str, *, insecure: bool, timeout: float) -> None:
        if len(url) > MAX_URL_CHARS:
            raise RegistryRefError(f"a URL of at most {MAX_URL_CHARS} characters", ref=url[:200])
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise RegistryRefError(f"{url[:200]!r} is not an https:// URL", ref=url[:200])
        if parts.query or parts.fragment or parts.username or parts.password:
            raise RegistryRefError(
                f"{url[:200]!r}: a bundle's URL has no query, fragment or credentials",
                ref=url[:200],
            )
        where = _network().origin(url)
        if where is None:
            raise RegistryRefError(f"{url[:200]!r} is not a URL requests sends", ref=url[:200])
        hop = _network().hop(where, insecure)
        if not hop.allowed:
            raise RegistryUnreachableError(f"{url[:200]}: {hop.why}", ref=url[:200])
        self.ref = url
        self.base = url if url.endswith("/") else url + "/"
        self.timeout = timeout
        self.session = _network().session(url[:200], timeout)

    def close(self) -> None:
        self.session.close()

    def _get(self, name: str, headers: dict[str, str]) -> Any:
        url = self.base + quote(name)
        response = self.session.request("GET", url, headers=headers, stream=True)
        status = response.status_code
        if status in (200, 206):
            return response
        response.close()
        if status == 404:
            raise RegistryNotFoundError(f"{url[:200]} is not there (404)", ref=self.ref, path=name)
        if 300 <= status < 400:
            raise RegistryProtocolError(
                f"{url[:200]} redirects ({status}, to "
                f"{response.headers.get('Location', '')[:200]!r}); a remote load follows no "
                "redirect: give the bundle's own URL",
                ref=self.ref,
                path=name,
            )
        error = RegistryUnreachableError if status >= 500 else RegistryProtocolError
        raise error(f"{url[:200]} answers {status}", ref=self.ref, path=name)

    def _small(self, name: str, limit: int) -> bytes:
        response = self._get(name, {})
        with response:
            if response.status_code != 200:
                raise RegistryProtocolError(
                    f"{name}: {response.status_code} to a plain GET", ref=self.ref, path=name
                )
            return _bounded(response, limit, name, self.ref)

    def manifest(self) -> bytes:
        try:
            return self._small(MANIFEST_NAME, _limits.MAX_MANIFEST_BYTES)
        except RegistryLimitError as e:
            raise ManifestTooLargeError(e.message, path=MANIFEST_NAME) from None

    def signatures(self) -> list[bytes]:
        try:
            return [self._small(SIGNATURE_NAME, MAX_SIGNATURE_BYTES)]
        except RegistryNotFoundError:
            return []

    def pieces(
        self, name: str, size: int, begin: int, end: int
    ) -> tuple[int, Generator[bytes, None, None]]:
        response = self._get(name, {"Range": f"bytes={begin}-{end - 1}"})
        return _ranged(response, name, size, begin, end, self.ref)


# ---- an OCI registry


class OciSource(Source):
    """`oci://HOST/REPO[:TAG|@DIGEST]`: the artifact `push` writes (or `oras push` of the
    directory). A tag is resolved once, to the manifest's digest; every layer is then fetched
    by the digest the bundle's manifest lists for its file, which the artifact must agree with."""

    def __init__(self, text: str, *, insecure: bool, timeout: float) -> None:
        from .._oci import _artifact, _ref
        from .._oci._client import INDEX, MANIFEST, Client

        target = _ref.parse(text)
        self.client = Client(target, insecure=insecure, timeout=timeout)
        try:
            raw, media_type, digest = self.client.get_manifest(target.reference, [MANIFEST, INDEX])
            self.client.ref = target.at(digest)  # errors from here on name the digest
            self.ref = str(self.client.ref)
            self.digest = digest
            self.artifact = _artifact.parse(raw, media_type, self.ref, digest)
        except BaseException:
            self.client.close()
            raise

    def close(self) -> None:
        self.client.close()

    def manifest(self) -> bytes:
        from .._oci import _blobs

        layer = self.artifact.manifest_layer
        if layer.size > _limits.MAX_MANIFEST_BYTES:
            raise ManifestTooLargeError(
                f"{self.ref}: the layer {MANIFEST_NAME} is {layer.size} bytes; the limit is "
                f"{_limits.MAX_MANIFEST_BYTES}",
                path=MANIFEST_NAME,
            )
        return _blobs.fetch_small(
            self.client, layer.digest, layer.size, _limits.MAX_MANIFEST_BYTES, MANIFEST_NAME
        )

    def signatures(self) -> list[bytes]:
        from .._oci import _blobs, _referrers

        found = _referrers.signatures(self.client, self.digest)
        layer = self.artifact.layers.get(SIGNATURE_NAME)
        if layer is not None:
            found.append(
                _blobs.fetch_small(
                    self.client, layer.digest, layer.size, MAX_SIGNATURE_BYTES, SIGNATURE_NAME
                )
            )
        return found

    def check_listed(self, name: str, size: int, sha256: str) -> None:
        """The layer titled `name` is the listed file: its size and digest."""
        layer = self.artifact.layers.get(name)
        if layer is None:
            raise RegistryNotFoundError(
                f"{self.ref}: the bundle's manifest lists {name!r}, and no layer is titled so",
                ref=self.ref,
                path=name,
            )
        if (layer.size, layer.digest) != (size, f"sha256:{sha256}"):
            raise HashMismatchError(
                f"{self.ref}: the layer {name!r} is {layer.digest} ({layer.size} bytes), the "
                f"bundle's manifest says sha256:{sha256} ({size} bytes)",
                path=name,
                field=f"files[{name!r}].sha256",
            )

    def pieces(
        self, name: str, size: int, begin: int, end: int
    ) -> tuple[int, Generator[bytes, None, None]]:
        layer = self.artifact.layers[name]  # check_listed() checked it first
        response = self.client.open_blob(layer.digest, begin, end)
        return _ranged(response, name, size, begin, end, self.ref)


# ---- answers


def _ranged(
    response: Any, name: str, size: int, begin: int, end: int, ref: str
) -> tuple[int, Generator[bytes, None, None]]:
    """The pieces of a range's answer: a 206 for exactly `[begin, end)`, or a 200 of the whole
    file (a server that ignores Range), each never longer than asked."""
    if response.status_code == 206:
        want = f"bytes {begin}-{end - 1}/{size}"
        got = response.headers.get("Content-Range", "")
        if got != want:
            response.close()
            raise RegistryProtocolError(
                f"{name}: the range {want!r} was asked, the answer is {got[:100]!r}",
                ref=ref,
                path=name,
            )
        return begin, _exactly(response, end - begin, name, ref)
    if response.status_code != 200:
        response.close()
        raise RegistryProtocolError(f"{name}: answered {response.status_code}", ref=ref, path=name)
    return 0, _exactly(response, size, name, ref, stop=end)


def _exactly(
    response: Any, length: int, name: str, ref: str, stop: int | None = None
) -> Generator[bytes, None, None]:
    """The answer's body, `length` bytes: refused past it (a body that never ends) or short.
    `stop`: only that many are wanted (of a whole file sent for a range): the answer is closed
    once they have come, not read to its end."""
    declared = response.headers.get("Content-Length", "")
    with response:
        if declared.isdigit() and int(declared) != length:
            raise RegistryProtocolError(
                f"{name}: {length} bytes were asked, the answer declares {declared}",
                ref=ref,
                path=name,
            )
        got = 0
        try:
            for piece in _network().arriving(response, PIECE, name, ref):
                got += len(piece)
                if got > length:
                    raise RegistryLimitError(
                        f"{name}: the answer goes on past the {length} bytes asked",
                        ref=ref,
                        path=name,
                    )
                yield piece
                if stop is not None and stop < length and got >= stop:
                    return  # what was asked has come: the rest is never read
        except _network().broken() as e:
            raise RegistryUnreachableError(f"reading {name}: {_short(e)}", ref=ref) from None
        if got != length:
            raise RegistryProtocolError(
                f"{name}: the answer ended after {got} of the {length} bytes asked",
                ref=ref,
                path=name,
            )


def _bounded(response: Any, limit: int, name: str, ref: str) -> bytes:
    declared = response.headers.get("Content-Length", "")
    if declared.isdigit() and int(declared) > limit:
        raise RegistryLimitError(f"{name} is {declared} bytes; the limit is {limit}", ref=ref)
    data = bytearray()
    try:
        for piece in _network().arriving(response, 1 << 16, name, ref):
            data += piece
            if len(data) > limit:
                raise RegistryLimitError(f"{name} is over the limit of {limit} bytes", ref=ref)
    except _network().broken() as e:
        raise RegistryUnreachableError(f"reading {name}: {_short(e)}", ref=ref) from None
    return bytes(data)


def _network() -> Any:
    """The one bounded session and reader both sources use: imported with the first remote
    read, so that a local load (`load()` of a path) does not import it."""
    from .._oci import _network

    return _network


def _short(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return text if len(text) <= 300 else text[:300] + "..."

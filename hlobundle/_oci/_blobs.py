"""Downloading a blob into a file: hashed as it streams, never past its declared size, resumed
by a Range request where the answer broke off (and the registry honours ranges), and checked
against its digest before anything uses it."""

from __future__ import annotations

import hashlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from .._format._errors import (
    BlobDigestError,
    RegistryLimitError,
    RegistryProtocolError,
    RegistryUnreachableError,
)
from .._read._store import Store
from ._client import Client
from ._network import arriving, broken

CHUNK = 1 << 20
MAX_RESUMES = 3


def from_store(store: Store, digest: str, size: int, target: Path) -> bool:
    """Write blob `digest` to the new file `target` from the store, hashed as it is copied;
    False (and no file) when the store lacks it, or holds other bytes."""
    pieces = store.pieces(digest.removeprefix("sha256:"), size)
    if pieces is None:
        return False
    h, written = hashlib.sha256(), 0
    with open(target, "xb") as f:
        try:
            for piece in pieces:
                h.update(piece)
                f.write(piece)
                written += len(piece)
        except OSError:  # the stored file, unreadable now (the disk's errors surface on fetch)
            written = -1
    if written == size and "sha256:" + h.hexdigest() == digest:
        return True
    target.unlink()
    return False


def download(client: Client, digest: str, size: int, target: Path, what: str) -> None:
    """Write blob `digest` (of `size` bytes, as the listing declares) to the new file `target`."""
    ref = str(client.ref)
    h, written, resumes = hashlib.sha256(), 0, 0
    with open(target, "xb") as f:
        while True:
            try:
                response = client.open_blob(digest, written)
            except RegistryUnreachableError:
                if not resumes:
                    raise
                resumes += 1  # the connection that broke off, reused: once more
                if resumes > MAX_RESUMES:
                    raise
                continue
            with response:
                if written and response.status_code == 200:  # ranges not honoured: start over
                    h, written = hashlib.sha256(), 0
                    f.seek(0)
                    f.truncate()
                client.check(response, f"blob {digest} ({what})", ok=(206,) if written else (200,))
                if written:
                    _check_range(response, written, digest, ref)
                h, written, broke = _stream(response, f, h, written, size, digest, what, ref)
            if written == size or size == 0:
                break
            resumes += 1
            if resumes > MAX_RESUMES:
                raise (RegistryUnreachableError if broke else RegistryProtocolError)(
                    f"the blob {digest} ({what}) ended after {written} of its {size} bytes, "
                    f"{resumes} times",
                    ref=ref,
                    digest=digest,
                    path=what,
                )
    if h.hexdigest() != digest.removeprefix("sha256:"):
        target.unlink()
        raise BlobDigestError(
            f"the blob {digest} ({what}) served by {client.ref.host} has the digest "
            f"sha256:{h.hexdigest()}",
            ref=ref,
            digest=digest,
            path=what,
        )


def _stream(
    response: Any, f: Any, h: Any, written: int, size: int, digest: str, what: str, ref: str
) -> tuple[Any, int, bool]:
    """Copy the answer's body on from `written`; stop at `size`. Whether it broke off. The
    bytes are hashed and written by a second thread while the next ones arrive (sha256 and
    the write release the GIL): one piece in flight at most."""
    breaks = broken()
    pieces = arriving(response, CHUNK, f"blob {digest} ({what})", ref)
    with ThreadPoolExecutor(1) as worker:
        pending = None
        try:
            while written < size:
                try:
                    chunk = next(pieces, b"")
                except breaks:  # the connection, not the disk (the worker's errors are raised)
                    return h, written, True
                if not chunk:
                    break
                if written + len(chunk) > size:
                    raise RegistryLimitError(
                        f"the blob {digest} ({what}) is longer than the {size} bytes declared",
                        ref=ref,
                        digest=digest,
                        path=what,
                    )
                if pending is not None:
                    pending.result()
                pending = worker.submit(_consume, h, f, chunk)
                written += len(chunk)
        finally:
            if pending is not None:
                pending.result()
    return h, written, False


def _consume(h: Any, f: Any, chunk: bytes) -> None:
    h.update(chunk)
    f.write(chunk)


def _check_range(response: Any, start: int, digest: str, ref: str) -> None:
    said = response.headers.get("Content-Range", "")
    if not said.startswith(f"bytes {start}-"):
        raise RegistryProtocolError(
            f"a Range request for the blob {digest} from byte {start} was answered with "
            f"Content-Range {said[:80]!r}",
            ref=ref,
            digest=digest,
        )


def fetch_small(client: Client, digest: str, size: int, limit: int, what: str) -> bytes:
    """A small blob (a config, a signature) in memory: at most `limit` bytes, digest checked."""
    from ._network import read_bounded

    ref = str(client.ref)
    if size > limit:
        raise RegistryLimitError(
            f"the {what} is {size} bytes; the limit is {limit}", ref=ref, digest=digest
        )
    response = client.open_blob(digest)
    with response:
        client.check(response, f"blob {digest} ({what})", ok=(200,))
        raw = read_bounded(response, min(size, limit), what, ref)
    if "sha256:" + hashlib.sha256(raw).hexdigest() != digest:
        raise BlobDigestError(
            f"the {what} {digest} served by {client.ref.host} has the digest "
            f"sha256:{hashlib.sha256(raw).hexdigest()}",
            ref=ref,
            digest=digest,
        )
    return raw

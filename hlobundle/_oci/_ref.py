"""Registry references: `oci://HOST[:PORT]/REPO[:TAG|@sha256:DIGEST]`, the scheme optional
(the OCI distribution spec's grammar for the repository, the tag and the digest)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from .._format._errors import RegistryRefError

SCHEME = "oci://"
DEFAULT_TAG = "latest"
_COMPONENT = r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*"
_REPOSITORY = re.compile(rf"{_COMPONENT}(?:/{_COMPONENT})*")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
_DIGEST = re.compile(r"sha256:[a-f0-9]{64}")
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST = re.compile(rf"(?:{_LABEL}(?:\.{_LABEL})*|\[[0-9A-Fa-f:.]+\])(?::[0-9]{{1,5}})?")
MAX_REF_CHARS = 2048


@dataclass(frozen=True)
class Reference:
    """A parsed reference. `host` keeps its port; `digest` wins over `tag` when both are given."""

    host: str
    repository: str
    tag: str | None
    digest: str | None

    @property
    def reference(self) -> str:
        """What the manifest is asked by: the digest, else the tag."""
        return self.digest or self.tag or DEFAULT_TAG

    def at(self, digest: str) -> Reference:
        """The same repository, pinned to `digest` (no tag)."""
        return replace(self, tag=None, digest=digest)

    def __str__(self) -> str:
        tail = f"@{self.digest}" if self.digest else f":{self.tag or DEFAULT_TAG}"
        return f"{SCHEME}{self.host}/{self.repository}{tail}"


def parse(text: str) -> Reference:
    """The reference `text` names; a `RegistryRefError` saying what is wrong otherwise."""
    if not isinstance(text, str) or len(text) > MAX_REF_CHARS:
        raise RegistryRefError(f"a reference is a string of at most {MAX_REF_CHARS} characters")
    body = text[len(SCHEME) :] if text.startswith(SCHEME) else text
    host, sep, rest = body.partition("/")
    if "://" in body or not sep or not _HOST.fullmatch(host):
        raise _bad(text, "HOST[:PORT]/ must come first (the scheme, if any, is oci://)")
    name, at, digest = rest.partition("@")
    tag = None
    if ":" in name.rsplit("/", 1)[-1]:
        name, _, tag = name.rpartition(":")
        if not _TAG.fullmatch(tag):
            raise _bad(text, f"the tag {tag!r} is not [A-Za-z0-9_][A-Za-z0-9._-]{{0,127}}")
    if not _REPOSITORY.fullmatch(name):
        raise _bad(text, f"the repository {name!r} is not lowercase components joined by '/'")
    if at and not _DIGEST.fullmatch(digest):
        raise _bad(text, f"the digest {digest!r} is not sha256: and 64 lowercase hex digits")
    return Reference(host, name, tag if tag or at else DEFAULT_TAG, digest or None)


def _bad(text: str, why: str) -> RegistryRefError:
    return RegistryRefError(
        f"{text!r} is not a registry reference: {why}; expected "
        "oci://HOST[:PORT]/REPO[:TAG|@sha256:DIGEST]",
        ref=text,
    )

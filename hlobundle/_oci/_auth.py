"""Answering a registry's 401 (docs/distribution.md, "Credentials"): Basic with the user and
password `_credentials` finds for the registry's host, Bearer with a token given or exchanged at
the token service the challenge names. Every request goes through the client's bounded
session; credentials go to the registry, and to a token service over HTTPS only (or plain HTTP
on loopback, or with --insecure), and never in clear through a proxy (`_network.hop`).

oras' `oras.auth` gives the challenge's parser and the Basic encoding used here. Its token
exchange is not used: it sends the user and password to whatever realm a challenge names, plain
HTTP included, and reads the answer unchecked (a traceback for one that is not a JSON object);
its Docker-config lookup runs a credential helper without a timeout, by any name the config
gives. `_credentials` keeps those bounds.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from .._format._errors import RegistryAuthError
from . import _credentials, _network
from ._ref import Reference

# RFC 6750's b64token: what a bearer token may hold, sent as it is in a header
_B64TOKEN = re.compile(r"[A-Za-z0-9._~+/-]+=*")


class Auth:
    """The Authorization header a client sends to one registry: none until the registry asks,
    then the answer to its last challenge. `send(method, url, **kwargs)`: the client's request
    through its bounded session; `asked_insecure`: plain HTTP allowed off loopback."""

    def __init__(self, ref: Reference, send: Callable[..., Any], *, asked_insecure: bool):
        self.ref = ref  # what errors name; the client keeps it current
        self.send = send
        self.asked_insecure = asked_insecure
        self.authorization: str | None = None
        self._found: _credentials.Credentials | None = None
        self._looked_up = False

    def credentials(self) -> _credentials.Credentials | None:
        """The registry's credentials, looked up once, when first needed."""
        if not self._looked_up:
            self._found = _credentials.find(self.ref.host, str(self.ref))
            self._looked_up = True
        return self._found

    def whose(self) -> str:
        """What an error says of the credentials tried."""
        found = self.credentials()
        return (
            f" with the credentials of {found.source}"
            if found
            else f"; no credentials were found (${_credentials.ENV}, or `docker login`)"
        )

    def answer(self, response: Any) -> None:
        """Take up the challenge of a 401 `response`: the Authorization to send next; a
        RegistryAuthError when there is none, or it is the one just refused."""
        challenge = response.headers.get("WWW-Authenticate", "")
        scheme = challenge.split(" ", 1)[0].lower()
        found = self.credentials()
        if scheme == "basic":
            basic = _basic(found)
            if basic is None:
                raise RegistryAuthError(
                    f"{self.ref.host} asks for a user and password{self.whose()}",
                    ref=str(self.ref),
                )
            new = f"Basic {basic}"
        elif scheme == "bearer":
            if found and found.token:
                new = f"Bearer {self._checked(found.token, found.source)}"
            else:
                new = f"Bearer {self.token(challenge)}"
        else:
            raise RegistryAuthError(
                f"{self.ref.host} answers 401 without a Basic or Bearer challenge "
                f"({challenge[:100]!r})",
                ref=str(self.ref),
            )
        if new == self.authorization:
            raise RegistryAuthError(
                f"{self.ref.host} refuses the credentials{self.whose()}", ref=str(self.ref)
            )
        self.authorization = new

    def token(self, challenge: str) -> str:
        """A bearer token from the service the challenge names, sent the user and password
        when there are some; over HTTPS unless that service is on loopback (or --insecure)."""
        from oras.auth.utils import parse_auth_header

        wanted = parse_auth_header(challenge)
        realm = wanted.realm or ""
        self._check_realm(realm)
        basic = _basic(self.credentials())
        params = {k: v for k, v in (("service", wanted.service), ("scope", wanted.scope)) if v}
        headers = {
            "Accept": "application/json",
            **({"Authorization": f"Basic {basic}"} if basic else {}),
        }
        response = self.send("GET", realm, params=params, headers=headers)
        token = _token_in(response, realm, str(self.ref)) if response.status_code == 200 else None
        if not isinstance(token, str) or not token:
            raise RegistryAuthError(
                f"the token service {realm[:200]} gives no token ({response.status_code})"
                f"{self.whose()}",
                ref=str(self.ref),
            )
        return self._checked(token, f"the token service {realm[:200]}")

    def _checked(self, token: str, whence: str) -> str:
        """`token`, when it is one (RFC 6750's b64token): anything else would be sent as other
        header lines, or not at all (a header is sent in Latin-1)."""
        if not _B64TOKEN.fullmatch(token):
            raise RegistryAuthError(
                f"{whence} gives {len(token)} characters that are not a bearer token "
                "(RFC 6750: letters, digits and -._~+/, then any =)",
                ref=str(self.ref),
            )
        return token

    def _check_realm(self, realm: str) -> None:
        """The token service's hop must carry credentials (`_network.hop`): a user and
        password go to it, and a token comes back."""
        where = _network.origin(realm)
        hop = _network.hop(where, self.asked_insecure) if where else None
        if hop is None or not hop.credentials:
            why = (
                hop.why
                if hop and hop.allowed
                else "credentials go only to an https:// one (or plain HTTP on loopback, or "
                "with --insecure)"
            )
            raise RegistryAuthError(
                f"{self.ref.host} names the token service {realm[:200]!r} ({where}); {why}",
                ref=str(self.ref),
            )


def _basic(found: _credentials.Credentials | None) -> str | None:
    """The Basic credentials of a user and password (oras' encoding), or None."""
    from oras.auth.utils import get_basic_auth

    if found is None or found.username is None or found.password is None:
        return None
    return str(get_basic_auth(found.username, found.password))


def _token_in(response: Any, realm: str, ref: str) -> object:
    """The token of a token service's answer (`token`, or OAuth's `access_token`)."""
    try:
        answer = json.loads(response.content)
        return answer.get("token") or answer.get("access_token")
    except (ValueError, AttributeError, RecursionError):
        raise RegistryAuthError(
            f"the token service {realm[:200]} answers something other than a JSON object",
            ref=ref,
        ) from None

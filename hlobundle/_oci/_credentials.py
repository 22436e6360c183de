"""Where a registry's credentials come from (docs/distribution.md, "Credentials"): the
`HLOBUNDLE_REGISTRY_AUTH` environment variable, else Docker's `config.json` (`auths`, then the
credential helpers of `credHelpers` and `credsStore`, run as `docker-credential-NAME get`).

They are looked up only when the registry asks (a 401), and only for the registry the reference
names: never for a host a blob is redirected to. What is sent, and where, is `_auth`'s.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .._format._errors import RegistryAuthError

ENV = "HLOBUNDLE_REGISTRY_AUTH"
MAX_CONFIG_BYTES = 1 << 20
HELPER_TIMEOUT_S = 30
_HELPER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


@dataclass(frozen=True)
class Credentials:
    """A user and password (basic auth, or exchanged for a bearer token), or a bearer token."""

    username: str | None = None
    password: str | None = None
    token: str | None = None
    source: str = ""


def find(host: str, ref: str) -> Credentials | None:
    """The credentials for `host` (with its port, as the reference spells it), or None."""
    value = os.environ.get(ENV)
    if value:
        user, sep, password = value.partition(":")
        if sep:
            return Credentials(user, password, source=f"${ENV}")
        return Credentials(token=value, source=f"${ENV} (a token)")
    config = _docker_config(ref)
    entry = _auth_entry(config.get("auths"), host)
    if isinstance(entry, dict) and isinstance(entry.get("auth"), str) and entry["auth"]:
        return _decoded(entry["auth"], ref, "the Docker config's auths")
    helpers = config.get("credHelpers")
    helper = helpers.get(host) if isinstance(helpers, dict) else None
    helper = helper or config.get("credsStore")
    return _from_helper(helper, host, ref) if isinstance(helper, str) and helper else None


def _docker_config(ref: str) -> dict:
    directory = os.environ.get("DOCKER_CONFIG") or Path.home() / ".docker"
    path = Path(directory) / "config.json"
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError:
        return {}
    try:
        if len(raw) > MAX_CONFIG_BYTES:
            raise ValueError(f"over {MAX_CONFIG_BYTES} bytes")
        config = json.loads(raw)
        if not isinstance(config, dict):
            raise ValueError("not a JSON object")
    except (ValueError, RecursionError) as e:
        raise RegistryAuthError(f"{path} cannot be read as Docker's config: {e}", ref=ref) from None
    return config


def _auth_entry(auths: object, host: str) -> object:
    if not isinstance(auths, dict):
        return None
    for key in (host, f"https://{host}", f"http://{host}", f"https://{host}/v1/"):
        if key in auths:
            return auths[key]
    return None


def _decoded(auth: str, ref: str, source: str) -> Credentials:
    try:
        user, sep, password = base64.b64decode(auth, validate=True).decode().partition(":")
    except ValueError:
        sep = ""
    if not sep:
        raise RegistryAuthError(f"{source}: an auth that is not base64 of user:password", ref=ref)
    return Credentials(user, password, source=source)


def _from_helper(name: str, host: str, ref: str) -> Credentials | None:
    if not _HELPER_NAME.fullmatch(name):
        raise RegistryAuthError(f"the Docker config names the credential helper {name!r}", ref=ref)
    binary = f"docker-credential-{name}"
    try:
        done = subprocess.run(
            [binary, "get"],
            input=host.encode(),
            capture_output=True,
            timeout=HELPER_TIMEOUT_S,
            check=False,
        )
    except FileNotFoundError:
        raise RegistryAuthError(
            f"the Docker config asks {binary} for {host}'s credentials, and it is not on PATH",
            ref=ref,
        ) from None
    except subprocess.TimeoutExpired:
        raise RegistryAuthError(
            f"{binary} gave no answer in {HELPER_TIMEOUT_S} s", ref=ref
        ) from None
    if done.returncode != 0:  # "credentials not found in native keychain": none for this host
        return None
    try:
        answer = json.loads(done.stdout[:MAX_CONFIG_BYTES])
        user, secret = answer["Username"], answer["Secret"]
        if not (isinstance(user, str) and isinstance(secret, str)):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        raise RegistryAuthError(
            f"{binary} answered something other than its JSON", ref=ref
        ) from None
    if user == "<token>":  # an identity token: Docker's OAuth refresh token, sent as a password
        return Credentials("<token>", secret, source=binary)
    return Credentials(user, secret, source=binary)

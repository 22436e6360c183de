"""A real OCI registry for the tests: CNCF distribution's `docker-registry serve` (Debian's
package; `.ci/run` installs it) on loopback and a free port, with filesystem storage in a
scratch directory, and optionally htpasswd (basic) auth.

Without the binary the tests that use it skip, saying why, except in CI (`CI` or `HLOBUNDLE_CI`
set), where a missing registry fails them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

BINARY = "docker-registry"
USER, PASSWORD = "tester", "s3cret-pass"


def in_ci() -> bool:
    return bool(os.environ.get("CI") or os.environ.get("HLOBUNDLE_CI"))


def unavailable(why: str) -> None:
    """Skip the test, saying why; in CI, fail it."""
    if in_ci():
        pytest.fail(f"{why}, and CI (CI or HLOBUNDLE_CI set) needs it")
    pytest.skip(why)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Registry:
    host: str
    storage: Path
    process: subprocess.Popen

    def ref(self, repository: str, tail: str = ":v1") -> str:
        return f"oci://{self.host}/{repository}{tail}"


def bcrypt_hash(password: str) -> str | None:
    """An htpasswd bcrypt hash (cost 4: the registry checks it at every request): from the
    bcrypt module, else the C library's crypt (Python 3.11, 3.12)."""
    try:
        import bcrypt

        return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()
    except ImportError:
        pass
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            import crypt
        except ImportError:
            return None
        hashed = crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=16))
    return hashed if hashed and hashed.startswith("$2") else None


@contextlib.contextmanager
def serve(root: Path, *, auth: bool = False) -> Iterator[Registry]:
    """A registry storing under `root`, until the block ends."""
    binary = shutil.which(BINARY)
    if binary is None:
        unavailable(f"{BINARY} is not installed (apt-get install docker-registry)")
    port = free_port()
    root.mkdir(parents=True, exist_ok=True)
    lines = [
        "version: 0.1",
        "log: {level: error}",
        f"storage: {{filesystem: {{rootdirectory: {root / 'data'}}}, delete: {{enabled: true}}}}",
        f"http: {{addr: 127.0.0.1:{port}}}",
    ]
    if auth:
        hashed = bcrypt_hash(PASSWORD)
        if hashed is None:
            pytest.skip("no bcrypt for htpasswd here (neither the bcrypt module nor crypt)")
        (root / "htpasswd").write_text(f"{USER}:{hashed}\n")
        lines.append(f"auth: {{htpasswd: {{realm: hlobundle-tests, path: {root / 'htpasswd'}}}}}")
    (root / "config.yml").write_text("\n".join(lines) + "\n")
    log = open(root / "registry.log", "wb")
    process = subprocess.Popen(
        [binary, "serve", str(root / "config.yml")], stdout=log, stderr=subprocess.STDOUT
    )
    try:
        _wait(port, process, root)
        yield Registry(f"127.0.0.1:{port}", root / "data", process)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def _wait(port: int, process: subprocess.Popen, root: Path) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"{BINARY} exited: {(root / 'registry.log').read_text()[-2000:]}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=1).close()
            return
        except urllib.error.HTTPError as e:
            if e.code == 401:  # up, and asking for credentials
                return
        except OSError:
            pass
        time.sleep(0.01)  # a start is over within the poll
    pytest.fail(f"{BINARY} did not answer on port {port} within 20 s")

"""`serve --uds PATH` and `--grpc-uds PATH` (hlobundle/_serve/_uds.py): the socket file is
owner-only whatever the umask, replaces nothing, is removed on exit only while it is still the
one made, and a path too long for a unix socket is a coded error; the server answers REST (curl)
and gRPC (tritonclient) through it and drains on SIGTERM."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
from pathlib import Path

import helpers
import numpy as np
import pytest
from helpers import ROOT, cli

import hlobundle
from hlobundle._format._errors import InputError
from hlobundle._serve import _uds

EXAMPLE = ROOT / "examples" / "lenet5.hlobundle"


@pytest.fixture
def here(tmp_path, monkeypatch):
    """A working directory of the test's own: socket paths stay short and relative."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _what_is_there(path: str) -> tuple[int, int, int]:
    found = os.lstat(path)
    return found.st_mode, found.st_ino, found.st_size


def _planted(kind: str, path: str) -> list[socket.socket]:
    """Something of someone else's at `path`; the sockets kept open (a live server)."""
    if kind == "regular file":
        Path(path).write_text("someone's data")
    elif kind == "directory":
        os.mkdir(path)
    elif kind == "symbolic link":
        Path("target").write_text("someone's data")
        os.symlink("target", path)
    elif kind == "dangling symbolic link":
        os.symlink("nowhere", path)
    elif kind == "FIFO":
        os.mkfifo(path)
    else:  # a live server's socket
        live = socket.socket(socket.AF_UNIX)
        live.bind(path)
        live.listen()
        return [live]
    return []


KINDS = ["regular file", "directory", "symbolic link", "dangling symbolic link", "FIFO", "socket"]


@pytest.mark.parametrize("kind", KINDS)
def test_nothing_at_the_path_is_replaced(here, kind):
    kept = _planted(kind, "s.sock")
    before = _what_is_there("s.sock")
    with pytest.raises(InputError, match=r"--uds 's.sock': exists \(a ") as e:
        with _uds.listening("s.sock"):
            pass
    assert e.value.code == "INPUT_INVALID" and e.value.argument == "uds"
    assert "serve replaces nothing" in e.value.message
    assert _what_is_there("s.sock") == before
    for s in kept:
        s.close()


@pytest.mark.parametrize("kind", ["socket", "regular file"])
def test_grpc_replaces_nothing_either(here, kind):
    # grpc's own bind of `unix:PATH` deletes a socket at PATH and takes its place
    _grpc = pytest.importorskip("hlobundle._serve._grpc", reason="grpcio is not installed")
    kept = _planted(kind, "g.sock")
    before = _what_is_there("g.sock")
    with pytest.raises(InputError, match=r"--grpc-uds 'g.sock': exists") as e:
        with _grpc.serving({}, uds="g.sock"):
            pass
    assert e.value.argument == "grpc_uds"
    assert _what_is_there("g.sock") == before
    for s in kept:
        s.close()


def test_the_socket_is_owner_only_whatever_the_umask(here):
    old = os.umask(0)  # a umask that would leave the socket writable, connectable, by anyone
    try:
        with _uds.listening("s.sock"):
            mode = os.lstat("s.sock").st_mode
            assert os.umask(0) == 0  # the umask is the user's again once it is bound
    finally:
        os.umask(old)
    assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600


def test_grpc_s_socket_is_owner_only_too(here):
    _grpc = pytest.importorskip("hlobundle._serve._grpc", reason="grpcio is not installed")
    old = os.umask(0)
    try:
        with _grpc.serving({}, uds="g.sock"):
            mode = os.lstat("g.sock").st_mode
    finally:
        os.umask(old)
    assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600
    assert not os.path.lexists("g.sock")  # removed on exit


def test_only_the_socket_made_here_is_removed(here):
    with _uds.listening("s.sock"):
        assert stat.S_ISSOCK(os.lstat("s.sock").st_mode)
        os.unlink("s.sock")  # someone else's socket put in its place
        other = socket.socket(socket.AF_UNIX)
        other.bind("s.sock")
    assert stat.S_ISSOCK(os.lstat("s.sock").st_mode)
    other.close()
    os.unlink("s.sock")
    with _uds.listening("s.sock"):
        os.unlink("s.sock")
        Path("s.sock").write_text("someone's data")
    assert Path("s.sock").read_text() == "someone's data"
    os.unlink("s.sock")
    with _uds.listening("s.sock"):
        pass
    assert not os.path.lexists("s.sock")


@pytest.mark.parametrize("flag", ["--uds", "--grpc-uds"])
def test_a_path_too_long_for_a_unix_socket_is_a_coded_error(here, flag):
    path = "d" * 50 + "/" + "s" * 57  # 108 bytes: the kernel holds 107 and a NUL
    os.mkdir("d" * 50)
    with pytest.raises(InputError, match=rf"{flag} '{path}': is 108 bytes long: .* at most 107"):
        _uds.check(path, flag)
    with pytest.raises(InputError, match="is 108 bytes long"):
        with _uds.listening(path):
            pass
    with _uds.listening(path[:-1]):  # 107 bytes fit
        pass


def test_a_missing_directory_is_a_coded_error(here):
    with pytest.raises(InputError, match=r"--uds 'no/s.sock': cannot be made \(No such file"):
        with _uds.listening("no/s.sock"):
            pass


@pytest.fixture
def compiled(monkeypatch):
    """The bundles whose function was made (compiled) in this test, by directory name."""
    from hlobundle._read._reader import Bundle

    made, function = [], Bundle.function
    monkeypatch.setattr(
        Bundle,
        "function",
        lambda self, *a, **k: made.append(self.path.name) or function(self, *a, **k),
    )
    return made


def test_the_cli_refuses_a_path_in_use_before_anything_compiles(here, compiled):
    Path("taken").write_text("someone's data")
    r = cli("serve", EXAMPLE, "--backend", "xla", "--uds", "taken")
    assert r.returncode == 1 and "serving" not in r.stdout, r.stdout + r.stderr
    assert r.stderr.startswith("error [INPUT_INVALID] --uds 'taken': exists (a regular file)")
    pytest.importorskip("grpc", reason="grpcio is not installed")
    r = cli("serve", EXAMPLE, "--backend", "xla", "--uds", "s.sock", "--grpc-uds", "taken")
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stderr.startswith("error [INPUT_INVALID] --grpc-uds 'taken': exists")
    assert not os.path.lexists("s.sock")  # REST's socket, made first, removed
    assert compiled == [] and Path("taken").read_text() == "someone's data"


@pytest.mark.parametrize(
    "flags", [["--uds", "a", "--port", "1"], ["--grpc-uds", "a", "--grpc-port", "1"]]
)
def test_a_socket_and_a_port_for_one_protocol_is_a_usage_error(here, flags):
    r = cli("serve", EXAMPLE, *flags)
    assert r.returncode == 2 and "not allowed with argument" in r.stderr, r.stderr


def _curl(path: str, url: str, *data: str) -> str:
    command = ["curl", "-sS", "--fail", "--unix-socket", path, f"http://localhost{url}"]
    return subprocess.run(
        command + [*data], capture_output=True, text=True, check=True, timeout=60
    ).stdout


@pytest.mark.slow
@pytest.mark.subprocess
def test_serve_answers_over_unix_sockets_and_drains_on_sigterm(here):
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    grpcclient = pytest.importorskip("tritonclient.grpc", reason="tritonclient[grpc] is absent")
    proc = helpers.CLI_ZYGOTE.start(  # a fork of the CLI zygote, a process of its own
        *("serve", EXAMPLE, "--backend", "xla", "--uds", "rest.sock", "--grpc-uds", "grpc.sock"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    bundle = hlobundle.load(EXAMPLE)
    images = np.asarray(bundle.tensor("images"))
    want = np.asarray(bundle.function("xla")(*bundle.example_args()))
    try:
        ready = ["--retry", "120", "--retry-delay", "1", "--retry-all-errors"]
        assert json.loads(_curl("rest.sock", "/v2/health/ready", *ready)) == {"ready": True}
        body = {
            "inputs": [
                {
                    "name": "images",
                    "shape": list(images.shape),
                    "datatype": "FP32",
                    "data": images.ravel().tolist(),
                }
            ]
        }
        answer = _curl("rest.sock", "/v2/models/lenet5/infer", "--json", json.dumps(body))
        out = json.loads(answer)["outputs"][0]
        np.testing.assert_allclose(np.float32(out["data"]).reshape(want.shape), want, rtol=1e-5)
        client = grpcclient.InferenceServerClient("unix:grpc.sock")
        tensor = grpcclient.InferInput("images", list(images.shape), "FP32")
        tensor.set_data_from_numpy(images)
        got = client.infer("lenet5", [tensor]).as_numpy("result")
        np.testing.assert_allclose(got, want, rtol=1e-5)
        client.close()
        for path in ("rest.sock", "grpc.sock"):
            assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600
    finally:
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr[-2000:]
    assert stdout.startswith("serving lenet5 at http://localhost/v2 over unix:rest.sock\n")
    assert "serving gRPC (inference.GRPCInferenceService) at unix:grpc.sock" in stdout
    assert "/infer" not in stdout + stderr  # no line a request without --access-log
    assert sorted(os.listdir()) == []  # both sockets removed, nothing else left


@pytest.mark.slow
@pytest.mark.subprocess
def test_the_docs_block_runs(tmp_path):
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    from test_readme import _bash, _sh

    # the block's SIGTERM to its server (`kill $server`) reaches the fork that serves
    r = _bash(_sh("docs/serving.md", "Over a unix socket: `--uds`"), tmp_path)
    assert '"name":"lenet5"' in r.stdout, r.stdout
    assert not (tmp_path / "lenet5.sock").exists()

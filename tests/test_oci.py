"""push and pull against a real registry (CNCF distribution, `tests/oci_registry.py`), and the
cross-checks with independent clients: oras pulls what hlobundle pushed and hlobundle pulls what
oras pushed, byte for byte; skopeo sees the ModelPack types; signatures travel as referrers."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from helpers import ROOT, cli
from oci_registry import PASSWORD, USER, serve

import hlobundle

pytest.importorskip("oras", reason="the oci extra (oras) is not installed")

EXAMPLE = ROOT / "examples" / "lenet5.hlobundle"
FILES = sorted(p.name for p in EXAMPLE.iterdir())


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    """One registry for this module's tests, each keeping to repositories of its own."""
    with serve(tmp_path_factory.mktemp("registry")) as running:
        yield running


@pytest.fixture(scope="module")
def auth_registry(tmp_path_factory):
    """A registry that asks for USER and PASSWORD (htpasswd, basic auth)."""
    with serve(tmp_path_factory.mktemp("auth-registry"), auth=True) as running:
        yield running


def _same_files(a: Path, b: Path, *, also: tuple[str, ...] = ()) -> None:
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted([*FILES, *also])
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def _raw_manifest(registry, repository: str, reference: str) -> dict:
    request = urllib.request.Request(
        f"http://{registry.host}/v2/{repository}/manifests/{reference}",
        headers={
            "Accept": "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json"
        },
    )
    with urllib.request.urlopen(request, timeout=10) as r:
        return json.loads(r.read())


@pytest.mark.slow
def test_push_then_pull_gives_the_bundle_byte_for_byte(registry, tmp_path):
    pushed = hlobundle.push(EXAMPLE, registry.ref("roundtrip"))
    assert pushed.tag == "v1" and pushed.ref.endswith("@" + pushed.digest)
    pulled = hlobundle.pull(registry.ref("roundtrip"), tmp_path / "got.hlobundle")
    assert pulled.digest == pushed.digest and pulled.ref == pushed.ref
    _same_files(tmp_path / "got.hlobundle", EXAMPLE)
    hlobundle.load(tmp_path / "got.hlobundle").verify()
    again = hlobundle.pull(pushed.ref, tmp_path / "pinned.hlobundle")  # by digest
    assert again.digest == pushed.digest
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


@pytest.mark.slow
def test_the_artifact_is_modelpack_and_one_bundle_one_digest(registry):
    first = hlobundle.push(EXAMPLE, registry.ref("modelpack"))
    second = hlobundle.push(EXAMPLE, registry.ref("modelpack", ":v2"))
    assert first.digest == second.digest  # no time stamps: pushing again changes nothing
    manifest = _raw_manifest(registry, "modelpack", "v1")
    assert manifest["artifactType"] == "application/vnd.cncf.model.manifest.v1+json"
    assert manifest["config"]["mediaType"] == "application/vnd.cncf.model.config.v1+json"
    listed = json.loads((EXAMPLE / "manifest.json").read_text())["files"]
    by_title = {
        entry["annotations"]["org.opencontainers.image.title"]: entry
        for entry in manifest["layers"]
    }
    assert sorted(by_title) == FILES
    for name, entry in listed.items():
        assert by_title[name]["digest"] == "sha256:" + entry["sha256"]
        assert by_title[name]["size"] == entry["size"]
    types = {name: entry["mediaType"] for name, entry in by_title.items()}
    assert types["weights.safetensors"] == "application/vnd.cncf.model.weight.v1.raw"
    assert types["inputs.safetensors"] == "application/vnd.cncf.model.dataset.v1.raw"
    assert types["module.mlir"] == "application/vnd.cncf.model.code.v1.raw"
    assert types["manifest.json"] == "application/vnd.cncf.model.weight.config.v1.raw"


@pytest.mark.slow
def test_skopeo_sees_the_modelpack_types(registry):
    if shutil.which("skopeo") is None:
        from oci_registry import unavailable

        unavailable("skopeo is not installed (apt-get install skopeo)")
    hlobundle.push(EXAMPLE, registry.ref("skopeo"))
    r = subprocess.run(
        ["skopeo", "inspect", "--raw", "--tls-verify=false", f"docker://{registry.host}/skopeo:v1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    raw = json.loads(r.stdout)
    assert raw["artifactType"] == "application/vnd.cncf.model.manifest.v1+json"
    assert raw["config"]["mediaType"] == "application/vnd.cncf.model.config.v1+json"


@pytest.mark.slow
def test_oras_pulls_what_hlobundle_pushed_byte_for_byte(registry, tmp_path):
    import oras.provider

    hlobundle.push(EXAMPLE, registry.ref("by-hlobundle"))
    client = oras.provider.Registry(hostname=registry.host, insecure=True)
    client.pull(target=f"{registry.host}/by-hlobundle:v1", outdir=str(tmp_path / "oras"))
    client.session.close()  # its kept-alive connections, before a later test collects them
    _same_files(tmp_path / "oras", EXAMPLE)


@pytest.mark.slow
def test_hlobundle_pulls_what_oras_pushed(registry, tmp_path, monkeypatch):
    import oras.provider

    monkeypatch.chdir(EXAMPLE)  # oras pushes paths relative to the working directory
    client = oras.provider.Registry(hostname=registry.host, insecure=True)
    client.push(target=f"{registry.host}/by-oras:v1", files=FILES, quiet=True)
    client.session.close()
    monkeypatch.chdir(tmp_path)
    pulled = hlobundle.pull(f"{registry.host}/by-oras:v1", tmp_path / "got.hlobundle")
    assert pulled.ref.startswith("oci://")
    _same_files(tmp_path / "got.hlobundle", EXAMPLE)


@pytest.mark.slow
def test_the_commands_push_pull_and_print_the_digest_to_pin(registry, tmp_path):
    r = cli("push", EXAMPLE, registry.ref("cli"))
    assert r.returncode == 0, r.stderr
    digest = r.stdout.splitlines()[-1].removeprefix("digest: ")
    assert r.stdout.startswith(f"pushed {EXAMPLE} as {registry.ref('cli', '@' + digest)} (tag v1)")
    r = cli("pull", registry.ref("cli"), "-o", tmp_path / "got.hlobundle")
    assert r.returncode == 0, r.stderr
    pulled, pinned = r.stdout.splitlines()
    said = f"pulled {registry.ref('cli', '@' + digest)} into {tmp_path / 'got.hlobundle'} "
    # the example's files may come from the store, where another test pulled them before
    assert re.fullmatch(
        re.escape(said) + r"\(every file's sha256 checked(; \d+ bytes of it from the store)?\)",
        pulled,
    )
    assert pinned == f"digest: {digest}"
    r = cli("pull", registry.ref("cli"), "-o", tmp_path / "got.hlobundle")
    assert r.returncode == 1 and "error [OUTPUT_EXISTS]" in r.stderr
    r = cli("pull", registry.ref("cli"), "-o", tmp_path / "got.hlobundle", "--force", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["digest"] == digest


def test_a_missing_tag_and_a_bad_reference_are_coded(registry, tmp_path):
    r = cli("pull", registry.ref("nothing-here"), "-o", tmp_path / "x")
    assert r.returncode == 1 and "error [REGISTRY_NOT_FOUND]" in r.stderr, r.stderr
    r = cli("pull", "oci://Not A Ref", "-o", tmp_path / "x")
    assert r.returncode == 1 and "error [REGISTRY_REF_INVALID]" in r.stderr
    assert not (tmp_path / "x").exists()


def test_plain_http_only_when_asked_or_on_loopback():
    from hlobundle._oci._client import Client
    from hlobundle._oci._ref import parse

    assert Client(parse("registry.example:5000/a:b")).scheme == "https"
    assert Client(parse("registry.example:5000/a:b"), insecure=True).scheme == "http"
    assert Client(parse("localhost:5000/a:b")).scheme == "http"
    assert Client(parse("127.0.0.1:5000/a:b")).scheme == "http"


# ---- signatures as referrers


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    pytest.importorskip("model_signing", reason="the sign extra (model-signing) is not installed")
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    d = tmp_path_factory.mktemp("keys")
    for name in ("a", "b"):
        key = ec.generate_private_key(ec.SECP256R1())
        (d / f"{name}.pem").write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        (d / f"{name}.pub").write_bytes(
            key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
    return d


@pytest.fixture(scope="module")
def signed(tmp_path_factory, keys):
    out = tmp_path_factory.mktemp("signed") / "lenet.hlobundle"
    shutil.copytree(EXAMPLE, out)
    hlobundle.sign(out, keys / "a.pem")
    return out


@pytest.mark.slow
def test_a_signature_travels_as_a_referrer_and_is_checked_before_writing(
    registry, signed, keys, tmp_path
):
    pushed = hlobundle.push(signed, registry.ref("signed"))
    assert pushed.signature is not None
    # distribution 2.8 has no referrers API: the fallback tag lists the referrer
    index = _raw_manifest(registry, "signed", pushed.digest.replace(":", "-"))
    assert index["mediaType"] == "application/vnd.oci.image.index.v1+json"
    assert [m["digest"] for m in index["manifests"]] == [pushed.signature]
    assert index["manifests"][0]["artifactType"] == "application/vnd.dev.sigstore.bundle.v0.3+json"
    referrer = _raw_manifest(registry, "signed", pushed.signature)
    assert referrer["subject"]["digest"] == pushed.digest
    hlobundle.push(signed, registry.ref("signed", ":v2"))  # the same referrer: listed once
    assert len(_raw_manifest(registry, "signed", pushed.digest.replace(":", "-"))["manifests"]) == 1

    pulled = hlobundle.pull(
        registry.ref("signed"), tmp_path / "ok.hlobundle", public_key=keys / "a.pub"
    )
    assert pulled.signer and pulled.signer.startswith("key ")
    _same_files(tmp_path / "ok.hlobundle", signed, also=("model.sig",))
    hlobundle.load(tmp_path / "ok.hlobundle", public_key=keys / "a.pub")

    with pytest.raises(
        hlobundle.errors.SignatureInvalidError, match="no signature of the 1 found verifies"
    ):
        hlobundle.pull(
            registry.ref("signed"), tmp_path / "bad.hlobundle", public_key=keys / "b.pub"
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ok.hlobundle"]  # nothing else written


@pytest.mark.slow
def test_pull_with_a_key_refuses_an_unsigned_artifact(registry, keys, tmp_path):
    hlobundle.push(EXAMPLE, registry.ref("unsigned"))
    r = cli("pull", registry.ref("unsigned"), "-o", tmp_path / "x", "--public-key", keys / "a.pub")
    assert r.returncode == 1 and "error [SIGNATURE_MISSING]" in r.stderr, r.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_sign_signs_what_the_registry_holds_without_pulling_it(registry, keys, tmp_path):
    pushed = hlobundle.push(EXAMPLE, registry.ref("sign-there"))
    r = cli("sign", registry.ref("sign-there"), "--private-key", keys / "a.pem")
    assert r.returncode == 0, r.stderr
    assert f"signed {pushed.ref} (key " in r.stdout and "referrer sha256:" in r.stdout
    pulled = hlobundle.pull(pushed.ref, tmp_path / "ok.hlobundle", public_key=keys / "a.pub")
    assert pulled.signer and pulled.signer.startswith("key ")
    b = hlobundle.load(registry.ref("sign-there"), public_key=keys / "a.pub")  # remote, too
    assert b.trusted
    with pytest.raises(hlobundle.errors.SignatureInvalidError):
        hlobundle.pull(pushed.ref, tmp_path / "bad.hlobundle", public_key=keys / "b.pub")


@pytest.mark.slow
def test_sign_in_a_registry_refuses_an_artifact_whose_layers_are_not_its_files(
    registry, keys, tmp_path, monkeypatch
):
    """Pushed by oras: a layer's bytes are not what the bundle's manifest lists for that file.
    Nothing is signed, and no referrer is pushed."""
    import oras.provider

    bundle = tmp_path / "b.hlobundle"
    shutil.copytree(EXAMPLE, bundle)
    m = json.loads((bundle / "manifest.json").read_bytes())
    name = next(n for n in m["files"] if n.endswith(".safetensors"))
    m["files"][name]["sha256"] = "0" * 64
    (bundle / "manifest.json").write_text(json.dumps(m, indent=2, sort_keys=True) + "\n")
    monkeypatch.chdir(bundle)
    client = oras.provider.Registry(hostname=registry.host, insecure=True)
    client.push(target=f"{registry.host}/sign-wrong:v1", files=FILES, quiet=True)
    client.session.close()
    r = cli("sign", registry.ref("sign-wrong"), "--private-key", keys / "a.pem")
    assert r.returncode == 1 and "error [HASH_MISMATCH]" in r.stderr, r.stderr
    digest = _raw_manifest_digest(registry, "sign-wrong", "v1")
    with pytest.raises(urllib.error.HTTPError):  # no fallback tag: no referrer was pushed
        _raw_manifest(registry, "sign-wrong", digest.replace(":", "-"))


def _raw_manifest_digest(registry, repository: str, reference: str) -> str:
    request = urllib.request.Request(
        f"http://{registry.host}/v2/{repository}/manifests/{reference}",
        method="HEAD",
        headers={"Accept": "application/vnd.oci.image.manifest.v1+json"},
    )
    with urllib.request.urlopen(request, timeout=10) as r:
        return r.headers["Docker-Content-Digest"]


# ---- credentials


@pytest.mark.slow
def test_basic_auth_from_the_environment_and_from_docker_config(
    auth_registry, tmp_path, monkeypatch
):
    import base64

    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))  # none there
    monkeypatch.delenv("HLOBUNDLE_REGISTRY_AUTH", raising=False)
    with pytest.raises(hlobundle.errors.RegistryAuthError, match="no credentials were found"):
        hlobundle.push(EXAMPLE, auth_registry.ref("private"))
    monkeypatch.setenv("HLOBUNDLE_REGISTRY_AUTH", f"{USER}:wrong")
    with pytest.raises(hlobundle.errors.RegistryAuthError, match="refuses the credentials"):
        hlobundle.push(EXAMPLE, auth_registry.ref("private"))
    monkeypatch.setenv("HLOBUNDLE_REGISTRY_AUTH", f"{USER}:{PASSWORD}")
    pushed = hlobundle.push(EXAMPLE, auth_registry.ref("private"))
    monkeypatch.delenv("HLOBUNDLE_REGISTRY_AUTH")
    (tmp_path / "docker").mkdir()
    auth = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    (tmp_path / "docker" / "config.json").write_text(
        json.dumps({"auths": {auth_registry.host: {"auth": auth}}})
    )
    pulled = hlobundle.pull(auth_registry.ref("private"), tmp_path / "got.hlobundle")
    assert pulled.digest == pushed.digest


@pytest.mark.slow
def test_a_credential_helper_is_asked(auth_registry, tmp_path, monkeypatch):
    helper = tmp_path / "bin" / "docker-credential-hlotest"
    helper.parent.mkdir()
    helper.write_text(
        f"#!{sys.executable}\nimport json, sys\nhost = sys.stdin.read().strip()\n"
        f"print(json.dumps({{'ServerURL': host, 'Username': {USER!r}, 'Secret': {PASSWORD!r}}}))\n"
    )
    helper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{helper.parent}:{__import__('os').environ['PATH']}")
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    monkeypatch.delenv("HLOBUNDLE_REGISTRY_AUTH", raising=False)
    (tmp_path / "config.json").write_text(
        json.dumps({"credHelpers": {auth_registry.host: "hlotest"}})
    )
    hlobundle.push(EXAMPLE, auth_registry.ref("helper"))
    (tmp_path / "config.json").write_text(json.dumps({"credsStore": "absent-helper"}))
    with pytest.raises(hlobundle.errors.RegistryAuthError, match="docker-credential-absent-helper"):
        hlobundle.push(EXAMPLE, auth_registry.ref("helper"))


@pytest.mark.slow
@pytest.mark.subprocess
def test_light_commands_do_not_import_oras():
    code = (
        "import sys; from hlobundle._cli._main import main; "
        f"main(['inspect', {str(EXAMPLE)!r}]); main(['push', '--help'])"
    )
    r = subprocess.run([sys.executable, "-c", code + "\n"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    code = (
        "import sys; from hlobundle._cli._main import main; "
        f"main(['inspect', {str(EXAMPLE)!r}]); assert 'oras' not in sys.modules"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.mark.slow
@pytest.mark.subprocess
@pytest.mark.parametrize("section", ["Push, pull, pin by digest", "Signatures", "Loading remotely"])
def test_the_docs_blocks_run(registry, tmp_path, section):
    from test_readme import _bash, _sh

    if section == "Signatures":
        pytest.importorskip(
            "model_signing", reason="the sign extra (model-signing) is not installed"
        )
        if shutil.which("openssl") is None:
            pytest.skip("the block makes its key with the openssl command, which is not installed")
    cache = str(tmp_path / "cache")
    r = _bash(
        _sh("docs/distribution.md", section),
        tmp_path,
        REGISTRY=registry.host,
        HLOBUNDLE_CACHE_DIR=cache,
    )
    assert "digest: sha256:" in r.stdout
    if section == "Loading remotely":
        assert any(line.endswith("ok") for line in r.stdout.splitlines())  # run checked it
        assert "remote bundles: 1" in r.stdout
    if section == "Signatures":
        assert "signed by key" in r.stdout
        assert (tmp_path / "checked.hlobundle" / "model.sig").is_file()


def _ten_shards(out: Path, changed: int | None = None, base: float = 0.0) -> Path:
    """`f(p, x) = sum of x @ p[wK]` over ten weights of 8 x 8,000 float32 (256 KB) of value
    `base + K`, each in a shard of its own; with `changed`, that weight's values differ (a new
    version)."""
    params = {
        f"w{k}": np.full((8, 8000), base + k + (0.5 if k == changed else 0.0), np.float32)
        for k in range(10)
    }
    return hlobundle.export(
        lambda p, x: sum(x @ p[k] for k in sorted(p)),
        params,
        np.ones((2, 8), np.float32),
        out=out,
        roles={"p": "parameter"},
        max_shard_size=300_000,
    )


def _shards(bundle: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in bundle.glob("weights-*.safetensors")}


@pytest.mark.slow
def test_a_new_version_sharing_nine_of_ten_shards_fetches_only_the_new_one(registry, tmp_path):
    """Pulled after the old version, through a proxy that counts what the registry sends: the
    files that changed (one shard, the expected outputs, the manifest), and beyond them only
    the artifact's manifest and config and the registry's answers' headers."""
    from http_static import CountingProxy

    old, new = _ten_shards(tmp_path / "v1"), _ten_shards(tmp_path / "v2", changed=3)
    changed = [p for p in new.iterdir() if (old / p.name).read_bytes() != p.read_bytes()]
    shards = [p.name for p in changed if p.name.startswith("weights-")]
    assert len(_shards(new)) == 10 and len(shards) == 1
    hlobundle.push(old, registry.ref("versions", ":v1"))
    hlobundle.push(new, registry.ref("versions", ":v2"))
    hlobundle.pull(registry.ref("versions", ":v1"), tmp_path / "pulled-v1")
    proxy = CountingProxy(registry.host)
    try:
        ref = registry.ref("versions", ":v2").replace(registry.host, proxy.host)
        pulled = hlobundle.pull(ref, tmp_path / "pulled-v2")
        new_bytes = sum(p.stat().st_size for p in changed)
        assert new_bytes <= proxy.received < new_bytes + (16 << 10), proxy.received
    finally:
        proxy.close()
    assert pulled.reused == sum(p.stat().st_size for p in new.iterdir()) - new_bytes
    for name in (p.name for p in new.iterdir()):
        assert (tmp_path / "pulled-v2" / name).read_bytes() == (new / name).read_bytes(), name


@pytest.mark.slow
def test_a_pulled_file_changed_afterwards_is_fetched_again_not_reused(registry, tmp_path):
    """The store remembers where a pull put each file: a file changed there since is hashed
    again by the next pull, which finds other bytes and fetches it."""
    bundle = _ten_shards(tmp_path / "b", base=100.0)  # shards no other test pulled
    hlobundle.push(bundle, registry.ref("changed"))
    hlobundle.pull(registry.ref("changed"), tmp_path / "first")  # fetches every shard
    shard = sorted((tmp_path / "first").glob("weights-*"))[0]
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0xFF
    shard.write_bytes(data)
    second = hlobundle.pull(registry.ref("changed"), tmp_path / "second")
    listed = sum(p.stat().st_size for p in bundle.iterdir() if p.name != "manifest.json")
    assert second.reused == listed - shard.stat().st_size  # all but the shard, fetched
    assert (tmp_path / "second" / shard.name).read_bytes() == (bundle / shard.name).read_bytes()


@pytest.mark.slow
@pytest.mark.subprocess
def test_the_local_registry_block_runs(tmp_path):
    """docs/distribution.md's "A registry of your own", as written, on a free port; the harness
    stops the registry however the block ends."""
    from oci_registry import BINARY, free_port, unavailable
    from test_readme import _bash, _sh

    if shutil.which(BINARY) is None:
        unavailable(f"{BINARY} is not installed (apt-get install docker-registry)")
    block = _sh("docs/distribution.md", "A registry of your own")
    harness = "trap 'kill \"${registry:-}\" 2>/dev/null || true' EXIT\n"
    r = _bash(
        harness + block, tmp_path, PORT=str(free_port()), HLOBUNDLE_CACHE_DIR=str(tmp_path / "c")
    )
    want = hlobundle.load(EXAMPLE).fingerprint()
    assert f"{want}  (bundle)" in r.stdout

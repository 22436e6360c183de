"""`hlobundle push --image` (docs/deploy.md, "KServe"): an OCI image whose `/models` is the
bundle, pushed to the real registry (`tests/oci_registry.py`), copied by skopeo and unpacked by
umoci, the unpacked bundle verified and run; the image checked against the OCI image spec; one
bundle, one digest; and a file whose bytes are not the manifest's never goes into an image."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tarfile
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from helpers import ROOT, cli
from oci_registry import serve, unavailable

import hlobundle
from hlobundle._oci import _image
from hlobundle._read._reader import Bundle

pytest.importorskip("oras", reason="the oci extra (oras) is not installed")

EXAMPLE = ROOT / "examples" / "lenet5.hlobundle"
FILES = sorted(p.name for p in EXAMPLE.iterdir())
SECTION = "An image KServe mounts: `push --image`"


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    with serve(tmp_path_factory.mktemp("registry")) as running:
        yield running


def _needs(*tools: str) -> None:
    for tool in tools:
        if shutil.which(tool) is None:
            unavailable(f"{tool} is not installed (apt-get install {tool})")


@pytest.mark.slow
@pytest.mark.subprocess
def test_the_docs_block_unpacks_the_image_with_umoci_and_the_bundle_verifies_and_runs(
    registry, tmp_path
):
    from test_readme import _bash, _sh

    _needs("skopeo", "umoci")
    r = _bash(
        _sh("docs/deploy.md", SECTION),
        tmp_path,
        REGISTRY=registry.host,
        HLOBUNDLE_CACHE_DIR=str(tmp_path / "cache"),
    )
    assert f"as the image oci://{registry.host}/models/lenet5@sha256:" in r.stdout
    assert "ok: unpacked/rootfs/models (7 files, sha256 checked)" in r.stdout
    assert r.stdout.rstrip().endswith("ok")  # hlobundle run: the expected outputs, matched
    models = tmp_path / "unpacked" / "rootfs" / "models"
    assert sorted(p.name for p in models.iterdir()) == FILES
    for name in FILES:
        assert (models / name).read_bytes() == (EXAMPLE / name).read_bytes(), name
    assert sorted(p.name for p in models.parent.iterdir()) == ["models"]  # nothing else
    pushed = r.stdout.split("as the image ", 1)[1].split()[0]
    _check_layout(tmp_path / "layout", pushed.rsplit("@", 1)[1])


def _blob(layout: Path, digest: str) -> bytes:
    data = (layout / "blobs" / "sha256" / digest.removeprefix("sha256:")).read_bytes()
    assert "sha256:" + hashlib.sha256(data).hexdigest() == digest
    return data


def _check_layout(layout: Path, digest: str) -> None:
    """The image skopeo copied, against the OCI image spec: its manifest is the one pushed;
    the config is an image config whose DiffID is the sha256 of the uncompressed layer; the
    layer is a tar of `models/` alone, sorted, owner 0, time 0, no links."""
    (entry,) = json.loads((layout / "index.json").read_text())["manifests"]
    assert entry["digest"] == digest  # skopeo kept the manifest's bytes
    manifest = json.loads(_blob(layout, digest))
    assert manifest["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert "artifactType" not in manifest  # an image, not an artifact
    assert manifest["config"]["mediaType"] == "application/vnd.oci.image.config.v1+json"
    config = json.loads(_blob(layout, manifest["config"]["digest"]))
    (layer,) = manifest["layers"]
    assert layer["mediaType"] == "application/vnd.oci.image.layer.v1.tar"
    data = _blob(layout, layer["digest"])
    assert layer["size"] == len(data)
    assert (config["architecture"], config["os"]) == ("amd64", "linux")
    assert config["rootfs"] == {"type": "layers", "diff_ids": [layer["digest"]]}
    _check_tar(layout / "blobs" / "sha256" / layer["digest"].removeprefix("sha256:"))


def _check_tar(path: Path) -> list[str]:
    with tarfile.open(path) as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names == sorted(names) and names[0] == "models"
    for m in members:
        assert m.name.startswith("models") and ".." not in m.name.split("/"), m.name
        assert (m.uid, m.gid, m.uname, m.gname, m.mtime) == (0, 0, "", "", 0), m.name
        assert m.isdir() or m.isfile(), m.name  # no link, no device
        assert m.mode == (0o755 if m.isdir() else 0o644), m.name
    return names


def _stored_otherwise(tmp_path: Path) -> Path:
    """The example, copied under another name, with other times and modes."""
    other = tmp_path / "elsewhere" / "renamed.hlobundle"
    shutil.copytree(EXAMPLE, other)
    for p in other.iterdir():
        os.utime(p, (1_700_000_000, 1_700_000_000))
        p.chmod(0o600)
    other.chmod(0o700)
    return other


@pytest.mark.slow
def test_one_bundle_one_image_digest_whatever_its_files_times_modes_or_name(registry, tmp_path):
    first = hlobundle.push(EXAMPLE, registry.ref("same", ":a"), image=True)
    r = cli("push", "--image", _stored_otherwise(tmp_path), registry.ref("same", ":b"), "--json")
    assert r.returncode == 0, r.stderr
    second = json.loads(r.stdout)
    assert second["image"] is True and second["tag"] == "b"
    assert second["digest"] == first.digest and first.signature is None
    artifact = hlobundle.push(EXAMPLE, registry.ref("same", ":artifact"))
    assert artifact.digest != first.digest  # the ModelPack artifact is kept, as it was
    pinned = hlobundle.push(EXAMPLE, registry.ref("same", "@" + first.digest), image=True)
    assert pinned.digest == first.digest and pinned.tag is None  # to its own digest
    with pytest.raises(
        hlobundle.errors.RegistryRefError, match="the bundle's image has the digest"
    ):
        hlobundle.push(EXAMPLE, registry.ref("same", "@sha256:" + "0" * 64), image=True)
    r = cli("pull", registry.ref("same", ":a"), "-o", tmp_path / "x")  # an image is no artifact
    assert r.returncode == 1 and "error [REGISTRY_ARTIFACT_INVALID]" in r.stderr, r.stderr
    assert "it is a container image, as `hlobundle push --image` writes" in r.stderr


def test_the_layer_holds_the_bundle_under_models_and_a_signature_too(tmp_path):
    bundle = tmp_path / "b.hlobundle"
    shutil.copytree(EXAMPLE, bundle)
    (bundle / "model.sig").write_bytes(b"the signature's bytes")
    opened = Bundle(bundle)
    digest = _image.write_layer(opened, b"the signature's bytes", tmp_path / "layer.tar")
    assert digest == "sha256:" + hashlib.sha256((tmp_path / "layer.tar").read_bytes()).hexdigest()
    names = _check_tar(tmp_path / "layer.tar")
    assert names == ["models", *sorted(f"models/{n}" for n in [*FILES, "model.sig"])]
    with tarfile.open(tmp_path / "layer.tar") as tar:
        for name in FILES:
            got = tar.extractfile(f"models/{name}")
            assert got is not None and got.read() == (bundle / name).read_bytes(), name


def test_directories_come_before_what_they_hold():
    names = ["compiled/x.vmfb", "manifest.json", "a/b/c.txt"]
    assert _image._directories(names) == ["models", "models/a", "models/a/b", "models/compiled"]


# ---- a file whose bytes are not the manifest's goes into no image


def test_a_file_changed_since_it_was_listed_stops_the_push_before_any_upload(registry, tmp_path):
    """Same size, other bytes: the registry cannot see it (it checks the tar's digest against
    the tar), so push checks each file's sha256 as the file goes into the tar."""
    bundle = tmp_path / "b.hlobundle"
    shutil.copytree(EXAMPLE, bundle)
    weights = bundle / "weights.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(data)
    with pytest.raises(
        hlobundle.errors.HashMismatchError, match=r"weights\.safetensors: sha256 is"
    ):
        hlobundle.push(bundle, registry.ref("changed"), image=True)
    assert not (registry.storage / "docker/registry/v2/repositories/changed").exists()
    with pytest.raises(urllib.error.HTTPError):  # no tag either
        urllib.request.urlopen(f"http://{registry.host}/v2/changed/manifests/v1", timeout=10)


@pytest.mark.parametrize("change", ["grown", "cut"])
def test_a_file_that_grows_or_shrinks_after_loading_is_refused(tmp_path, change):
    bundle = tmp_path / "b.hlobundle"
    shutil.copytree(EXAMPLE, bundle)
    opened = Bundle(bundle)  # sizes checked here; the file changes after
    inputs = bundle / "inputs.safetensors"
    data = inputs.read_bytes()
    inputs.write_bytes(data + b"x" if change == "grown" else data[:-100])
    with pytest.raises(hlobundle.errors.SizeMismatchError, match=r"inputs\.safetensors is \d+"):
        _image.write_layer(opened, None, tmp_path / "layer.tar")


def test_a_manifest_changed_after_loading_goes_into_no_image(tmp_path):
    """The files are checked against the manifest that was loaded; the `manifest.json` put
    beside them must be that one, not one written since."""
    bundle = tmp_path / "b.hlobundle"
    shutil.copytree(EXAMPLE, bundle)
    opened = Bundle(bundle)
    document = json.loads((bundle / "manifest.json").read_bytes())
    document["files"]["weights.safetensors"]["sha256"] = "0" * 64
    (bundle / "manifest.json").write_text(json.dumps(document))
    with pytest.raises(hlobundle.errors.HashMismatchError, match=r"manifest\.json"):
        _image.write_layer(opened, None, tmp_path / "layer.tar")


def test_a_signed_bundle_s_image_holds_its_signature_and_verifies_by_key(tmp_path):
    """`model.sig` goes into the image, so `--public-key` checks the mounted bundle."""
    pytest.importorskip("model_signing", reason="the sign extra (model-signing) is not installed")
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    (tmp_path / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    (tmp_path / "pub.pem").write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    bundle = tmp_path / "signed.hlobundle"
    shutil.copytree(EXAMPLE, bundle)
    hlobundle.sign(bundle, tmp_path / "key.pem")
    signature = (bundle / "model.sig").read_bytes()
    _image.write_layer(Bundle(bundle), signature, tmp_path / "layer.tar")
    with tarfile.open(tmp_path / "layer.tar") as tar:
        tar.extractall(tmp_path / "rootfs", filter="data")
    mounted = hlobundle.load(tmp_path / "rootfs" / "models", public_key=tmp_path / "pub.pem")
    assert mounted.trusted


# ---- names the layer format reserves: a whiteout would delete the file it names


def _listing(tmp_path: Path, name: str) -> Path:
    """A valid bundle: the example, with one more listed file, `name`."""
    bundle = tmp_path / "listing.hlobundle"
    shutil.copytree(EXAMPLE, bundle)
    target = bundle.joinpath(*name.split("/"))
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(b"notes\n")
    document = json.loads((bundle / "manifest.json").read_bytes())
    document["files"][name] = {"size": 6, "sha256": hashlib.sha256(b"notes\n").hexdigest()}
    (bundle / "manifest.json").write_text(json.dumps(document))
    Bundle(bundle).verify()  # a valid bundle
    return bundle


WHITEOUTS = [".wh.NOTES", "notes/.wh..wh..opq", ".wh.notes/a.txt"]


@pytest.mark.parametrize("name", WHITEOUTS)
def test_a_name_the_layer_format_reserves_goes_into_no_layer(tmp_path, name):
    """OCI's layer format reads a path component `.wh.X` as "delete X" (`.wh..wh..opq`: "empty
    this directory"): an unpacker deletes, never extracts it."""
    opened = Bundle(_listing(tmp_path, name))
    with pytest.raises(hlobundle.errors.UnsafePathError, match="whiteout") as caught:
        _image.write_layer(opened, None, tmp_path / "layer.tar")
    assert caught.value.path == name
    assert not (tmp_path / "layer.tar").exists()


@pytest.mark.parametrize("name", ["a.wh.b", "wh.NOTES", "notes/x.wh.y", "notes/.whNOTES"])
def test_a_name_that_only_contains_wh_goes_in(tmp_path, name):
    opened = Bundle(_listing(tmp_path, name))
    _image.write_layer(opened, None, tmp_path / "layer.tar")
    with tarfile.open(tmp_path / "layer.tar") as tar:
        assert f"models/{name}" in tar.getnames()


@pytest.mark.slow
def test_push_image_refuses_a_whiteout_name_before_any_upload(registry, tmp_path):
    """The ModelPack artifact keeps the name (a layer a file, titled by it); the image cannot."""
    bundle = _listing(tmp_path, ".wh.NOTES")
    r = cli("push", "--image", bundle, registry.ref("whiteout-refused"))
    assert r.returncode == 1 and "error [PATH_UNSAFE]" in r.stderr, r.stderr
    assert "'.wh.NOTES'" in r.stderr and "whiteout" in r.stderr
    assert not (registry.storage / "docker/registry/v2/repositories/whiteout-refused").exists()
    assert cli("push", bundle, registry.ref("whiteout-artifact")).returncode == 0


@pytest.mark.slow
@pytest.mark.subprocess
def test_umoci_unpacks_a_whiteout_name_as_a_deletion(registry, tmp_path, monkeypatch):
    """What the refusal prevents, with it taken out: the image pushes, skopeo copies it, umoci
    unpacks it without the file, and the unpacked bundle fails to verify."""
    import subprocess

    _needs("skopeo", "umoci")
    bundle = _listing(tmp_path, ".wh.NOTES")
    monkeypatch.setattr(_image, "check_names", lambda names: None)
    r = cli("push", "--image", bundle, registry.ref("whiteout", ":v1"))
    assert r.returncode == 0, r.stderr
    for command in (
        "skopeo copy --preserve-digests --src-tls-verify=false "
        f"docker://{registry.host}/whiteout:v1 oci:layout:v1",
        "umoci unpack --rootless --image layout:v1 unpacked",
    ):
        subprocess.run(command.split(), cwd=tmp_path, check=True, capture_output=True)
    models = tmp_path / "unpacked" / "rootfs" / "models"
    assert (models / "manifest.json").exists() and not (models / ".wh.NOTES").exists()
    r = cli("verify", models)
    assert r.returncode == 1 and "error [FILE_MISSING]" in r.stderr, r.stderr

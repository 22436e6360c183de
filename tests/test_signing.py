"""Signed bundles (SPEC.md, "Signature"): OpenSSF model signing at the reserved name model.sig,
made and checked by hlobundle and by the standard `model_signing` tool, both ways."""

from __future__ import annotations

import datetime
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import ROOT, cli, edit_manifest, identity_module, rehash, sample

import hlobundle

# found, not imported: each worker's collection, in every run, would pay 0.3 s for it
if importlib.util.find_spec("model_signing") is None:
    pytest.skip("the sign extra (model-signing) is not installed", allow_module_level=True)

from cryptography import x509  # noqa: E402 (installed with model-signing)
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import NameOID  # noqa: E402

EXAMPLE = ROOT / "examples" / "lenet5.hlobundle"
MODEL_SIGNING = str(Path(sys.executable).parent / "model_signing")


def _write_key(key: ec.EllipticCurvePrivateKey, private: Path, public: Path) -> None:
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    d = tmp_path_factory.mktemp("keys")
    for name in ("a", "b"):
        _write_key(ec.generate_private_key(ec.SECP256R1()), d / f"{name}.pem", d / f"{name}.pub")
    return d


def _certificate(subject: str, key, issuer: str, issuer_key, *, ca: bool) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=not ca,
                key_cert_sign=ca,
                crl_sign=ca,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    )
    return builder.sign(issuer_key, hashes.SHA256())


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A root CA, and a signing certificate it issued for the key `leaf.pem`."""
    d = tmp_path_factory.mktemp("pki")
    root_key, leaf_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(2))
    root = _certificate("hlobundle test root", root_key, "hlobundle test root", root_key, ca=True)
    leaf = _certificate("release-bot", leaf_key, "hlobundle test root", root_key, ca=False)
    _write_key(leaf_key, d / "leaf.pem", d / "leaf.pub")
    (d / "root.crt").write_bytes(root.public_bytes(serialization.Encoding.PEM))
    (d / "leaf.crt").write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    other_key = ec.generate_private_key(ec.SECP256R1())
    other = _certificate("other root", other_key, "other root", other_key, ca=True)
    (d / "other.crt").write_bytes(other.public_bytes(serialization.Encoding.PEM))
    return d


@pytest.fixture
def bundle(tmp_path):
    out = tmp_path / "lenet.hlobundle"
    shutil.copytree(EXAMPLE, out)
    return out


def _signed(bundle: Path, keys: Path) -> Path:
    r = cli("sign", bundle, "--private-key", keys / "a.pem")
    assert r.returncode == 0, r.stderr
    return bundle


def test_sign_then_verify_with_the_public_key(bundle, keys):
    r = cli("sign", bundle, "--private-key", keys / "a.pem")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"signed {bundle} (key ")
    assert (bundle / "model.sig").is_file()
    r = cli("verify", bundle, "--public-key", keys / "a.pub")
    assert r.returncode == 0, r.stderr
    assert "sha256 checked, signed by key " in r.stdout
    report = json.loads(cli("verify", bundle, "--json").stdout)  # no key: the signature is ignored
    assert report["ok"] and report["signed"] is True and report["signer"] is None
    assert "signed    by key " in cli("inspect", bundle).stdout


def test_sign_and_verify_with_certificates(bundle, pki):
    r = cli(
        "sign",
        bundle,
        "--private-key",
        pki / "leaf.pem",
        "--signing-certificate",
        pki / "leaf.crt",
        "--certificate-chain",
        pki / "root.crt",
    )
    assert r.returncode == 0, r.stderr
    assert "certificate CN=release-bot" in r.stdout
    r = cli("verify", bundle, "--certificate-chain", pki / "root.crt")
    assert r.returncode == 0, r.stderr
    assert "signed by certificate CN=release-bot" in r.stdout
    r = cli("verify", bundle, "--certificate-chain", pki / "other.crt")
    assert r.returncode == 1 and "error [SIGNATURE_INVALID]" in r.stderr


def test_an_unsigned_bundle_fails_only_when_a_key_is_given(bundle, keys):
    assert json.loads(cli("verify", bundle, "--json").stdout)["signed"] is False
    r = cli("verify", bundle, "--public-key", keys / "a.pub")
    assert r.returncode == 1
    assert r.stderr.startswith(
        "error [SIGNATURE_MISSING] the bundle is not signed: it has no model.sig"
    )


def test_a_wrong_key_fails(bundle, keys):
    _signed(bundle, keys)
    r = cli("verify", bundle, "--public-key", keys / "b.pub")
    assert r.returncode == 1 and r.stderr.startswith("error [SIGNATURE_INVALID]")
    assert "Key mismatch" in r.stderr


FILES = sorted(p.name for p in EXAMPLE.iterdir())


@pytest.mark.parametrize("name", FILES)
def test_a_changed_file_with_a_rewritten_manifest_fails(bundle, keys, name):
    # The attacker changes a file and rewrites the manifest's hashes to match: `verify` alone
    # accepts that; the signature must not.
    _signed(bundle, keys)
    if name == "manifest.json":
        edit_manifest(bundle, lambda m: m["provenance"].update(producer="someone else"))
    else:
        data = bytearray((bundle / name).read_bytes())
        data[-1] ^= 1
        (bundle / name).write_bytes(bytes(data))
        rehash(bundle, name)
    if name in ("module.mlir", "module.mlirbc", "batched.mlir", "batched.mlirbc"):
        # a module changes its program: the reader refuses it before the signature is read
        assert cli("verify", bundle).returncode == 1
        return
    assert cli("verify", bundle).returncode == 0  # integrity alone is satisfied
    r = cli("verify", bundle, "--public-key", keys / "a.pub")
    assert r.returncode == 1, r.stdout
    changed = sorted({name, "manifest.json"})  # a rewritten manifest changed too
    assert r.stderr.startswith(
        "error [SIGNATURE_INVALID] model.sig verifies, but files changed since signing: "
        f"changed: {', '.join(changed)}"
    ), r.stderr
    assert "Digest(" not in r.stderr


def test_a_file_added_to_the_manifest_fails(bundle, keys):
    _signed(bundle, keys)
    (bundle / "notes.txt").write_text("added after signing")
    edit_manifest(
        bundle, lambda m: m["files"].update({"notes.txt": {"size": 0, "sha256": "0" * 64}})
    )
    rehash(bundle, "notes.txt")  # a listed file, with its true hash
    assert cli("verify", bundle).returncode == 0
    r = cli("verify", bundle, "--public-key", keys / "a.pub")
    assert r.returncode == 1
    assert "files changed since signing: changed: manifest.json; added: notes.txt" in r.stderr


def test_a_removed_file_is_named(bundle, keys):
    _list_file(bundle, "LICENSE", b"Apache-2.0\n")
    _signed(bundle, keys)
    (bundle / "LICENSE").unlink()
    edit_manifest(bundle, lambda m: m["files"].pop("LICENSE"))
    r = cli("verify", bundle, "--public-key", keys / "a.pub")
    assert r.returncode == 1
    assert "files changed since signing: changed: manifest.json; removed: LICENSE" in r.stderr


def test_a_signature_that_does_not_verify_names_no_files(bundle, keys):
    # A signature by another key lists digests nobody vouches for: they must not be reported.
    assert cli("sign", bundle, "--private-key", keys / "b.pem").returncode == 0
    edit_manifest(bundle, lambda m: m["provenance"].update(producer="someone else"))
    r = cli("verify", bundle, "--public-key", keys / "a.pub")
    assert r.returncode == 1 and r.stderr.startswith(
        "error [SIGNATURE_INVALID] model.sig does not verify"
    )
    assert "changed" not in r.stderr and "manifest.json" not in r.stderr


def test_run_and_load_refuse_a_tampered_signed_bundle_before_running(bundle, keys, tmp_path):
    _signed(bundle, keys)
    edit_manifest(bundle, lambda m: m["provenance"].update(producer="someone else"))
    r = cli("run", bundle, "--public-key", keys / "a.pub")
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.startswith("error [SIGNATURE_INVALID]")
    with pytest.raises(hlobundle.errors.SignatureInvalidError):
        hlobundle.load(bundle, public_key=keys / "a.pub")


def test_run_with_the_right_key_runs(bundle, keys):
    _signed(bundle, keys)
    r = cli("run", bundle, "--public-key", keys / "a.pub", "--backend", "xla")
    assert r.returncode == 0, r.stderr
    b = hlobundle.load(bundle, public_key=keys / "a.pub")
    assert b.signer.startswith("key ")


@pytest.mark.slow
@pytest.mark.subprocess
def test_the_standard_tool_verifies_what_hlobundle_signs(bundle, keys):
    _signed(bundle, keys)
    r = subprocess.run(
        [
            MODEL_SIGNING,
            "verify",
            "key",
            bundle,
            "--signature",
            bundle / "model.sig",
            "--public_key",
            keys / "a.pub",
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Verification succeeded" in r.stdout + r.stderr


@pytest.mark.slow  # the standard tool in a child process
@pytest.mark.subprocess
def test_hlobundle_verifies_what_the_standard_tool_signs(bundle, keys):
    r = subprocess.run(
        [
            MODEL_SIGNING,
            "sign",
            "key",
            bundle,
            "--signature",
            bundle / "model.sig",
            "--private_key",
            keys / "b.pem",
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    r = cli("verify", bundle, "--public-key", keys / "b.pub")
    assert r.returncode == 0, r.stderr
    r = cli("verify", bundle, "--public-key", keys / "a.pub")
    assert r.returncode == 1 and "SIGNATURE_INVALID" in r.stderr


def test_pack_signs_as_its_last_step(tmp_path, keys):
    x = sample((3,), "float32")
    np.save(tmp_path / "x.npy", x)
    (tmp_path / "m.mlir").write_text(identity_module(x))
    r = cli(
        "pack",
        tmp_path / "m.mlir",
        "--inputs",
        tmp_path / "x.npy",
        "-o",
        tmp_path / "b",
        "--sign-key",
        keys / "a.pem",
    )
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b", "m.mlir", "x.npy"]  # no leftovers
    r = cli("verify", tmp_path / "b", "--public-key", keys / "a.pub")
    assert r.returncode == 0, r.stderr
    r = cli(
        "pack", tmp_path / "m.mlir", "-o", tmp_path / "c", "--signing-certificate", keys / "a.pem"
    )
    assert r.returncode == 2 and "sign with --sign-key" in r.stderr


def test_signing_twice_needs_force(bundle, keys):
    _signed(bundle, keys)
    r = cli("sign", bundle, "--private-key", keys / "b.pem")
    assert r.returncode == 1 and "error [OUTPUT_EXISTS]" in r.stderr and "--force" in r.stderr
    assert cli("verify", bundle, "--public-key", keys / "a.pub").returncode == 0  # untouched
    assert cli("sign", bundle, "--private-key", keys / "b.pem", "--force").returncode == 0
    assert cli("verify", bundle, "--public-key", keys / "b.pub").returncode == 0


def test_the_library_signs_and_verifies(bundle, keys):
    who = hlobundle.sign(bundle, keys / "a.pem")
    b = hlobundle.load(bundle)
    assert b.signed and b.signer is None
    b.verify(public_key=keys / "a.pub")
    assert b.signer == who


@pytest.mark.parametrize("version", ["1.0", "1.1"])
def test_signing_an_older_bundle_makes_it_1_2(tmp_path, keys, version):
    # model.sig is reserved since 1.2: a 1.0 or 1.1 reader refuses it as an unlisted file
    # (FILE_UNLISTED), so a signed bundle that still said 1.0 would lie about who can read it.
    bundle = shutil.copytree(
        ROOT / "tests" / "corpus" / version / "predict.hlobundle", tmp_path / "b"
    )
    before = json.loads((bundle / "manifest.json").read_bytes())
    assert before["format_version"] == version
    hlobundle.sign(bundle, keys / "a.pem")
    after = json.loads((bundle / "manifest.json").read_bytes())
    assert after == {**before, "format_version": "1.2"}
    hlobundle.load(bundle, public_key=keys / "a.pub")
    r = cli("verify", bundle, "--public-key", keys / "a.pub")
    assert r.returncode == 0, r.stderr


def test_signing_a_1_2_or_newer_bundle_leaves_its_manifest_alone(tmp_path, keys):
    bundle = shutil.copytree(
        ROOT / "tests" / "corpus" / "1.3" / "predict.hlobundle", tmp_path / "b"
    )
    before = (bundle / "manifest.json").read_bytes()
    hlobundle.sign(bundle, keys / "a.pem")
    assert (bundle / "manifest.json").read_bytes() == before
    hlobundle.load(bundle, public_key=keys / "a.pub")


# --- a hostile model.sig: read once, bounded, never through a link ---------------------------


def test_a_garbage_signature_is_invalid(bundle, keys):
    (bundle / "model.sig").write_bytes(b"\x00not a signature")
    assert cli("verify", bundle).returncode == 0  # ignored without a key
    r = cli("verify", bundle, "--public-key", keys / "a.pub")
    assert r.returncode == 1 and r.stderr.startswith(
        "error [SIGNATURE_INVALID] model.sig does not verify"
    )
    assert "signed    by an unknown signer" in cli("inspect", bundle).stdout


def test_a_deeply_nested_signature_is_invalid_not_a_crash(bundle, keys):
    (bundle / "model.sig").write_bytes(b"[" * 200_000 + b"]" * 200_000)
    assert "signed    by an unknown signer" in cli("inspect", bundle).stdout
    r = cli("verify", bundle, "--public-key", keys / "a.pub")
    assert r.returncode == 1 and r.stderr.startswith("error [SIGNATURE_INVALID]")


def test_an_oversized_signature_is_refused_unread(bundle, keys):
    with open(bundle / "model.sig", "wb") as f:
        f.truncate((1 << 20) + 1)
    r = cli("verify", bundle, "--public-key", keys / "a.pub")
    assert r.returncode == 1 and r.stderr.startswith("error [LIMIT_EXCEEDED] model.sig is over")


def test_a_signature_that_is_a_symlink_or_a_directory_is_refused(bundle, keys, tmp_path):
    outside = tmp_path / "elsewhere.sig"
    _signed(bundle, keys)
    shutil.move(bundle / "model.sig", outside)
    (bundle / "model.sig").symlink_to(outside)
    r = cli("verify", bundle, "--public-key", keys / "a.pub")
    assert r.returncode == 1 and r.stderr.startswith("error [PATH_UNSAFE] 'model.sig' is a symlink")
    (bundle / "model.sig").unlink()
    (bundle / "model.sig").mkdir()
    r = cli("verify", bundle, "--public-key", keys / "a.pub")
    assert r.returncode == 1 and r.stderr.startswith(
        "error [SIGNATURE_INVALID] model.sig is not a file"
    )


def test_the_manifest_may_not_list_the_reserved_name(bundle):
    (bundle / "model.sig").write_bytes(b"x")
    edit_manifest(
        bundle, lambda m: m["files"].update({"model.sig": {"size": 0, "sha256": "0" * 64}})
    )
    rehash(bundle, "model.sig")
    r = cli("verify", bundle)
    assert r.returncode == 1
    assert r.stderr.startswith("error [MANIFEST_INVALID] files lists model.sig, the name reserved")


def test_refresh_signs_again_with_the_key(bundle, keys):
    _signed(bundle, keys)
    r = cli("refresh", bundle, "--sign-key", keys / "a.pem")
    assert r.returncode == 0, r.stderr
    assert cli("verify", bundle, "--public-key", keys / "a.pub").returncode == 0


# --- the signature covers every listed byte: our verdict is the standard tool's ---------------


def _list_file(bundle: Path, name: str, data: bytes) -> None:
    """Add `name` to the bundle as a listed file no module, tensor or executable refers to."""
    (bundle / name).write_bytes(data)
    edit_manifest(bundle, lambda m: m["files"].update({name: {"size": 0, "sha256": "0" * 64}}))
    rehash(bundle, name)


def _flip(path: Path, where: float = 0.5) -> None:
    data = bytearray(path.read_bytes())
    data[int(len(data) * where)] ^= 1
    path.write_bytes(bytes(data))


TAMPERINGS = {
    "nothing": lambda b: None,
    "unreferenced file replaced, same size": lambda b: (b / "LICENSE").write_bytes(
        b"MIT license, not Apache-2.0, read it".ljust(len((b / "LICENSE").read_bytes()), b" ")
    ),
    "module text byte": lambda b: _flip(b / "module.mlir"),
    "artifact byte": lambda b: _flip(b / "module.mlirbc"),
    "weights byte": lambda b: _flip(b / "weights.safetensors", 0.99),
    "manifest byte": lambda b: (b / "manifest.json").write_bytes(
        (b / "manifest.json").read_bytes().replace(b'"float32"', b'"float16"', 1)
    ),
    "added file": lambda b: (b / "notes.txt").write_text("added after signing"),
    "removed file": lambda b: (b / "LICENSE").unlink(),
    "model.sig byte": lambda b: _flip(b / "model.sig", 0.6),
}


def _standard_verdict(bundle: Path, public_key: Path) -> bool:
    import model_signing.verifying

    config = model_signing.verifying.Config().use_elliptic_key_verifier(public_key=public_key)
    try:
        config.verify(bundle, bundle / "model.sig")
    except Exception:  # the tool's refusal, of whatever kind
        return False
    return True


@pytest.mark.parametrize("tamper", TAMPERINGS)
def test_our_verdict_is_the_standard_tools(bundle, keys, tamper):
    _list_file(bundle, "LICENSE", b"Apache-2.0; see https://www.apache.org/licenses/\n")
    _signed(bundle, keys)
    TAMPERINGS[tamper](bundle)
    standard = _standard_verdict(bundle, keys / "a.pub")
    assert standard == (tamper == "nothing")
    r = cli("verify", bundle, "--public-key", keys / "a.pub")
    assert (r.returncode == 0) == standard, r.stdout + r.stderr
    try:
        hlobundle.load(bundle, public_key=keys / "a.pub")
        loaded = True
    except hlobundle.HloBundleError:
        loaded = False
    assert loaded == standard


def test_sign_hashes_every_listed_file(bundle, keys):
    _list_file(bundle, "LICENSE", b"Apache-2.0\n")
    (bundle / "LICENSE").write_bytes(b"MIT-2.0!!\n\n")  # same size, not what the manifest says
    r = cli("sign", bundle, "--private-key", keys / "a.pem")
    assert r.returncode == 1
    assert r.stderr.startswith("error [HASH_MISMATCH] LICENSE: sha256 is ")
    assert not (bundle / "model.sig").exists()


# --- re-signing (refresh, compile) never launders: the old signature verifies first ------------


def _snapshot(bundle: Path) -> dict[str, bytes]:
    return {
        p.relative_to(bundle).as_posix(): p.read_bytes() for p in bundle.rglob("*") if p.is_file()
    }


RESIGNING = {
    "refresh": ("refresh",),
    "compile": ("compile", "--target", "vmvx"),  # refused before anything compiles
}


@pytest.mark.parametrize("command", RESIGNING)
def test_resigning_refuses_a_bundle_whose_signature_does_not_verify(bundle, keys, command):
    r = cli("sign", bundle, "--private-key", keys / "b.pem")  # the vendor's signature
    assert r.returncode == 0, r.stderr
    before = _snapshot(bundle)
    r = cli(*RESIGNING[command], bundle, "--sign-key", keys / "a.pem")
    assert r.returncode == 1, r.stdout
    assert r.stderr.startswith("error [SIGNATURE_INVALID] model.sig does not verify")
    assert "--replace-signature" in r.stderr and "--public-key" in r.stderr
    assert _snapshot(bundle) == before
    assert cli("verify", bundle, "--public-key", keys / "b.pub").returncode == 0


def test_resigning_a_tampered_bundle_with_the_signers_own_key_is_refused(bundle, keys):
    # The laundering attack: a signed bundle changed (manifest and hashes consistent), then
    # re-signed by an automated refresh holding the signer's key.
    _signed(bundle, keys)
    edit_manifest(bundle, lambda m: m["provenance"].update(producer="someone else"))
    before = _snapshot(bundle)
    r = cli("refresh", bundle, "--sign-key", keys / "a.pem")
    assert r.returncode == 1 and r.stderr.startswith("error [SIGNATURE_INVALID]")
    assert _snapshot(bundle) == before


def test_resigning_takes_the_vendors_key_or_an_explicit_replacement(bundle, keys):
    assert cli("sign", bundle, "--private-key", keys / "b.pem").returncode == 0
    r = cli("refresh", bundle, "--sign-key", keys / "a.pem", "--public-key", keys / "a.pub")
    assert r.returncode == 1 and "SIGNATURE_INVALID" in r.stderr  # a key it was not signed by
    r = cli("refresh", bundle, "--sign-key", keys / "a.pem", "--public-key", keys / "b.pub")
    assert r.returncode == 0, r.stderr
    assert cli("verify", bundle, "--public-key", keys / "a.pub").returncode == 0
    (bundle / "model.sig").write_bytes(b"{}")  # a broken signature: only the override passes
    assert cli("refresh", bundle, "--sign-key", keys / "a.pem").returncode == 1
    r = cli("refresh", bundle, "--sign-key", keys / "a.pem", "--replace-signature")
    assert r.returncode == 0, r.stderr
    assert cli("verify", bundle, "--public-key", keys / "a.pub").returncode == 0
    r = cli("refresh", bundle, "--public-key", keys / "a.pub")
    assert r.returncode == 2 and "--sign-key" in r.stderr


def _unusable_key(keys: Path, kind: str, tmp_path: Path) -> Path:
    if kind == "missing":
        return tmp_path / "no-such-key.pem"
    if kind == "a public key":
        return keys / "a.pub"
    key = serialization.load_pem_private_key((keys / "a.pem").read_bytes(), password=None)
    encrypted = tmp_path / "encrypted.pem"  # its password is not given: a wrong one
    encrypted.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"password"),
        )
    )
    return encrypted


@pytest.mark.parametrize("replace", [False, True], ids=["checked", "replace-signature"])
@pytest.mark.parametrize("kind", ["missing", "a public key", "encrypted"])
@pytest.mark.parametrize("command", RESIGNING)
def test_a_key_that_cannot_sign_changes_nothing(bundle, keys, tmp_path, command, kind, replace):
    _signed(bundle, keys)
    before = _snapshot(bundle)
    flags = ["--replace-signature"] if replace else []
    r = cli(*RESIGNING[command], bundle, "--sign-key", _unusable_key(keys, kind, tmp_path), *flags)
    assert r.returncode == 1, r.stdout
    assert r.stderr.startswith("error [INPUT_INVALID] cannot sign with ")
    assert _snapshot(bundle) == before
    assert cli("verify", bundle, "--public-key", keys / "a.pub").returncode == 0


def test_a_failed_signature_leaves_the_old_bundle_whole(bundle, keys, monkeypatch):
    from hlobundle._bundle_io import _signing
    from hlobundle._format import _signature
    from hlobundle._format._errors import InputError

    _signed(bundle, keys)
    before = _snapshot(bundle)
    real = _signing.sign

    def fails_on_the_new_files(root, digests, key, *, name=None):
        if root != bundle:  # the rewritten bundle, built beside the old one
            raise InputError("the signing service is down", argument="private_key")
        return real(root, digests, key, name=name)

    monkeypatch.setattr(_signing, "sign", fails_on_the_new_files)
    key = _signature.SigningKey(keys / "a.pem")
    with pytest.raises(InputError, match="the signing service is down"):
        hlobundle.refresh(bundle, target_version=_oldest(), sign_key=key)
    assert _snapshot(bundle) == before
    assert sorted(p.name for p in bundle.parent.iterdir()) == [bundle.name]  # nothing left over
    hlobundle.load(bundle, public_key=keys / "a.pub")


def _oldest() -> str:
    from hlobundle._parse import _mlir

    return _mlir.minimum_version()


@pytest.mark.parametrize("name", [".gitignore", ".github/workflow.yml", ".git/HEAD"])
def test_sign_refuses_a_file_the_standard_tool_skips(bundle, keys, name):
    # model_signing never hashes git files: a signature over one would verify here and fail there.
    (bundle / name).parent.mkdir(exist_ok=True)
    _list_file(bundle, name, b"x\n")
    r = cli("sign", bundle, "--private-key", keys / "a.pem")
    assert r.returncode == 1
    assert r.stderr.startswith(f"error [INPUT_INVALID] {name} cannot be signed: ")
    assert not (bundle / "model.sig").exists()


def test_resigning_with_a_certificate_checks_against_its_chain(bundle, pki, keys):
    signing = ["--signing-certificate", pki / "leaf.crt", "--certificate-chain", pki / "root.crt"]
    assert cli("sign", bundle, "--private-key", pki / "leaf.pem", *signing).returncode == 0
    r = cli("refresh", bundle, "--sign-key", pki / "leaf.pem", *signing)
    assert r.returncode == 0, r.stderr
    assert cli("verify", bundle, "--certificate-chain", pki / "root.crt").returncode == 0
    assert cli("sign", bundle, "--private-key", keys / "a.pem", "--force").returncode == 0
    r = cli("refresh", bundle, "--sign-key", pki / "leaf.pem", *signing)  # a key, not the chain
    assert r.returncode == 1 and r.stderr.startswith("error [SIGNATURE_INVALID]")


def test_verify_without_a_key_says_the_signature_was_not_checked(bundle, keys, tmp_path):
    unsigned = cli("verify", bundle)
    assert unsigned.returncode == 0 and "signed" not in unsigned.stdout
    r = cli("verify", _signed(bundle, keys))
    assert r.returncode == 0, r.stderr
    assert "signed" in r.stdout and "not checked" in r.stdout and "--public-key" in r.stdout


def test_pack_files_and_from_reactant_server_sign_with_a_key_file(tmp_path, keys):
    from test_reactant_server import server_bundle

    x = sample((2, 3), "float32")
    np.save(tmp_path / "x.npy", x)
    packed = hlobundle.pack_files(
        identity_module(x),
        [tmp_path / "x.npy"],
        tmp_path / "p",
        names=["x"],
        sign_key=keys / "a.pem",
    )
    served = hlobundle.from_reactant_server(
        server_bundle(tmp_path), tmp_path / "s", sign_key=keys / "a.pem"
    )
    for out in (packed, served):  # the server bundle's: signed once both batch sizes are in
        b = hlobundle.load(out, verify=True, public_key=keys / "a.pub")
        assert b.signer is not None and b.signer.startswith("key "), out

"""Attacks on format 2.1's metadata and model card (SPEC.md 2.12), declared independent rows
(2.13) and several platforms in one function (2.14). Each test fails on the code it was written
against: what it shows is a problem, and what it asserts is what should happen."""

from __future__ import annotations

import json
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import cli, edit_manifest, needs_enzyme

import hlobundle
from hlobundle.errors import HloBundleError

W = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
X = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)
XS = np.random.default_rng(2).standard_normal((5, 2, 4)).astype(np.float32)  # 5 blocks of 2


def _dense(w, x):
    return jnp.tanh(x @ w)


def _tanh(x):
    return jnp.tanh(x)


@pytest.fixture(scope="module")
def carded(tmp_path_factory):
    """A bundle with metadata, hence a README.md model card (format 2.1)."""
    out = tmp_path_factory.mktemp("carded") / "c"
    return hlobundle.export(
        _tanh, np.ones((2, 3), np.float32), out=out, metadata={"license": "MIT"}
    )


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    """A function lowered for cpu and cuda: @main takes the platform index first."""
    out = tmp_path_factory.mktemp("platforms") / "two"
    return hlobundle.export(
        _dense, W, X, out=out, roles={"w": "parameter"}, platforms=("cpu", "cuda")
    )


# --- metadata (SPEC.md 2.12) -------------------------------------------------------------------


@pytest.mark.parametrize(
    "license",
    [
        "MIT\u001cOR\u001dApache-2.0",  # information separators: str.split() whitespace
        "MIT\tOR Apache-2.0",  # a tab: allowed in description and citation only
        "MIT\u2028OR Apache-2.0",  # a line separator
        "MIT\u0085",  # a C1 control (NEL)
    ],
)
def test_a_license_with_a_control_or_separator_character_is_refused(carded, tmp_path, license):
    """SPEC.md 2.12: no metadata string holds a control character (U+0000 to U+001F, U+007F to
    U+009F) or a line separator, and a reader MUST refuse one with MANIFEST_INVALID. The
    license alone has no such check: packaging.licenses splits the expression on whitespace
    (which includes these characters) and the reader silently keeps its canonical spelling,
    so a manifest another conforming reader refuses loads here."""
    copy = tmp_path / "c"
    shutil.copytree(carded, copy)
    edit_manifest(copy, lambda m: m["metadata"].update(license=license))
    with pytest.raises(HloBundleError) as refused:
        hlobundle.load(copy)
    assert refused.value.code == "MANIFEST_INVALID"


def test_reshard_keeps_a_bundle_s_model_card(carded, tmp_path):
    """`reshard` of any bundle with metadata crashed with a pydantic ValidationError (a
    traceback, not a coded error): it rebuilds the manifest with no files, and the metadata's
    card (README.md) is then a file the manifest does not list."""
    out = hlobundle.reshard(carded, tmp_path / "resharded")
    b = hlobundle.load(out)
    b.verify()
    assert b.metadata is not None and b.metadata.card == "README.md"
    assert (out / "README.md").read_bytes() == (carded / "README.md").read_bytes()


def test_reshard_cli_of_a_carded_bundle_prints_no_traceback(carded, tmp_path):
    done = cli("reshard", carded, "-o", tmp_path / "r")
    assert "Traceback" not in done.stderr, done.stderr[-2000:]


def test_a_function_can_be_added_to_a_bundle_with_a_model_card(carded, tmp_path):
    """`export(..., add=True)` into a bundle with metadata crashed with a pydantic
    ValidationError ('metadata.card names README.md, which files does not list'): adding a
    function combines the manifests with no files."""
    copy = tmp_path / "c"
    shutil.copytree(carded, copy)
    hlobundle.export(lambda x: x * 2, np.ones((2, 3), np.float32), out=copy, name="twice", add=True)
    b = hlobundle.load(copy)
    b.verify()
    assert "twice" in b.functions and len(b.functions) == 2
    assert b.metadata is not None and b.metadata.license == "MIT"


# --- several platforms (SPEC.md 2.14) --------------------------------------------------------


def _iree_compiles() -> bool:
    from hlobundle._run._backends import _installed, _iree

    return bool(_iree.BACKEND.available() and _installed.iree_compiler())


@pytest.mark.skipif(not _iree_compiles(), reason="the iree extra is absent")
def test_compile_refuses_a_function_lowered_for_several_platforms_with_a_code(two, tmp_path):
    """`hlobundle compile` of a multi-platform function ran iree-compile on the module (whose
    @main takes the platform index), then crashed with a pydantic ValidationError (a traceback
    on the CLI) when it stored the executable: SPEC.md 2.14 says such a function has no
    executables and IREE refuses it with BACKEND_UNSUPPORTED."""
    copy = tmp_path / "two"
    shutil.copytree(two, copy)
    with pytest.raises(HloBundleError) as refused:
        hlobundle.compile(copy)
    assert refused.value.code == "BACKEND_UNSUPPORTED"
    done = cli("compile", copy)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]


def test_emit_reactant_server_refuses_a_function_lowered_for_several_platforms(two, tmp_path):
    """`emit --format reactant-server` of a multi-platform function crashed with jaxlib's
    MLIRError ('func.call' op incorrect number of operands: the wrapper it writes calls @main
    without the platform index): it should refuse with a code, as `emit` does for scripts."""
    with pytest.raises(HloBundleError):
        hlobundle.emit_reactant_server(two, tmp_path / "rs")
    done = cli("emit", two, "--format", "reactant-server", "-o", tmp_path / "rs2")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]


# --- independent rows (SPEC.md 2.13) ---------------------------------------------------------


def _centred(x):  # rows NOT independent: a batch statistic
    return x - jnp.mean(x, axis=0)


def _loops(fn, xs):
    text = str(jax.make_jaxpr(jax.vmap(fn))(xs))
    return "scan" in text or "while" in text


@needs_enzyme
def test_an_untrusted_bundle_never_folds_through_another_bundle_s_declaration(tmp_path):
    """On the enzyme backend a fold is registered by the refined module's text (the module's
    sha256 and the call's shapes), not by the function that trusts it. So once a trusted
    function of ANY bundle with the same module text has run, a vmap of an untrusted bundle,
    one with no declaration at all, folds too, with the other bundle's (here false) claim:
    wrong results on a bundle nobody trusted. SPEC.md 2.13: untrusted, a runner loops."""
    plain = hlobundle.export(
        _centred, np.ones((2, 4), np.float32), out=tmp_path / "plain", shapes_specs=("b, 4",)
    )
    lying = tmp_path / "lying"
    shutil.copytree(plain, lying)

    def declare(m):
        m["format_version"] = "2.1"
        m["functions"][0]["independent_rows"] = {
            "arguments": {"x": 0},
            "results": {"result": 0},
        }

    edit_manifest(lying, declare)
    trusted = hlobundle.load(lying).function("enzyme", trust=hlobundle.Trust.BATCHED)
    jax.vmap(lambda x: trusted(x=x))(XS)  # the user's choice, on the bundle the user trusts

    untrusted = hlobundle.load(plain).function("enzyme")  # another bundle, trusted by nobody
    assert hlobundle.load(plain).manifest.independent_rows is None
    call = lambda x: untrusted(x=x)  # noqa: E731
    want = np.stack([_centred(x) for x in XS])
    np.testing.assert_allclose(jax.vmap(call)(XS), want, rtol=1e-5, atol=1e-6)
    assert _loops(call, XS)


@pytest.mark.parametrize("fn", [jnp.sqrt, jnp.log, jnp.arcsin], ids=["sqrt", "log", "arcsin"])
def test_export_accepts_independent_rows_of_an_elementwise_function_with_nan(tmp_path, fn):
    """export's check compares the joined call with the blocks' calls by np.allclose, where
    NaN differs from NaN: an elementwise function (sqrt, log) of random normal rows gives NaN,
    and its plainly independent rows are refused as 'a batch statistic'."""
    out = hlobundle.export(
        fn,
        np.ones((2, 4), np.float32),
        out=tmp_path / "f",
        shapes_specs=("b, 4",),
        independent_rows="b",
    )
    rows = json.loads((out / "manifest.json").read_text())["functions"][0]["independent_rows"]
    assert rows["checked"] is True


def test_diff_says_the_platforms_changed(two, tmp_path):
    """The platforms are part of the fingerprint (SPEC.md 2.14), so `diff` of a bundle and its
    copy with the platforms' order swapped (on CPU, the other lowering runs) says 'changed' and
    'fingerprints differ', but lists no change at all: `platforms` is not among the fields it
    compares, and the user cannot see why."""
    swapped = tmp_path / "swapped"
    shutil.copytree(two, swapped)
    edit_manifest(swapped, lambda m: m["functions"][0].update(platforms=["cuda", "cpu"]))
    done = cli("diff", two, swapped, "--json")
    assert done.returncode == 1, done.stderr
    found = json.loads(done.stdout)
    assert "platforms" in json.dumps(found), found
    text = cli("diff", two, swapped).stdout
    assert "platforms" in text, text

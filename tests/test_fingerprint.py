"""Fingerprints (SPEC.md 2.11): what a function computes, and nothing else. The same function
packed twice has one; reshard and refresh to the same target keep it; one weight value, one
dtype or one symbol changes it. `hlobundle fingerprint` prints them."""

from __future__ import annotations

import hashlib
import json
import shutil

import jax.numpy as jnp
import numpy as np
import pytest
from helpers import ROOT, cli, edit_manifest, two_functions

import hlobundle

LM = ROOT / "examples" / "lm.hlobundle"


def _pack(out, w=None, dtype=np.float32, spec="b, 8"):
    w = np.linspace(-1, 1, 24, dtype=dtype).reshape(8, 3) if w is None else w
    return hlobundle.export(
        lambda w, x: jnp.tanh(x @ w),
        w,
        np.ones((2, 8), dtype),
        out=out,
        roles={"w": "parameter"},
        shapes_specs=(None, spec),
    )


def test_the_same_function_packed_twice_has_one_fingerprint(tmp_path):
    """Packed twice, one of them then given another producer, version and time (as another
    machine on another day would write): the manifests differ, the fingerprints do not."""
    a, b = _pack(tmp_path / "a"), _pack(tmp_path / "b")

    def elsewhere(m: dict) -> None:
        m["provenance"] |= {
            "producer": "elsewhere",
            "producer_version": "9",
            "timestamp": "2031-01-01T00:00:00Z",
        }

    edit_manifest(b, elsewhere)
    assert (a / "manifest.json").read_bytes() != (b / "manifest.json").read_bytes()
    fa, fb = hlobundle.load(a).fingerprint(), hlobundle.load(b).fingerprint()
    assert fa == fb and fa.startswith("sha256:") and len(fa) == 71


def test_one_weight_value_one_dtype_or_one_symbol_changes_it(tmp_path):
    base = hlobundle.load(_pack(tmp_path / "base")).fingerprint()
    w = np.linspace(-1, 1, 24, dtype=np.float32).reshape(8, 3)
    w[2, 1] += 0.25
    others = [
        _pack(tmp_path / "value", w=w),
        _pack(tmp_path / "dtype", dtype=np.float64),
        _pack(tmp_path / "symbol", spec="n, 8"),
    ]
    prints = [hlobundle.load(p).fingerprint() for p in others]
    assert len({base, *prints}) == 4


def test_example_inputs_are_not_part_of_it(tmp_path):
    a = _pack(tmp_path / "a")
    b = hlobundle.export(
        lambda w, x: jnp.tanh(x @ w),
        np.linspace(-1, 1, 24, dtype=np.float32).reshape(8, 3),
        np.full((3, 8), 7.0, np.float32),  # other example inputs, of another batch size
        out=tmp_path / "b",
        roles={"w": "parameter"},
        shapes_specs=(None, "b, 8"),
    )
    assert hlobundle.load(a).fingerprint() == hlobundle.load(b).fingerprint()


def test_reshard_keeps_it(tmp_path):
    original = LM
    sharded = hlobundle.reshard(original, tmp_path / "sharded", max_shard_size=256 << 10)
    assert len(list(sharded.glob("weights-*.safetensors"))) > 1
    joined = hlobundle.reshard(sharded, tmp_path / "joined")
    prints = {hlobundle.load(p).fingerprint() for p in (original, sharded, joined)}
    assert len(prints) == 1
    for name in ("prefill", "decode"):
        assert len({hlobundle.load(p).fingerprint(name) for p in (original, sharded)}) == 1


def test_refresh_to_the_same_target_keeps_it(tmp_path):
    bundle = shutil.copytree(_pack(tmp_path / "a"), tmp_path / "copy")
    before = hlobundle.load(bundle).fingerprint()
    target = hlobundle.load(bundle).manifest.module.portable.target_version
    hlobundle.refresh(bundle, target_version=target)
    assert hlobundle.load(bundle).fingerprint() == before


def test_a_function_s_fingerprint_is_its_own_in_a_bundle_of_several(tmp_path):
    """`predict` alone and `predict` beside `loss`: one function fingerprint; the bundles'
    fingerprints differ (the bundle's holds every function)."""
    two = hlobundle.load(two_functions(tmp_path))
    alone = hlobundle.load(
        hlobundle.export(
            lambda w, x: jnp.tanh(x @ w),
            np.linspace(-1, 1, 24, dtype=np.float32).reshape(8, 3),
            np.ones((5, 8), np.float32),
            out=tmp_path / "alone",
            name="predict",
            roles={"w": "parameter"},
            shapes_specs=(None, "b, 8"),
        )
    )
    assert two.fingerprint("predict") == alone.fingerprint("predict")
    assert two.fingerprint("loss") != two.fingerprint("predict")
    assert two.fingerprint() != alone.fingerprint()


def test_the_command_prints_the_bundle_s_and_each_function_s(tmp_path):
    b = hlobundle.load(LM)
    done = cli("fingerprint", LM)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"{b.fingerprint()}  (bundle)",
        f"{b.fingerprint('prefill')}  prefill",
        f"{b.fingerprint('decode')}  decode",
    ]
    one = cli("fingerprint", LM, "--function", "decode", "--json")
    assert json.loads(one.stdout) == {"functions": {"decode": b.fingerprint("decode")}}
    missing = cli("fingerprint", LM, "--function", "nope")
    assert missing.returncode == 1 and "INPUT_INVALID" in missing.stderr
    assert cli("fingerprint").returncode == 2


@pytest.mark.parametrize("field", ["value_sha256", "portable_sha256", "shape"])
def test_the_document_holds_what_the_spec_names(field):
    """The digest is of SPEC 2.11's document: each part of it is there."""
    from hlobundle._read._fingerprint import canonical, document

    b = hlobundle.load(LM).select("decode")
    text = canonical(document(b)).decode()
    assert f'"{field}":' in text
    assert b.fingerprint("decode") == "sha256:" + hashlib.sha256(text.encode()).hexdigest()

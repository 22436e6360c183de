"""The language model of examples/lm.py, as committed in examples/lm.hlobundle: its prefill and
decode agree with the model's JAX code at other batch sizes and lengths than the stored
examples, on every installed backend; greedy generation through the bundle matches JAX's; the
weights are stored once."""

from __future__ import annotations

import sys

import jax
import numpy as np
import pytest
from helpers import INSTALLED_BACKENDS, ROOT, cli

import hlobundle

sys.path.insert(0, str(ROOT / "examples"))
import lm  # noqa: E402

BUNDLE = ROOT / "examples" / "lm.hlobundle"


@pytest.fixture(scope="module")
def bundle():
    return hlobundle.load(BUNDLE)


@pytest.fixture(scope="module")
def params(bundle):
    return bundle.select("prefill").example_args()[0]


def _tokens(batch, length, seed=0):
    return np.random.default_rng(seed).integers(32, 127, (batch, length)).astype(np.int32)


@pytest.mark.slow
@pytest.mark.parametrize("backend", INSTALLED_BACKENDS)
@pytest.mark.parametrize(("batch", "length"), [(1, 5), pytest.param(3, 17, marks=pytest.mark.slow)])
def test_prefill_and_decode_agree_with_jax(bundle, params, backend, batch, length):
    prefill = bundle.function(backend, name="prefill")
    decode = bundle.function(backend, name="decode")
    tokens = _tokens(batch, length)
    logits, cache = prefill(params, tokens)
    want_logits, want_cache = jax.jit(lm.prefill)(params, tokens)
    np.testing.assert_allclose(logits, want_logits, rtol=1e-4, atol=1e-4)
    for key in ("k", "v", "pos"):
        np.testing.assert_allclose(cache[key], want_cache[key], rtol=1e-4, atol=1e-4)
    token = np.asarray(want_logits).argmax(-1).astype(np.int32)
    logits, cache = decode(params, want_cache, token)
    want_logits, want_cache = jax.jit(lm.decode)(params, want_cache, token)
    np.testing.assert_allclose(logits, want_logits, rtol=1e-4, atol=1e-4)
    assert cache["pos"].tolist() == [length + 1] * batch


@pytest.mark.slow
@pytest.mark.parametrize("backend", INSTALLED_BACKENDS)
def test_greedy_text_through_the_bundle_is_jax_s(bundle, params, backend):
    prefill = bundle.function(backend, name="prefill")
    decode = bundle.function(backend, name="decode")
    prompts = ["A bundle ", "The func "]
    got = lm.generate(prefill, decode, params, prompts, 24)
    assert got == lm.generate(jax.jit(lm.prefill), jax.jit(lm.decode), params, prompts, 24)
    assert [text[: len(p)] for text, p in zip(got, prompts, strict=True)] == prompts


def test_decode_runs_from_the_cli_on_its_stored_example():
    r = cli("run", BUNDLE, "--function", "decode", "--backend", "xla")
    assert r.returncode == 0, r.stderr
    assert r.stdout.rstrip().endswith("ok")


def test_the_weights_are_stored_once():
    got = lm.storage(BUNDLE)
    assert got["stored"] <= 1.02 * (got["weights"] + got["examples"]), got


@pytest.mark.slow
@pytest.mark.subprocess
def test_emitted_scripts_generate_jax_s_text(tmp_path, params, script_zygote):
    for name in ("prefill", "decode"):
        r = cli("emit", BUNDLE, "--function", name, "-o", tmp_path / f"{name}.py")
        assert r.returncode == 0, r.stderr
    driver = [str(ROOT / "examples" / "lm_generate.py"), "prefill.py", "decode.py", "A bundle "]
    r = script_zygote(*driver, "30", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    [want] = lm.generate(jax.jit(lm.prefill), jax.jit(lm.decode), params, ["A bundle "], 30)
    assert r.stdout.rstrip("\n") == want

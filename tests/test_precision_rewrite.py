"""`precision="highest"` (`run --precision highest`, SPEC.md 2.15) against every attribute
StableHLO's verifier checks together with `precision_config`.

A `dot_general` with an explicit `algorithm` (what `jax.lax.DotAlgorithmPreset` exports) must
keep a DEFAULT precision_config ("must specify DEFAULT precision config when algorithm is
set"): its algorithm already says its precision, so the rewrite leaves it and says so. A
convolution and the deprecated `dot` have no algorithm; every op's precision_config has at
most two entries, and the rewrite writes two. What the verifier still refuses after a rewrite
is a coded error, never MLIR's own.

jax's ragged_dot on a TPU is a `stablehlo.composite` "chlo.ragged_dot" whose
`composite_attributes` hold its precision_config (strings), and the TPU's compiler runs it at
that precision, not its decomposition's (measured on a TPU v5e: rewriting only the
decomposition's dot_generals left it a bfloat16 pass off, 0.0025 of its largest value; with
the attribute too, 1.3e-7): the attribute is read and rewritten with the dots.
"""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import cli

import hlobundle
from hlobundle.errors import HloBundleWarning, TransformError

BF16 = jax.lax.DotAlgorithmPreset.BF16_BF16_F32


@pytest.fixture(scope="module")
def with_algorithm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bundle of two dots: one with an explicit algorithm, one that asks for nothing."""
    a = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    b = np.linspace(0, 2, 6, dtype=np.float32).reshape(3, 2)
    out = tmp_path_factory.mktemp("algorithm") / "b.hlobundle"
    return hlobundle.export(lambda a, b: jnp.dot(a, b, precision=BF16) + a @ b, a, b, out=out)


def dot_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if "stablehlo.dot_general" in line]


def test_the_rewrite_counts_what_it_left_at_default(with_algorithm):
    from hlobundle._parse import _mlir
    from hlobundle._run._precision_rewrite import Rewrite, at_highest, lowest_asked

    text = hlobundle.load(with_algorithm).module_text
    lines = dot_lines(text)
    assert len(lines) == 2 and sum("algorithm = " in line for line in lines) == 1
    module = _mlir.parse(text)
    assert at_highest(module) == Rewrite(rewritten=1, kept=1)
    assert lowest_asked(module) == "DEFAULT"  # an algorithm's precision_config is DEFAULT


def test_highest_leaves_an_explicit_algorithm_and_says_so(with_algorithm):
    b = hlobundle.load(with_algorithm)
    args = [b.tensor(a.name) for a in b.arguments]
    with pytest.warns(HloBundleWarning, match=r"leaves 1 dot_general op .* explicit algorithm"):
        highest = b.function("xla", precision="highest")
    kept, rewritten = sorted(dot_lines(highest.bundle.modules["module"].text), key=len)[::-1]
    assert "algorithm = " in kept and "HIGHEST" not in kept
    assert "precision = [HIGHEST, HIGHEST]" in rewritten
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        stored = b.function("xla")  # nothing to say without the rewrite
    np.testing.assert_array_equal(highest.call_flat(*args)[0], stored.call_flat(*args)[0])


def test_run_precision_highest_reports_the_op_it_left(with_algorithm):
    r = cli("run", with_algorithm, "--precision", "highest", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and "explicit algorithm" in r.stderr
    report = json.loads(r.stdout)
    assert report["ok"] and "1 dot_general op" in report["precision_kept"]
    assert json.loads(cli("run", with_algorithm, "--json").stdout)["precision_kept"] is None


def test_a_rewrite_the_verifier_refuses_is_a_coded_error(with_algorithm, monkeypatch):
    # As if the rewrite knew nothing of algorithms: StableHLO's verifier refuses what it wrote.
    from hlobundle._run import _precision_rewrite

    monkeypatch.setattr(_precision_rewrite, "keeps_its_precision", lambda op: False)
    b = hlobundle.load(with_algorithm)
    with pytest.raises(TransformError, match="must specify DEFAULT precision config") as e:
        b.function("xla", precision="highest")
    assert e.value.code == "TRANSFORM_UNSUPPORTED" and e.value.argument == "precision"
    assert "module.mlir" in str(e.value)
    r = cli("run", with_algorithm, "--precision", "highest")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "[TRANSFORM_UNSUPPORTED]" in r.stderr and "--precision highest" in r.stderr


def ragged_dot(tmp_path: Path) -> Path:
    """A bundle for the CPU and the TPU of jax's ragged_dot: on the TPU, a composite."""
    lhs, rhs = np.ones((6, 4), np.float32), np.ones((2, 4, 3), np.float32)
    groups = np.array([3, 3], np.int32)
    return hlobundle.export(
        jax.lax.ragged_dot, lhs, rhs, groups, out=tmp_path / "r.hlobundle", platforms=("cpu", "tpu")
    )


def composite_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if '"chlo.ragged_dot"' in line]


def test_a_composite_s_precision_is_read_where_its_compiler_reads_it(tmp_path):
    from hlobundle._parse import _mlir
    from hlobundle._run._precision_rewrite import lowest_asked

    text = hlobundle.load(ragged_dot(tmp_path)).module_text
    (line,) = composite_lines(text)
    assert 'precision_config = ["DEFAULT", "DEFAULT"]' in line
    # The decomposition's dots at HIGHEST say nothing of what the TPU runs: the composite's.
    dims = r"(contracting_dims = \[[\d, ]*\] x \[[\d, ]*\])"
    decomposed = re.sub(dims, r"\1, precision = [HIGHEST, HIGHEST]", text)
    assert decomposed.count("precision = [HIGHEST, HIGHEST]") == len(dot_lines(text)) == 3
    assert lowest_asked(_mlir.parse(decomposed)) == "DEFAULT"
    asked = decomposed.replace('["DEFAULT", "DEFAULT"]', '["HIGHEST", "HIGH"]')
    assert lowest_asked(_mlir.parse(asked)) == "HIGH"
    for odd in ('["HIGHEST", 3]', '"HIGHEST"', '["FASTEST", "HIGHEST"]'):  # not jax's: DEFAULT
        assert (
            lowest_asked(_mlir.parse(decomposed.replace('["DEFAULT", "DEFAULT"]', odd)))
            == "DEFAULT"
        )


def test_highest_rewrites_a_composite_s_precision_with_its_decomposition(tmp_path):
    b = hlobundle.load(ragged_dot(tmp_path))
    highest = b.function("xla", precision="highest")
    text = highest.bundle.modules["module"].text
    (line,) = composite_lines(text)
    assert (
        'precision_config = ["HIGHEST", "HIGHEST"]' in line
        and "ragged_dot_dimension_numbers" in line
    )
    assert all("precision = [HIGHEST, HIGHEST]" in d for d in dot_lines(text))
    args = [b.tensor(a.name) for a in b.arguments]
    np.testing.assert_array_equal(
        highest.call_flat(*args)[0], b.function("xla").call_flat(*args)[0]
    )

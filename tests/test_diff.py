"""`hlobundle diff A B`: function by function, what differs (signature, weights, modules,
metadata), in text and JSON held against golden files (tests/golden/diff.*, fingerprints
masked: they depend on the portable artifacts jaxlib writes); exit 0 when the fingerprints are
equal, 1 when they differ."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
from helpers import ROOT, cli

import hlobundle

GOLDEN = Path(__file__).parent / "golden"
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")

MODULE = """
func.func @main(%w: tensor<3x2xf32>, %x: tensor<4x3xf32>) -> tensor<4x2xf32> {
  %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<4x3xf32>, tensor<3x2xf32>) -> tensor<4x2xf32>
  %1 = stablehlo.tanh %0 : tensor<4x2xf32>
  return %1 : tensor<4x2xf32>
}
"""
# B: one op more, one weight value changed, its result renamed, another producer version.
MODULE_B = MODULE.replace(
    "  return %1", "  %2 = stablehlo.add %1, %1 : tensor<4x2xf32>\n  return %2"
).replace("return %1 :", "return %2 :")


def _pack(out: Path, module: str, w: np.ndarray, version: str, result: str = "y") -> Path:
    x = np.linspace(0, 1, 12, dtype=np.float32).reshape(4, 3)
    return hlobundle.pack(
        module,
        [w, x],
        out,
        names=["w", "x"],
        result_names=[result],
        roles={"w": "parameter"},
        producer=("golden", version),
        timestamp="2026-12-05T00:00:00Z",
    )


@pytest.fixture
def pair(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    w = np.arange(6, dtype=np.float32).reshape(3, 2) / 10
    changed = w.copy()
    changed[1, 0] += 0.5
    _pack(tmp_path / "a.hlobundle", MODULE, w, "1")
    _pack(tmp_path / "b.hlobundle", MODULE_B, changed, "2", result="z")
    return "a.hlobundle", "b.hlobundle"


def _golden(name: str, got: str) -> None:
    masked = DIGEST.sub("sha256:...", got)
    path = GOLDEN / name
    if os.environ.get("HLOBUNDLE_UPDATE_GOLDEN"):
        path.write_text(masked)
    assert masked == path.read_text()


def test_the_text_says_what_differs(pair):
    done = cli("diff", *pair)
    assert done.returncode == 1, done.stderr
    _golden("diff.txt", done.stdout)


def test_the_json_says_what_differs(pair):
    done = cli("diff", *pair, "--json")
    assert done.returncode == 1, done.stderr
    found = json.loads(done.stdout)
    (tensor,) = found["functions"]["main"]["tensors"]
    assert tensor["max_abs_diff"] == pytest.approx(0.5)
    _golden("diff.json", json.dumps(found, indent=2, sort_keys=True) + "\n")


def test_equal_fingerprints_exit_0_though_the_files_differ(pair, tmp_path):
    a, _ = pair
    w = np.arange(6, dtype=np.float32).reshape(3, 2) / 10
    again = _pack(tmp_path / "again.hlobundle", MODULE, w, "7")  # another producer version
    done = cli("diff", a, again)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "function main: same" in done.stdout
    assert 'metadata provenance.producer_version: "1" -> "7"' in done.stdout


def test_functions_added_and_removed(tmp_path):
    from helpers import two_functions

    found = json.loads(
        cli("diff", two_functions(tmp_path), ROOT / "examples" / "lm.hlobundle", "--json").stdout
    )
    assert {n: f["status"] for n, f in found["functions"].items()} == {
        "predict": "removed",
        "loss": "removed",
        "prefill": "added",
        "decode": "added",
    }
    assert found["same"] is False


def test_a_hostile_value_is_escaped(pair):
    """A producer version holding a terminal escape prints as an escape, not as one."""
    from helpers import edit_manifest

    a, b = pair
    edit_manifest(Path(b), lambda m: m["provenance"].update(producer_version="\x1b[2J"))
    done = cli("diff", a, b)
    assert done.returncode == 1, done.stderr
    assert "\x1b" not in done.stdout
    assert 'metadata provenance.producer_version: "1" -> "\\u001b[2J"' in done.stdout


@pytest.mark.slow  # the block's commands, each a process of its own (about 1.2 s)
def test_the_docs_block_runs(tmp_path):
    from test_readme import _bash, _sh

    done = _bash(_sh("docs/distribution.md", "Versions: fingerprint and diff"), tmp_path)
    lenet = hlobundle.load(ROOT / "examples" / "lenet5.hlobundle")
    assert done.stdout.splitlines()[0] == f"{lenet.fingerprint()}  (bundle)"
    assert "same fingerprint" in done.stdout
    changes = json.loads((tmp_path / "changes.json").read_text())
    assert changes["same"] is False and set(changes["functions"]) == {
        *lenet.functions,
        "prefill",
        "decode",
    }


@pytest.mark.parametrize(("value", "said"), [(np.nan, "NaN"), (np.inf, "Infinity")])
def test_a_nan_or_an_infinity_is_a_difference_in_strict_json(pair, tmp_path, value, said):
    """A weight turned NaN is not a difference of 0, and an infinite one is strict JSON."""
    a, _ = pair
    w = np.arange(6, dtype=np.float32).reshape(3, 2) / 10
    w[1, 0] = value
    _pack(tmp_path / "odd.hlobundle", MODULE, w, "1")
    done = cli("diff", a, "odd.hlobundle", "--json")
    assert done.returncode == 1, done.stderr
    found = json.loads(done.stdout, parse_constant=lambda c: pytest.fail(f"not strict JSON: {c}"))
    (tensor,) = found["functions"]["main"]["tensors"]
    assert tensor["max_abs_diff"] == said
    assert f"largest |a - b| {said}" in cli("diff", a, "odd.hlobundle").stdout


def test_arguments_renamed_in_place_are_paired_by_position_and_shape(tmp_path):
    """`params` renamed `p`: each argument at the same position with the same dtype and shape
    is one renamed, its bytes compared, not one removed and one added."""
    x = np.linspace(0, 1, 12, dtype=np.float32).reshape(4, 3)
    w = np.arange(6, dtype=np.float32).reshape(3, 2) / 10

    def pack(out, names, w):
        return hlobundle.pack(MODULE, [w, x], out, names=names, roles={names[0]: "parameter"})

    a = pack(tmp_path / "a", ["params_w", "x"], w)
    b = pack(tmp_path / "b", ["p_w", "x"], w + 1)
    found = json.loads(cli("diff", a, b, "--json").stdout)
    function = found["functions"]["main"]
    assert function["signature"] == [["argument params_w: renamed", "params_w", "p_w"]]
    (tensor,) = function["tensors"]
    assert tensor["name"] == "params_w -> p_w" and tensor["max_abs_diff"] == pytest.approx(1)
    text = cli("diff", a, b).stdout
    assert "  argument params_w: renamed p_w" in text and "removed" not in text, text
    wider = MODULE.replace("3x2", "3x5").replace("4x2", "4x5")
    c = hlobundle.pack(wider, [np.ones((3, 5), np.float32), x], tmp_path / "c", names=["p_w", "x"])
    text = cli("diff", a, c).stdout  # another shape: not the same argument renamed
    assert "argument params_w: removed" in text and "argument p_w: added" in text, text


def test_64_bit_integer_weights_differ_by_their_exact_difference(tmp_path):
    """The independent attack of issue 64: weights widened to float64 made int64's 2**53 and
    2**53 + 1 the same number, so a changed weight said `max_abs_diff` 0 (`_agreement`)."""
    from helpers import identity_module

    made = []
    for name, value in (("a", 2**53), ("b", 2**53 + 1)):
        w = np.int64([value, -(2**63)])
        made.append(
            hlobundle.pack(
                identity_module(w), [w], tmp_path / name, names=["w"], roles={"w": "parameter"}
            )
        )
    done = cli("diff", *made, "--json")
    assert done.returncode == 1, done.stderr
    ((_, function),) = json.loads(done.stdout)["functions"].items()
    (tensor,) = function["tensors"]
    assert tensor["max_abs_diff"] == 1.0, tensor

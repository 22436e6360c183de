"""Checks that mean the same on every platform (SPEC.md 2.15): where expected outputs were
computed, the tolerance derived from it, `precision="highest"`, and the mismatch report.

A TPU's DEFAULT precision for float32 dots and convolutions rounds their operands to bfloat16
(one pass) and accumulates in float32. `bf16_operands` makes a CPU compute exactly that, by
rounding each such op's operands with `stablehlo.reduce_precision` (8 exponent bits, 7 mantissa
bits): on the LeNet example it is off by 1.46 u of max|expected| (u = 2^-8), as the TPU v5e
was (0.0031 of 0.54), and on the Lux LeNet by 1.34 u, as the TPU was (791 of 151,091).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers import FIXTURES, INSTALLED_BACKENDS, ROOT, cli, needs_fixtures, pack_identity, rehash
from safetensors.numpy import load_file, save_file

import hlobundle

EXAMPLE = ROOT / "examples" / "lenet5.hlobundle"
TPU = {"platform": "tpu", "device_kind": "TPU v5 lite", "precision": "DEFAULT"}


def bf16_operands(text: str) -> bytes:
    """The module with each dot and convolution's operands rounded to bfloat16 first (what a
    TPU's DEFAULT precision computes), as a portable artifact."""
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import stablehlo

    from hlobundle._parse import _mlir
    from hlobundle._run import _precision_rewrite

    module = _mlir.parse(text)
    ops = _precision_rewrite._ops(module)
    with _mlir.context(), ir.Location.unknown():
        for op in ops:
            for i, value in enumerate(list(op.operands)):
                with ir.InsertionPoint(op):
                    op.operands[i] = stablehlo.reduce_precision(value, 8, 7)
    return _mlir.to_portable(module, _mlir.default_target())


def as_if_on_a_tpu(tmp_path: Path, record: dict | None = TPU, source: Path = EXAMPLE) -> Path:
    """A copy of a bundle (the LeNet example) with expected outputs computed as a TPU computes
    them, recorded (or not, `record=None`) as computed there."""
    from hlobundle._run import _compute

    bundle = tmp_path / "tpu.hlobundle"
    shutil.copytree(source, bundle)
    b = hlobundle.load(bundle)
    values = [b.tensor(a.name) for a in b.arguments]
    got = _compute.outputs(b.manifest, bf16_operands(b.module_text), values)
    save_file(
        {r.name: x for r, x in zip(b.results, got, strict=True)},
        str(bundle / "expected.safetensors"),
    )
    rehash(bundle, "expected.safetensors")
    if record is not None:
        recorded(bundle, record)
    return bundle


def recorded(bundle: Path, record: dict) -> None:
    """Write the bundle's manifest again with `expected_from` (a 2.2 manifest of one function)."""
    from hlobundle._format._bundle_manifest import combine
    from hlobundle._format._manifest import ExpectedFrom

    m = hlobundle.load(bundle).manifest
    m = m.model_copy(update={"expected_from": ExpectedFrom(**record)})
    (bundle / "manifest.json").write_bytes(combine([m], m.function, m.files).to_json())


def perturbed(bundle: Path, name: str, factor: float = 1.01) -> None:
    """Scale the stored value of argument `name` by `factor`, in whichever file holds it."""
    file = hlobundle.load(bundle).manifest.argument(name).value.file
    stored = load_file(str(bundle / file))
    stored[name] = (stored[name] * np.float32(factor)).astype(np.float32)
    save_file(stored, str(bundle / file))
    rehash(bundle, file)


def test_bf16_operands_is_off_as_the_tpu_was():
    from hlobundle._run import _compute

    b = hlobundle.load(EXAMPLE)
    values = [b.tensor(a.name) for a in b.arguments]
    (got,) = _compute.outputs(b.manifest, bf16_operands(b.module_text), values)
    want = b.expected_outputs()["result"]
    off = np.abs(got - want).max() / np.abs(want).max() / 2**-8
    assert 1.3 < off < 1.6, off  # the TPU v5e: 0.0031 of 0.54, 1.46 u


@pytest.mark.parametrize("backend", INSTALLED_BACKENDS)
def test_tpu_expected_outputs_pass_on_a_cpu_with_the_derived_tolerance(tmp_path, backend):
    bundle = as_if_on_a_tpu(tmp_path)
    r = cli("run", bundle, "--backend", backend, "--json", "--verify")
    report = json.loads(r.stdout)
    assert r.returncode == 0, r.stdout
    (out,) = report["outputs"]
    scale = float(np.abs(hlobundle.load(bundle).expected_outputs()["result"]).max())
    # atol = 2 * (u_tpu + u_cpu) * max|expected|, SPEC.md 2.15
    assert out["atol"] == pytest.approx(2 * (2**-8 + 2**-24) * scale)
    assert report["widened"].startswith(
        "expected outputs computed on tpu (TPU v5 lite) with an unknown XLA at DEFAULT"
    )
    assert "platform tpu / cpu" in report["widened"]


def test_without_the_record_the_same_outputs_fail(tmp_path):
    # What the TPU showed: a bundle that records nothing is held to the CPU's tolerance.
    bundle = as_if_on_a_tpu(tmp_path, record=None)
    r = cli("run", bundle)
    assert r.returncode == 1
    # widened by float32's roundoff alone, and only under another jaxlib than the example's
    assert "tolerance widened" not in r.stdout or "atol = 2 * 1.19e-07 *" in r.stdout, r.stdout


@pytest.mark.parametrize("weight", ["conv1_w", "conv2_w", "dense1_w", "dense2_w", "dense3_w"])
def test_a_weight_off_by_one_percent_still_fails(tmp_path, weight):
    # LeNet's biases are zero and relu and max pooling commute with a positive scale, so a
    # weight scaled by 1.01 scales every output by 1.01: 2.56 u of max|expected|, past 2 u.
    bundle = as_if_on_a_tpu(tmp_path)
    perturbed(bundle, f"params_{weight}")
    r = cli("run", bundle)
    assert r.returncode == 1, r.stdout
    assert (
        "MISMATCH" in r.stdout and "tolerance widened: expected outputs computed on tpu" in r.stdout
    )


@needs_fixtures
def test_the_lux_export_as_on_a_tpu(tmp_path):
    # The seed's Lux LeNet (Reactant's export_to_enzymejax), packed as the lead packed it.
    lux = tmp_path / "lux.hlobundle"
    export = FIXTURES / "export_to_enzymejax_lux"
    assert cli("pack", "--from-reactant", export, "-o", lux, "--compute-expected").returncode == 0
    bundle = as_if_on_a_tpu(tmp_path, source=lux)
    r = cli("run", bundle)
    assert r.returncode == 0, r.stdout
    # Every weight matrix and kernel scaled by 1.01 fails (1.65 atol); a bias does not (0.67
    # atol: its share of the output is below the bfloat16 pass's error).
    perturbed(bundle, "arg_3_6_3_1")
    r = cli("run", bundle)
    assert r.returncode == 1 and "MISMATCH" in r.stdout, r.stdout


@pytest.mark.parametrize("backend", INSTALLED_BACKENDS)
def test_highest_computes_the_same_on_a_cpu_and_leaves_the_stored_module(tmp_path, backend):
    from hlobundle._run._precision_rewrite import lowest_asked

    bundle = tmp_path / "b.hlobundle"
    shutil.copytree(EXAMPLE, bundle)
    before = {p.name: p.read_bytes() for p in bundle.iterdir()}
    b = hlobundle.load(bundle)
    args = [b.tensor(a.name) for a in b.arguments]
    stored, highest = b.function(backend), b.function(backend, precision="highest")
    np.testing.assert_array_equal(highest.call_flat(*args)[0], stored.call_flat(*args)[0])
    assert lowest_asked(b.modules["module"].parsed) == "DEFAULT"  # the stored one, as it was
    for form in ("module", "batched"):  # every form the function may run
        assert lowest_asked(highest.bundle.modules[form].parsed) == "HIGHEST"
        rewritten = highest.bundle.modules[form].text
        assert rewritten.count("HIGHEST") == 2 * 5 and "DEFAULT" not in rewritten
    assert "HIGHEST" not in b.module_text
    assert {p.name: p.read_bytes() for p in bundle.iterdir()} == before


def test_run_precision_highest_from_the_command_line():
    r = cli("run", EXAMPLE, "--precision", "highest")
    assert r.returncode == 0, r.stdout + r.stderr
    r = cli("run", EXAMPLE, "--precision", "fast")
    assert r.returncode == 2 and "invalid choice: 'fast'" in r.stderr


def test_an_unknown_precision_is_refused():
    with pytest.raises(hlobundle.errors.InputError, match="precision must be None") as e:
        hlobundle.load(EXAMPLE).function("xla", precision="fast")
    assert e.value.argument == "precision"


def test_lowest_asked_reads_every_dot_and_convolution():
    from hlobundle._parse import _mlir
    from hlobundle._run._precision_rewrite import at_highest, lowest_asked

    def dot(precision: str) -> str:
        config = f", precision = [{precision}, HIGHEST]" if precision else ""
        return (
            "%y = stablehlo.dot_general %x, %x, contracting_dims = [1] x [0]"
            + config
            + " : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>"
        )

    def module(*body: str) -> str:
        lines = "\n".join(f"  {b}" for b in body)
        return f"func.func @main(%x: tensor<2x2xf32>) -> tensor<2x2xf32> {{\n{lines}\n  return %x : tensor<2x2xf32>\n}}"

    assert lowest_asked(_mlir.parse(module())) is None
    assert lowest_asked(_mlir.parse(module(dot("HIGHEST")))) == "HIGHEST"
    assert lowest_asked(_mlir.parse(module(dot("HIGH")))) == "HIGH"
    assert lowest_asked(_mlir.parse(module(dot("")))) == "DEFAULT"  # no precision_config
    parsed = _mlir.parse(module(dot("HIGH")))
    assert at_highest(parsed).rewritten == 1 and lowest_asked(parsed) == "HIGHEST"


def test_a_composite_that_decomposes_into_no_contraction_asks_for_nothing():
    # A producer's composite with a precision_config attribute around an identity: before, the
    # module "asked" DEFAULT, so a record of (tpu, DEFAULT) widened a run on a CPU to
    # 2 * (2^-8 + 2^-24) * max|expected| (0.78 %) for a function that computes alike anywhere
    from hlobundle._parse import _mlir
    from hlobundle._run._precision_rewrite import lowest_asked

    def module(decomposition: str) -> str:
        return (
            "module @m {\n"
            "  func.func private @inner(%a: tensor<2x2xf32>) -> tensor<2x2xf32> {\n"
            f"    {decomposition}\n"
            "  }\n"
            "  func.func public @main(%x: tensor<2x2xf32>) -> tensor<2x2xf32> {\n"
            '    %0 = stablehlo.composite "my.op" %x {composite_attributes = {precision_config'
            ' = ["DEFAULT"]}, decomposition = @inner} : (tensor<2x2xf32>) -> tensor<2x2xf32>\n'
            "    return %0 : tensor<2x2xf32>\n"
            "  }\n"
            "}"
        )

    identity = "return %a : tensor<2x2xf32>"
    assert lowest_asked(_mlir.parse(module(identity))) is None
    dot = (
        "%y = stablehlo.dot_general %a, %a, contracting_dims = [1] x [0], precision = [HIGHEST,"
        " HIGHEST] : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>\n"
        "    return %y : tensor<2x2xf32>"
    )
    # one that decomposes into a dot runs at its attribute's precision (ragged_dot on a TPU)
    assert lowest_asked(_mlir.parse(module(dot))) == "DEFAULT"


def test_widening_follows_both_sides():
    from hlobundle._run._tolerance import F32_ROUNDOFF, Computed, differences, widening

    cpu = Computed("cpu", "cpu", "DEFAULT", "0.10.2")
    tpu = Computed("tpu", "TPU v5 lite", "DEFAULT", "0.10.2")
    assert widening(cpu, cpu) == 0.0
    assert widening(cpu, tpu) == widening(tpu, cpu) == 2**-8 + F32_ROUNDOFF
    assert widening(tpu, tpu) == 0.0  # the same platform, device, jaxlib and precision
    assert widening(tpu, Computed("tpu", "TPU v4", "DEFAULT", "0.10.2")) == 2 * 2**-8
    assert widening(tpu, Computed("tpu", "TPU v5 lite", "DEFAULT", "0.12.1")) == 2 * 2**-8
    assert widening(cpu, Computed("tpu", "TPU v5 lite", "HIGH", "0.10.2")) == 2**-16 + F32_ROUNDOFF
    # Another computation at float32 on both sides: another summation order, float32's u each.
    f32 = 2 * F32_ROUNDOFF
    # ... but a TPU's float32 is not IEEE's at any precision (bfloat16 passes, approximated
    # functions): 2^-16 on its side where its module has dots, HIGHEST too (SPEC.md 2.15) ...
    tpu_f32 = 2**-16 + F32_ROUNDOFF
    assert widening(cpu, Computed("tpu", "TPU v5 lite", "HIGHEST", "0.10.2")) == tpu_f32
    # ... and a module without any (no precision) claims no floor: a platform alone buys none
    assert widening(Computed("cpu", None, None, "0.10.2"), Computed("tpu", "v5", None)) == f32
    highest = Computed("tpu", "TPU v5 lite", "HIGHEST", "0.10.2")
    assert widening(highest, highest) == 0.0  # the same computation computes the same bits
    # HIGH and HIGHEST on one TPU share a u but are not the same computation
    assert widening(highest, Computed("tpu", "TPU v5 lite", "HIGH", "0.10.2")) == 2 * 2**-16
    assert widening(Computed("cuda", "H100", "HIGHEST", "0.10.2"), cpu) == f32  # IEEE's
    assert widening(cpu, Computed("cpu", "cpu", "DEFAULT", "0.12.1")) == f32
    assert widening(Computed("cpu", None, None), Computed("cpu", "cpu", None)) == f32  # unknown
    assert widening(cpu, Computed("cpu", "cpu", "HIGHEST", "0.10.2")) == 0.0  # a CPU's all f32
    assert widening(Computed("cpu", None, None, "0.10.2"), cpu) == 0.0  # a CPU's kind: "cpu"
    assert differences(cpu, Computed("tpu", "TPU v5 lite", "HIGHEST", "0.12.1")) == [
        "platform cpu / tpu",
        "jaxlib 0.10.2 / jaxlib 0.12.1",
    ]


def test_the_mismatch_names_the_worst_element_not_the_largest_difference(tmp_path):
    # 1000 against 1000.005 is within rtol (allowed 0.01); 0.001 against 0.0011 is not
    # (allowed 1e-5), though its difference is 50 times smaller.
    x = np.array([1000.0, 0.001], np.float32)
    bundle = pack_identity(tmp_path, x, expected=[np.array([1000.005, 0.0011], np.float32)])
    r = cli("run", bundle)
    assert r.returncode == 1
    assert "result_0[1]: got 0.001, expected 0.0011, |diff| 0.0001 > allowed 1e-05" in r.stdout
    assert "(rtol 1e-05, atol 1e-05)" in r.stdout and "give --rtol and --atol" in r.stdout
    assert "--precision highest" not in r.stdout  # a CPU computed both at full precision
    report = json.loads(cli("run", bundle, "--json").stdout)
    (out,) = report["outputs"]
    assert out["max_abs_diff"] == pytest.approx(0.005, rel=0.01)
    assert out["worst"]["index"] == [1] and out["worst"]["allowed"] == pytest.approx(1e-5, rel=0.01)


def test_compare_equal_infinities_agree_and_a_nan_against_a_number_does_not():
    from hlobundle._run._tolerance import compare

    inf = np.array([np.inf, -np.inf, np.nan], np.float32)
    assert compare(inf, inf.copy(), 1e-5, 1e-5)[0]
    ok, _, worst = compare(np.array([1.0, np.nan]), np.array([1.0, 2.0]), 1e-5, 1e-5)
    assert not ok and worst is not None and worst.index == [1] and worst.diff == np.inf
    ok, _, worst = compare(np.float32(2.0), np.float32(1.0), 1e-5, 1e-5)  # 0-d
    assert not ok and worst is not None and worst.index == []


def test_a_cpu_writer_records_nothing_and_keeps_the_oldest_version(tmp_path):
    x = np.ones((2, 2), np.float32)
    bundle = pack_identity(tmp_path, x, expected="compute")
    m = json.loads((bundle / "manifest.json").read_text())
    assert m["format_version"] == "1.0" and "expected_from" not in json.dumps(m)


def test_a_writer_off_a_cpu_records_where_and_at_what_precision(tmp_path, monkeypatch):
    from hlobundle._run import _compute

    # Only the question "where does jax compute" is answered as a TPU would answer it.
    monkeypatch.setattr(_compute, "where", lambda: ("tpu", "TPU v5 lite", "0.10.2"))
    text = (
        "func.func @main(%x: tensor<2x2xf32>) -> tensor<2x2xf32> {\n"
        "  %y = stablehlo.dot_general %x, %x, contracting_dims = [1] x [0] : "
        "(tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>\n"
        "  return %y : tensor<2x2xf32>\n}\n"
    )
    bundle = hlobundle.pack(text, [np.eye(2, dtype=np.float32)], tmp_path / "b", expected="compute")
    m = json.loads((bundle / "manifest.json").read_text())
    assert m["format_version"] == "2.2"
    assert m["functions"][0]["expected_from"] == {
        "device_kind": "TPU v5 lite",
        "jaxlib_version": "0.10.2",
        "platform": "tpu",
        "precision": "DEFAULT",
    }
    b = hlobundle.load(bundle)
    assert b.manifest.expected_from.platform == "tpu"
    assert cli("run", bundle).returncode == 0  # the identity's dot is exact at any precision


def test_conformance_widens_for_an_implementation_on_a_tpu():
    from hlobundle._cli import _conformance
    from hlobundle._run._tolerance import Computed, widening

    case = _conformance.INSTALLED / "valid_expected_from"
    want = load_file(str(case / "outputs.safetensors"))["result0"]
    off = {"result0": want * np.float32(1 + 2**-9)}  # a bfloat16 pass's error, about
    assert _conformance._compare(case, off, 1e-6, 1e-6, 0.0).startswith("result result0")
    here = _conformance._where(
        {"platform": "tpu", "device_kind": "TPU v5 lite", "precision": "DEFAULT"}
    )
    u = widening(Computed("cpu", None, here.precision), here)
    assert _conformance._compare(case, off, 1e-6, 1e-6, u) == ""
    assert _conformance._where({"platform": 3}) == _conformance.CPU  # nothing said


@pytest.mark.slow
def test_the_docs_block_runs(tmp_path):
    from test_readme import _bash, _sh

    r = _bash(_sh("docs/accelerators.md", "How results are compared"), tmp_path)
    assert r.stdout.split() == ["cpu", "1e-05"]


def test_inspect_says_where_the_expected_outputs_were_computed(tmp_path):
    from hlobundle._cli._conformance import INSTALLED

    r = cli("inspect", INSTALLED / "valid_expected_from" / "bundle")
    assert "expected  computed on tpu (TPU v5 lite) at DEFAULT, jaxlib 0.10.2" in r.stdout
    assert "expected  computed" not in cli("inspect", EXAMPLE).stdout  # a CPU's: nothing said


def test_the_emitted_scripts_widen_as_the_runner_does():
    from hlobundle._emit import _template
    from hlobundle._format import _agreement
    from hlobundle._run import _tolerance
    from hlobundle._run._tolerance import Computed

    shared = (ROOT / "hlobundle" / "_emit" / "run_shared.py").read_text()
    body = shared[shared.index("# Unit roundoff") : shared.index("def random_input(")]
    body = _template._written_part(Path(_agreement.__file__)) + body  # `widened` is its
    helpers: dict = {}
    exec(compile("import numpy as np\nEXPECTED_FROM = None\n" + body, "helpers", "exec"), helpers)
    assert helpers["ROUNDOFF"] == _tolerance.ROUNDOFF
    assert helpers["PLATFORM_ROUNDOFF"] == _tolerance.PLATFORM_ROUNDOFF
    sides = [
        Computed("cpu", None, "DEFAULT", "0.10.2"),
        Computed("cpu", "cpu", "HIGHEST", "0.10.2"),
        Computed("cpu", "cpu", None, "0.12.1"),
        Computed("cpu", "cpu", None, None),
        Computed("tpu", "TPU v5 lite", "DEFAULT", "0.10.2"),
        Computed("tpu", "TPU v5 lite", "DEFAULT", "0.12.1"),
        Computed("tpu", None, "DEFAULT", "0.10.2"),
        Computed("tpu", "TPU v4", "DEFAULT", "0.10.2"),
        Computed("tpu", "TPU v5 lite", "HIGH", "0.10.2"),
        Computed("tpu", "TPU v5 lite", "HIGHEST", "0.10.2"),
        Computed("tpu", "TPU v5 lite", None, "0.10.2"),
        Computed("cuda", "NVIDIA H100", "DEFAULT", "0.10.2"),
    ]
    for expected in sides:
        for here in sides:
            helpers["EXPECTED_FROM"] = (*vars(expected).values(), here.precision)
            got = helpers["widening"]((here.platform, here.device_kind, here.jaxlib_version))
            assert got == _tolerance.widening(expected, here), (expected, here)
    want = np.float32([0.5, -2.0, np.inf])
    assert helpers["widened_atol"](1e-5, want, 2**-8) == _tolerance.widened(1e-5, want, 2**-8)


@pytest.mark.slow
@pytest.mark.subprocess
def test_an_emitted_script_checks_tpu_outputs_as_run_does(tmp_path, script_zygote):
    bundle = as_if_on_a_tpu(tmp_path)
    hlobundle.emit_script(hlobundle.load(bundle), tmp_path / "run.py", backend="xla")
    r = script_zygote(tmp_path / "run.py")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "tolerance widened (SPEC.md 2.15)" in r.stdout
    perturbed(bundle, "params_dense3_w")
    hlobundle.emit_script(hlobundle.load(bundle), tmp_path / "bad.py", backend="xla")
    r = script_zygote(tmp_path / "bad.py")
    assert r.returncode == 1 and "FAILED: result differ" in r.stderr, r.stderr[-2000:]


def _column_major_off_at_1_2(tmp_path: Path) -> Path:
    """A column-major (Julia) result whose expected element [1, 2] (as stored) is 0.5 off."""
    from helpers import identity_module

    stored = np.arange(6, dtype=np.float32).reshape(2, 3)
    text = identity_module(stored)
    bundle = hlobundle.pack(
        text, [stored.T], tmp_path / "b", layout="column_major", expected="compute"
    )
    expected = load_file(str(bundle / "expected.safetensors"))
    expected["result_0"][1, 2] += 0.5
    save_file(expected, str(bundle / "expected.safetensors"))
    rehash(bundle, "expected.safetensors")
    return bundle


def test_the_worst_element_is_named_in_the_orientation_shown(tmp_path):
    # A column-major (Julia) result shown with --layout producer is the stored array reversed:
    # its worst element's index is too.
    bundle = _column_major_off_at_1_2(tmp_path)
    stored_view = json.loads(cli("run", bundle, "--json").stdout)["outputs"][0]
    producer_view = json.loads(cli("run", bundle, "--json", "--layout", "producer").stdout)
    assert stored_view["worst"]["index"] == [1, 2] and stored_view["shape"] == [2, 3]
    assert producer_view["outputs"][0]["worst"]["index"] == [2, 1]
    assert producer_view["outputs"][0]["shape"] == [3, 2]


@pytest.mark.slow
@pytest.mark.subprocess
def test_an_emitted_script_names_the_worst_element_as_run_does(tmp_path, script_zygote):
    bundle = _column_major_off_at_1_2(tmp_path)
    hlobundle.emit_script(hlobundle.load(bundle), tmp_path / "run.py", backend="xla")
    said = "result_0{}: got 5, expected 5.5, |diff| 0.5 > allowed 6.5e-05"
    r = script_zygote(tmp_path / "run.py")
    assert r.returncode == 1 and said.format([1, 2]) in r.stdout, r.stdout + r.stderr[-2000:]
    r = script_zygote(tmp_path / "run.py", "--layout", "producer")
    assert r.returncode == 1 and said.format([2, 1]) in r.stdout, r.stdout + r.stderr[-2000:]


def test_export_off_a_cpu_records_where_its_expected_outputs_were_computed(tmp_path, monkeypatch):
    # export() computes expected outputs by running the JAX function itself, on jax's default
    # device: a TPU's export records it as pack --compute-expected does.
    import jax.numpy as jnp

    from hlobundle._run import _compute

    w, x = np.ones((3, 2), np.float32), np.ones((4, 3), np.float32)
    on_a_cpu = hlobundle.export(lambda w, x: jnp.tanh(x @ w), w, x, out=tmp_path / "cpu")
    assert hlobundle.load(on_a_cpu).manifest.expected_from is None
    monkeypatch.setattr(_compute, "where", lambda: ("tpu", "TPU v5 lite", "0.10.2"))
    on_a_tpu = hlobundle.export(lambda w, x: jnp.tanh(x @ w), w, x, out=tmp_path / "tpu")
    record = hlobundle.load(on_a_tpu).manifest.expected_from
    assert (record.platform, record.precision) == ("tpu", "DEFAULT")
    unstored = hlobundle.export(
        lambda w, x: jnp.tanh(x @ w), w, x, out=tmp_path / "none", store_expected=False
    )
    assert hlobundle.load(unstored).manifest.expected_from is None  # no expected outputs


def _claimed_tpu_default(tmp_path: Path, dots: bool) -> Path:
    """A CPU's bundle whose manifest then claims a TPU at DEFAULT, with a weight scaled by
    1.001 since: its function has no dot (`dots` False) or only dots asking for HIGHEST."""
    import jax
    import jax.numpy as jnp

    def f(w, x):
        if dots:
            return jnp.dot(x, w, precision=jax.lax.Precision.HIGHEST)
        return jnp.tanh(x * w) + w

    w = np.linspace(0.5, 1.5, 16, dtype=np.float32).reshape(4, 4)
    out = tmp_path / "claimed.hlobundle"
    hlobundle.export(f, w, np.ones((4, 4), np.float32), out=out, roles={"w": "parameter"})
    recorded(out, TPU)
    perturbed(out, "w", 1.001)
    return out


@pytest.mark.parametrize("dots", [False, True], ids=["no_dot", "dots_at_highest"])
def test_a_record_of_a_precision_the_module_cannot_ask_for_widens_nothing(tmp_path, dots):
    """Attack: a manifest whose `expected_from` claims a TPU at DEFAULT for a module with no
    dot or convolution op (where SPEC.md 2.15 widens by no bfloat16 pass), or whose dots all
    ask for HIGHEST (which a TPU computes at float32), made `run` widen atol to 2 (2^-8 +
    2^-24) max|expected|: a weight scaled by 1.001 then passed. The expected side's precision
    is at the lowest the module's own: the claimed TPU widens by float32's roundoff alone where
    the module has no dot (a platform's claim buys no floor there), and by its floor, 2^-16,
    where its dots ask for HIGHEST: not 2^-8."""
    bundle = _claimed_tpu_default(tmp_path, dots)
    r = cli("run", bundle, "--json")
    report = json.loads(r.stdout)
    said = "atol = 2 * 1.53e-05 *" if dots else "atol = 2 * 1.19e-07 *"
    assert r.returncode == 1 and said in report["widened"], r.stdout


@pytest.mark.slow
@pytest.mark.subprocess
def test_an_emitted_script_does_not_widen_for_a_precision_the_module_cannot_ask_for(
    tmp_path, script_zygote
):
    bundle = _claimed_tpu_default(tmp_path, dots=True)
    hlobundle.emit_script(hlobundle.load(bundle), tmp_path / "run.py", backend="xla")
    r = script_zygote(tmp_path / "run.py")
    assert r.returncode == 1 and "FAILED: result differ" in r.stderr, r.stdout + r.stderr[-2000:]
    assert "atol = 2 * 1.53e-05 * max|expected|" in r.stdout  # each side's float32 alone


_CLAIMS_A_TPU = """\
import json, sys
import numpy as np
from safetensors.numpy import load_file, save_file

case, command, args = sys.argv[1], sys.argv[2], sys.argv[3:]
if command == "verify":
    print(json.dumps({"ok": True}))
elif command == "fingerprint":
    print(json.dumps({"bundle": json.load(open(case + "/case.json"))["fingerprint"]}))
else:  # run: the expected outputs, off by 0.5 %, said to be a TPU's at DEFAULT
    want = load_file(case + "/outputs.safetensors")
    out = args[args.index("--save-outputs") + 1]
    save_file({k: (v * np.float32(1.005)).astype(v.dtype) for k, v in want.items()}, out)
    print(json.dumps({"ok": True, "platform": "tpu", "device_kind": "TPU v5 lite",
                      "precision": "DEFAULT"}))
"""


@pytest.mark.subprocess
@pytest.mark.slow
@pytest.mark.parametrize(
    ("case", "passes"), [("valid_dtype_float32", False), ("valid_expected_from", True)]
)
def test_conformance_believes_an_implementation_s_precision_only_where_a_dot_can_round(
    tmp_path, case, passes
):
    """Attack (issue 64, §3): the conformance runner widened its tolerance for whatever
    precision an implementation's `run --json` reported, so a reader off by 0.5 % that said
    "tpu, DEFAULT" passed a case whose module has no dot or convolution op (a transpose, which
    rounds nothing). A claimed precision is taken as `run` takes a manifest's (SPEC.md 2.15):
    none where the module has no such op. Where it has one (valid_expected_from's dot), the
    same claim still widens, and the same outputs pass."""
    import sys

    from hlobundle._cli import _conformance

    script = tmp_path / "claims_a_tpu.py"
    script.write_text(_CLAIMS_A_TPU)
    where = _conformance.INSTALLED / case
    outcome = _conformance.run_case(where, [sys.executable, str(script), str(where)])
    assert outcome.passed is passes, outcome
    if not passes:
        assert outcome.detail.startswith("result "), outcome

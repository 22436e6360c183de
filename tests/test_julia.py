"""Julia interop: export_to_enzymejax output, the manual column-major flow, and normalization."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest
from helpers import FIXTURES, cli, lowered_text, needs_enzyme, needs_fixtures

import hlobundle

LUX = FIXTURES / "export_to_enzymejax_lux"


# --- export_to_enzymejax ---------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.subprocess
@needs_fixtures
@needs_enzyme  # the generated script calls enzyme_ad's hlo_call
def test_lux_export_round_trips_and_equals_the_generated_script(tmp_path):
    r = cli("pack", "--from-reactant", LUX, "-o", tmp_path / "lux", "--compute-expected")
    assert r.returncode == 0, r.stderr
    bundle = hlobundle.load(tmp_path / "lux")
    assert [a.path for a in bundle.arguments][:3] == ["arg.2", "arg.3.1.1", "arg.3.1.2"]
    assert [a.name for a in bundle.arguments][:3] == ["arg_2", "arg_3_1_1", "arg_3_1_2"]
    assert {a.layout for a in bundle.arguments} == {"column_major"}
    assert bundle.manifest.function == "run_lux_model" and bundle.results[0].name == "result"
    # The real generated script, run as its authors meant, in its own directory copy.
    shutil.copytree(LUX, tmp_path / "lux_src")
    code = (
        "import runpy, numpy as np\n"
        f"ns = runpy.run_path({str(tmp_path / 'lux_src' / 'run_lux_model.py')!r})\n"
        "out = ns['run_run_lux_model'](*ns['load_inputs']())\n"
        f"np.save({str(tmp_path / 'script.npy')!r}, np.asarray(out[0]))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    want = np.load(tmp_path / "script.npy")
    for backend in ("enzyme", "xla"):
        r = cli(
            "run",
            tmp_path / "lux",
            "--backend",
            backend,
            "--save-outputs",
            tmp_path / f"{backend}.npz",
        )
        assert r.returncode == 0, r.stderr
        np.testing.assert_array_equal(np.load(tmp_path / f"{backend}.npz")["result"], want)
    npz = np.load(LUX / "run_lux_model_0_inputs.npz")
    np.testing.assert_array_equal(bundle.tensor("arg_3_1_1"), npz["arr_2"])


@needs_fixtures
def test_the_readme_role_line_marks_the_models_parameters(tmp_path):
    # README "From Julia": the export numbers the arguments but does not say which are `ps`.
    out = hlobundle.from_reactant(LUX, tmp_path / "b", roles={"arg_3_*": "parameter"})
    roles = {a.name: a.role for a in hlobundle.load(out).arguments}
    assert roles.pop("arg_2") == "input" and set(roles.values()) == {"parameter"}


@needs_fixtures
def test_the_same_export_npz_packed_both_ways_differs_only_in_the_flag(tmp_path):
    # What README "From Julia" explains: the .npz holds arrays already at the tensors' shapes.
    a = hlobundle.from_reactant(LUX, tmp_path / "a")
    b = hlobundle.pack_files(
        LUX / "run_lux_model_0.mlir",
        [LUX / "run_lux_model_0_inputs.npz"],
        tmp_path / "b",
        layout="auto",
    )
    a, b = hlobundle.load(a), hlobundle.load(b)
    assert {x.layout for x in a.arguments} == {"column_major"}
    assert {x.layout for x in b.arguments} == {"row_major"}
    for x, y in zip(a.arguments, b.arguments, strict=True):
        np.testing.assert_array_equal(a.tensor(x.name), b.tensor(y.name))


@needs_fixtures
def test_export_without_data_runs_on_generated_inputs(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(LUX, src)
    (src / "run_lux_model_0_inputs.npz").unlink()
    script = (src / "run_lux_model.py").read_text()
    script = re.sub(r"def load_inputs\(\):.*?return tuple\(inputs\)\n", "", script, flags=re.S)
    (src / "run_lux_model.py").write_text(script)
    out = hlobundle.from_reactant(src, tmp_path / "b", names=[f"p{i}" for i in range(11)])
    bundle = hlobundle.load(out)
    assert not bundle.has_example_inputs
    assert bundle.arguments[0].name == "p0" and bundle.arguments[0].path == "arg.2"
    r = cli("run", out, "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["inputs"] == "generated"


@needs_fixtures
def test_the_export_names_the_function_and_its_paths_the_arguments(tmp_path):
    """What the export says: its function_name (`def run_run_lux_model` calls hlo_call) and the
    Julia paths (`arg.3.6.1.1`); one result is `result`, as a JAX function's one array is."""
    b = hlobundle.load(hlobundle.from_reactant(LUX, tmp_path / "b"))
    assert b.manifest.function == "run_lux_model"  # not "Chain", the module's truncated name
    assert [(a.name, a.path) for a in b.arguments][5] == ("arg_3_6_1_1", "arg.3.6.1.1")
    assert [r.name for r in b.results] == ["result"]
    named = hlobundle.from_reactant(LUX, tmp_path / "n", function="lenet", result_names=["logits"])
    named = hlobundle.load(named)
    assert named.manifest.function == "lenet" and [r.name for r in named.results] == ["logits"]


@needs_fixtures
def test_paths_that_sanitize_alike_get_numbered_names(tmp_path):
    """Dict keys `"a-b"` and `"a_b"` both become `a_b`: the second is `_2`, not a refusal."""
    src = tmp_path / "src"
    shutil.copytree(LUX, src)
    script = (src / "run_lux_model.py").read_text()
    script = script.replace("Path: arg.3.1.1", "Path: arg.3.a-b").replace(
        "Path: arg.3.1.2", "Path: arg.3.a_b"
    )
    (src / "run_lux_model.py").write_text(script)
    b = hlobundle.load(hlobundle.from_reactant(src, tmp_path / "b"))
    assert [(a.name, a.path) for a in b.arguments][1:3] == [
        ("arg_3_a_b", "arg.3.a-b"),
        ("arg_3_a_b_2", "arg.3.a_b"),
    ]


@needs_fixtures
@pytest.mark.parametrize(
    "edit",
    [
        lambda s: s.replace("def run_run_lux_model(", "def call_it("),  # no run_<name>
        lambda s: s + "\ndef run_other(x):\n    return hlo_call(x, source=_hlo_code)\n",
    ],
    ids=["none", "two"],
)
def test_without_one_run_function_the_module_names_the_function(tmp_path, edit):
    src = tmp_path / "src"
    shutil.copytree(LUX, src)
    (src / "run_lux_model.py").write_text(edit((src / "run_lux_model.py").read_text()))
    b = hlobundle.load(hlobundle.from_reactant(src, tmp_path / "b"))
    assert b.manifest.function == "Chain"


@needs_fixtures
def test_docstring_that_disagrees_with_the_module(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(LUX, src)
    script = (
        (src / "run_lux_model.py")
        .read_text()
        .replace("arg3: Array of shape (6,)", "arg3: Array of shape (7,)")
    )
    (src / "run_lux_model.py").write_text(script)
    with pytest.raises(
        hlobundle.InputError,
        match=re.escape(
            "arg3 (Path: arg.3.1.2) is documented as float32[7], but @main's argument 2 is float32[6]"
        ),
    ):
        hlobundle.from_reactant(src / "run_lux_model.py", tmp_path / "b")


@needs_fixtures
def test_two_named_exports_make_one_bundle_with_the_weights_stored_once(tmp_path):
    """`pack --from-reactant a=DIR --from-reactant b=DIR2`: a function per export; the model's
    parameters, the same bytes in both, are one tensor of the shared weights.safetensors."""
    other = tmp_path / "other"
    shutil.copytree(LUX, other)
    npz = dict(np.load(LUX / "run_lux_model_0_inputs.npz"))
    npz["arr_1"] = npz["arr_1"][::-1].copy()  # other images, the same model
    (other / "run_lux_model_0_inputs.npz").chmod(0o644)
    np.savez(other / "run_lux_model_0_inputs.npz", **npz)
    r = cli(
        "pack",
        "--from-reactant",
        f"first={LUX}",
        "--from-reactant",
        f"second={other}",
        "--role",
        "arg_3_*=parameter",
        "-o",
        tmp_path / "b",
    )
    assert r.returncode == 0, r.stderr
    assert "functions first, second" in r.stdout
    b = hlobundle.load(tmp_path / "b", verify=True)
    assert b.functions == ["first", "second"] and b.default_function == "first"
    params = [a for a in b.arguments if a.role == "parameter"]
    assert len(params) == 10 and params == [
        a for a in b.select("second").arguments if a.role == "parameter"
    ]  # each function's parameter is the one stored tensor
    assert {a.value.file for a in params} == {"weights.safetensors"}
    from safetensors import safe_open

    with safe_open(tmp_path / "b" / "weights.safetensors", "np") as f:
        assert sorted(f.keys()) == sorted(a.value.key for a in params)
    images = {f: b.select(f).tensor("arg_2") for f in b.functions}  # the npz's shapes
    np.testing.assert_array_equal(images["second"], npz["arr_1"])
    np.testing.assert_array_equal(images["first"], npz["arr_1"][::-1])
    for f in b.functions:  # each function runs on its own example images
        r = cli(
            "run",
            tmp_path / "b",
            "--function",
            f,
            "--backend",
            "xla",
            "--save-outputs",
            tmp_path / f"{f}.npz",
        )
        assert r.returncode == 0, r.stderr
    assert not np.array_equal(
        np.load(tmp_path / "first.npz")["result"], np.load(tmp_path / "second.npz")["result"]
    )


def test_from_reactant_usage_errors(tmp_path):
    assert cli("pack", "-o", tmp_path / "b").returncode == 2
    r = cli("pack", "--from-reactant", tmp_path, "-o", tmp_path / "b")
    assert r.returncode == 1 and "expected one script written by export_to_enzymejax" in r.stderr


def _hostile_export(tmp_path, make_module):
    """A copy of the Lux export whose script names the module `make_module(src)` returns."""
    src = tmp_path / "src"
    shutil.copytree(LUX, src)
    for p in src.iterdir():
        p.chmod(0o644)
    name = make_module(src)
    script = (src / "run_lux_model.py").read_text().replace('"run_lux_model_0.mlir"', repr(name))
    (src / "run_lux_model.py").write_text(script)
    return src


def _fifo(src):
    os.mkfifo(src / "pipe.mlir")
    return "pipe.mlir"


def _symlink_to_dev_zero(src):
    (src / "zero.mlir").symlink_to("/dev/zero")
    return "zero.mlir"


def _symlink_to_the_real_module(src):
    (src / "link.mlir").symlink_to(src / "run_lux_model_0.mlir")
    return "link.mlir"


@needs_fixtures
@pytest.mark.parametrize(
    "make_module, message",
    [
        (lambda src: "../outside.mlir", "'..'"),
        (lambda src: str(src / "run_lux_model_0.mlir"), "absolute"),
        (_fifo, "not a regular file"),
        (_symlink_to_dev_zero, "symlink"),
        (_symlink_to_the_real_module, "symlink"),
        (lambda src: (src / "sub.mlir").mkdir() or "sub.mlir", "not a regular file"),
    ],
    ids=["dotdot", "absolute", "fifo", "dev-zero", "symlink", "directory"],
)
def test_a_hostile_script_names_no_module_outside_its_directory(tmp_path, make_module, message):
    (tmp_path / "outside.mlir").write_text((LUX / "run_lux_model_0.mlir").read_text())
    src = _hostile_export(tmp_path, make_module)
    with pytest.raises(hlobundle.InputError, match=message) as e:
        hlobundle.from_reactant(src, tmp_path / "b")
    assert e.value.code == "INPUT_INVALID"
    assert not (tmp_path / "b").exists()


@needs_fixtures
def test_a_hostile_script_names_no_inputs_outside_its_directory(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(LUX, src)
    for p in src.iterdir():
        p.chmod(0o644)
    (src / "run_lux_model_0_inputs.npz").rename(tmp_path / "elsewhere_inputs.npz")
    script = (src / "run_lux_model.py").read_text()
    script = script.replace('"run_lux_model_0_inputs.npz"', '"../elsewhere_inputs.npz"')
    (src / "run_lux_model.py").write_text(script)
    r = cli("pack", "--from-reactant", src, "-o", tmp_path / "b")
    assert r.returncode == 1 and "[INPUT_INVALID]" in r.stderr and "'..'" in r.stderr, r.stderr


@needs_fixtures
def test_a_module_over_the_size_limit_is_refused_before_it_is_read(tmp_path, monkeypatch):
    from hlobundle._format import _limits

    monkeypatch.setattr(_limits, "MAX_MODULE_BYTES", 1000)
    with pytest.raises(hlobundle.InputError, match="the limit is 1000"):
        hlobundle.from_reactant(LUX, tmp_path / "b")


def test_a_fifo_or_symlink_among_the_scripts_is_refused_not_read(tmp_path):
    os.mkfifo(tmp_path / "a.py")
    with pytest.raises(hlobundle.InputError, match="not a regular file"):
        hlobundle.from_reactant(tmp_path, tmp_path / "b")
    (tmp_path / "a.py").unlink()
    (tmp_path / "a.py").symlink_to("/dev/zero")
    with pytest.raises(hlobundle.InputError, match="symlink"):
        hlobundle.from_reactant(tmp_path, tmp_path / "b")


# --- the manual flow: @code_hlo text plus arrays in Julia's orientation ----------------------


def sum_first_julia_axis(t):
    """What Julia's `sum(A; dims=1)` lowers to: a reduction over the tensor's last axis."""
    return t.sum(axis=-1)


@pytest.mark.parametrize("julia_shape", [(5,), (3, 4), (2, 3, 4), (2, 3, 4, 5)])
@pytest.mark.parametrize("layout", ["column-major", "auto"])
def test_column_major_flow_gives_correct_values(tmp_path, julia_shape, layout):
    tensor_shape = julia_shape[::-1]
    (tmp_path / "m.mlir").write_text(
        lowered_text(sum_first_julia_axis, np.zeros(tensor_shape, np.float32))
    )
    a = np.asfortranarray(np.random.default_rng(0).standard_normal(julia_shape).astype(np.float32))
    np.save(tmp_path / "a.npy", a)  # Julia's array, in Julia's orientation (fortran_order)
    if layout == "auto" and len(julia_shape) == 1:
        layout = "column-major"  # rank 1 cannot tell, and NumPy data is row-major by default
    r = cli(
        "pack",
        tmp_path / "m.mlir",
        "--inputs",
        tmp_path / "a.npy",
        "-o",
        tmp_path / "b",
        "--layout",
        layout,
    )
    assert r.returncode == 0, r.stderr
    assert hlobundle.load(tmp_path / "b").arguments[0].layout == "column_major"
    r = cli("run", tmp_path / "b", "--save-outputs", tmp_path / "out.npz", "--layout", "producer")
    assert r.returncode == 0, r.stderr
    got = np.load(tmp_path / "out.npz")["result"]
    want = a.sum(axis=0)  # Julia: dropdims(sum(A; dims=1); dims=1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_square_matrices_are_row_major_unless_stored_in_fortran_order(tmp_path):
    # The CLI agrees with pack(): NumPy data is row-major. Column-major needs evidence: shapes
    # that are the tensors' reversed, Fortran-ordered arrays (Julia's NPZ.jl), or --layout.
    (tmp_path / "m.mlir").write_text(
        lowered_text(sum_first_julia_axis, np.zeros((3, 3), np.float32))
    )
    a = np.arange(9, dtype=np.float32).reshape(3, 3)
    np.save(tmp_path / "c.npy", a)
    np.save(tmp_path / "f.npy", np.asfortranarray(a))
    for name, layout in (("c", "row_major"), ("f", "column_major")):
        r = cli(
            "pack", tmp_path / "m.mlir", "--inputs", tmp_path / f"{name}.npy", "-o", tmp_path / name
        )
        assert r.returncode == 0, r.stderr
        arg = hlobundle.load(tmp_path / name).arguments[0]
        assert arg.layout == layout
    np.testing.assert_array_equal(hlobundle.load(tmp_path / "c").tensor("arg0"), a)
    np.testing.assert_array_equal(
        hlobundle.load(tmp_path / "f").tensor("arg0", layout="producer"), a
    )


def test_mixed_orientations_are_refused(tmp_path):
    text = lowered_text(
        lambda x, y: (x, y), np.zeros((2, 3), np.float32), np.zeros((4, 5), np.float32)
    )
    with pytest.raises(
        hlobundle.InputError,
        match=re.escape(
            "arguments ['arg0'] have the tensors' shapes but ['arg1'] have them reversed"
        ),
    ):
        hlobundle.pack(
            text,
            [np.zeros((2, 3), np.float32), np.zeros((5, 4), np.float32)],
            tmp_path / "b",
            layout="auto",
        )


def test_zero_d_column_major(tmp_path):
    text = lowered_text(lambda x: x * 2, np.float64(1))
    out = hlobundle.pack(
        text, [np.float64(1.5)], tmp_path / "b", layout="column_major", expected="compute"
    )
    bundle = hlobundle.load(out)
    assert bundle.tensor("arg0", layout="producer") == 1.5
    assert bundle.expected_outputs()["result"] == 3.0


# --- normalization and refusal (synthetic modules, no ../shared needed) ---------------------

BODY = "  func.func @main(%x: tensor<2xf32>{attrs}) -> tensor<2xf32> {{\n    return %x : tensor<2xf32>\n  }}\n"


def module(header="module @m {\n", attrs="", extra="", footer="}\n"):
    return header + extra + BODY.format(attrs=attrs) + footer


@pytest.mark.parametrize(
    ("text", "change"),
    [
        ("Module:\n" + module(), "removed a leading 'Module:' line"),
        (
            module(header='module @"reactant_Chain{@..." {\n'),
            "renamed the module @'reactant_Chain{@...' (quoted or truncated by the producer) to @reactant_Chain",
        ),
        (
            module(attrs=" {enzymexla.memory_effects = [], reactant.donated}"),
            "removed the attribute enzymexla.memory_effects (1 use)",
        ),
        (
            module(attrs=" {enzymexla.flag = #enzymexla<guaranteed UNKNOWN>}"),
            "removed the attribute enzymexla.flag (1 use)",
        ),
        (
            module(header='module @m attributes {llvm.data_layout = "e"} {\n'),
            "removed the module attribute llvm.data_layout",
        ),
        (
            module(
                extra='  llvm.module_flags [#llvm.mlir.module_flag<warning, "Dwarf Version", 2 : i32>]\n'
            ),
            "removed the top-level op llvm.module_flags (it has no symbol name)",
        ),
    ],
)
def test_normalizations(tmp_path, text, change):
    bundle = hlobundle.load(
        hlobundle.pack(text, [np.ones(2, np.float32)], tmp_path / "b", expected="compute")
    )
    assert change in bundle.manifest.module.normalizations
    np.testing.assert_array_equal(bundle.function("xla")(np.ones(2, np.float32))[0], np.ones(2))


@pytest.mark.parametrize("text", [module(header="module {\n"), BODY.format(attrs="")])
def test_bare_module_and_bare_func_need_no_change(tmp_path, text):
    bundle = hlobundle.load(hlobundle.pack(text, [np.ones(2, np.float32)], tmp_path / "b"))
    assert bundle.manifest.module.normalizations == []
    assert bundle.manifest.function == "main"


def custom_call(target):
    return module(extra="").replace(
        "    return %x",
        f"    %y = stablehlo.custom_call @{target}(%x) : (tensor<2xf32>) -> tensor<2xf32>\n    return %x",
    )


@pytest.mark.parametrize(
    ("text", "what"),
    [
        (
            custom_call("enzymexla_compile_cpu"),
            "custom_call @enzymexla_compile_cpu at line 3, column 10",
        ),
        (
            custom_call("reactant_julia_callback"),
            "custom_call @reactant_julia_callback at line 3, column 10",
        ),
        (
            module(extra="  llvm.func @kernel() {\n    llvm.return\n  }\n"),
            "llvm.func at line 2, column 3",
        ),
        (
            module().replace(
                "    return %x",
                '    %y = "enzymexla.jit_call"(%x) {fn = @f} : (tensor<2xf32>) -> tensor<2xf32>\n    return %x',
            ),
            "enzymexla.jit_call at line 3, column 10",
        ),
        (
            module().replace(
                "    return %x",
                '    %y = "enzymexla.kernel_call"(%x) : (tensor<2xf32>) -> tensor<2xf32>\n    return %x',
            ),
            "enzymexla.kernel_call at line 3, column 10",
        ),
    ],
)
def test_non_portable_modules_are_refused(tmp_path, text, what):
    with pytest.raises(
        hlobundle.errors.ModuleError, match=re.escape(f"the module is not portable: {what}")
    ) as e:
        hlobundle.pack(text, None, tmp_path / "b")
    assert e.value.code == "MODULE_NOT_PORTABLE"


def test_allow_custom_call_is_recorded(tmp_path):
    out = hlobundle.pack(
        custom_call("enzymexla_my_kernel"),
        None,
        tmp_path / "b",
        allow_custom_calls=["enzymexla_my_kernel", "unused"],
    )
    assert hlobundle.load(out).manifest.module.allowed_custom_calls == ["enzymexla_my_kernel"]


def test_jax_modules_are_untouched(tmp_path):
    x = np.ones(3, np.float32)
    text = lowered_text(lambda x: jax.nn.relu(x), x)
    bundle = hlobundle.load(hlobundle.pack(text, [x], tmp_path / "b"))
    assert bundle.manifest.module.normalizations == []
    assert bundle.module_text == text


@pytest.mark.parametrize("backend", ["enzyme", "xla"])
def test_aliased_arguments_can_be_donated(tmp_path, backend):
    # Reactant's in-place update: result 0 writes back argument 0 (tf.aliasing_output = 0).
    text = (
        "func.func @main(%x: tensor<3xf32> {tf.aliasing_output = 0 : i32}, %y: tensor<3xf32>)"
        " -> tensor<3xf32> {\n  %z = stablehlo.add %x, %y : tensor<3xf32>\n  return %z : tensor<3xf32>\n}"
    )
    bundle = hlobundle.load(hlobundle.pack(text, None, tmp_path / "b", names=["state", "delta"]))
    assert bundle.results[0].aliases == 0
    fn = bundle.function(backend, donate="aliased")
    assert fn.donated == ("state",)
    state, delta = jax.numpy.ones(3, np.float32), jax.numpy.full(3, 2.0, np.float32)
    (new,) = fn(state, delta)
    np.testing.assert_array_equal(new, np.full(3, 3.0))
    assert state.is_deleted() and not delta.is_deleted()
    with pytest.raises(
        hlobundle.InputError, match=r"cannot donate unknown argument\(s\) \['nope'\]"
    ):
        bundle.function(backend, donate=["nope"])

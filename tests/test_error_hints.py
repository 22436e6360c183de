"""Mistakes a user makes in the first hour get errors that say what to do (issue 33): each test
runs the user's command or call and checks the message."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest
from helpers import FIXTURES, ROOT, cli, identity_module, needs_fixtures, two_functions

import hlobundle

LENET = ROOT / "examples" / "lenet5.hlobundle"
IMAGES = (4, 1, 28, 28)  # LeNet's one input, after ten parameters


def test_a_role_typo_in_export_is_a_coded_error_listing_the_roles(tmp_path):
    x = np.ones((2, 3), np.float32)
    with pytest.raises(hlobundle.InputError, match=r"role 'param' .*input, parameter, state"):
        hlobundle.export(
            lambda params, x: x * params, x, x, out=tmp_path / "b", roles={"params": "param"}
        )
    assert not (tmp_path / "b").exists()
    (tmp_path / "m.mlir").write_text(identity_module(x))
    r = cli("pack", tmp_path / "m.mlir", "-o", tmp_path / "c", "--role", "arg0=param")
    assert r.returncode == 2 and "input|parameter|state, got 'arg0=param'" in r.stderr


def test_a_wrong_input_name_lists_the_inputs_first_and_suggests_the_closest(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros(IMAGES, np.float32))
    r = cli("run", LENET, "--inputs", f"imagez={tmp_path / 'x.npy'}")
    assert r.returncode == 1
    assert "did you mean 'images'?" in r.stderr, r.stderr
    assert "['images', 'params_conv1_b'," in r.stderr and "and 3 more" in r.stderr, r.stderr
    fn = hlobundle.load(LENET).function("xla")
    with pytest.raises(
        hlobundle.InputError, match=r"'imagez'; did you mean 'images'\?.*and 3 more"
    ):
        fn(imagez=np.zeros(IMAGES, np.float32))


def test_one_unnamed_array_goes_to_the_only_input(tmp_path):
    images = np.zeros(IMAGES, np.float32)
    np.save(tmp_path / "x.npy", images)
    r = cli(
        "run",
        LENET,
        "--inputs",
        tmp_path / "x.npy",
        "--json",
        "--save-outputs",
        tmp_path / "out.npz",
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["inputs"] == "given and stored"
    want = hlobundle.load(LENET).function("xla")(images=images)
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["result"], want, rtol=1e-6)
    # Two loose arrays name no argument: the hint names the input, never a parameter.
    np.save(tmp_path / "y.npy", images)
    r = cli("run", LENET, "--inputs", tmp_path / "x.npy", tmp_path / "y.npy")
    assert r.returncode == 1 and "e.g. --inputs images=x.npy" in r.stderr, r.stderr


def _column_major(tmp_path):
    """A bundle made from Julia's arrays: @main takes and returns a tensor<2x3xf32>, which Julia
    holds as a 3x2 array."""
    julia = np.arange(6, dtype=np.float32).reshape(3, 2)
    text = identity_module(np.zeros((2, 3), np.float32))
    out = hlobundle.pack(text, [julia], tmp_path / "b", layout="column_major")
    np.save(tmp_path / "julia.npy", julia)
    return out


def test_an_array_in_julia_s_orientation_gets_a_hint_naming_layout_producer(tmp_path):
    b = _column_major(tmp_path)
    r = cli("run", b, "--inputs", f"arg0={tmp_path / 'julia.npy'}")
    assert r.returncode == 1
    assert "expected shape (2, 3), got (3, 2)" in r.stderr and "--layout producer" in r.stderr
    r = cli("run", b, "--inputs", f"arg0={tmp_path / 'julia.npy'}", "--layout", "producer")
    assert r.returncode == 0, r.stderr


def test_layout_producer_shows_and_saves_the_producer_s_shapes(tmp_path):
    b = _column_major(tmp_path)
    r = cli("run", b, "--layout", "producer", "--save-outputs", tmp_path / "out.npz")
    assert r.returncode == 0, r.stderr
    assert "  result_0  (3, 2)  float32" in r.stdout, r.stdout
    assert np.load(tmp_path / "out.npz")["result_0"].shape == (3, 2)
    r = cli("run", b, "--layout", "producer", "--json")
    assert json.loads(r.stdout)["outputs"][0]["shape"] == [3, 2]
    r = cli("run", b)  # the stored orientation, as before
    assert "  result_0  (2, 3)  float32" in r.stdout, r.stdout


def test_a_python_float_argument_suggests_a_32_bit_scalar(tmp_path):
    x = np.ones((3,), np.float32)
    jax.config.update("jax_enable_x64", False)
    try:
        with pytest.raises(hlobundle.InputError, match=r"Python float.*np\.float32\(2\.0\)") as e:
            hlobundle.export(lambda x, s: x * s, x, 2.0, out=tmp_path / "b")
    finally:
        jax.config.update("jax_enable_x64", True)
    assert "jax_enable_x64', True" not in str(e.value)


def test_emit_reactant_server_of_a_symbolic_function_says_how_to_get_static_shapes(tmp_path):
    two = two_functions(tmp_path)
    r = cli(
        "emit", two, "--function", "predict", "--format", "reactant-server", "-o", tmp_path / "rs"
    )
    assert r.returncode == 1
    assert "re-export it at fixed sizes" in r.stderr and "static module" in r.stderr, r.stderr


@needs_fixtures
def test_verify_of_a_reactant_export_suggests_pack_from_reactant():
    lux = FIXTURES / "export_to_enzymejax_lux"
    r = cli("verify", lux)
    assert r.returncode == 1 and r.stderr.startswith("error [NOT_A_BUNDLE]")
    assert f"hlobundle pack --from-reactant {lux} -o" in r.stderr, r.stderr


@pytest.mark.parametrize("backend", ["iree", "enzyme"])
def test_a_symbolic_function_refused_by_a_script_backend_is_a_usage_error(tmp_path, backend):
    two = two_functions(tmp_path)
    r = cli("emit", two, "--function", "predict", "--backend", backend, "-o", tmp_path / "s.py")
    assert r.returncode == 2, r.stderr
    first, usage = r.stderr.strip().splitlines()
    assert usage.startswith("usage: hlobundle emit") and first.startswith("hlobundle emit: error")
    assert "symbolic shapes" in first and "--backend xla" in first, first
    assert not (tmp_path / "s.py").exists()


def test_an_unknown_option_names_the_closest_with_the_command_s_usage():
    r = cli("run", LENET, "--input", "x.npy")  # an abbreviation is not taken for --inputs
    assert r.returncode == 2
    first, usage = r.stderr.strip().splitlines()
    assert usage.startswith("usage: hlobundle run "), r.stderr
    assert (
        first
        == "hlobundle run: error: unrecognized arguments: --input x.npy; did you mean --inputs?"
    )
    r = cli("pack", "m.mlir", "-o", "out", "--compute-expect")
    first, usage = r.stderr.strip().splitlines()
    assert first.endswith("did you mean --compute-expected?"), r.stderr
    assert usage.startswith("usage: hlobundle pack ")


def test_no_parser_takes_abbreviations():
    from hlobundle._cli import _parser

    top = _parser.build()
    commands = top._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    parsers = [top, *commands.values()]
    nested = commands["cache"]._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    parsers += nested.values()  # cache ls, cache prune
    assert len(parsers) == 20 and not any(p.allow_abbrev for p in parsers)


@pytest.mark.slow
def test_a_traceback_is_shown_only_when_asked_for(tmp_path):
    """HLOBUNDLE_TRACEBACK=0 (or false, no, off, empty) keeps tracebacks off, as unset does."""
    import helpers

    verify = helpers.CLI_ZYGOTE.run  # each a process of its own, which reads the variable
    for value in ("0", "false", "no", "off", ""):
        r = verify("verify", tmp_path / "nothing", env={"HLOBUNDLE_TRACEBACK": value})
        assert r.returncode == 1 and "Traceback" not in r.stderr, (value, r.stderr)
    r = verify("verify", tmp_path / "nothing", env={"HLOBUNDLE_TRACEBACK": "1"})
    assert r.returncode == 1 and "Traceback" in r.stderr


def test_inspect_counts_one_function_in_the_singular(tmp_path):
    from helpers import two_functions

    b = two_functions(tmp_path)
    assert "2 functions" in cli("inspect", b).stdout
    out = tmp_path / "one"
    hlobundle.export(
        lambda x: x * 2, np.ones((2, 3), np.float32), out=out, name="double", shapes_specs=("b, 3",)
    )
    r = cli("inspect", out)
    assert "1 function," in r.stdout or "1 function\n" in r.stdout, r.stdout


@pytest.mark.slow
def test_export_names_a_leaf_that_is_not_an_array(tmp_path):
    """A whole Equinox module holds functions (its activation) beside its arrays: export names
    the first leaf that is not an array and says how to split the model (eqx.partition)."""
    eqx = pytest.importorskip("equinox", reason="equinox is in the dev extra")
    import jax

    model = eqx.nn.MLP(3, 2, 4, 2, key=jax.random.PRNGKey(0))
    with pytest.raises(hlobundle.InputError, match=r"args\[0\]\.activation is a") as e:
        hlobundle.export(
            lambda m, x: jax.vmap(m)(x), model, np.ones((5, 3), np.float32), out=tmp_path / "m"
        )
    assert "eqx.partition(model, eqx.is_array)" in e.value.message
    assert not (tmp_path / "m").exists()
    with pytest.raises(hlobundle.InputError, match=r"args\[0\]\['name'\] is a str"):
        hlobundle.export(
            lambda d, x: x, {"name": "relu"}, np.ones(3, np.float32), out=tmp_path / "d"
        )


def test_pinned_sizes_must_name_a_symbol_of_some_model(tmp_path):
    pytest.importorskip("starlette", reason="the serve extra is not installed")
    from hlobundle._serve._models import load_models

    out = tmp_path / "sym"
    hlobundle.export(
        lambda x: x * 2, np.ones((2, 3), np.float32), out=out, name="double", shapes_specs=("b, 3",)
    )
    with pytest.raises(hlobundle.InputError, match=r"--sizes names symbol\(s\) \['c'\]"):
        load_models([out], backend="xla", sizes={"c": [1]})
    assert "sym" in load_models([out], backend="xla", sizes={"b": [1, 2]})


def test_a_partial_set_of_numbered_keys_says_how_to_give_some_arguments(tmp_path):
    from helpers import small_bundle

    b = small_bundle(tmp_path)
    np.savez(tmp_path / "one.npz", np.ones((4, 3), np.float32))  # arr_0 only, of two arguments
    r = cli("run", b, "--inputs", tmp_path / "one.npz")
    assert r.returncode == 1 and "[INPUT_AMBIGUOUS]" in r.stderr, r.stderr
    assert "are not one full set for 2 argument(s)" in r.stderr
    assert "name them: keys named after the arguments (['x', 'w'])" in r.stderr, r.stderr


def test_a_python_call_takes_julia_s_orientation_with_layout_producer(tmp_path):
    """The call's hint names the option; with it, column-major arguments are given and results
    come back in Julia's orientation, as `run --layout producer` takes and saves them."""
    b = hlobundle.load(_column_major(tmp_path))
    julia = np.load(tmp_path / "julia.npy")
    with pytest.raises(hlobundle.InputError, match=r"got float32\[3, 2\], its reversed shape.*"):
        b.function("xla")(arg0=julia)
    with pytest.raises(hlobundle.InputError, match=r"layout='producer'"):
        b.function("xla")(arg0=julia)
    producer = b.function("xla", layout="producer")
    (got,) = producer(arg0=julia)
    np.testing.assert_array_equal(got, julia)  # the identity, in Julia's orientation
    with pytest.raises(hlobundle.InputError, match=r"expected float32\[3, 2\] \(the producer's"):
        producer(arg0=julia.T)
    with pytest.raises(hlobundle.InputError, match="layout must be 'stored' or 'producer'"):
        b.function("xla", layout="julia")


@pytest.mark.slow
@pytest.mark.subprocess
def test_the_emitted_script_takes_layout_producer_and_hints_it(tmp_path, script_zygote):
    run_script = script_zygote
    script = tmp_path / "run.py"
    hlobundle.emit_script(_column_major(tmp_path), script, backend="xla")
    julia = tmp_path / "julia.npy"
    r = run_script(script, "--inputs", f"arg0={julia}")
    assert r.returncode == 1 and "its reversed shape" in r.stderr, r.stderr[-2000:]
    assert "--layout producer" in r.stderr, r.stderr[-2000:]
    r = run_script(script, "--inputs", f"arg0={julia}", "--layout", "producer")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "result_0: float32[3, 2]" in r.stdout  # Julia's orientation, as run shows it
    assert np.array2string(np.load(julia), threshold=20) in r.stdout


def test_julia_s_orientation_of_a_row_major_argument_gets_its_own_hint(tmp_path):
    """LeNet's images are row-major (exported from JAX): `--layout producer` would change
    nothing, so the hint says to reverse the axes."""
    np.save(tmp_path / "images_julia.npy", np.zeros(IMAGES[::-1], np.float32))
    r = cli("run", LENET, "--inputs", f"images={tmp_path / 'images_julia.npy'}")
    assert r.returncode == 1 and "got (28, 28, 1, 4), its reversed shape" in r.stderr, r.stderr
    assert "row-major" in r.stderr and "permutedims" in r.stderr, r.stderr
    with pytest.raises(hlobundle.InputError, match="its reversed shape.*row-major"):
        hlobundle.load(LENET).function("xla")(images=np.zeros(IMAGES[::-1], np.float32))


def test_example_args_of_a_bundle_without_inputs_says_what_to_do(tmp_path):
    text = identity_module(np.zeros((2, 3), np.float32))
    b = hlobundle.load(hlobundle.pack(text, None, tmp_path / "b"))
    with pytest.raises(hlobundle.InputError) as raised:
        b.example_args()
    said = str(raised.value)
    assert "no stored example value for argument(s) ['arg0']" in said
    assert "arg0 float32[2, 3]" in said and "bundle.function()(arg0=" in said, said
    assert "hlobundle run" in said and "invents" in said, said


# --- compile: its targets, and its default (issue 66, 5; issue 68) ---------------------------


def test_compile_help_lists_every_target_the_code_accepts_and_says_the_default():
    from hlobundle._run import _backends

    r = cli("compile", "--help")
    assert r.returncode == 0
    text = " ".join(r.stdout.split())  # argparse wraps lines
    targets = _backends.targets()
    assert {"llvm-cpu", "vmvx", "xla-cpu", "xla-tpu", "xla-cuda", "xla-rocm"} <= set(targets)
    assert [t for t in targets if t not in text] == []
    assert "Without --target, compile compiles IREE's llvm-cpu" in text


def test_compile_without_a_target_or_iree_names_the_targets_this_machine_has(tmp_path, monkeypatch):
    import shutil

    from hlobundle._run._backends import _installed

    b = tmp_path / "lenet"
    shutil.copytree(LENET, b)
    monkeypatch.setattr(_installed, "iree_compiler", lambda: False)
    r = cli("compile", b)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "without --target, compile compiles IREE's llvm-cpu" in r.stderr, r.stderr
    assert "This machine compiles for xla-cpu: give --target xla-cpu" in r.stderr, r.stderr
    with pytest.raises(hlobundle.errors.BackendUnavailableError, match=r"compiles for xla-cpu"):
        hlobundle.compile(b, ["vmvx"])
    assert not (b / "compiled").exists()  # refused before any work


# --- a positional call whose first arguments are parameters (issue 68) --------------------------


def test_a_positional_array_taken_as_a_parameter_says_what_it_was_bound_to():
    """LeNet's @main takes ten parameters, then `images`: `f(x)` binds x to params_conv1_b."""
    f = hlobundle.load(LENET).function("xla")
    images = np.zeros(IMAGES, np.float32)
    with pytest.raises(hlobundle.InputError) as caught:
        f(images)
    message = str(caught.value)
    assert "missing argument(s) ['images']" in message, message
    assert "The 1 positional value was bound to params_conv1_b (a parameter), by position" in (
        message
    )
    assert "pass images by name, f(images=...)" in message, message
    assert "the parameters left out take their stored values" in message, message
    assert f(images=images).shape == (4, 10)  # what the message says works
    # Every argument given by position: nothing left to explain.
    with pytest.raises(hlobundle.InputError, match=r"expected 11 argument") as caught:
        f(*[images] * 12)


# --- a Reactant bundle: its result, and what its expected outputs are (issue 68) ---------------


@needs_fixtures
def test_a_reactant_bundle_returns_a_1_tuple_and_holds_this_machine_s_or_julia_s_results(tmp_path):
    """docs/julia.md: the Lux export's function returns `(array,)`; `--compute-expected` stores
    this machine's run; Julia's results go in with `--expected` in the tensor's shape (their axes
    reversed), and Julia's own orientation is refused, naming both shapes."""
    lux, roles = FIXTURES / "export_to_enzymejax_lux", "arg_3_*=parameter"
    r = cli(
        "pack", "--from-reactant", lux, "-o", tmp_path / "a", "--compute-expected", "--role", roles
    )
    assert r.returncode == 0, r.stderr
    bundle = hlobundle.load(tmp_path / "a")
    out = bundle.function("xla")(**bundle.example_inputs())
    assert isinstance(out, tuple) and len(out) == 1 and out[0].shape == (4, 10)
    stored = bundle.expected_outputs()["result"]
    np.testing.assert_array_equal(stored, out[0])  # this machine's run, as computed here
    np.savez(tmp_path / "julia.npz", result=stored.T)  # Julia's orientation: (10, 4)
    r = cli(
        "pack",
        "--from-reactant",
        lux,
        "-o",
        tmp_path / "b",
        "--expected",
        tmp_path / "julia.npz",
        "--role",
        roles,
    )
    assert r.returncode == 1 and "expected shape (4, 10), got (10, 4)" in r.stderr, r.stderr
    np.savez(tmp_path / "tensor.npz", result=stored)  # permutedims in Julia: the tensor's shape
    r = cli(
        "pack",
        "--from-reactant",
        lux,
        "-o",
        tmp_path / "b",
        "--expected",
        tmp_path / "tensor.npz",
        "--role",
        roles,
    )
    assert r.returncode == 0 and cli("run", tmp_path / "b").returncode == 0, r.stderr


# --- near misses (issue 68) ----------------------------------------------------------------------


def test_a_bundle_s_manifest_given_as_the_bundle_suggests_its_parent():
    r = cli("inspect", LENET / "manifest.json")
    assert r.returncode == 1 and r.stderr.startswith("error [NOT_A_BUNDLE]"), r.stderr
    assert f"it is a bundle's manifest.json: give the bundle's directory, {LENET}" in r.stderr
    with pytest.raises(hlobundle.errors.NotABundleError, match=r"give the bundle's directory"):
        hlobundle.load(LENET / "weights.safetensors")  # any file of a bundle: its directory
    other = ROOT / "pyproject.toml"  # a file that is no bundle's: nothing suggested
    with pytest.raises(hlobundle.errors.NotABundleError) as caught:
        hlobundle.load(other)
    assert "give the bundle's directory" not in str(caught.value)

"""Bundle.function(): both backends agree with native JAX, and arguments are checked first."""

from __future__ import annotations

import re
import subprocess
import sys

import helpers
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import ALL_DTYPES, ENZYME, ROOT, needs_enzyme, relu_module_text, sample

import hlobundle

BACKENDS = ["enzyme", "xla"]

sys.path.insert(0, str(ROOT / "examples"))
import lenet5  # noqa: E402


def export(tmp_path, fn, *args, name="b", **kwargs):
    return hlobundle.load(hlobundle.export(fn, *args, out=tmp_path / name, **kwargs))


def assert_tree_equal(got, want, exact=False):
    gl, wl = jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want)
    for g, w in zip(gl, wl, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        if exact:
            np.testing.assert_array_equal(
                np.asarray(g).view(np.uint8), np.asarray(w).view(np.uint8)
            )
        else:
            np.testing.assert_allclose(
                np.asarray(g, np.float64), np.asarray(w, np.float64), rtol=1e-6, atol=1e-6
            )


@pytest.fixture(scope="module")
def lenet_bundle(tmp_path_factory):
    """LeNet's bundle, exported once for the tests that only read it."""
    out = tmp_path_factory.mktemp("lenet") / "b"
    return hlobundle.load(
        hlobundle.export(lenet5.lenet5, lenet5.init_params(), lenet5.example_images(), out=out)
    )


@pytest.fixture(scope="module")
def native_lenet():
    """LeNet's own result on its example images, once for every backend and test."""
    return jax.jit(lenet5.lenet5)(lenet5.init_params(), lenet5.example_images())


@pytest.mark.parametrize("backend", BACKENDS)
def test_lenet_matches_native_jax(lenet_bundle, native_lenet, backend):
    params, images = lenet5.init_params(), lenet5.example_images()
    fn, want = lenet_bundle.function(backend), native_lenet
    assert_tree_equal(fn(params, images), want)  # the exported pytree structure
    assert_tree_equal(jax.jit(fn)(params, images), want)
    assert_tree_equal(jax.jit(lambda p, x: fn(p, x) * 2.0)(params, images), want * 2.0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_flat_positional_and_named_calls(lenet_bundle, native_lenet, backend, caplog):
    fn, want = lenet_bundle.function(backend), native_lenet
    stored = lenet_bundle.example_inputs()
    with jax.log_compiles(True), caplog.at_level("WARNING"):
        assert_tree_equal(fn(*stored.values()), want)
        assert_tree_equal(fn(**stored), want)
        first, *rest = stored
        assert_tree_equal(fn(stored[first], **{k: stored[k] for k in rest}), want)
    compiles = [
        r for r in caplog.records if r.getMessage().startswith("Compiling jit(bundle_lenet5)")
    ]
    assert len(compiles) == 1, [r.getMessage()[:80] for r in compiles]  # however it is called


@pytest.mark.parametrize("backend", BACKENDS)
def test_multi_result_dict_output(tmp_path, backend):
    def f(x, y):
        return {"sum": x + y, "prod": x * y, "norm": jnp.linalg.norm(x)}

    x, y = sample((3, 4), "float32", 1), sample((3, 4), "float32", 2)
    fn = export(tmp_path, f, x, y).function(backend)
    assert_tree_equal(fn(x, y), jax.jit(f)(x, y))


@pytest.mark.parametrize("backend", BACKENDS)
def test_zero_arguments(tmp_path, backend):
    def f():
        return jnp.arange(5.0) * 2

    fn = export(tmp_path, f).function(backend)
    assert_tree_equal(fn(), jax.jit(f)())


@pytest.mark.parametrize("backend", BACKENDS)
def test_zero_d_arguments(tmp_path, backend):
    def f(a, b):
        return a * b + 1, jnp.sin(a)

    a, b = np.float32(2.5), np.float64(-3.0)
    fn = export(tmp_path, f, a, b).function(backend)
    assert_tree_equal(fn(a, b), jax.jit(f)(a, b))
    assert_tree_equal(fn(2.5, -3.0), jax.jit(f)(a, b))  # Python scalars for 0-d arguments


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(fn, *args) -> its bundle, exported once for both backends."""
    return helpers.once_per_program(
        lambda fn, *args: export(tmp_path_factory.mktemp(fn.__name__.strip("_")), fn, *args)
    )


def _dtype_program(*xs):
    return tuple((x, jnp.flip(x, 0)) for x in xs)


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_dtype(exported, backend):
    xs = [sample((3, 2), d, i) for i, d in enumerate(ALL_DTYPES)]
    fn = exported(_dtype_program, *xs).function(backend)
    assert_tree_equal(fn(*xs), jax.jit(_dtype_program)(*xs), exact=True)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "dtype", ["bool", "float16", "uint8", "int16", "uint16", "bfloat16", "complex128"]
)
def test_dtypes_through_arithmetic(exported, backend, dtype):
    x = sample((4,), dtype)
    fn = exported(_arithmetic, x).function(backend)
    assert_tree_equal(fn(x), jax.jit(_arithmetic)(x), exact=True)


def _arithmetic(x):
    return (~x, x & x) if x.dtype == jnp.bool_ else (x + x, x * x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_private_relu_next_to_jax_relu(tmp_path, backend):
    x = np.array([-2.0, -1.0, 0.5, 3.0], np.float32)
    fn = hlobundle.load(hlobundle.pack(relu_module_text(), [x], tmp_path / "b")).function(backend)

    @jax.jit
    def g(x):
        (plus_one,) = fn(x)
        return jax.nn.relu(x), plus_one, jax.nn.relu(plus_one)

    relu, plus_one, both = g(x)
    np.testing.assert_array_equal(relu, np.maximum(x, 0))
    np.testing.assert_array_equal(plus_one, x + 1)
    np.testing.assert_array_equal(both, np.maximum(x + 1, 0))


@pytest.mark.parametrize("backend", BACKENDS)
def test_same_bundle_twice_in_one_jit(tmp_path, backend):
    x = np.array([-2.0, -1.0, 0.5, 3.0], np.float32)
    fn = hlobundle.load(hlobundle.pack(relu_module_text(), [x], tmp_path / "b")).function(backend)
    (once,) = fn(x)
    (twice,) = jax.jit(lambda x: fn(fn(x)[0]))(x)
    np.testing.assert_array_equal(twice, once + 1)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda f, a: f(*a[:-1], np.zeros((2, 1, 28, 28), np.float32)),
            "argument 'images' (position 10, producer path args[1]): expected float32[4, 1, 28, 28], got float32[2, 1, 28, 28]",
        ),
        (
            lambda f, a: f(*a[:-1], a[-1][..., None]),  # one axis more, the others as declared
            "argument 'images' (position 10, producer path args[1]): expected float32[4, 1, 28, 28], got float32[4, 1, 28, 28, 1]",
        ),
        (
            lambda f, a: f(*a[:-1], a[-1].astype(np.float64)),
            "argument 'images' (position 10, producer path args[1]): expected float32[4, 1, 28, 28], got float64[4, 1, 28, 28]",
        ),
        (lambda f, a: f(*a[:-1]), "missing argument(s) ['images']"),
        (lambda f, a: f(*a, a[0]), "expected 11 argument(s) (params_conv1_b, params_conv1_w,"),
        (
            lambda f, a: f(*a, bogus=1),
            "unexpected argument 'bogus'. The arguments are ['params_conv1_b',",
        ),
        (
            lambda f, a: f(*a, images=a[-1]),
            "argument 'images' given twice (by position and by name)",
        ),
        (
            lambda f, a: f({"conv1": {}}, a[-1]),
            "args[0]: expected a dict with keys ['conv1', 'conv2', 'dense1', 'dense2', 'dense3'], got a dict with keys ['conv1']",
        ),
        (
            lambda f, a: f(lenet5.init_params(), a[-1], a[-1]),
            "expected 2 positional argument(s) with the exported pytree structure, or 11 arrays; got 3",
        ),
    ],
)
@pytest.mark.parametrize("backend", BACKENDS)
def test_argument_errors(lenet_bundle, backend, call, message):
    fn = lenet_bundle.function(backend)
    args = list(lenet_bundle.example_inputs().values())
    with pytest.raises(hlobundle.InputError, match=re.escape(message)):
        call(fn, args)
    with pytest.raises(hlobundle.InputError, match=re.escape(message)):
        jax.jit(lambda *a: call(fn, list(a)))(*args)  # checked at trace time, too


@pytest.fixture(scope="module")
def scaled_pair(tmp_path_factory):
    """f({"w": w}, (x, y)) = x * w + y, all f32[3]: a dict and a pair in its input tree."""
    x = np.arange(3, dtype=np.float32)
    out = tmp_path_factory.mktemp("tree") / "b"
    return hlobundle.load(
        hlobundle.export(lambda p, xy: xy[0] * p["w"] + xy[1], {"w": x}, (x, x), out=out)
    ).function("xla")


@pytest.mark.parametrize(
    ("call", "argument", "message"),
    [
        (
            lambda f, x: f({"w": x}, (x,)),
            "args[1]",
            "args[1]: expected a sequence of 2, got a tuple of 1",
        ),
        (
            lambda f, x: f({"w": x}, np.stack([x, x])),  # unchecked, its rows would bind
            "args[1]",
            "args[1]: expected a sequence of 2, got ndarray",
        ),
        (
            lambda f, x: f([x], (x, x)),
            "args[0]",
            "args[0]: expected a dict with keys ['w'], got a list of 1",
        ),
    ],
    ids=["a pair short of one", "an array for the pair", "a list for the dict"],
)
def test_a_pytree_argument_of_another_structure_is_a_coded_input_error(
    scaled_pair, call, argument, message
):
    x = np.ones(3, np.float32)
    with pytest.raises(hlobundle.InputError) as e:
        call(scaled_pair, x)
    assert e.value.code == "INPUT_INVALID" and e.value.argument == argument
    assert e.value.message == message


def test_unknown_backend(lenet_bundle):
    with pytest.raises(
        hlobundle.InputError,
        match=r"backend must be one of \('auto', 'enzyme', 'xla', 'iree'\), got 'tpu'",
    ):
        lenet_bundle.function("tpu")


def test_auto_prefers_enzyme_where_it_is_installed(lenet_bundle):
    assert lenet_bundle.function().backend == ("enzyme" if ENZYME else "xla")


@pytest.mark.slow
@pytest.mark.subprocess
def test_x64_off_gives_instructions(tmp_path):
    out = hlobundle.pack(
        "func.func @main(%a: tensor<2xi64>) -> tensor<2xi64> { return %a : tensor<2xi64> }",
        [np.arange(2)],
        tmp_path / "b",
    )
    code = (
        "import numpy as np, hlobundle\n"
        f"f = hlobundle.load({str(out)!r}).function('xla')\n"
        "try:\n    f(np.arange(2))\n"
        "except hlobundle.ConfigError as e:\n    print(e.code, e.message)\n"
    )
    # in a fork of the CLI zygote (jax imported, x64 never turned on), not a Python of its own
    # that imports jax and hlobundle again (1.2 CPU-s)
    forked = helpers.CLI_ZYGOTE.start(
        source=code, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    out, err = forked.communicate(timeout=120)
    assert "X64_DISABLED this bundle has 64-bit values" in out, err
    assert "jax.config.update('jax_enable_x64', True)" in out


@pytest.mark.slow
@needs_enzyme
def test_unnamed_top_level_op_is_dropped_for_hlo_call(tmp_path):
    text = (
        "module @m {\n"
        '  llvm.module_flags [#llvm.mlir.module_flag<warning, "Dwarf Version", 2 : i32>]\n'
        "  func.func @main(%x: tensor<3xf32>) -> tensor<3xf32> {\n"
        "    %y = stablehlo.multiply %x, %x : tensor<3xf32>\n"
        "    return %y : tensor<3xf32>\n  }\n}\n"
    )
    from hlobundle._run._backends._enzyme import prepared_for_hlo_call

    x = np.array([1.0, 2.0, 3.0], np.float32)
    bundle = hlobundle.load(hlobundle.pack(text, [x], tmp_path / "b"))
    assert "llvm.module_flags" not in prepared_for_hlo_call(bundle).text
    np.testing.assert_array_equal(bundle.function("enzyme")(x)[0], x * x)


def test_enzyme_backend_missing(lenet_bundle, monkeypatch):
    monkeypatch.setitem(sys.modules, "enzyme_ad.jax", None)  # makes the import fail
    with pytest.raises(
        hlobundle.ConfigError, match=r"the enzyme backend needs enzyme-ad >= 0.0.16"
    ) as e:
        lenet_bundle.function("enzyme")
    assert e.value.code == "BACKEND_UNAVAILABLE"
    assert lenet_bundle.function("auto").backend == "xla"


def _with_parameters(tmp_path):
    x, w = sample((4, 3), "float32", 1), sample((3, 2), "float32", 2)
    b = hlobundle.export(lambda x, w: x @ w, x, w, out=tmp_path / "p", roles={"w": "parameter"})
    return hlobundle.load(b), x, w


def test_a_call_by_name_takes_stored_parameters_for_the_rest(tmp_path):
    bundle, x, w = _with_parameters(tmp_path)
    f = bundle.function("xla")
    y = f(x=x + 1)  # as `run --inputs x=...`: w keeps its stored value
    np.testing.assert_allclose(np.asarray(y), (x + 1) @ w, rtol=1e-5)
    with pytest.raises(hlobundle.InputError, match=r"missing argument\(s\) \['x'\]"):
        f(w=w)  # an input is never taken from the stored example


def test_parameters_are_the_stored_values_by_name(tmp_path):
    bundle, _, w = _with_parameters(tmp_path)
    params = bundle.parameters()
    assert list(params) == ["w"]
    np.testing.assert_array_equal(params["w"], w)

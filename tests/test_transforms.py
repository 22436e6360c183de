"""Bundles under JAX's transformations: grad, vjp, vmap, jacrev, jvp, donation; and the clear
refusals where a backend cannot transform."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import helpers
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import ENZYME, ROOT, assert_close, needs_enzyme, sample

import hlobundle

sys.path.insert(0, str(ROOT / "examples"))
import lenet5  # noqa: E402

BACKENDS = ["enzyme", "xla"]


@pytest.fixture(scope="module")
def lenet(tmp_path_factory):
    out = tmp_path_factory.mktemp("lenet") / "b"
    params, images = lenet5.init_params(), lenet5.example_images()
    return (
        hlobundle.load(hlobundle.export(lenet5.lenet5, params, images, out=out, with_vjp=True)),
        params,
        images,
    )


def loss(f):
    return lambda params, images: (f(params, images) ** 2).mean()


# LeNet's own results, which each backend's are compared with: computed once for both
# backends, jitted (eagerly, JAX compiled each of their operations alone: the vmap test's were
# 170 compiles, 1.8 of its 3.6 CPU-s). The bundle's side keeps the transformation, eager or
# jitted, each test names.
@pytest.fixture(scope="module")
def native_gradients(lenet):
    """value_and_grad of `loss` by both arguments, and the pullback of ones at the images."""
    _, params, images = lenet
    ones = jnp.ones_like(jax.jit(lenet5.lenet5)(params, images))
    return (
        jax.jit(jax.value_and_grad(loss(lenet5.lenet5), argnums=(0, 1)))(params, images),
        jax.jit(lambda x: jax.vjp(lambda x: lenet5.lenet5(params, x), x)[1](ones)[0])(images),
    )


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("jit", [pytest.param(False, marks=pytest.mark.slow), True])
def test_lenet_gradients_match_native(lenet, native_gradients, backend, jit):
    bundle, params, images = lenet
    value_and_grad, pulled_back = native_gradients
    fn = bundle.function(backend)
    transform = jax.jit if jit else (lambda f: f)
    # jax.grad is value_and_grad without the value (jax/_src/api.py): one of them, by both
    # arguments, is the same check as both were, for one trace and compile
    got = transform(jax.value_and_grad(loss(fn), argnums=(0, 1)))(params, images)
    assert_close(got, value_and_grad)
    out, pullback = jax.vjp(lambda x: fn(params, x), images)
    (ct,) = pullback(jnp.ones_like(out))
    assert_close(ct, pulled_back)


def _training(f, images):
    """Two steps of gradient descent in a scan, then a gradient under a cond, jitted."""

    def step(p, _):
        g = jax.grad(loss(f))(p, images)
        return jax.tree_util.tree_map(lambda a, b: a - 0.1 * b, p, g), None

    def run(p, flag):
        p, _ = jax.lax.scan(step, p, None, length=2)
        return jax.lax.cond(flag, lambda q: jax.grad(loss(f))(q, images), lambda q: q, p)

    return jax.jit(run)


@pytest.fixture(scope="module")
def native_training(lenet):
    """LeNet's own `_training`, computed once for both backends."""
    _, params, images = lenet
    return _training(lenet5.lenet5, images)(params, True)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_gradients_inside_scan_and_cond(lenet, native_training, backend):
    bundle, params, images = lenet
    fn = bundle.function(backend)
    assert_close(_training(fn, images)(params, True), native_training)


def _while_fn(x, w):
    return jax.lax.fori_loop(0, 5, lambda i, y: jnp.tanh(y @ w) + x, x).sum()


def _complex_fn(z, w):
    return jnp.abs(z * w + jnp.sin(z)).sum() ** 2


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(fn, *args) -> its bundle with a backward module, exported once for every backend and
    test that only reads it."""

    def export(fn, *args):
        out = tmp_path_factory.mktemp(fn.__name__.strip("_")) / "b"
        return hlobundle.load(hlobundle.export(fn, *args, out=out, with_vjp=True))

    return helpers.once_per_program(export)


@pytest.fixture(scope="module")
def native_grad():
    """(fn, *args) -> fn's own gradient by every argument, once for both backends, jitted
    (native_gradients' note; a fori_loop's body is compiled again at each eager call)."""
    return helpers.once_per_program(
        lambda fn, *args: jax.jit(jax.grad(fn, argnums=tuple(range(len(args)))))(*args)
    )


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("fn", "args"),
    [
        (_while_fn, (sample((4, 3), "float32", 1) / 8, sample((3, 3), "float32", 2) / 8)),
        (_complex_fn, (sample((5,), "complex128", 3) / 8, sample((5,), "complex128", 4) / 8)),
    ],
)
def test_while_loop_and_complex_gradients(exported, native_grad, backend, fn, args):
    bundle = exported(fn, *args)
    assert "stablehlo.while" in bundle.module_text or fn is _complex_fn
    f = bundle.function(backend)
    if backend == "enzyme" and fn is _complex_fn:  # enzyme-ad 0.0.16 cannot; it must say so
        with pytest.raises(
            hlobundle.TransformError,
            match=r"reverse-mode differentiation \(jax.grad, jax.vjp\) through complex values \(stablehlo\.\w+ at line",
        ):
            jax.grad(f)(*args)
        with pytest.raises(hlobundle.TransformError, match="through complex values"):
            jax.grad(jax.checkpoint(f))(*args)  # refused when compiled, not before tracing
        return
    assert_close(jax.grad(f, argnums=(0, 1))(*args), native_grad(fn, *args))


@pytest.fixture(scope="module")
def native_vmap(lenet):
    """vmap over a batch of 3 image sets, its per-example gradients of `loss`, and the jacrev
    of the summed logits by a shift of 4 copies of the first image (native_gradients' note)."""
    _, params, images = lenet
    batch = np.stack([images, images * 0.5, -images])
    small = images[:1].repeat(4, 0)
    return (
        batch,
        small,
        jax.jit(jax.vmap(lambda x: lenet5.lenet5(params, x)))(batch),
        jax.jit(jax.vmap(jax.grad(loss(lenet5.lenet5)), in_axes=(None, 0)))(params, batch),
        jax.jit(jax.jacrev(lambda b: lenet5.lenet5(params, small + b[0]).sum(-1)))(
            jnp.zeros((1,), np.float32)
        ),
    )


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_vmap_jacrev_and_per_example_gradients(lenet, native_vmap, backend):
    bundle, params, images = lenet
    batch, small, mapped, per_example_grads, jacobian = native_vmap
    fn = bundle.function(backend)
    assert_close(jax.vmap(lambda x: fn(params, x))(batch), mapped)
    # The derivatives jitted: eagerly they run the same rules (the loop, a scan, is compiled
    # whole either way), and JAX compiled each operation around it alone (1 CPU-s)
    per_example = jax.jit(jax.vmap(jax.grad(loss(fn)), in_axes=(None, 0)))
    assert_close(per_example(params, batch), per_example_grads)
    jacrev = jax.jit(jax.jacrev(lambda b: fn(params, small + b[0]).sum(-1)))
    assert_close(jacrev(jnp.zeros((1,), np.float32)), jacobian, rtol=1e-4)


def _mlp(w, x):
    return jnp.tanh(x @ w).sum(-1)


# _mlp's arguments in the tests that share its bundle (`exported`: enzyme's forward mode needs
# no backward module, and finds the one there unused)
W, X = sample((3, 2), "float32", 1) / 8, sample((4, 3), "float32", 2) / 8


@pytest.mark.parametrize("backend", BACKENDS)
def test_hessian_of_a_small_function(exported, backend):
    w, x = W, X
    fn = exported(_mlp, w, x).function(backend)
    with pytest.raises(
        hlobundle.TransformError, match="second-order differentiation .* is not supported"
    ):
        jax.hessian(lambda w: fn(w, x).sum())(w)


@needs_enzyme
def test_jvp_where_enzyme_can(exported):
    w, x = W, X
    fn = exported(_mlp, w, x).function("enzyme")
    tangent = jnp.ones_like(x)
    assert_close(
        jax.jvp(lambda x: fn(w, x), (x,), (tangent,)),
        jax.jvp(lambda x: _mlp(w, x), (x,), (tangent,)),
    )


@pytest.mark.parametrize(
    ("backend", "transform", "message"),
    [
        (
            "enzyme",
            lambda f, p, x: jax.jvp(lambda x: f(p, x), (x,), (x,)),
            "forward-mode differentiation (jax.jvp, jax.jacfwd, jax.linearize) through this bundle needs the forward derivative of stablehlo.reduce_window (line",
        ),
        (
            "enzyme",
            lambda f, p, x: jax.jvp(jax.checkpoint(lambda x: f(p, x)), (x,), (x,)),
            "forward-mode differentiation (jax.jvp, jax.jacfwd, jax.linearize) through this bundle needs the forward derivative of stablehlo.reduce_window (line",
        ),
        (
            "enzyme",
            lambda f, p, x: jax.grad(lambda x: jax.grad(lambda y: loss(f)(p, y))(x).sum())(x),
            "second-order differentiation (grad of grad, jax.hessian, jacfwd of grad) of a bundle is not supported",
        ),
        (
            "enzyme",
            lambda f, p, x: jax.linearize(lambda x: f(p, x), x)[1](x),
            "forward-mode differentiation (jax.jvp, jax.jacfwd, jax.linearize) through this bundle needs the forward derivative of stablehlo.reduce_window (line",
        ),
        (
            "enzyme",
            lambda f, p, x: jax.grad(
                lambda x: jax.grad(jax.checkpoint(lambda y: loss(f)(p, y)))(x).sum()
            )(x),
            "second-order differentiation (grad of grad, jax.hessian, jacfwd of grad) of a bundle is not supported: enzyme-ad",
        ),
        (
            "xla",
            lambda f, p, x: jax.jvp(lambda x: f(p, x), (x,), (x,)),
            "forward-mode differentiation (jax.jvp, jax.jacfwd) is not available on the xla backend",
        ),
        (
            "xla",
            lambda f, p, x: jax.grad(lambda x: jax.grad(lambda y: loss(f)(p, y))(x).sum())(x),
            "second-order differentiation (grad of grad, jax.hessian, jacfwd of grad) of a bundle is not supported: on the xla backend",
        ),
    ],
)
def test_unsupported_transformations_say_why(lenet, backend, transform, message):
    bundle, params, images = lenet
    with pytest.raises(hlobundle.TransformError, match=re.escape(message)):
        transform(bundle.function(backend), params, images)


def test_linearize_on_xla_is_jax_own_forward_mode_error(lenet):
    # A jax.export function has only a VJP; JAX itself refuses to linearize it, clearly.
    bundle, params, images = lenet
    fn = bundle.function("xla")
    with pytest.raises(TypeError, match="can't apply forward-mode autodiff"):
        jax.linearize(lambda x: fn(params, x), images)[1](images)


def test_xla_without_backward_module_says_how_to_get_one(tmp_path):
    """Said for how the bundle was made (its provenance): export(), or pack of module text."""
    w, x = sample((3, 2), "float32", 1), sample((4, 3), "float32", 2)
    fn = hlobundle.load(hlobundle.export(_mlp, w, x, out=tmp_path / "b")).function("xla")
    how = "export it again with hlobundle.export(..., with_vjp=True)"
    with pytest.raises(hlobundle.TransformError, match=re.escape(f"it stores none: {how}")):
        jax.grad(lambda w: fn(w, x).sum())(w)
    text = jax.jit(_mlp).lower(w, x).as_text()
    fn = hlobundle.load(hlobundle.pack(text, None, tmp_path / "c")).function("xla")
    how = (
        "pack it with --with-vjp (hlobundle.pack(..., with_vjp=True)), or use backend='enzyme'"
        if ENZYME
        else "export it from JAX with hlobundle.export(..., with_vjp=True), or pack it with "
        "--with-vjp where enzyme-ad is installed (Python 3.11)"
    )
    with pytest.raises(hlobundle.TransformError, match=re.escape(f"it stores none: {how}")):
        jax.grad(lambda w: fn(w, x)[0].sum())(w)  # a packed module returns a tuple


def _dtype_fn(x, y):
    z = x * y + x * x
    return (z.real if jnp.iscomplexobj(z) else z).astype(jnp.float32).sum()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "dtype",
    [
        "float16",
        "bfloat16",
        "float32",
        "float64",
        "complex64",
        "complex128",
        "float8_e4m3fn",
        "float8_e5m2",
    ],
)
def test_dtype_matrix_backward(exported, native_grad, backend, dtype):
    x, y = sample((3,), dtype, 1), sample((3,), dtype, 2)
    fn = exported(_dtype_fn, x, y).function(backend)
    if backend == "enzyme" and ("complex" in dtype or "float8" in dtype):
        # enzyme-ad 0.0.16 emits invalid IR (complex) or crashes (float8): refused, with why
        with pytest.raises(
            hlobundle.TransformError, match="through complex values|float8 values .* crashes"
        ):
            jax.grad(fn)(x, y)
        with pytest.raises(
            hlobundle.TransformError, match="through complex values|float8 values .* crashes"
        ):
            jax.grad(jax.checkpoint(fn))(x, y)
        return
    got, want = jax.grad(fn, argnums=(0, 1))(x, y), native_grad(_dtype_fn, x, y)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype
        np.testing.assert_allclose(
            np.asarray(g, np.complex128), np.asarray(w, np.complex128), rtol=1e-2
        )


@pytest.mark.slow
@pytest.mark.subprocess
@needs_enzyme  # packing the backward module of a module text needs it; running it does not
def test_with_vjp_for_a_non_jax_module_runs_without_enzyme(tmp_path):
    text = (
        "module @reactant_f {\n  func.func @main(%x: tensor<3xf32>, %n: tensor<i64>) -> tensor<3xf32> {\n"
        "    %s = stablehlo.sine %x : tensor<3xf32>\n    %y = stablehlo.multiply %s, %x : tensor<3xf32>\n"
        "    return %y : tensor<3xf32>\n  }\n}\n"
    )
    x = np.array([0.5, 1.0, 2.0], np.float32)
    out = hlobundle.pack(text, [x, np.int64(2)], tmp_path / "b", with_vjp=True)
    assert hlobundle.load(out).manifest.vjp is not None
    code = (
        "import sys, importlib.abc\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name.split('.')[0] == 'enzyme_ad': raise ImportError('blocked: no enzyme-ad here')\n"
        "sys.meta_path.insert(0, Block())\n"
        "import jax, numpy as np, hlobundle\n"
        "jax.config.update('jax_enable_x64', True)\n"
        f"fn = hlobundle.load({str(out)!r}).function()\n"
        "assert fn.backend == 'xla', fn.backend\n"
        "x = np.array([0.5, 1.0, 2.0], np.float32)\n"
        "g = jax.grad(lambda x: fn(x, np.int64(2))[0].sum())(x)\n"
        "assert not [m for m in sys.modules if m.startswith('enzyme_ad')]\n"
        "import json; print(json.dumps(np.asarray(g).tolist()))\n"
    )
    # in a fork of the CLI zygote (jax imported, enzyme-ad not: the code checks that it never
    # is), not a Python of its own that imports jax and hlobundle again (1.2 CPU-s)
    forked = helpers.CLI_ZYGOTE.start(
        source=code, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    out, err = forked.communicate(timeout=120)
    assert forked.returncode == 0, err[-2000:]
    got = np.array(json.loads(out.strip().splitlines()[-1]))
    np.testing.assert_allclose(got, np.sin(x) + x * np.cos(x), rtol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "policy",
    [None, jax.checkpoint_policies.dots_saveable, jax.checkpoint_policies.everything_saveable],
)
def test_checkpoint(lenet, native_checkpointed, backend, policy):
    bundle, params, images = lenet
    fn = bundle.function(backend)
    want = native_checkpointed(policy)
    assert_close(
        jax.value_and_grad(_checkpointed(fn, policy), argnums=(0, 1))(params, images), want
    )
    assert_close(
        jax.jit(jax.value_and_grad(_checkpointed(fn, policy), argnums=(0, 1)))(params, images), want
    )


def _checkpointed(f, policy):
    """A checkpointed block between native ops, as in a training step."""
    block = jax.checkpoint(lambda p, x: jnp.sin(f(p, x)) * 2.0, policy=policy)
    return lambda p, x: (block(p, x * 0.5) ** 2).mean()


@pytest.fixture(scope="module")
def native_checkpointed(lenet):
    """policy -> LeNet's own value and gradients of `_checkpointed`, computed once for both
    backends, jitted (native_gradients' note)."""
    _, params, images = lenet
    done = {}

    def of(policy):
        if policy not in done:
            value_and_grad = jax.value_and_grad(_checkpointed(lenet5.lenet5, policy), (0, 1))
            done[policy] = jax.jit(value_and_grad)(params, images)
        return done[policy]

    return of


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_checkpointed_scan_body(exported, backend):
    w, x = sample((3, 3), "float32", 1) / 4, sample((4, 3), "float32", 2) / 4
    fn = exported(_mlp, w, x).function(backend)

    def unrolled(f):
        def step(w, _):
            return w - 0.1 * f(w, x).T @ x, None

        return lambda w: jax.lax.scan(jax.checkpoint(step), w, None, length=3)[0].sum()

    assert_close(jax.jit(jax.grad(unrolled(fn)))(w), jax.grad(unrolled(_mlp))(w))


@needs_enzyme
def test_linearize_on_enzyme(exported):
    w, x = W, X
    fn = exported(_mlp, w, x).function("enzyme")
    out, linear = jax.linearize(lambda w: fn(w, x), w)
    want_out, want_linear = jax.linearize(lambda w: _mlp(w, x), w)
    assert_close(
        (out, linear(w), jax.jit(linear)(2 * w)), (want_out, want_linear(w), want_linear(2 * w))
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_checkpoint_with_an_undifferentiated_call(exported, backend):
    # The call's inputs are all constants of the derivative: the policy decides whether its
    # result is saved or recomputed in the backward pass; both must give the same gradient.
    w, x = W, X
    fn = exported(_mlp, w, x).function(backend)
    want = jax.grad(lambda s: (s * _mlp(w, x)).sum())(2.0)
    for policy in (
        jax.checkpoint_policies.nothing_saveable,
        jax.checkpoint_policies.everything_saveable,
    ):
        block = jax.checkpoint(lambda s: (s * fn(w, x)).sum(), policy=policy)
        assert_close(jax.jit(jax.grad(block))(2.0), want)

"""Batched modules (SPEC 2.6): `jax.vmap` of a bundle function runs one batched computation when
the bundle has one for the mapped arguments, a loop otherwise, with the same derivatives."""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import ROOT, assert_close, cli, edit_manifest, generate, rehash, sample

import hlobundle

sys.path.insert(0, str(ROOT / "examples"))
import lenet5  # noqa: E402

BACKENDS = ["enzyme", "xla"]


def loops(f, in_axes, *args) -> bool:
    """Whether `jax.vmap(f, in_axes)` runs a loop (`lax.map` is a scan) rather than one call."""
    return "scan" in str(jax.make_jaxpr(jax.vmap(f, in_axes))(*args))


@pytest.fixture(scope="module")
def lenet(tmp_path_factory):
    params, images = lenet5.init_params(), lenet5.example_images()
    out = tmp_path_factory.mktemp("lenet") / "b"
    bundle = hlobundle.export(
        lenet5.lenet5, params, images, out=out, with_vjp=True, vmap_in_axes=(None, 0)
    )
    return hlobundle.load(bundle), params, np.stack([images * (i + 1) / 4 for i in range(5)])


def test_export_records_the_batched_arguments(lenet):
    bundle, _, _ = lenet
    assert bundle.manifest.format_version == "1.1"  # the oldest with a batched module
    assert bundle.manifest.batched.arguments == ["images"]
    bundle.verify()


@pytest.fixture(scope="module")
def native_mapped(lenet):
    """LeNet's own results on each image set of the batch, for every backend and size (a
    prefix's are the prefix of these), jitted: eagerly, JAX compiled each operation alone,
    again for each size."""
    _, params, batch = lenet
    return jax.jit(jax.vmap(lenet5.lenet5, (None, 0)))(params, batch)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("size", [pytest.param(1, marks=pytest.mark.slow), 5])
def test_vmap_runs_the_batched_module(lenet, native_mapped, backend, size):
    bundle, params, batch = lenet
    fn, batch, want = bundle.function(backend), batch[:size], native_mapped[:size]
    assert not loops(fn, (None, 0), params, batch)
    assert_close(jax.vmap(fn, (None, 0))(params, batch), want)
    assert_close(jax.jit(jax.vmap(fn, (None, 0)))(params, batch), want)


@pytest.mark.slow
@pytest.mark.parametrize("backend", [pytest.param("enzyme", marks=pytest.mark.slow), "xla"])
def test_other_axes_and_empty_batches_loop(lenet, backend):
    bundle, params, batch = lenet
    fn = bundle.function(backend)
    stacked = jax.tree_util.tree_map(lambda a: np.stack([a, 2 * a]), params)
    assert loops(fn, (0, None), stacked, batch[0])
    assert_close(  # LeNet's own, jitted: native_mapped's note
        jax.vmap(fn, (0, None))(stacked, batch[0]),
        jax.jit(jax.vmap(lenet5.lenet5, (0, None)))(stacked, batch[0]),
    )
    assert jax.vmap(fn, (None, 0))(params, batch[:0]).shape == (0, 4, 10)


def _total(f):
    return lambda p, x: (jax.vmap(f, (None, 0))(p, x) ** 2).mean()


def _per_example(f):
    return jax.vmap(jax.grad(lambda p, x: (f(p, x) ** 2).mean()), (None, 0))


@pytest.fixture(scope="module")
def native_derivatives(lenet):
    """LeNet's own gradients of `_total` and `_per_example`, which each backend's are compared
    with: computed once for both, jitted (eagerly, JAX compiled each operation alone)."""
    _, params, batch = lenet
    return (
        jax.jit(jax.grad(_total(lenet5.lenet5), argnums=(0, 1)))(params, batch),
        jax.jit(_per_example(lenet5.lenet5))(params, batch),
    )


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_derivatives_are_the_loops(lenet, native_derivatives, backend):
    bundle, params, batch = lenet
    total, per_example = native_derivatives
    fn = bundle.function(backend)
    assert_close(jax.grad(_total(fn), argnums=(0, 1))(params, batch), total)
    assert_close(_per_example(fn)(params, batch), per_example)
    if backend == "enzyme":  # forward mode: the loop's, which Enzyme cannot do through pooling
        with pytest.raises(
            hlobundle.TransformError, match="forward derivative of stablehlo.reduce_window"
        ):
            jax.jvp(lambda x: jax.vmap(fn, (None, 0))(params, x), (batch,), (batch,))


def _gate(mask, x, unused):
    return jnp.where(mask, x * 2, x), (x * 3).astype(jnp.float16)


GATE_ARGS = (sample((3,), "bool", 1), sample((3,), "float16", 2), sample((2,), "float32", 3))


@pytest.fixture(scope="module")
def gate(tmp_path_factory):
    """_gate's bundle, batched over every argument, exported once for both backends."""
    out = tmp_path_factory.mktemp("gate") / "b"
    return hlobundle.load(hlobundle.export(_gate, *GATE_ARGS, out=out, vmap_in_axes=0))


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_carried_dtypes_and_unused_arguments(gate, backend):
    # bool and float16 travel in other dtypes to hlo_call; `unused` is never read, and may be
    # left unmapped although the batched module batches it.
    mask, x, unused = GATE_ARGS
    fn = gate.function(backend)
    masks, xs = np.stack([mask, ~mask]), np.stack([x, 2 * x])
    for axes, args in (
        ((0, 0, 0), (masks, xs, np.stack([unused] * 2))),
        ((0, 0, None), (masks, xs, unused)),
    ):
        assert not loops(fn, axes, *args)
        got, want = jax.vmap(fn, axes)(*args), jax.vmap(_gate, axes)(*args)
        assert [g.dtype for g in got] == [w.dtype for w in want]
        assert_close(got, want)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_batched_module_written_by_hand(tmp_path, backend):
    # Any producer's batched module, not only JAX's: the conformance case's.
    fn = hlobundle.load(generate.scale(tmp_path, ["x"])).function(backend)
    x, w = sample((4, 3), "float32", 1), sample((3,), "float32", 2)
    assert not loops(fn, (0, None), x, w)
    assert_close(jax.vmap(fn, (0, None))(x, w), [x * w])
    if backend == "enzyme":  # forward mode: the loop's JVP
        tangent = np.ones_like(x)
        _, (dy,) = jax.jvp(lambda x: jax.vmap(fn, (0, None))(x, w), (x,), (tangent,))
        assert_close(dy, tangent * w)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_bundle_never_uses_another_bundles_batched_module(lenet, tmp_path, backend):
    _, params, batch = lenet
    plain = hlobundle.export(lenet5.lenet5, params, batch[0], out=tmp_path / "plain")
    assert loops(hlobundle.load(plain).function(backend), (None, 0), params, batch)


def test_inspect_shows_it(tmp_path):
    r = cli("inspect", str(generate.scale(tmp_path, ["x"])))
    assert r.returncode == 0
    assert "batched   batched.mlir + batched.mlirbc, over x" in r.stdout


def test_reader_checks_the_batched_module(tmp_path):
    out = generate.scale(tmp_path, ["x"])
    edit_manifest(out, lambda m: m["batched"].update(arguments=["w"]))
    with pytest.raises(
        hlobundle.errors.MainSignatureError, match="the batched module batched.mlir has signature"
    ):
        hlobundle.load(out)
    edit_manifest(out, lambda m: m["batched"].update(arguments=["x", "x"]))
    with pytest.raises(hlobundle.errors.ManifestError, match="duplicate batched.arguments name"):
        hlobundle.load(out)
    edit_manifest(out, lambda m: m["batched"].update(arguments=["x"]))
    (out / "batched.mlir").write_bytes(b"\xff\xfe not text")
    rehash(out, "batched.mlir")
    with pytest.raises(hlobundle.errors.ModuleError, match="batched.mlir is not UTF-8 text"):
        hlobundle.load(out)


def test_writer_refuses_a_wrong_batched_module(tmp_path):
    with pytest.raises(hlobundle.errors.MainSignatureError) as e:
        generate.scale(tmp_path, ["w"])
    assert e.value.field == "batched"
    assert not (tmp_path / "bundle").exists()


@pytest.mark.parametrize(
    ("axes", "message"),
    [
        ((None, None), "maps no argument"),
        ((None, 1), "only 0 and None"),
        ((None, 0, 0), "does not match the arguments"),
    ],
)
def test_export_says_what_is_wrong_with_vmap_in_axes(tmp_path, axes, message):
    w, x = sample((3, 2), "float32", 1), sample((4, 3), "float32", 2)
    with pytest.raises(hlobundle.InputError, match=message) as e:
        hlobundle.export(lambda w, x: x @ w, w, x, out=tmp_path / "b", vmap_in_axes=axes)
    assert e.value.argument == "vmap_in_axes"


def test_a_non_portable_batched_module_is_refused(tmp_path):
    bad = generate.BATCHED_SCALE.replace(
        "%y = stablehlo.multiply %a0, %w : tensor<?x3xf32>",
        "%y = stablehlo.custom_call @enzymexla_compile_cpu(%a0, %w) : (tensor<?x3xf32>, tensor<?x3xf32>) -> tensor<?x3xf32>",
    )
    t = "tensor<3xf32>"
    text = generate.func([t, t], [t], [f"%y = stablehlo.multiply %a0, %a1 : {t}"], ["%y"])
    with pytest.raises(hlobundle.errors.ModuleError, match="not portable") as e:
        hlobundle.pack(
            text, None, tmp_path / "b", names=["x", "w"], batched=bad, batched_arguments=["x"]
        )
    assert e.value.code == "MODULE_NOT_PORTABLE"


def _where(mask, n, x):
    return jnp.where(mask, x * n, jnp.sin(x))


WHERE_ARGS = (sample((3,), "bool", 1), np.int32(3), sample((3,), "float32", 2))


@pytest.fixture(scope="module")
def where(tmp_path_factory):
    """_where's bundle with a backward module, batched over mask and x, exported once for both
    backends."""
    out = tmp_path_factory.mktemp("where") / "b"
    bundle = hlobundle.export(
        _where, *WHERE_ARGS, out=out, with_vjp=True, vmap_in_axes=(0, None, 0)
    )
    return hlobundle.load(bundle)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_gradients_with_integer_and_bool_arguments(where, backend):
    f, (mask, n, x) = _where, WHERE_ARGS
    fn = where.function(backend)
    masks, xs = np.stack([mask, ~mask]), np.stack([x, x / 2])

    def total(g):
        return lambda xs: jax.vmap(g, (0, None, 0))(masks, n, xs).sum()

    assert not loops(fn, (0, None, 0), masks, n, xs)
    assert_close(jax.grad(total(fn))(xs), jax.grad(total(f))(xs))


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_bundles_of_one_module_text_keep_their_own_batched_modules(tmp_path, backend):
    """Bundles X and Y share `@main`'s text (x * w, no private symbol), and their batched modules
    differ (Y's adds w: a claim no check can refute, its producer's). Each vmap runs its own
    bundle's: JAX's rules find a batched module by the prepared module's text, which must name
    the bundle's modules even where no private symbol would carry the name (it did not)."""
    x, w = sample((4, 3), "float32", 1), sample((3,), "float32", 2)
    fx = hlobundle.load(generate.scale(tmp_path / "x", ["x"])).function(backend)
    adds = generate.BATCHED_SCALE.replace("stablehlo.multiply", "stablehlo.add")
    y = generate.scale(tmp_path / "y", ["x"])
    (y / "batched.mlir").write_text(adds)  # the same signature, another program
    rehash(y, "batched.mlir")
    from hlobundle._parse import _mlir

    (y / "batched.mlirbc").write_bytes(_mlir.to_portable(_mlir.parse(adds), "1.13.7"))
    rehash(y, "batched.mlirbc")
    fy = hlobundle.load(y).function(backend)  # registered after X's: the same text's latest
    assert_close(jax.vmap(fy, (0, None))(x, w), [x + w])  # Y's own claim
    assert_close(jax.vmap(fx, (0, None))(x, w), [x * w])  # and X's own, not Y's

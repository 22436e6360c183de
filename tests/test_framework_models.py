"""A framework's model keeps its structure (docs/jax.md, "Pytrees"): an Equinox module, a Flax
model's variables, NamedTuples and integer-keyed dicts exported with `hlobundle.export` come
back as the structure they went in as, or, where a bundle cannot store the node (its class is
code), as the list of its leaves, with a warning at export saying so; and the function takes
the original objects either way."""

from __future__ import annotations

import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hlobundle

X = np.linspace(-1, 1, 15, dtype=np.float32).reshape(5, 3)


def _export(tmp_path, fn, *args, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = hlobundle.export(fn, *args, out=tmp_path / "b", **kwargs)
    return hlobundle.load(out), [
        str(w.message) for w in caught if issubclass(w.category, hlobundle.HloBundleWarning)
    ]


@pytest.mark.slow
def test_an_equinox_module_is_stored_as_its_leaves_and_called_as_itself(tmp_path):
    # imported here, not at the module's top: collecting the file (each worker, every run)
    # imported equinox, 0.12 s, for this one slow test
    eqx = pytest.importorskip("equinox", reason="equinox is in the dev extra")
    model = eqx.nn.MLP(3, 2, 4, 2, key=jax.random.PRNGKey(0))
    params, static = eqx.partition(model, eqx.is_array)

    def predict(params, x):
        return jax.vmap(eqx.combine(params, static))(x)

    bundle, said = _export(
        tmp_path, predict, params, X, roles={"params": "parameter"}, with_vjp=True
    )
    (message,) = said
    assert "args[0] (type MLP)" in message and "the list of its 6 leaves" in message
    fn = bundle.function("xla")
    want = np.asarray(predict(params, X))
    np.testing.assert_allclose(np.asarray(fn(params, X)), want, rtol=1e-6)  # the module itself
    stored, x = bundle.example_args()  # unpacks as exported: the leaves, then x
    assert len(stored) == 6 and np.asarray(x).shape == (5, 3)
    np.testing.assert_allclose(np.asarray(fn(stored, x)), want, rtol=1e-6)  # or its leaves
    grads = jax.grad(lambda p: fn(p, X).sum())(params)  # the gradient is the module's type
    assert isinstance(grads, eqx.nn.MLP)


@pytest.mark.slow
def test_flax_variables_and_a_namedtuple_keep_their_structure(tmp_path):
    linen = pytest.importorskip("flax.linen", reason="flax is in the dev extra")

    class Dense(linen.Module):
        @linen.compact
        def __call__(self, x):
            return linen.Dense(2)(x)

    class Batch(NamedTuple):
        x: jax.Array
        scale: jax.Array

    model = Dense()
    variables = model.init(jax.random.PRNGKey(0), X)
    batch = Batch(X, np.float32(2.0))

    def apply(variables, batch):
        return model.apply(variables, batch.x) * batch.scale

    bundle, said = _export(tmp_path, apply, variables, batch, roles={"variables": "parameter"})
    assert said == []  # dicts and tuples are stored as they are
    assert bundle.manifest.input_tree == [
        {
            "params": {
                "Dense_0": {
                    "bias": "variables_params_Dense_0_bias",
                    "kernel": "variables_params_Dense_0_kernel",
                }
            }
        },
        ["batch_x", "batch_scale"],
    ]
    got = bundle.function("xla")(variables, batch)
    np.testing.assert_allclose(np.asarray(got), np.asarray(apply(variables, batch)), rtol=1e-6)


def test_an_integer_keyed_dict_comes_back_as_its_leaves_with_a_warning(tmp_path):
    """jax.export cannot serialize an integer-keyed dict; a bundle stores its leaves, in
    jax's order (sorted keys), and takes the dict itself."""
    layers = {1: np.ones((3, 3), np.float32), 0: np.eye(3, dtype=np.float32)}

    def net(layers, x):
        return {"out": x @ layers[0] @ layers[1] + jnp.float32(1)}

    bundle, said = _export(tmp_path, net, layers, X)
    (message,) = said
    assert "args[0] (type dict)" in message and "the list of its 2 leaves" in message
    fn = bundle.function("xla")
    np.testing.assert_allclose(np.asarray(fn(layers, X)["out"]), X @ layers[1] + 1, rtol=1e-6)
    assert bundle.manifest.output_tree == {"out": "out"}  # string keys are kept

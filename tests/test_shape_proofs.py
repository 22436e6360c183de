"""A manifest's symbolic shapes are proven against the module before any backend runs a call
(SPEC.md 2.8): a manifest that calls sizes independent where the module needs them equal, or
declares a result the module does not compute, gets a coded error on every backend, never a
result (on IREE, which checks nothing, a result would be bytes read past a buffer)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers import INSTALLED_BACKENDS

import hlobundle
from hlobundle._cli import _conformance
from hlobundle._read._inputs import from_python
from hlobundle._write._writer import PackOptions, pack_planned

try:
    from hlobundle._run import _backends

    HAS_IREE = _backends.kind("iree").available()
except ImportError:  # pragma: no cover - the iree extra is part of dev
    HAS_IREE = False
BACKENDS = (*INSTALLED_BACKENDS, *(("iree",) if HAS_IREE else ()))
W = np.linspace(-1, 1, 24, dtype=np.float32).reshape(8, 3)


def _without_stored_values(bundle: Path) -> None:
    path = bundle / "manifest.json"
    m = json.loads(path.read_text())
    for f in m["functions"]:
        for v in [*f["arguments"], *f["results"]]:
            v.pop("value", None)
            v.pop("expected", None)
    for name in ("inputs.safetensors", "expected.safetensors"):
        m["files"].pop(name, None)
        (bundle / name).unlink(missing_ok=True)
    path.write_text(json.dumps(m))


def _relabel(bundle: Path, function: str, argument: str, shape: list) -> None:
    path = bundle / "manifest.json"
    m = json.loads(path.read_text())
    f = next(f for f in m["functions"] if f["name"] == function)
    next(a for a in f["arguments"] if a["name"] == argument)["shape"] = shape
    path.write_text(json.dumps(m))


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    """jax.export's pair(x, y) = (x @ W) * y for x: f32[b, 8], y: f32[b, 3], its manifest
    relabelled to y: f32[c, 3] (the module's shape assertions and its multiply need b = c)."""
    out = tmp_path_factory.mktemp("relabelled") / "pair"
    x, y = np.ones((2, 8), np.float32), np.ones((2, 3), np.float32)
    hlobundle.export(
        lambda x, y: (x @ W) * y, x, y, out=out, name="pair", shapes_specs=("b, 8", "b, 3")
    )
    _without_stored_values(out)
    _relabel(out, "pair", "y", ["c", 3])
    return out


# `z = x + y` on `tensor<?x3xf32>`: the module of the conformance cases on these manifests
# (valid_symbolic_independent_agree, invalid_symbolic_*), read from there, so that its portable
# bytes are theirs and IREE compiles it once a run (the source text's columns are in the bytes).
ADD = _conformance.INSTALLED / "valid_symbolic_independent_agree" / "bundle" / "module.mlir"


def _hand_written(path: Path, result: str = "b") -> Path:
    """`ADD`, with x: (b, 3), y: (c, 3) and z: (`result`, 3)."""
    text = ADD.read_text()
    options = PackOptions(
        names=["x", "y"],
        result_names=["z"],
        shapes=[["b", 3], ["c", 3]],
        result_shapes=[[result, 3]],
    )
    return pack_planned(text, None, path, options)


@pytest.fixture(scope="module")
def independent(tmp_path_factory) -> Path:
    return _hand_written(tmp_path_factory.mktemp("independent") / "add")


@pytest.fixture(scope="module")
def wrong_result(tmp_path_factory) -> Path:
    return _hand_written(tmp_path_factory.mktemp("wrong_result") / "add", result="2*b")


def _function(bundle: Path, backend: str):
    loaded = hlobundle.load(bundle)
    loaded.verify()  # each bundle is verified: the format checks alone do not see the clash
    return loaded.function(backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_relabelled_jax_export_symbol_is_refused_on_every_backend(exported, backend):
    fn = _function(exported, backend)
    with pytest.raises(hlobundle.InputError, match=r"does not accept the shapes.*symbol 'c'") as e:
        fn(np.ones((256, 8), np.float32), np.ones((2, 3), np.float32))
    assert e.value.code == "INPUT_INVALID" and e.value.argument == "y"
    assert "pair" in e.value.message and "b=256, c=2" in e.value.message
    x, y = np.ones((5, 8), np.float32), np.full((5, 3), 2, np.float32)
    np.testing.assert_allclose(np.asarray(fn.call_flat(x, y)[0]), (x @ W) * y, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_independent_symbols_the_module_adds_are_refused_on_every_backend(independent, backend):
    fn = _function(independent, backend)
    with pytest.raises(hlobundle.InputError, match="does not accept the shapes") as e:
        fn(np.ones((256, 3), np.float32), np.ones((2, 3), np.float32))
    assert e.value.argument == "y" and "symbol 'c'" in e.value.message
    x, y = np.ones((4, 3), np.float32), np.full((4, 3), 2, np.float32)
    # equal sizes are what the module needs: those run
    np.testing.assert_array_equal(np.asarray(fn.call_flat(x, y)[0]), x + y)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_result_expression_the_module_does_not_compute_is_refused(wrong_result, backend):
    fn = _function(wrong_result, backend)
    x = np.ones((2, 3), np.float32)
    with pytest.raises(hlobundle.InputError, match=r"computes result 'z' of shape \[2, 3\]") as e:
        fn(x, x)
    assert "declares ['2*b', 3] = [4, 3]" in e.value.message and e.value.argument == "z (b)"


def test_a_proof_is_kept_per_shape_up_to_max_shapes(independent):
    fn = hlobundle.load(independent).function("xla", max_shapes=2)
    for rows in (1, 2, 3, 2):
        x = np.ones((rows, 3), np.float32)
        fn(x, x)
    assert fn._prover.known() == [((3, 3), (3, 3)), ((2, 3), (2, 3))]
    assert list(fn._per_shape) == [((3, 3), (3, 3)), ((2, 3), (2, 3))]  # compiled: as many
    for bad in (0, True, 2.5):  # True is an int (1) to isinstance
        with pytest.raises(hlobundle.InputError, match="max_shapes must be a positive integer"):
            hlobundle.load(independent).function("xla", max_shapes=bad)


def test_a_result_of_another_size_than_proven_is_refused(independent):
    """The last guard after every call (`check_results`): a backend's result of another size
    than the proof computed (an op's size its type does not say, which the proofs refuse
    before any backend runs it) is refused, not handed on."""
    from hlobundle._run import _shapes

    bundle = hlobundle.load(independent)
    proof = _shapes.prove(bundle, ((2, 3), (2, 3)))
    _shapes.check_results(bundle.manifest, proof, [np.zeros((2, 3), np.float32)])
    with pytest.raises(hlobundle.InputError) as e:
        _shapes.check_results(bundle.manifest, proof, [np.zeros((1, 3), np.float32)])
    assert e.value.code == "INPUT_INVALID" and e.value.argument == "z"
    message = e.value.message
    assert "computed result 'z' of shape [1, 3] on these inputs, not the proven [2, 3]" in message


def test_a_proof_names_a_free_entry_beside_the_modules_own_functions(tmp_path):
    """The proof renames @main beside the module's functions: a private function already named
    as the renamed entry would be (hb_proven_main) does not clash."""
    t = "tensor<?x3xf32>"
    text = (
        f"func.func private @hb_proven_main(%x: {t}) -> {t} {{\n  return %x : {t}\n}}\n"
        f"func.func @main(%x: {t}) -> {t} {{\n"
        f"  %y = func.call @hb_proven_main(%x) : ({t}) -> {t}\n  return %y : {t}\n}}\n"
    )
    options = PackOptions(names=["x"], shapes=[["b", 3]], result_shapes=[["b", 3]])
    bundle = pack_planned(text, from_python([np.ones((2, 3), np.float32)]), tmp_path / "b", options)
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    np.testing.assert_array_equal(np.asarray(hlobundle.load(bundle).function("xla")(x)[0]), x)


def test_the_cli_refuses_inconsistent_shapes_with_a_message(exported, tmp_path):
    from helpers import cli

    np.savez(tmp_path / "in.npz", x=np.ones((256, 8), np.float32), y=np.ones((2, 3), np.float32))
    r = cli("run", exported, "--inputs", tmp_path / "in.npz")
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith("error [INPUT_INVALID] pair: the module does not accept"), r.stderr


def test_a_new_shape_is_proven_from_the_bytes_read_at_load(exported, tmp_path):
    """Proving reads only the module text read and hashed at load: with the bundle's directory
    gone, a new shape is still proven and run (nothing is read from disk again)."""
    copy = shutil.copytree(exported, tmp_path / "pair")
    fn = hlobundle.load(copy).function("xla")
    shutil.rmtree(copy)
    x, y = np.ones((3, 8), np.float32), np.ones((3, 3), np.float32)
    assert np.asarray(fn(x, y)).shape == (3, 3)


# Through `serve`: a client never gets bytes it did not send or the function cannot compute.
def _infer(client, model: str, **inputs):
    body = {
        "inputs": [
            {"name": n, "shape": list(v.shape), "datatype": "FP32", "data": v.reshape(-1).tolist()}
            for n, v in inputs.items()
        ]
    }
    return client.post(f"/v2/models/{model}/infer", json=body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_serve_refuses_what_the_module_refuses_with_a_400(exported, independent, backend):
    pytest.importorskip("starlette", reason="the serve extra is not installed")
    pytest.importorskip("httpx2", reason="Starlette's test client needs httpx2 (the dev extra)")
    from starlette.testclient import TestClient

    from hlobundle._serve._app import app
    from hlobundle._serve._models import load_models

    client = TestClient(app(load_models([exported, independent], backend=backend)))
    x, y = np.ones((256, 8), np.float32), np.ones((2, 3), np.float32)
    r = _infer(client, "pair.pair", x=x, y=y)
    assert r.status_code == 400 and r.json()["code"] == "INPUT_INVALID", r.text
    assert r.json()["argument"] == "y" and "symbol 'c'" in r.json()["error"]
    assert "outputs" not in r.json()
    r = _infer(client, "add.main", x=np.ones((64, 3), np.float32), y=np.ones((1, 3), np.float32))
    assert r.status_code == 400 and "outputs" not in r.json(), r.text
    x, y = np.ones((3, 8), np.float32), np.full((3, 3), 2, np.float32)
    r = _infer(client, "pair.pair", x=x, y=y)  # and the server goes on serving
    assert r.status_code == 200, r.text
    got = np.float32(r.json()["outputs"][0]["data"]).reshape(3, 3)
    np.testing.assert_allclose(got, (x @ W) * y, rtol=1e-5, atol=1e-5)


def _unknown_custom_call(path: Path) -> Path:
    t = "tensor<3xf32>"
    text = (
        f"func.func @main(%x: {t}) -> {t} {{\n"
        f"  %y = stablehlo.custom_call @my_unknown_target(%x) : ({t}) -> {t}\n"
        f"  return %y : {t}\n}}\n"
    )
    return hlobundle.pack(
        text, [np.ones(3, np.float32)], path, allow_custom_calls=["my_unknown_target"]
    )


@pytest.mark.parametrize("backend", INSTALLED_BACKENDS)
def test_a_compile_failure_of_a_verified_bundle_is_coded(tmp_path, backend):
    """A custom call the user allowed, which XLA does not implement: XLA's compile fails."""
    fn = hlobundle.load(_unknown_custom_call(tmp_path / "cc")).function(backend)
    with pytest.raises(hlobundle.errors.BackendUnsupportedError, match="my_unknown_target") as e:
        fn(np.ones(3, np.float32))
    assert f"the {backend} backend failed to lower, compile or run" in e.value.message


def test_serve_answers_a_compile_failure_with_a_400(tmp_path):
    pytest.importorskip("starlette", reason="the serve extra is not installed")
    pytest.importorskip("httpx2", reason="Starlette's test client needs httpx2 (the dev extra)")
    from starlette.testclient import TestClient

    from hlobundle._serve._app import app
    from hlobundle._serve._models import Served

    bundle = hlobundle.load(_unknown_custom_call(tmp_path / "cc"))
    served = Served(
        bundle,
        ("cc",),
        "v1",
        bundle.function("xla"),
        inputs={"arg0": ("float32", (3,))},
        outputs={"result": "float32"},  # the names pack gives (a check of the answer reads them)
    )
    r = _infer(TestClient(app({"cc": served})), "cc", arg0=np.ones(3, np.float32))
    assert r.status_code == 400 and r.json()["code"] == "BACKEND_UNSUPPORTED", r.text


# A fresh-eyes attack on the proofs found these; each test failed before its fix.
EVEN = """func.func @main(%x: tensor<?x3xf32>) -> tensor<?x3xf32> {
  %d = stablehlo.get_dimension_size %x, dim = 0 : (tensor<?x3xf32>) -> tensor<i32>
  %two = stablehlo.constant dense<2> : tensor<i32>
  %zero = stablehlo.constant dense<0> : tensor<i32>
  %r = stablehlo.remainder %d, %two : tensor<i32>
  %ok = stablehlo.compare EQ, %r, %zero : (tensor<i32>, tensor<i32>) -> tensor<i1>
  stablehlo.custom_call @shape_assertion(%ok, %d) {error_message = "b must be even, got {0}", has_side_effect = true} : (tensor<i1>, tensor<i32>) -> ()
  %y = stablehlo.add %x, %x : tensor<?x3xf32>
  return %y : tensor<?x3xf32>
}"""


@pytest.mark.slow
@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "enzyme"])
def test_batched_requests_are_each_proven_not_only_their_concatenation(tmp_path, backend):
    """The module asserts an even b: two requests of b = 1 are each refused, although their
    concatenation (b = 2) would pass; a request of b = 2 beside them is answered."""
    pytest.importorskip("starlette", reason="the serve extra is not installed")
    from hlobundle._serve._models import load_models

    options = PackOptions(
        names=["x"],
        result_names=["y"],
        shapes=[["b", 3]],
        result_shapes=[["b", 3]],
        independent_rows="b",
    )
    bundle = pack_planned(
        EVEN, from_python([np.ones((2, 3), np.float32)]), tmp_path / "even", options
    )
    served = load_models([bundle], backend=backend, max_batch=4, trust=hlobundle.Trust.BATCHED)[
        "even"
    ]
    assert served.concatenated == "b"
    one, two = {"x": np.ones((1, 3), np.float32)}, {"x": np.ones((2, 3), np.float32)}
    out = served.call_many([one, one, two])
    assert [type(o).__name__ for o in out[:2]] == ["InputError", "InputError"]
    assert "b must be even, got 1" in out[0].message
    np.testing.assert_array_equal(out[2]["y"], 2 * two["x"])


def test_the_servers_kept_shapes_follow_the_functions_order(independent):
    """A shape used again moves to the recent end in the server as in the function: with
    max_shapes 2, sizes 3, 2, 4, 3 leave 4 and 3 kept in both (before, the server thought 3
    kept after the function had dropped it, and ran its compile on the event loop)."""
    pytest.importorskip("starlette", reason="the serve extra is not installed")
    from hlobundle._serve._models import load_models

    served = load_models([independent], backend="xla", max_shapes=2)["add"]
    for rows in (3, 2, 3, 4, 3):
        x = np.ones((rows, 3), np.float32)
        served({"x": x, "y": x})
    assert [k[0][0] for k in served._warm] == [4, 3]  # the rows of x in each shape kept
    assert [k[0][0] for k in served.function._per_shape] == [4, 3]


def test_a_warm_call_never_waits_for_another_shapes_proof(independent):
    import threading

    fn = hlobundle.load(independent).function("xla")
    warm = np.ones((2, 3), np.float32)
    fn(warm, warm)
    started, release = threading.Event(), threading.Event()
    original = _shapes_module().prove

    def slow_prove(bundle, shapes):
        started.set()
        release.wait(10)
        return original(bundle, shapes)

    _shapes_module().prove = slow_prove
    try:
        other = threading.Thread(
            target=lambda: fn(np.ones((5, 3), np.float32), np.ones((5, 3), np.float32))
        )
        other.start()
        assert started.wait(10)
        done = threading.Event()
        threading.Thread(target=lambda: (fn(warm, warm), done.set())).start()
        assert done.wait(5), "a call of a proven shape waited for another shape's proof"
    finally:
        release.set()
        other.join()
        _shapes_module().prove = original


def _shapes_module():
    from hlobundle._run import _shapes

    return _shapes


@pytest.mark.parametrize("backend", INSTALLED_BACKENDS)
def test_tracing_at_symbolic_shapes_is_coded_or_left_to_jax(independent, backend):
    import jax
    import jax.numpy as jnp
    from jax import export

    fn = hlobundle.load(independent).function(backend)
    b, c = export.symbolic_shape("b, c")
    specs = [jax.ShapeDtypeStruct((b, 3), jnp.float32), jax.ShapeDtypeStruct((c, 3), jnp.float32)]
    if backend == "enzyme":  # hlo_call takes static shapes only
        with pytest.raises(hlobundle.TransformError, match="concrete shapes only"):
            export.export(jax.jit(fn.call_flat))(*specs)
    else:  # jax refines the caller's module itself, when it is called
        assert export.export(jax.jit(fn.call_flat))(*specs).in_avals[0].shape[1] == 3


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_static_op_whose_result_size_its_operands_values_choose_is_refused(tmp_path, backend):
    """real_dynamic_slice typed tensor<2xf32> but slicing one element: XLA returned an array
    whose buffer held 1 element under a shape of 2."""
    text = """func.func @main(%x: tensor<8xf32>, %s: tensor<1xi32>) -> tensor<2xf32> {
  %one = stablehlo.constant dense<1> : tensor<1xi32>
  %l = stablehlo.add %s, %one : tensor<1xi32>
  %y = stablehlo.real_dynamic_slice %x, %s, %l, %one : (tensor<8xf32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<2xf32>
  return %y : tensor<2xf32>
}"""
    bundle = hlobundle.load(pack_planned(text, None, tmp_path / "rds", PackOptions()))
    bundle.verify()
    with pytest.raises(hlobundle.errors.ModuleError, match="fails StableHLO's shape refinement"):
        bundle.function(backend)


# Ops whose result's size comes from an operand's value, here the argument %s: refinement
# leaves each as it is (its size operand is no constant), typed tensor<4xf32> whatever %s holds.
SIZED_BY_VALUE = {
    "dynamic_iota": "stablehlo.dynamic_iota %s, dim = 0 : (tensor<1xi32>) -> tensor<4xf32>",
    "dynamic_broadcast_in_dim": "stablehlo.dynamic_broadcast_in_dim %x, %s, dims = [0] : "
    "(tensor<4xf32>, tensor<1xi32>) -> tensor<4xf32>",
    "dynamic_reshape": "stablehlo.dynamic_reshape %x, %s : "
    "(tensor<4xf32>, tensor<1xi32>) -> tensor<4xf32>",
}


@pytest.mark.parametrize("op", sorted(SIZED_BY_VALUE))
@pytest.mark.parametrize("backend", BACKENDS)
def test_an_op_sized_by_a_value_that_refinement_leaves_is_refused(tmp_path, backend, op):
    """Unlike real_dynamic_slice above (which refinement itself refuses), these pass StableHLO's
    shape refinement: the refined module is what refuses them, before any backend runs one."""
    text = f"""func.func @main(%x: tensor<4xf32>, %s: tensor<1xi32>) -> tensor<4xf32> {{
  %y = {SIZED_BY_VALUE[op]}
  return %y : tensor<4xf32>
}}"""
    bundle = hlobundle.load(pack_planned(text, None, tmp_path / "op", PackOptions()))
    bundle.verify()
    with pytest.raises(hlobundle.errors.ModuleError) as e:
        bundle.function(backend)
    assert e.value.code == "MLIR_INVALID"
    assert f"main: stablehlo.{op} at " in e.value.message
    assert "takes its result's shape from its operands' values" in e.value.message


@pytest.mark.skipif(not HAS_IREE, reason="the iree extra is not installed")
def test_iree_refuses_a_shape_assertion_it_would_ignore(tmp_path):
    text = """func.func @main(%x: tensor<8xf32>, %p: tensor<i1>) -> tensor<8xf32> {
  stablehlo.custom_call @shape_assertion(%p) {error_message = "value-dependent", has_side_effect = true} : (tensor<i1>) -> ()
  return %x : tensor<8xf32>
}"""
    bundle = hlobundle.load(pack_planned(text, None, tmp_path / "sa", PackOptions()))
    with pytest.raises(hlobundle.errors.ModuleError, match="expects static assert_what"):
        bundle.function("iree")


def test_tracing_at_symbolic_shapes_that_bind_one_symbol_twice_is_refused(tmp_path):
    """The call-time symbol check (`_binding.check_symbols`): at symbolic shapes the prover
    has no numbers to prove, and the arguments' symbols are bound against the manifest. Without
    it jax refuses the call too, but as the backend's failure (BACKEND_UNSUPPORTED), not the
    input's naming `y`."""
    import jax
    import jax.numpy as jnp
    from jax import export

    t = "tensor<?x3xf32>"
    text = (
        f"func.func @main(%x: {t}, %y: {t}) -> {t} {{\n"
        f"  %z = stablehlo.add %x, %y : {t}\n  return %z : {t}\n}}\n"
    )
    options = PackOptions(
        names=["x", "y"], result_names=["z"], shapes=[["b", 3], ["b", 3]], result_shapes=[["b", 3]]
    )
    fn = hlobundle.load(pack_planned(text, None, tmp_path / "same", options)).function("xla")
    b, c = export.symbolic_shape("b, c")
    specs = [jax.ShapeDtypeStruct((b, 3), jnp.float32), jax.ShapeDtypeStruct((c, 3), jnp.float32)]
    with pytest.raises(
        hlobundle.InputError, match=r"do not fit main's symbolic shapes: y.shape\[0\] is c"
    ) as e:
        export.export(jax.jit(fn.call_flat))(*specs)
    assert e.value.argument == "y"

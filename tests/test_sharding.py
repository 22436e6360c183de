"""Sharded bundles on the session's 8-device CPU mesh (conftest.py), and the single-device paths.

Tests of another device count, of a distributed start or of the emitted script run a process
of their own (marked `subprocess`)."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import FIXTURES, INSTALLED_BACKENDS, cli, needs_enzyme, needs_fixtures
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import hlobundle


def _mesh_4x2():
    from jax.sharding import AxisType

    return jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Auto, AxisType.Auto))


def test_jax_bundle_on_a_4x2_mesh(tmp_path):
    mesh = _mesh_4x2()
    rng = np.random.default_rng(0)
    w = jax.device_put(
        rng.standard_normal((8, 16)).astype(np.float32), NamedSharding(mesh, P("x", "y"))
    )
    x = jax.device_put(
        rng.standard_normal((16, 4)).astype(np.float32), NamedSharding(mesh, P("y", None))
    )
    b = hlobundle.load(hlobundle.export(lambda w, x: jnp.tanh(w @ x), w, x, out=tmp_path / "b"))
    assert [(a.name, a.size) for a in b.manifest.mesh.axes] == [("x", 4), ("y", 2)]
    assert [a.sharding for a in b.arguments] == [[["x"], ["y"]], [["y"], []]]
    single = np.asarray(b.function("xla", devices=1)(np.asarray(w), np.asarray(x)))
    for backend in INSTALLED_BACKENDS:
        fn = b.function(backend)
        assert fn.mesh.shape == {"x": 4, "y": 2}
        r = fn(np.asarray(w), np.asarray(x))
        np.testing.assert_allclose(np.asarray(r), single, rtol=1e-6)
        assert r.sharding.spec == P() and len(r.sharding.device_set) == 8


@needs_fixtures
def test_reactant_sdy_fixture_on_8_devices(tmp_path):
    fixture = FIXTURES / "14_enzymejax_sdy_sharding.mlir"
    b = hlobundle.load(hlobundle.pack(fixture, None, tmp_path / "b"))
    assert [a.sharding for a in b.arguments][0] == [["x"], [], ["y"]]
    xs = [np.random.default_rng(i).standard_normal((16, 16, 16)) for i in range(3)]
    for backend in INSTALLED_BACKENDS:
        (r,) = b.function(backend).call_flat(*xs)
        np.testing.assert_allclose(np.asarray(r), xs[0] + xs[1] + xs[2], rtol=1e-12)
        assert r.sharding.spec == P(None, ("x", "y"), None)  # as the module records
    r = cli("run", tmp_path / "b", "--devices", "8", "--json", "--no-cache")
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout)["ok"]


@pytest.mark.slow
@pytest.mark.subprocess
def test_device_count_errors(tmp_path):
    out = hlobundle.pack(
        'module @m {\n  sdy.mesh @mesh = <["x"=4, "y"=2]>\n'
        '  func.func @main(%a: tensor<8x2xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {"y"}]>}) -> tensor<8x2xf32> {\n'
        "    return %a : tensor<8x2xf32>\n  }\n}\n",
        [np.ones((8, 2), np.float32)],
        tmp_path / "b",
    )
    bundle = hlobundle.load(out)
    # forks of the CLI zygote, which imported jax but never started its CPU client: XLA reads
    # the device count there, from this environment
    import helpers

    four = {"XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    r = helpers.CLI_ZYGOTE.run("run", out, env=four)
    assert r.returncode == 1
    assert (
        "error [DEVICES_UNAVAILABLE] the bundle's mesh (x=4 x y=2) needs 8 devices, but 4 are visible"
        in r.stderr
    )
    r = helpers.CLI_ZYGOTE.run("run", out, "--devices", "1", env=four)
    assert r.returncode == 0, r.stderr[-2000:]
    with pytest.raises(
        hlobundle.ConfigError, match=r"spans 8 devices; it cannot run on 2. Use 8 devices, or 1"
    ):
        bundle.function("xla", devices=2)
    unsharded = hlobundle.load(
        hlobundle.pack(
            "func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {\n  return %a : tensor<2xf32>\n}",
            None,
            tmp_path / "c",
        )
    )
    with pytest.raises(
        hlobundle.ConfigError, match="records no device mesh, so it runs on 1 device, not 8"
    ):
        unsharded.function("xla", devices=8)


@pytest.mark.slow
@pytest.mark.parametrize("backend", [pytest.param("enzyme", marks=needs_enzyme), "xla"])
@pytest.mark.subprocess
def test_emitted_script_runs_a_sharded_bundle(tmp_path, backend, script_zygote):
    x = jax.device_put(
        np.arange(64, dtype=np.float32).reshape(8, 8), NamedSharding(_mesh_4x2(), P("x", "y"))
    )
    hlobundle.emit_script(
        hlobundle.export(lambda x: jnp.sin(x) * 2, x, out=tmp_path / "b"),
        tmp_path / "run.py",
        backend=backend,
    )
    source = (tmp_path / "run.py").read_text()
    assert (
        "MESH_AXES = [('x', 4), ('y', 2)]" in source
        and "ARGUMENT_SHARDINGS = [['x', 'y']]" in source
    )
    r = script_zygote(tmp_path / "run.py")  # on this session's 8 CPU devices
    assert r.returncode == 0 and r.stdout.rstrip().endswith("ok"), r.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.subprocess
def test_distributed_single_process(tmp_path):
    import socket

    import helpers

    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    env = {
        "JAX_COORDINATOR_ADDRESS": f"localhost:{port}",
        "JAX_NUM_PROCESSES": "1",
        "JAX_PROCESS_ID": "0",
    }
    from helpers import ROOT

    # forks of the CLI zygote, which imported jax but never initialized jax.distributed
    run = ("run", ROOT / "examples" / "lenet5.hlobundle", "--distributed", "--backend", "xla")
    r = helpers.CLI_ZYGOTE.run(*run, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.rstrip().endswith("ok")
    # It did go through jax.distributed: without a process count, the same run fails.
    del env["JAX_NUM_PROCESSES"]
    r = helpers.CLI_ZYGOTE.run(*run, env=env)
    assert (
        r.returncode == 1
        and "error [DEVICES_UNAVAILABLE] jax.distributed.initialize() failed" in r.stderr
    )

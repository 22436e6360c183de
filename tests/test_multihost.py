"""Several hosts, modelled by two CPU processes on loopback (jax.distributed, gloo): a sharded
bundle run as 2 processes x 2 devices gives what one 4-device process gives, and each process
reads from disk only the slices of the stored tensors its own devices hold."""

from __future__ import annotations

import json
import os
import socket
import subprocess

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import hlobundle

# A 16 MiB float32 weight: each process's half is far above the noise of code pages (it read
# 0.509-0.513 of the weight; 64 MiB cost 2-3 s more to write, read, gather and hash)
SIDE = 2048

WORKER = r"""
import hashlib, json, os, sys
import jax, jax.numpy as jnp, numpy as np
path, processes = sys.argv[1], int(os.environ.get("JAX_NUM_PROCESSES", "1"))
if processes > 1:
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(os.environ["JAX_COORDINATOR_ADDRESS"], processes,
                               int(os.environ["JAX_PROCESS_ID"]))
import hlobundle
from hlobundle._run._placement import to_host

def file_pages():  # bytes of mapped files resident in this process
    return int([l.split()[1] for l in open("/proc/self/status") if l.startswith("RssFile")][0]) * 1024

b = hlobundle.load(path)
fn = b.function("xla")
a = b.arguments[0]
fn.call_flat(jnp.zeros(a.shape, a.dtype))  # compile first: its code pages are not the data's
before = file_pages()
(out,) = fn.call_flat(b.tensor(a.name))
jax.block_until_ready(out)
read = file_pages() - before
host = to_host(out)
print(json.dumps({"read": read, "sha256": hashlib.sha256(host.tobytes()).hexdigest(),
                  "devices": len(jax.devices()), "local": len(jax.local_devices())}))
"""


def _sharded(out, side: int, **options):
    """w * 2 + 1 of a `side` x `side` float32 weight sharded over a 2 x 2 mesh."""
    mesh = jax.make_mesh(
        (2, 2),
        ("x", "y"),
        devices=jax.devices()[:4],
        axis_types=(jax.sharding.AxisType.Auto,) * 2,
    )
    w = np.arange(side * side, dtype=np.float32).reshape(side, side) / side
    w = jax.device_put(w, NamedSharding(mesh, P("x", "y")))
    return hlobundle.export(lambda w: w * 2 + 1, w, out=out, **options)


@pytest.fixture(scope="module")
def sharded_16_mib(tmp_path_factory):
    """For what each process reads from disk: a weight far above the noise of code pages.
    Without expected outputs, which the test computes itself (another 16 MiB computed,
    written and hashed)."""
    return _sharded(tmp_path_factory.mktemp("mh") / "b", SIDE, store_expected=False)


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    """For the runs themselves: a small weight (64 MiB made each run about 1 s slower, most
    of it the kernel's time on its pages)."""
    return _sharded(tmp_path_factory.mktemp("mh") / "b", 64)


def _env(devices: int, **extra: str) -> dict[str, str]:
    """This environment with `devices` CPU devices and no JAX_ variables; the suite's other
    XLA flags (conftest.py: the tests' compile options) stay."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}
    flags = [
        f
        for f in env.get("XLA_FLAGS", "").split()
        if not f.startswith("--xla_force_host_platform_device_count=")
    ]
    env["XLA_FLAGS"] = " ".join([*flags, f"--xla_force_host_platform_device_count={devices}"])
    return {**env, **extra}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _on_two_processes(argv: list[str], devices: int = 2) -> list[tuple[int, str, str]]:
    """Run `argv` as processes 0 and 1 of a 2-process JAX run on loopback: (status, out, err).
    `{k}` in an argument becomes the process's id. `argv`: a command's arguments (`hlobundle
    ARGV`), or `-c SOURCE ARGS`, each process a fork of the session's CLI zygote
    (helpers.CliZygote.start), which imported jax but started no backend: XLA reads the fork's
    own XLA_FLAGS, and jax.distributed starts there."""
    import helpers

    port = _free_port()
    procs = []
    for k in range(2):
        env = _env(
            devices,
            JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}",
            JAX_NUM_PROCESSES="2",
            JAX_PROCESS_ID=str(k),
        )
        args = [a.replace("{k}", str(k)) for a in argv]
        pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
        if args[0] == "-c":
            procs.append(helpers.CLI_ZYGOTE.start(*args[2:], source=args[1], env=env, **pipes))
        else:
            procs.append(helpers.CLI_ZYGOTE.start(*args, env=env, **pipes))
    done = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        done.append((proc.returncode, out, err))
    return done


@pytest.mark.slow
@pytest.mark.subprocess
def test_two_processes_give_the_result_and_each_reads_only_its_shards(sharded_16_mib):
    import hashlib

    sharded = sharded_16_mib
    w = hlobundle.load(sharded).tensor("w")
    want = hashlib.sha256((np.asarray(w) * 2 + 1).tobytes()).hexdigest()
    size = SIDE * SIDE * 4
    for status, out, err in _on_two_processes(["-c", WORKER, str(sharded)]):
        assert status == 0, err[-3000:]
        r = json.loads(out.strip().splitlines()[-1])
        assert (r["devices"], r["local"]) == (4, 2)
        assert r["sha256"] == want  # the whole result, gathered on every process
        # its half, not the whole weight: a process reading all of it adds the whole size
        assert 0.4 * size < r["read"] < 0.65 * size, r


@pytest.mark.slow
@pytest.mark.subprocess
def test_the_cli_runs_across_two_processes(sharded, tmp_path):
    argv = [
        "run",
        str(sharded),
        "--distributed",
        "--json",
        "--backend",
        "xla",
        "--save-outputs",
    ]
    for status, out, err in _on_two_processes([*argv, str(tmp_path / "out{k}.npz")]):
        assert status == 0, err[-3000:]
        ours = [line for line in out.splitlines() if not line.startswith("[Gloo]")]  # see below
        assert json.loads(ours[-1])["ok"] is True
    w = np.asarray(hlobundle.load(sharded).tensor("w"))
    for k in range(2):
        np.testing.assert_array_equal(np.load(tmp_path / f"out{k}.npz")["result"], w * 2 + 1)


@pytest.mark.slow
@pytest.mark.subprocess
def test_too_few_devices_across_processes_names_the_variables(sharded):
    argv = [
        "run",
        str(sharded),
        "--distributed",
        "--backend",
        "xla",
    ]
    for status, _, err in _on_two_processes(argv, devices=1):
        assert status == 1, err[-2000:]
        assert "error [DEVICES_UNAVAILABLE]" in err and "needs 4 devices, but 2 are visible" in err
        assert "JAX_NUM_PROCESSES" in err


@pytest.mark.slow
@pytest.mark.subprocess
def test_the_emitted_script_runs_across_two_processes(sharded, tmp_path):
    script = tmp_path / "run.py"
    hlobundle.emit_script(sharded, script, backend="xla")
    for status, out, err in _on_two_processes(["-c", _RUN_SCRIPT, str(script)]):
        assert status == 0, err[-3000:]
        # Gloo's C++ logs its connections on stdout, at any moment, even after the script's end
        ours = [line for line in out.splitlines() if not line.startswith("[Gloo]")]
        assert "max abs diff from expected 0" in out and ours[-1] == "ok"


# `python SCRIPT`, as `-c` source (a fork of the CLI zygote): the script run as __main__, with
# its own __file__ (where it finds its bundle) and argv.
_RUN_SCRIPT = (
    "import runpy, sys\nsys.argv = sys.argv[1:]\nrunpy.run_path(sys.argv[0], run_name='__main__')\n"
)

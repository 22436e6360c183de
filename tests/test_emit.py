"""The emitted run.py: standalone, and it runs every kind of bundle the suite makes."""

from __future__ import annotations

import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest
from helpers import ALL_DTYPES, ROOT, identity_module, rehash, relu_module_text, sample

import hlobundle

sys.path.insert(0, str(ROOT / "examples"))
import lenet5  # noqa: E402

# Run the script, then prove it never imported hlobundle.
RUNNER = (
    "import runpy, sys; runpy.run_path(sys.argv[1], run_name='__main__'); "
    "assert 'hlobundle' not in sys.modules, 'the script imported hlobundle'"
)


def run_script(path):
    return subprocess.run([sys.executable, "-c", RUNNER, str(path)], capture_output=True, text=True)


def _all_dtypes(*xs):
    return tuple((x, jnp.flip(x, 0)) for x in xs)


def stats(x):
    return {"s": x.sum(), "m": x.max(0)}


def _bundles(tmp):
    yield (
        "lenet",
        hlobundle.export(
            lenet5.lenet5, lenet5.init_params(), lenet5.example_images(), out=tmp / "lenet"
        ),
    )
    xs = [sample((3, 2), d, i) for i, d in enumerate(ALL_DTYPES)]
    yield "dtypes", hlobundle.export(_all_dtypes, *xs, out=tmp / "dtypes")
    yield "zero_args", hlobundle.export(lambda: jnp.arange(3.0), out=tmp / "zero_args")
    yield (
        "scalars",
        hlobundle.export(
            lambda a, b: (a * b, a - b), np.float64(2), np.int64(3), out=tmp / "scalars"
        ),
    )
    yield "multi", hlobundle.export(stats, sample((4, 3), "float32"), out=tmp / "multi")
    x = np.array([-1.0, 0.0, 1.0, 2.0], np.float32)
    yield "relu", hlobundle.pack(relu_module_text(), [x], tmp / "relu", expected="compute")
    text = identity_module(sample((2,), "bool"), sample((3,), "float16"))
    yield "no_inputs", hlobundle.pack(text, None, tmp / "no_inputs")


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("emit")
    return dict(_bundles(tmp))


@pytest.mark.parametrize(
    "name", ["lenet", "dtypes", "zero_args", "scalars", "multi", "relu", "no_inputs"]
)
def test_emitted_script_runs(bundles, tmp_path, name):
    script = tmp_path / "scripts" / "run.py"
    script.parent.mkdir()
    source = hlobundle.emit_script(bundles[name], script)
    assert "import hlobundle" not in source and "from hlobundle" not in source
    r = run_script(script)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.rstrip().endswith("ok")
    if hlobundle.load(bundles[name]).expected_outputs():
        assert "max abs diff from expected 0" in r.stdout


def test_script_detects_wrong_expected(bundles, tmp_path):
    import shutil

    from safetensors.numpy import load_file, save_file

    bundle = tmp_path / "lenet"
    shutil.copytree(bundles["lenet"], bundle)
    data = load_file(str(bundle / "expected.safetensors"))
    data["result"] = data["result"] + 1
    save_file(data, str(bundle / "expected.safetensors"))
    rehash(bundle, "expected.safetensors")
    script = tmp_path / "run.py"
    hlobundle.emit_script(bundle, script)
    r = run_script(script)
    assert r.returncode == 1 and "FAILED: result differ from the expected outputs" in r.stderr


def test_script_argument_checks_raise(bundles, tmp_path):
    script = tmp_path / "run.py"
    hlobundle.emit_script(bundles["multi"], script)
    code = (
        "import importlib.util, numpy as np\n"
        f"spec = importlib.util.spec_from_file_location('run', {str(script)!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "try:\n    m.stats(np.zeros((4, 4), np.float32))\n"
        "except TypeError as e:\n    print(e)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "argument x (#0): expected float32[4, 3], got float32[4, 4]" in r.stdout, r.stderr[
        -2000:
    ]


def test_emit_cli_and_overwrite(bundles, tmp_path):
    out = tmp_path / "s.py"
    r = subprocess.run(
        [sys.executable, "-m", "hlobundle", "emit", bundles["relu"], "-o", out],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0 and out.exists()
    r = subprocess.run(
        [sys.executable, "-m", "hlobundle", "emit", bundles["relu"], "-o", out],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 1 and "error [OUTPUT_EXISTS]" in r.stderr


def test_emit_source_without_path(bundles):
    source = hlobundle.emit_script(bundles["relu"])
    compile(source, "run.py", "exec")
    assert "BUNDLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'relu')" in source

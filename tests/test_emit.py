"""The emitted run.py: standalone, and it runs every kind of bundle the suite makes."""

from __future__ import annotations

import json
import os
import signal
import sys

import jax.numpy as jnp
import numpy as np
import pytest
from helpers import (
    ALL_DTYPES,
    ROOT,
    ChildProcess,
    cli,
    identity_module,
    needs_enzyme,
    rehash,
    relu_module_text,
    sample,
)

import hlobundle

sys.path.insert(0, str(ROOT / "examples"))
import lenet5  # noqa: E402


@pytest.fixture(autouse=True)
def _zygote(script_zygote):
    _ZYGOTE.append(script_zygote)
    yield
    _ZYGOTE.pop()


# The worker's script zygote (conftest.py's `script_zygote`), for the module's helpers.
_ZYGOTE: list[ChildProcess] = []


def run_script(path, *args):
    """`python SCRIPT ARGS` in a process of its own (a fork of tests/script_zygote.py, which
    has imported jax and numpy, never hlobundle), then a failure if it imported hlobundle."""
    return _ZYGOTE[0](path, *args)


def run_code(code, where, *args):
    """`python -c CODE ARGS` as `run_script` runs a script: CODE written to a file in `where`."""
    caller = where / "caller.py"
    caller.write_text(code)
    return run_script(caller, *args)


@pytest.mark.slow
@pytest.mark.subprocess
def test_each_script_runs_in_a_fresh_process_whose_end_is_reported(tmp_path):
    script = tmp_path / "s.py"
    script.write_text(
        "import sys, os, jax\n"
        "print(jax.config.jax_enable_x64, sys.argv[1:])\n"
        "jax.config.update('jax_enable_x64', True)\n"
        "if sys.argv[1:] == ['abort']: os.abort()\n"
        "if sys.argv[1:] == ['hlobundle']: import hlobundle\n"
        "if sys.argv[1:] == ['3']: sys.exit(3)\n"
    )
    r = run_script(script, "a")
    assert (r.returncode, r.stdout) == (0, "False ['a']\n")  # x64 off: a process of its own
    assert run_script(script, "abort").returncode == -signal.SIGABRT
    assert run_script(script, "3").returncode == 3
    r = run_script(script, "hlobundle")
    assert r.returncode == 1 and "the script imported hlobundle" in r.stderr
    r = run_script(script, "b")
    assert (r.returncode, r.stdout) == (0, "False ['b']\n")


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
    ("name", "backend"),
    [
        *[
            pytest.param(name, "enzyme", marks=needs_enzyme)
            for name in ["lenet", "dtypes", "zero_args", "scalars", "multi", "relu", "no_inputs"]
        ],
        *[(name, "xla") for name in ["lenet", "dtypes", "zero_args", "scalars", "no_inputs"]],
    ],
)
@pytest.mark.slow
@pytest.mark.subprocess
def test_emitted_script_runs(bundles, tmp_path, name, backend):
    script = tmp_path / "scripts" / "run.py"
    script.parent.mkdir()
    source = hlobundle.emit_script(bundles[name], script, backend=backend)
    assert f"BACKEND = '{backend}'" in source
    assert "import hlobundle" not in source and "from hlobundle" not in source
    r = run_script(script)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.rstrip().endswith("ok")
    if hlobundle.load(bundles[name]).expected_outputs():
        assert "max abs diff from expected 0" in r.stdout


@pytest.mark.slow
@pytest.mark.subprocess
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


@pytest.mark.slow
@pytest.mark.subprocess
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
    r = run_code(code, tmp_path)
    assert "argument x (#0): expected float32[4, 3], got float32[4, 4]" in r.stdout, r.stderr[
        -2000:
    ]


def test_emit_cli_and_overwrite(bundles, tmp_path):
    out = tmp_path / "s.py"
    r = cli("emit", bundles["relu"], "-o", out)
    assert r.returncode == 0 and out.exists()
    r = cli("emit", bundles["relu"], "-o", out)
    assert r.returncode == 1 and "error [OUTPUT_EXISTS]" in r.stderr


def test_emit_source_without_path(bundles):
    source = hlobundle.emit_script(bundles["relu"])
    compile(source, "run.py", "exec")
    assert "WHERE = 'relu'" in source


# --- hostile manifests: strings are data, never code -------------------------------------

PAYLOAD = '"""\nimport pathlib; pathlib.Path("PWNED").touch()\n"""\r# '


def _hostile_bundle(tmp_path):
    """A bundle whose every free-text manifest string carries code, whose argument names shadow
    the script's globals or collide under NFKC, and whose module text has another file name."""
    import json

    x, w = sample((3,), "float32", 1), sample((3,), "float32", 2)
    names = ["hlo_call", "BUNDLE", "ﬁx", "fix", "check_arguments"]
    t = "tensor<3xf32>"
    params = ", ".join(f"%a{i}: {t}" for i in range(5))
    text = f"func.func @main({params}) -> {t} {{\n  %y = stablehlo.add %a0, %a3 : {t}\n  return %y : {t}\n}}\n"
    out = tmp_path / f"evil{PAYLOAD.replace('/', '_')}"
    hlobundle.pack(text, [x, w, w, w, x], out, names=names, expected="compute")
    os.rename(out / "module.mlir", out / "main.mlir")
    data = json.loads((out / "manifest.json").read_text())
    data["files"]["main.mlir"] = data["files"].pop("module.mlir")
    data["module"]["text"] = "main.mlir"
    data["function"] = PAYLOAD
    data["provenance"].update(producer=PAYLOAD, producer_version=PAYLOAD)
    for a in data["arguments"]:
        a["path"] = PAYLOAD
    (out / "manifest.json").write_text(json.dumps(data))
    return out


@pytest.mark.slow
@pytest.mark.subprocess
def test_hostile_strings_reach_the_script_only_as_data(tmp_path, monkeypatch):
    import ast

    bundle = _hostile_bundle(tmp_path)
    script = tmp_path / "run.py"
    source = hlobundle.emit_script(bundle, script)
    assert "\r" not in source and 'Path("PWNED")' not in source.replace("\\n", "\n").split("\n")
    tree = ast.parse(source)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    assert not any(getattr(c.func, "attr", None) == "touch" for c in calls)
    fn = [n for n in tree.body if isinstance(n, ast.FunctionDef)][-1]  # the named function
    params = [a.arg for a in fn.args.args]
    # BUNDLE and check_arguments are the script's globals, and "ﬁx" is "fix" under NFKC: renamed.
    # (hlo_call is imported inside a function of the script, so it shadows nothing.)
    assert params == ["hlo_call", "arg1", "arg2", "fix", "arg4"]
    assert "MODULE_FILE = 'main.mlir'" in source  # the module file the manifest names
    monkeypatch.chdir(tmp_path)  # where a script that escaped its data would write PWNED
    r = run_script(script)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.rstrip().endswith("ok") and not (tmp_path / "PWNED").exists()


def test_the_template_is_a_script_whose_helpers_agree_with_the_runner():
    # run_template.py is itself valid Python; its comparison rules (kept in run_shared.py, for
    # both scripts) are the runner's (SPEC 7), with either script's numpy_dtype.
    from hlobundle._emit import _template
    from hlobundle._run._tolerance import default_tolerance

    path = ROOT / "hlobundle" / "_emit" / "run_template.py"
    source = path.read_text()
    compile(source, str(path), "exec")
    shared, agreement = (
        text[text.index("\n", text.index(_template._SHARED_FROM)) + 1 :].strip("\n") + "\n"
        for text in (
            (path.parent / "run_shared.py").read_text(),
            (ROOT / "hlobundle" / "_format" / "_agreement.py").read_text(),
        )
    )
    assert _template.template() == source.replace(
        _template._SHARED, shared + "\n\n" + agreement
    )  # the file, and the shared parts: run_shared.py's, then how each element is compared
    compile(_template.template(), "run.py", "exec")
    body = shared[shared.index("def tolerance(") : shared.index("def random_input(")]
    body += agreement
    iree = (path.parent / "run_iree_template.py").read_text()
    numpy_dtypes = [
        "numpy_dtype = jnp.dtype\n",
        iree[iree.index("def numpy_dtype(") : iree.index("def read_file(")],
    ]
    for numpy_dtype in numpy_dtypes:
        helpers: dict = {}
        prelude = "import jax.numpy as jnp\nimport ml_dtypes\nimport numpy as np\n"
        exec(compile(prelude + numpy_dtype + body, "helpers", "exec"), helpers)
        for dtype in ALL_DTYPES:
            assert helpers["tolerance"](dtype) == default_tolerance(dtype), dtype
        close = helpers["mismatch"]  # tests/test_ieee.py holds it to the table of special values
        wide = helpers["widened"]
        assert (
            close(wide(np.float32([1, np.nan])), wide(np.float32([1 + 1e-7, np.nan])), 1e-5, 1e-5)
            is None
        )
        assert close(wide(np.float32([1])), wide(np.float32([1.1])), 1e-5, 1e-5) is not None


# --- the xla backend: jax only, differentiable through the stored backward module ---------

GRADIENT = (
    "import importlib.util, json, sys, jax, jax.numpy as jnp, numpy as np\n"
    "spec = importlib.util.spec_from_file_location('run', sys.argv[1])\n"
    "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
    "x = np.float32([1.0, -2.0, 3.0, 0.5])\n"
    "g = jax.jit(jax.grad(lambda x: jnp.sum(m.call(x)[0])))(x)\n"
    "print('grad', json.dumps(np.asarray(g).tolist()))\n"
    "assert 'hlobundle' not in sys.modules and 'enzyme_ad' not in sys.modules\n"
)


@pytest.mark.slow
@pytest.mark.subprocess
def test_xla_script_differentiates_through_the_backward_module(tmp_path):
    bundle = hlobundle.export(
        lambda x: (jnp.sin(x) * x,),
        np.float32([1.0, -2.0, 3.0, 0.5]),
        out=tmp_path / "b",
        with_vjp=True,
    )
    script = tmp_path / "run.py"
    hlobundle.emit_script(bundle, script, backend="xla")
    r = run_code(GRADIENT, tmp_path, script)
    assert r.returncode == 0, r.stderr[-3000:]
    got = np.array(json.loads(r.stdout.split("grad ", 1)[1]), np.float32)
    x = np.float32([1.0, -2.0, 3.0, 0.5])
    np.testing.assert_allclose(got, np.cos(x) * x + np.sin(x), rtol=1e-6)


@pytest.mark.slow
@pytest.mark.subprocess
def test_xla_script_without_a_backward_module_says_how_to_get_one(bundles, tmp_path):
    script = tmp_path / "run.py"
    hlobundle.emit_script(bundles["relu"], script, backend="xla")
    r = run_code(GRADIENT, tmp_path, script)
    assert r.returncode == 1
    assert "stores no backward module" in r.stderr and "--with-vjp" in r.stderr
    # one from export(): with_vjp=True there (the advice fits how the bundle was made)
    made = hlobundle.export(
        lambda x: (jnp.sin(x) * x,), np.float32([1.0, -2.0, 3.0, 0.5]), out=tmp_path / "e"
    )
    hlobundle.emit_script(made, script, backend="xla", force=True)
    r = run_code(GRADIENT, tmp_path, script)
    assert r.returncode == 1
    assert "export it again with hlobundle.export(..., with_vjp=True)" in r.stderr, r.stderr[-2000:]
    assert "--with-vjp" not in r.stderr


def test_emit_cli_backend_xla_says_what_it_wrote(bundles, tmp_path):
    out = tmp_path / "s.py"
    r = cli("emit", bundles["relu"], "--backend", "xla", "-o", out)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"wrote {out} (backend xla; run it with: python {out})"
    assert "BACKEND = 'xla'" in out.read_text()


def test_emit_default_backend_is_a_script_that_picks_when_it_runs(bundles, tmp_path):
    # Whatever is installed where it is emitted: the recipient may have jax alone.
    source = hlobundle.emit_script(bundles["relu"])
    assert "BACKEND = 'auto'" in source
    out = tmp_path / "s.py"
    r = cli("emit", bundles["relu"], "-o", out)
    assert r.returncode == 0, r.stderr
    assert "(backend auto: enzyme where enzyme_ad imports when it runs, else xla" in r.stdout
    assert "BACKEND = 'auto'" in out.read_text()


# A caller that runs the script (argv[1]) where a module cannot be imported (argv[2], as in a
# venv without it): `import enzyme_ad` raises ModuleNotFoundError.
WITHOUT = (
    "import runpy, sys\n"
    "sys.modules[sys.argv.pop(2)] = None\n"
    "sys.argv = sys.argv[1:]\n"
    "runpy.run_path(sys.argv[0], run_name='__main__')\n"
)
# A caller that imports the script (argv[1]) and prints the backend its run picked.
PICKED = (
    "import importlib.util, sys\n"
    "if sys.argv[2:]: sys.modules[sys.argv[2]] = None\n"
    "spec = importlib.util.spec_from_file_location('run', sys.argv[1])\n"
    "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
    "print('picked', m.BACKEND_HERE)\n"
)


@pytest.mark.subprocess
@pytest.mark.parametrize("name", ["relu", "multi"])
def test_default_script_runs_with_jax_alone(bundles, tmp_path, name):
    """Emitted where enzyme-ad is installed or not, the default script runs in a jax-only venv
    (it ended in ModuleNotFoundError: No module named 'enzyme_ad' where emit had found it)."""
    script = tmp_path / "run.py"
    hlobundle.emit_script(bundles[name], script)
    r = run_code(WITHOUT, tmp_path, script, "enzyme_ad")
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.rstrip().endswith("ok") and "max abs diff from expected 0" in r.stdout
    r = run_code(PICKED, tmp_path, script, "enzyme_ad")
    assert (r.returncode, r.stdout) == (0, "picked xla\n"), r.stderr[-3000:]


@needs_enzyme
@pytest.mark.subprocess
def test_default_script_calls_enzyme_where_it_imports(bundles, tmp_path):
    script = tmp_path / "run.py"
    hlobundle.emit_script(bundles["relu"], script)
    r = run_code(PICKED, tmp_path, script)
    assert (r.returncode, r.stdout) == (0, "picked enzyme\n"), r.stderr[-3000:]
    r = run_script(script)
    assert r.returncode == 0 and "max abs diff from expected 0" in r.stdout, r.stderr[-3000:]


@needs_enzyme
@pytest.mark.subprocess
def test_enzyme_script_without_enzyme_says_what_to_install_in_one_line(bundles, tmp_path):
    script = tmp_path / "run.py"
    hlobundle.emit_script(bundles["relu"], script, backend="enzyme")
    r = run_code(WITHOUT, tmp_path, script, "enzyme_ad")
    assert r.returncode == 1, r.stderr[-3000:]
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "emitted with --backend enzyme" in r.stderr
    assert 'pip install "enzyme-ad>=0.0.16"' in r.stderr and "--backend xla" in r.stderr


@pytest.mark.subprocess
def test_script_without_jax_says_what_to_install_in_one_line(bundles, tmp_path):
    script = tmp_path / "run.py"
    hlobundle.emit_script(bundles["relu"], script, backend="xla")
    r = run_code(WITHOUT, tmp_path, script, "jax")
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert r.stderr.strip() == (
        "error: this script needs jax, which is not installed: pip install jax (it brings "
        "numpy and ml_dtypes)"
    )


# A caller that prints the structure of what the script's named function (argv[2]) returns
# on the stored example inputs.
NESTED = (
    "import importlib.util, sys, jax\n"
    "spec = importlib.util.spec_from_file_location('run', sys.argv[1])\n"
    "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
    "out = getattr(m, sys.argv[2])(*m.stored_inputs())\n"
    "print(jax.tree_util.tree_structure(out))\n"
)


@pytest.mark.subprocess
@pytest.mark.parametrize(("name", "function"), [("multi", "stats"), ("lenet", "lenet5")])
def test_script_function_returns_what_bundle_function_returns(bundles, tmp_path, name, function):
    import jax

    script = tmp_path / "run.py"
    source = hlobundle.emit_script(bundles[name], script, backend="xla")
    assert f"def {function}(" in source
    bundle = hlobundle.load(bundles[name])
    want = jax.tree_util.tree_structure(bundle.function("xla")(**bundle.example_inputs()))
    r = run_code(NESTED, tmp_path, script, function)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == str(want)
    assert str(want) != str(jax.tree_util.tree_structure((0,) * len(bundle.manifest.results)))


def test_script_docstrings_name_only_what_the_recipient_sees(bundles):
    """A recipient has the script alone: its text names no file of hlobundle's source."""
    from hlobundle._emit import _template

    sources = [hlobundle.emit_script(bundles["relu"]), _template.template("run_iree_template.py")]
    for source in sources:
        for name in ("run_shared.py", "run_template.py", "run_iree_template.py"):
            assert name not in source.replace(_template._SHARED, ""), name


def test_emit_unknown_backend_is_a_usage_error(bundles, tmp_path):
    r = cli("emit", bundles["relu"], "--backend", "tpu", "-o", tmp_path / "s.py")
    assert r.returncode == 2 and "invalid choice: 'tpu'" in r.stderr
    with pytest.raises(hlobundle.InputError, match="backend must be one of"):
        hlobundle.emit_script(bundles["relu"], backend="tpu")


# --- a script runs only the files emit verified ----------------------------------------------


def _twin_bundles(tmp_path):
    """Two bundles with the same file names and signature, computing different things."""
    w, x = np.arange(4, dtype=np.float32), np.ones(4, np.float32)
    roles = {"w": "parameter"}
    a = hlobundle.export(lambda w, x: x * w + 1, w, x, out=tmp_path / "a", roles=roles)
    b = hlobundle.export(lambda w, x: x * w - 1, w + 7, x, out=tmp_path / "b", roles=roles)
    return a, b


@pytest.mark.slow
@pytest.mark.subprocess
@pytest.mark.parametrize("backend", ["xla", "enzyme"])
def test_script_refuses_files_swapped_after_emit(tmp_path, backend):
    """Another bundle's same-named module, weights and expected files, the manifest rewritten: the
    script names the first changed file and exits 1 (unpinned, it would run them and print ok)."""
    import shutil

    a, b = _twin_bundles(tmp_path)
    module = "module.mlirbc" if backend == "xla" else "module.mlir"
    script = tmp_path / "run.py"
    hlobundle.emit_script(a, script, backend=backend)
    r = run_script(script)
    assert r.returncode == 0 and r.stdout.rstrip().endswith("ok"), r.stderr[-2000:]
    pair = ["module.mlir", "module.mlirbc"]
    weights = ["weights.safetensors", "expected.safetensors"]
    for first, swapped in ((module, pair), ("weights.safetensors", weights)):
        for name in [*swapped, "manifest.json"]:
            shutil.copyfile(a / name, tmp_path / f"saved-{name}")
        for name in swapped:
            shutil.copyfile(b / name, a / name)
            rehash(a, name)
        hlobundle.load(a, verify=True)  # a valid bundle again: only the script can tell
        r = run_script(script)
        assert r.returncode == 1, (r.stdout, r.stderr[-2000:])
        assert f"{first} changed since this script was written" in r.stderr
        assert "ok" not in r.stdout.split()
        for name in [*swapped, "manifest.json"]:
            shutil.copyfile(tmp_path / f"saved-{name}", a / name)


@pytest.mark.slow
@pytest.mark.subprocess
def test_script_takes_help_and_inputs_like_hlobundle_run(tmp_path):
    from safetensors.numpy import save_file

    x, w = sample((4, 3), "float32", 1), sample((3, 2), "float32", 2)
    b = hlobundle.export(lambda x, w: x @ w, x, w, out=tmp_path / "b")
    script = tmp_path / "run.py"
    hlobundle.emit_script(b, script, backend="xla")
    r = run_script(script, "--help")
    assert r.returncode == 0 and "--inputs" in r.stdout and "NAME=FILE" in r.stdout
    x_new = sample((4, 3), "float32", 9)
    np.save(tmp_path / "x_new.npy", x_new)
    r = run_script(script, "--inputs", f"x={tmp_path / 'x_new.npy'}")  # w: its stored value
    assert r.returncode == 0, r.stderr[-3000:]
    assert np.array2string(x_new @ w, threshold=20) in r.stdout
    assert "max abs diff" not in r.stdout  # the expected outputs are for the stored inputs
    save_file({"x": x_new, "w": w + 1}, str(tmp_path / "both.safetensors"))
    r = run_script(script, "--inputs", tmp_path / "both.safetensors")
    assert r.returncode == 0 and np.array2string(x_new @ (w + 1), threshold=20) in r.stdout
    r = run_script(script, "--inputs", tmp_path / "x_new.npy")  # one loose file of two
    assert r.returncode == 1 and "NAME=FILE" in r.stderr and "--inputs x=" in r.stderr
    np.save(tmp_path / "bad.npy", np.zeros((2, 2), np.float32))
    r = run_script(script, "--inputs", f"x={tmp_path / 'bad.npy'}")
    assert r.returncode == 1 and "expected float32[4, 3]" in r.stderr
    np.savez(tmp_path / "all.npz", x_new, w + 1)  # arr_0, arr_1: every argument, as run takes
    r = run_script(script, "--inputs", tmp_path / "all.npz")
    assert r.returncode == 0, r.stderr[-3000:]
    assert np.array2string(x_new @ (w + 1), threshold=20) in r.stdout
    r = run_script(script, "--inputs", f"X={tmp_path / 'x_new.npy'}")  # no argument's name
    assert r.returncode == 1 and "'X' is not an argument name; did you mean 'x'?" in r.stderr
    assert "No such file" not in r.stderr


# --- symbolic shapes (format 2.0) ---------------------------------------------------------------

SYMBOLIC_CALLS = (
    "import importlib.util, sys, numpy as np\n"
    "spec = importlib.util.spec_from_file_location('run', sys.argv[1])\n"
    "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
    "w = np.linspace(-1, 1, 24, dtype=np.float32).reshape(8, 3)\n"
    "for n in (1, 5):\n"
    "    x = np.arange(n * 8, dtype=np.float32).reshape(n, 8) / 10\n"
    "    print(n, np.abs(np.asarray(m.predict(w, x)) - np.tanh(x @ w)).max())\n"
    "try:\n    m.predict(w, np.zeros((2, 7), np.float32))\n"
    "except TypeError as e:\n    print(e)\n"
)


@pytest.fixture(scope="module")
def symbolic_bundle(tmp_path_factory):
    """A 2.0 bundle (x's batch `b` symbolic), exported once for the tests that only read it."""

    def predict(w, x):
        return jnp.tanh(x @ w)

    w = np.linspace(-1, 1, 24, dtype=np.float32).reshape(8, 3)
    return hlobundle.export(
        predict,
        w,
        np.ones((4, 8), np.float32),
        out=tmp_path_factory.mktemp("symbolic") / "sym",
        roles={"w": "parameter"},
        shapes_specs=(None, "b, 8"),
    )


@pytest.mark.slow
@pytest.mark.subprocess
def test_xla_script_of_a_symbolic_bundle_runs_any_fitting_shape(symbolic_bundle, tmp_path):
    script = tmp_path / "run.py"
    hlobundle.emit_script(symbolic_bundle, script, backend="xla")
    r = run_script(script)
    assert r.returncode == 0 and r.stdout.rstrip().endswith("ok"), r.stderr[-3000:]
    assert "result: float32['b', 3], max abs diff from expected 0" in r.stdout
    r = run_code(SYMBOLIC_CALLS, tmp_path, script)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    assert [line.split()[0] for line in lines[:2]] == ["1", "5"]
    assert all(float(line.split()[1]) < 1e-6 for line in lines[:2])
    assert lines[2] == "argument x (#1): expected float32['b', 8], got float32[2, 7]"


def test_emit_of_a_symbolic_bundle_refuses_enzyme_and_auto_chooses_xla(symbolic_bundle, tmp_path):
    bundle = symbolic_bundle
    with pytest.raises(hlobundle.InputError, match=r"symbolic shapes.*--backend xla"):
        hlobundle.emit_script(bundle, backend="enzyme")
    assert "BACKEND = 'xla'" in hlobundle.emit_script(bundle)
    r = cli("emit", bundle, "-o", tmp_path / "s.py")
    assert r.returncode == 0 and "(backend xla;" in r.stdout, r.stderr
    r = cli("emit", bundle, "--backend", "enzyme", "-o", tmp_path / "e.py")
    assert r.returncode == 2 and "emit it with --backend xla" in r.stderr  # a usage error


def test_emit_reactant_server_picks_a_name_the_module_does_not_use(tmp_path):
    """The new @main calls the original under a new name: a module whose private function
    already has the name the emitter would pick still emits, and computes the same."""
    t = "tensor<3xf32>"
    text = (
        f"func.func private @hlobundle_original_main(%a: {t}) -> {t} {{\n"
        f"  %b = stablehlo.negate %a : {t}\n  return %b : {t}\n}}\n"
        f"func.func @main(%w: {t}, %x: {t}) -> {t} {{\n"
        f"  %n = func.call @hlobundle_original_main(%x) : ({t}) -> {t}\n"
        f"  %y = stablehlo.add %n, %w : {t}\n  return %y : {t}\n}}\n"
    )
    w, x = np.arange(3, dtype=np.float32), np.ones(3, np.float32)
    bundle = hlobundle.pack(
        text, [w, x], tmp_path / "b", names=["w", "x"], roles={"w": "parameter"}
    )
    r = cli("emit", bundle, "--format", "reactant-server", "-o", tmp_path / "rs")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    back = hlobundle.load(hlobundle.from_reactant_server(tmp_path / "rs", tmp_path / "back"))
    (got,) = back.function("xla").call_flat(x, w)  # the inputs first, then the weights
    np.testing.assert_array_equal(np.asarray(got), w - x)


def test_emit_reactant_server_reports_an_mlir_failure_with_a_code(tmp_path, monkeypatch):
    from hlobundle._emit import _reactant_server

    def refuse(*_):
        raise RuntimeError("an MLIR rewrite failed")

    monkeypatch.setattr(_reactant_server, "_add_reordered_main", refuse)
    r = cli(
        "emit",
        ROOT / "examples" / "lenet5.hlobundle",
        "--format",
        "reactant-server",
        "-o",
        tmp_path / "rs",
    )
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith("error [MLIR_INVALID] function lenet5: reordering @main's")
    assert not (tmp_path / "rs").exists()


# --- a script away from its bundle -------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.subprocess
def test_a_script_away_from_its_bundle_names_the_bundle_path_it_needs(bundles, tmp_path):
    """Copied elsewhere, a script reads the bundle at its relative path there: one line naming
    that path, no traceback; `--bundle-path absolute` pins the bundle wherever the script goes."""
    import shutil

    script, away = tmp_path / "run.py", tmp_path / "elsewhere" / "run.py"
    away.parent.mkdir()
    assert cli("emit", bundles["relu"], "--backend", "xla", "-o", script).returncode == 0
    shutil.copyfile(script, away)
    r = run_script(away)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    where = os.path.relpath(bundles["relu"].resolve(), tmp_path.resolve())
    needed = os.path.normpath(os.path.join(away.parent, where))
    assert r.stderr.strip() == (
        f"error: this script reads the bundle at {needed} ({where!r}, relative to the script), "
        "and there is none: put the script beside the bundle again, or emit it again (hlobundle "
        "emit BUNDLE -o SCRIPT; --bundle-path absolute pins the bundle's absolute path)"
    )
    r = cli(
        "emit",
        bundles["relu"],
        "--backend",
        "xla",
        "-o",
        script,
        "--force",
        "--bundle-path",
        "absolute",
    )
    assert r.returncode == 0, r.stderr
    assert f"WHERE = {str(bundles['relu'].resolve())!r}" in script.read_text()
    shutil.copyfile(script, away)
    r = run_script(away)
    assert r.returncode == 0 and r.stdout.rstrip().endswith("ok"), r.stderr[-2000:]


def test_parameter_names_are_distinct_usable_and_their_own_where_they_can_be():
    """Each argument's parameter is a usable identifier, distinct from every other and from
    every later argument's name, and its own name when that is usable and free; sets, not
    scans (thousands of arguments made it quadratic: 0.36 s of an emit of 4,096)."""
    import random

    from hlobundle._emit._template import _usable, parameter_names

    rng = random.Random(0)
    pool = ["x", "x_", "arg0", "arg1", "arg1_", "class", "a", "b", "1x", "", "print", "np"]
    for _ in range(5000):
        names = [rng.choice(pool) for _ in range(rng.randint(0, 8))]
        chosen = parameter_names(names)
        assert len(chosen) == len(names) and len(set(chosen)) == len(chosen)
        for i, (name, got) in enumerate(zip(names, chosen, strict=True)):
            assert _usable(got) and got not in names[i + 1 :]
            if _usable(name) and name not in chosen[:i] and name not in names[i + 1 :]:
                assert got == name
    many = [f"w{i}" for i in range(4096)]
    assert parameter_names(many) == many

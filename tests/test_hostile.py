"""Hostile input: mutated bundles only ever end in a clean project error or a valid load, never
read outside the bundle, and never exhaust memory; a killed `pack` never leaves a half bundle.

Inputs tried per run: 300 byte mutations (a mutated listed file must be refused) + 200
manifest-field mutations + 100 file renames = 600 (hypothesis, derandomized so that CI runs the
same inputs every time), plus 400 mutations past the hash checks by `fuzz/fuzz_forms.py`,
new ones each run (a random first case, named in any failure), and 300 relabellings of
symbolic shapes by `fuzz/fuzz_shapes.py` (the same ones every run: each function on each
backend must reach both a call and a refusal).
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from helpers import identity_module, sample
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hlobundle

FILES = [
    "manifest.json",
    "module.mlir",
    "module.mlirbc",
    "inputs.safetensors",
    "weights.safetensors",
]
FUZZ = Path(__file__).resolve().parent.parent / "fuzz"


def fuzz(examples: int) -> settings:
    return settings(
        max_examples=examples,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )


_opened: list[str] = []
_recording = False


def _audit(event: str, args: tuple) -> None:
    if _recording and event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        _opened.append(os.fsdecode(args[0]))


sys.addaudithook(_audit)


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("hostile")
    (root / "secret.txt").write_text("outside the bundle")
    x, w = sample((3, 4), "float32"), sample((5,), "int64")
    return hlobundle.pack(
        identity_module(x, w),
        [x, w],
        root / "base",
        names=["x", "w"],
        roles={"w": "parameter"},
        expected="compute",
    )


def attempt(bundle: Path) -> hlobundle.HloBundleError | None:
    """Load, verify and read everything; only project errors may escape, only bundle files be read.

    **Returns:** the error, or None when the bundle was accepted.
    """
    global _recording
    _opened.clear()
    _recording = True
    error = None
    try:
        b = hlobundle.load(bundle)
        b.verify()
        for a in b.arguments:
            if a.value is not None:
                np.asarray(b.tensor(a.name)).sum()
        b.expected_outputs()
    except hlobundle.HloBundleError as e:
        error = e
    finally:
        _recording = False
    root = str(bundle.parent)
    outside = [p for p in _opened if p.startswith(root) and not p.startswith(str(bundle) + os.sep)]
    assert not outside, f"read outside the bundle: {outside}"
    return error


def fresh(base: Path) -> Path:
    target = Path(tempfile.mkdtemp(dir=base.parent)) / "bundle"
    shutil.copytree(base, target)
    return target


@pytest.fixture(scope="module")
def scratch(base) -> Path:
    """One copy of `base` for the fuzzers' examples, beside a secret of its own: each example
    changes a few of its entries, and `restore` puts them back (a copy and removal per example
    were half of these tests' time)."""
    bundle = fresh(base)
    (bundle.parent / "secret.txt").write_text("outside the bundle")
    return bundle


def restore(bundle: Path, base: Path, *entries: str) -> None:
    """Put the top-level `entries` of `bundle` back as `base` has them (each file written anew:
    nothing still maps the one before), and check that nothing else changed."""
    for entry in dict.fromkeys(entries):
        path = bundle / entry
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.is_symlink() or path.exists():
            path.unlink()
        if (base / entry).exists():
            shutil.copyfile(base / entry, path)
    assert sorted(os.listdir(bundle)) == sorted(os.listdir(base)), "an example left a change"


@pytest.mark.slow
# On Python 3.13 a TCP socket an earlier test on the same worker left open is collected during
# this test's many collections (seen twice in CI; its owner is not found yet: an open item of
# issue 35/36). It is not this test's failure, so only that message is ignored, only here.
@pytest.mark.filterwarnings(
    "ignore:Exception ignored in. <socket object:pytest.PytestUnraisableExceptionWarning"
)
@fuzz(300)
@given(data=st.data())
def test_byte_mutations(base, scratch, data):
    bundle = scratch
    name = data.draw(st.sampled_from(FILES))
    raw = bytearray((bundle / name).read_bytes())
    for _ in range(data.draw(st.integers(1, 4))):
        kind = data.draw(st.sampled_from(["flip", "truncate", "insert"]))
        pos = data.draw(st.integers(0, max(len(raw) - 1, 0)))
        if kind == "flip" and raw:
            raw[pos] ^= data.draw(st.integers(1, 255))
        elif kind == "truncate":
            del raw[pos:]
        else:
            raw[pos:pos] = data.draw(st.binary(min_size=1, max_size=16))
    changed = bytes(raw) != (bundle / name).read_bytes()
    (bundle / name).unlink()
    (bundle / name).write_bytes(bytes(raw))
    try:
        error = attempt(bundle)
    finally:
        restore(bundle, base, name)
    if changed and name != "manifest.json":  # a listed file: its size or sha256 now differs
        assert error is not None, f"a mutated {name} was accepted"


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats()
    | st.text(max_size=12)
    | st.sampled_from(
        [
            "../secret.txt",
            "/etc/passwd",
            "float128",
            "column_major",
            "2.0",
            "1.9",
            "inputs.safetensors",
        ]
    ),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=6,
)


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, (*prefix, i))


@pytest.mark.slow
@fuzz(200)
@given(data=st.data())
def test_manifest_field_mutations(base, scratch, data):
    bundle = scratch
    manifest = json.loads((bundle / "manifest.json").read_text())
    path = data.draw(st.sampled_from([p for p in _paths(manifest) if p]))
    parent = manifest
    for key in path[:-1]:
        parent = parent[key]
    if data.draw(st.booleans()):
        parent[path[-1]] = data.draw(JSON_VALUES)
    elif isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent.pop(path[-1])
    (bundle / "manifest.json").unlink()
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    try:
        attempt(bundle)
    finally:
        restore(bundle, base, "manifest.json")


@pytest.mark.slow
@fuzz(100)
@given(data=st.data())
def test_file_renames_and_links(base, scratch, data):
    bundle = scratch
    name = data.draw(st.sampled_from(FILES[1:]))
    action = data.draw(st.sampled_from(["rename", "symlink_out", "directory", "delete"]))
    new = data.draw(st.sampled_from(["x", "sub/inputs.safetensors", ".hidden", name.upper()]))
    if action == "rename":
        (bundle / new).parent.mkdir(exist_ok=True)
        os.rename(bundle / name, bundle / new)
    elif action == "symlink_out":
        (bundle / name).unlink()
        os.symlink(bundle.parent / "secret.txt", bundle / name)
    elif action == "directory":
        (bundle / name).unlink()
        (bundle / name).mkdir()
    else:
        (bundle / name).unlink()
    try:
        attempt(bundle)
    finally:
        restore(bundle, base, name, new.split("/")[0])


def _fuzzer(name: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """`python fuzz/NAME.py ARGV`, its driver run in this process (which imported jax already)
    and its worker a child process, as ever: a crash in a parser ends the worker, which the
    driver reports as a finding with its case. The worker is a fork of the session's CLI
    zygote (helpers.CliZygote.start), which imported jax and hlobundle, not a fresh interpreter
    (whose start cost each fuzzer about a CPU-second). The seed bundle is exported with x64
    off, as the driver's own process would (the same bytes: conftest.py turns x64 on here)."""
    import contextlib
    import io

    import helpers
    import jax

    def forked(script: Path, worker: list[str]) -> helpers.Forked:
        pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
        run = f"import runpy, sys; sys.argv[0] = {str(script)!r}; "
        run += f"runpy.run_path({str(script)!r}, run_name='__main__')"
        return helpers.CLI_ZYGOTE.start(*worker, source=run, **pipes)

    spec = importlib.util.spec_from_file_location(name, FUZZ / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    saved_path = list(sys.path)
    try:
        spec.loader.exec_module(module)  # fuzz_shapes puts fuzz/ on the path for fuzz_forms
    finally:
        sys.path[:] = saved_path
    said = io.StringIO()
    with contextlib.redirect_stdout(said), jax.enable_x64(False):
        code = module.main(list(argv), start=forked)
    return subprocess.CompletedProcess([name, *argv], code, said.getvalue(), "")


@pytest.mark.slow
@pytest.mark.subprocess
def test_fuzzer_past_the_hash_checks_in_child_processes():
    # fuzz/fuzz_forms.py: 400 mutations of every module form (text and artifact), the
    # tensors and the manifest, rehashed so that each reaches its parser. Its worker is a
    # child process: a crash is reported as a finding with the case, not lost with pytest.
    # Each run tries 400 new cases (case K is seeded by K, from a random first one), so runs
    # add up to a campaign; a failure names the command that repeats it. One worker: the
    # suite's other process keeps the second core busy.
    first = random.SystemRandom().randrange(10**9)
    again = f"(again: python fuzz/fuzz_forms.py --runs 400 --jobs 1 --first {first})"
    r = _fuzzer("fuzz_forms", "--runs", "400", "--jobs", "1", "--first", str(first))
    assert r.returncode == 0, r.stdout[-3000:] + again
    assert "400 mutations, no findings" in r.stdout, again
    # Each of these is drawn with probability 1/20 or more per case: missed in 400 cases with
    # a probability under 1e-8.
    for form in ("module", "vjp", "batched"):
        for suffix in (".mlir", ".mlirbc"):
            assert f"{form}{suffix}: " in r.stdout, f"{form}{suffix} was never reached {again}"
        assert f"{form}.mlir (names): " in r.stdout, f"{form}.mlir's names were not mutated {again}"


@pytest.mark.slow
@pytest.mark.subprocess
def test_shape_fuzzer_relabelling_symbols_finds_nothing():
    # fuzz/fuzz_shapes.py: 300 relabellings of a symbolic manifest's symbols and constraints
    # (SPEC.md 2.8), each called with shapes that bind them: a coded error, or the module's own
    # results; a result for shapes the module refuses is a finding. The same 300 each run (case
    # K is seeded by K), in which the rarest outcome checked below comes 2 times with enzyme
    # installed and 4 without; one worker, as above. With the iree backend's proof and its
    # results' check removed (the over-read of issue 32), 15 of them are findings with enzyme
    # installed and 26 without, the first at case 6 in both.
    r = _fuzzer("fuzz_shapes", "--runs", "300", "--jobs", "1")
    assert r.returncode == 0, r.stdout[-3000:]
    assert "300 mutations, no findings" in r.stdout
    backends = ("xla", "iree") if importlib.util.find_spec("iree.runtime") else ("xla",)
    for name in ("pair", "cat", "twice", "add"):
        for backend in backends:  # each reached a call, refused and run
            for outcome in ("ok", "INPUT_INVALID"):
                assert f"{name} on {backend}: {outcome}" in r.stdout, (name, backend, outcome)


def _bombs(bundle: Path) -> dict[str, Callable[[], None]]:
    """Small edits that claim huge sizes: what a reader must refuse before allocating."""
    tensors = bundle / "inputs.safetensors"

    def big_header() -> None:  # a 64 MiB header (valid JSON, padded) for two tensors
        data = tensors.read_bytes()
        n = int.from_bytes(data[:8], "little")
        header = data[8 : 8 + n] + b" " * (64 << 20)
        tensors.write_bytes(len(header).to_bytes(8, "little") + header + data[8 + n :])
        _rehash(bundle, "inputs.safetensors")

    def shape() -> None:  # the manifest claims a 2**40-element argument
        m = json.loads((bundle / "manifest.json").read_text())
        m["arguments"][0]["shape"] = [2**20, 2**20]
        (bundle / "manifest.json").write_text(json.dumps(m))

    def deep_json() -> None:
        m = (bundle / "manifest.json").read_text()
        (bundle / "manifest.json").write_text(
            m[:-2] + ', "output_tree": ' + "[" * 500_000 + "]" * 500_000 + "}"
        )

    return {"big_header": big_header, "shape": shape, "deep_json": deep_json}


def _rehash(bundle: Path, name: str) -> None:
    import hashlib

    m = json.loads((bundle / "manifest.json").read_text())
    data = (bundle / name).read_bytes()
    m["files"][name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (bundle / "manifest.json").write_text(json.dumps(m))


@pytest.mark.parametrize(
    ("bomb", "code"),
    [
        ("big_header", "LIMIT_EXCEEDED"),  # the header's size limit
        ("shape", "SIGNATURE_MISMATCH"),  # the shape against @main's, before any allocation
        ("deep_json", "LIMIT_EXCEEDED"),  # the depth precheck (json.loads alone would refuse
        # it too, by recursion, within the same memory: the code tells the two apart)
    ],
)
def test_memory_stays_bounded(base, bomb, code):
    # What the reader allocates while refusing a bomb, measured around that one call; and
    # which check refused it.
    import tracemalloc

    bundle = fresh(base)
    _bombs(bundle)[bomb]()
    tracemalloc.start()
    try:
        error = attempt(bundle)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert error is not None and error.code == code, error
    assert peak < 16 << 20, f"{bomb}: {peak} bytes"


@pytest.mark.slow
@pytest.mark.subprocess
def test_killed_pack_never_leaves_a_half_bundle(tmp_path):
    # Each pack is a process of its own, killed with SIGKILL: a fork of the session's CLI
    # zygote (helpers.CliZygote), not a fresh interpreter (each pack's start cost more than
    # its 32 MiB: 11-13 fresh ones took 3.9-4.7 CPU-s, the forks 2.4-2.9). Its fsync is the
    # real one (conftest.py's is only this process's). Written straight into `out` instead of
    # beside it, the first kill leaves a bundle without its manifest.
    import helpers

    big = [sample((1024, 1024), "float32", i) for i in range(8)]  # 32 MiB, so pack takes a while
    (tmp_path / "m.mlir").write_text(identity_module(*big))
    np.savez(tmp_path / "in.npz", *big)
    out = tmp_path / "out"
    argv = [
        "pack",
        tmp_path / "m.mlir",
        "--inputs",
        tmp_path / "in.npz",
        "-o",
        out,
        "--force",
        "--layout",
        "row-major",
    ]

    def pack() -> helpers.Forked:
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        return helpers.CLI_ZYGOTE.start(*argv, **quiet)

    durations = []  # the warm run's: a first run's imports (a fork imports what pack needs)
    for _ in range(2):
        start = time.perf_counter()
        assert pack().wait() == 0
        durations.append(time.perf_counter() - start)
        shutil.rmtree(out)
    duration = min(durations)
    rng = random.Random(0)
    kills = launches = 0
    while kills < 8 and launches < 48:  # count until there are enough kills, within a bound
        launches += 1
        proc = pack()
        time.sleep(rng.uniform(0.2, 1.0) * duration)
        if proc.poll() is None:
            proc.kill()
            kills += 1
        assert proc.wait() in (0, -signal.SIGKILL)
        if out.exists():
            hlobundle.load(out).verify()  # a complete bundle, never a half one
    assert kills >= 8
    assert pack().wait() == 0
    hlobundle.load(out).verify()
    leftovers = [p.name for p in tmp_path.iterdir() if ".partial-" in p.name or ".old-" in p.name]
    assert leftovers == [], "the next pack removes what killed packs left"


@settings(max_examples=300, derandomize=True, deadline=None)
@given(
    data=st.binary(max_size=400) | st.text(alphabet='([{<>}])x"/\n', max_size=400).map(str.encode)
)
@pytest.mark.slow
def test_bracket_depth_is_the_same_counted_by_python_and_by_numpy(data):
    # Small texts are counted in Python (no numpy import for `inspect`), large ones with numpy.
    from hlobundle._format import _prechecks

    def depth(numpy_above: int) -> int:
        saved, _prechecks.NUMPY_ABOVE = _prechecks.NUMPY_ABOVE, numpy_above
        try:
            return _prechecks.max_depth(data, b"([{", b")]}")
        finally:
            _prechecks.NUMPY_ABOVE = saved

    python, numpy = depth(len(data)), depth(-1)
    assert python == numpy >= 0
    if data.count(b"(") and not data.translate(None, b")]}"):
        assert python >= 1


# Escapes that decode to invalid UTF-8, in each kind of string MLIR text holds. jaxlib's
# bindings parse them, then throw (or terminate the process) when the name reaches Python.
# Names, keys and locations are refused before MLIR parses the text; values are legal (opaque
# bytes exist in real modules), and a value the reader reads as text is a coded error.
_ESCAPES = {
    "module name": ("module @jit__lambda", 'module @"\\FF"', True),
    "function name": (
        "func.func public @main",
        'func.func private @"\\C3\\28"() {\n    return\n  }\n  func.func public @main',
        True,
    ),
    "attribute name": ("attributes {", 'attributes {"\\FF" = 1 : i32, ', True),
    "location": (
        "return %arg0 : tensor<3xf32>",
        'return %arg0 : tensor<3xf32> loc("\\FF":1:2)',
        True,
    ),
    "result info": ('"result[0]"', '"\\FF"', False),
    "attribute value": ("attributes {", 'attributes {mhlo.foo = "\\E2\\82", ', False),
    "sharding value": ("{jax.result_info", '{mhlo.sharding = "\\FF", jax.result_info', True),
    "generic sym_name": (
        "func.func public @main",
        '"func.func"() <{function_type = () -> (), sym_name = "\\C0", sym_visibility = "private"}> ({\n    "func.return"() : () -> ()\n  }) : () -> ()\n  func.func public @main',
        True,
    ),
}


@pytest.fixture(scope="module")
def cli_child(tmp_path_factory):
    from helpers import ChildProcess

    child = ChildProcess(tmp_path_factory.mktemp("cli-child"), "cli_child.py")
    yield child
    child.close()


@pytest.mark.subprocess
def test_a_command_that_kills_the_cli_child_is_reported_and_the_next_gets_a_fresh_one(tmp_path):
    # What test_invalid_utf8_escapes_never_abort relies on to see an abort.
    from helpers import ChildProcess

    child = ChildProcess(tmp_path, "cli_child.py", "--main", "cli_child:crash_on")
    try:
        assert child("a").stdout == "ran a\n"
        assert child("abort").returncode == -signal.SIGABRT
        assert child("exit", "3").returncode == 3
        r = child("b")
        assert (r.returncode, r.stdout) == (0, "ran b\n")
    finally:
        child.close()


@pytest.mark.subprocess
@pytest.mark.parametrize("where", sorted(_ESCAPES))
def test_invalid_utf8_escapes_never_abort(tmp_path, where, cli_child):
    # Commands run in a child process (one for the module, restarted when a command ends it):
    # an abort (SIGABRT) is what this guards against.
    from helpers import rehash

    x = sample((3,), "float32")
    bundle = hlobundle.pack(identity_module(x), [x], tmp_path / "b")
    old, new, refused = _ESCAPES[where]
    text = (bundle / "module.mlir").read_text()
    assert old in text
    hostile = text.replace(old, new, 1)
    (bundle / "module.mlir").write_text(hostile)
    rehash(bundle, "module.mlir")
    (tmp_path / "m.mlir").write_text(hostile)
    for args in (
        ["verify", bundle],
        ["inspect", bundle],
        ["run", bundle, "--backend", "xla"],
        ["pack", tmp_path / "m.mlir", "-o", tmp_path / "out"],
    ):
        r = cli_child(*args)
        assert "Traceback" not in r.stderr and r.returncode >= 0, (args, r.stderr[-2000:])
        if refused:
            assert r.returncode == 1, (args, r.returncode, r.stderr[-2000:])
            assert "[MLIR_INVALID]" in r.stderr and "UTF-8" in r.stderr, (args, r.stderr[-2000:])
        elif args[0] == "pack":  # a legal value: the bundle is written, and it loads
            assert r.returncode == 0, r.stderr[-2000:]
            assert cli_child("verify", tmp_path / "out").returncode == 0
        else:  # the text no longer matches its artifact
            assert r.returncode == 1 and "[MODULE_MISMATCH]" in r.stderr, r.stderr[-2000:]

import atexit
import os
import shutil
import sys
import tempfile

import pytest
from jaxlib_flags import knows

# Bytecode: the suite's processes write that of the tests and of hlobundle into their usual
# `__pycache__` (ignored by git), as Python does by default, even where the environment says
# PYTHONDONTWRITEBYTECODE (this project's shared machine does). Without it, each worker's
# collection rewrote and compiled every test module again (7-8.5 CPU-s; 3.2-3.9 with their
# bytecode read back), and every Python the tests start compiled hlobundle's modules again
# (they read the bytecode back whatever the variable says).
sys.dont_write_bytecode = False

# The suite never reads or writes the user's caches (compiled programs, check verdicts): each
# session (each xdist worker) gets its own private, empty cache root, removed at its end.
_CACHE_ROOT = tempfile.mkdtemp(prefix="hlobundle-test-cache-")
os.environ["HLOBUNDLE_CACHE_DIR"] = _CACHE_ROOT
atexit.register(shutil.rmtree, _CACHE_ROOT, ignore_errors=True)


# fsync, in the suite's own processes: what a test writes lives in its temporary directory and
# never has to outlast a crash of the machine, so the call checks its descriptor (EBADF, as
# fsync would) and returns without waiting for the disk. Every pack fsyncs each file and
# directory it writes: 5,322 calls in the edit loop, 14.4 s of each worker's 399 s waiting for
# a shared disk (a busy 2-core machine, 2026-12-07). Where an fsync is what a test checks, it
# records the calls (test_tensor_writing.py); where a crash is, the writer is a process of its
# own (test_hostile.py's killed packs), whose fsync is the real one.
def _fsync_in_a_test(fd) -> None:
    os.fstat(fd if isinstance(fd, int) else fd.fileno())


os.fsync = _fsync_in_a_test


# One CPU device count for the whole session, set before jax is imported, so that sharded
# bundles run in this process; tests of other device counts start a process of their own.
# The tests' programs are tiny: XLA compiles them without LLVM's optimizations, which changes no
# result and takes about a fifth less time, and, where this XLA has the choice, with its
# classic fusion code generator rather than the newer MLIR fusion emitters, which gives the
# same results (the suite's byte-for-byte comparisons included) in about a third of the
# compile time (processes the tests start inherit the flags).
_FLAGS = " --xla_force_host_platform_device_count=8 --xla_backend_optimization_level=0"
if knows("xla_cpu_use_fusion_emitters"):
    _FLAGS += " --xla_cpu_use_fusion_emitters=false"
# Each program's LLVM module compiled whole, not split for parallel compilation: for these tiny
# programs the split costs more than it saves (the compile-heavy tests took about 6 % less CPU).
if knows("xla_cpu_parallel_codegen_split_count"):
    _FLAGS += " --xla_cpu_parallel_codegen_split_count=1"
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + _FLAGS).strip()


def pytest_configure(config):
    """jax, set up for the tests, in each process that runs them (before its collection): not
    in the one that only starts `-n 3`'s workers and hands them tests, whose import of jax
    (0.7 s) held back their start."""
    if not _starts_workers(config):
        _set_up_jax()


def _starts_workers(config) -> bool:
    """Whether this process is pytest-xdist's controller, which runs no test itself."""
    workers = config.getoption("dist", "no") != "no" and config.getoption("tx", None)
    return bool(workers) and not hasattr(config, "workerinput")


def _set_up_jax() -> None:
    import jax

    # 64-bit dtypes are part of the format; tests lower them with x64 on.
    jax.config.update("jax_enable_x64", True)

    # JAX's persistent compilation cache, in the private cache root above, from the start: as
    # every `hlobundle` command turns it on (so did the first in-process `cli("run", ...)` of a
    # session, for the tests after it). A program an earlier test compiled is read back, not
    # compiled again.
    from hlobundle._run._process import enable_compilation_cache

    enable_compilation_cache()


def pytest_collection_modifyitems(config, items):
    """Tests marked slow run first, so that with `-n 3` the longest start early and the others
    fill in beside them (pyproject.toml's `--dist worksteal` splits the list between the
    workers, and a worker that runs dry takes half of what the busiest has left); a long test
    left to the end would keep one worker busy while the other idles.

    Where enzyme-ad is not installed (it has wheels for Python 3.11 only), every test run on
    the enzyme backend (a `backend` parameter of "enzyme") skips, with that reason."""
    from helpers import ENZYME, needs_enzyme

    # A stable sort: within each group, the files and their tests keep their order.
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
    if ENZYME:
        return
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if params.get("backend") == "enzyme":
            item.add_marker(needs_enzyme)


# What this process's collection imported, and whether it collected the whole suite (no file
# named alone, none ignored): test_torch.py's test that collecting imports neither torch nor
# model_signing reads it, where it collected a whole suite of its own in a child (4 CPU-s).
COLLECTION_IMPORTED = pytest.StashKey[tuple[frozenset[str], bool]]()


def pytest_collection_finish(session):
    config = session.config
    tests = os.path.dirname(os.path.realpath(__file__))
    here = config.invocation_params.dir
    given = [os.path.realpath(os.path.join(here, str(a).split("::")[0])) for a in config.args]
    whole = (
        any(tests == g or tests.startswith(g + os.sep) for g in given)
        and not config.getoption("ignore", None)
        and not config.getoption("ignore_glob", None)
    )
    config.stash[COLLECTION_IMPORTED] = (frozenset(sys.modules), whole)


SINGLE_THREAD = "--mlir-disable-threading"


@pytest.fixture(scope="session", autouse=True)
def _each_iree_compile_once(tmp_path_factory):
    """IREE compiles one program with the same flags once per run: the vmfb bytes of each
    `iree-compile` run (a child process, about 0.3 s) are kept, named by everything the child
    is given (the portable artifact, the flags, the time and memory limits), in this run's own
    temporary directory (both xdist workers' parent, which each run makes afresh), and a later
    compile of the same program reads them back. What the package does around the compiler (its
    own compile cache, refusals, the manifest's executables) runs as ever; only identical
    successful runs of the child are shared, so a compile that fails or hangs runs each time.
    The compiler runs on one thread (`--mlir-disable-threading`, the same bytes: a test compares
    them), as the tests' other process keeps the second core busy: with its threads, IREE's
    conformance run took 19.5 CPU-s against 14.9."""
    import hashlib

    from hlobundle._format import _limits
    from hlobundle._run._backends import _iree_compile

    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "iree-compiles"
    root.mkdir(exist_ok=True)
    compile_once = _iree_compile._run_compiler

    def run_compiler(portable: bytes, chosen: tuple[str, ...]) -> bytes:
        given = [portable, *(f.encode() for f in chosen)]
        given += [str(_limits.COMPILE_TIMEOUT_S).encode(), str(_limits.CHILD_MEMORY_BYTES).encode()]
        key = hashlib.sha256(b"\0".join(hashlib.sha256(g).digest() for g in given)).hexdigest()
        kept = root / f"{key}.vmfb"
        if kept.exists():
            return kept.read_bytes()
        vmfb = compile_once(portable, (*chosen, SINGLE_THREAD))
        partial = root / f"{key}.{os.getpid()}.partial"
        partial.write_bytes(vmfb)
        os.replace(partial, kept)
        return vmfb

    run_compiler.__wrapped__ = compile_once  # type: ignore[attr-defined]  (the real one)
    _iree_compile._run_compiler = run_compiler
    yield
    _iree_compile._run_compiler = compile_once


@pytest.fixture(scope="session")
def script_zygote(tmp_path_factory):
    """`script_zygote(SCRIPT, *ARGS, cwd=None)`: `python SCRIPT ARGS` in a process of its own, a
    fork of this worker's one script zygote (tests/script_zygote.py, which imported jax, numpy
    and scipy's LAPACK once, never hlobundle), answered as `subprocess.run` would answer; a script that
    imported hlobundle fails (an emitted script is standalone)."""
    from helpers import ChildProcess

    zygote = ChildProcess(tmp_path_factory.mktemp("zygote"), "script_zygote.py")
    yield zygote
    zygote.close()


@pytest.fixture(scope="session", autouse=True)
def _cli_zygote(tmp_path_factory):
    """This worker's one `helpers.CliZygote`, started when a test first asks it for its
    `hlobundle` (test_readme's `_bash`, for the docs' sh blocks), closed at the session's end."""
    import helpers

    helpers.CLI_ZYGOTE = helpers.CliZygote(tmp_path_factory.mktemp("cli-zygote"))
    yield
    helpers.CLI_ZYGOTE.close()

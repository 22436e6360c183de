import atexit
import os
import shutil
import tempfile

# The suite never reads or writes the user's caches (compiled programs, check verdicts): each
# session (each xdist worker) gets its own private, empty cache root, removed at its end.
_CACHE_ROOT = tempfile.mkdtemp(prefix="hlobundle-test-cache-")
os.environ["HLOBUNDLE_CACHE_DIR"] = _CACHE_ROOT
atexit.register(shutil.rmtree, _CACHE_ROOT, ignore_errors=True)

# One CPU device count for the whole session, set before jax is imported, so that sharded
# bundles run in this process; tests of other device counts start a process of their own.
# The tests' programs are tiny: XLA compiles them without LLVM's optimizations, which changes no
# result and takes about a fifth less time (processes the tests start inherit both flags).
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "")
    + " --xla_force_host_platform_device_count=8 --xla_backend_optimization_level=0"
).strip()

import jax  # noqa: E402

# 64-bit dtypes are part of the format; tests lower them with x64 on.
jax.config.update("jax_enable_x64", True)

# JAX's persistent compilation cache, in the private cache root above, from the start: as
# every `hlobundle` command turns it on (so did the first in-process `cli("run", ...)` of a
# session, for the tests after it). A program an earlier test compiled is read back, not
# compiled again.
from hlobundle._run._process import enable_compilation_cache  # noqa: E402

enable_compilation_cache()


def pytest_collection_modifyitems(config, items):
    """Tests marked slow run first, so that with `-n 2` the longest start early and the others
    fill in beside them (pyproject.toml's `--dist worksteal` splits the list between the
    workers, and a worker that runs dry takes half of what the other has left); a long test
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

"""Process-wide JAX policy, in one place for the library and the command line (docs/jax.md,
"Calling a bundle from JAX"): 64-bit values, JAX's persistent compilation cache in hlobundle's
private cache directory, and multi-host start-up. `hlobundle.configure_jax()` gives a Python program
what every `hlobundle` command does before it runs a bundle.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator

from .._format._errors import DevicesUnavailableError


def configure_jax(
    *, x64: bool = True, compile_cache: bool = True, distributed: bool = False
) -> None:
    """Configure JAX as `hlobundle run` does, before anything is compiled.

    **Arguments:**

    - `x64`: turn on `jax_enable_x64`, so that 64-bit values stay 64-bit (bundles with int64 or
      float64 values refuse to run without it: `X64DisabledError`).
    - `compile_cache`: JAX's persistent compilation cache in hlobundle's private cache
      directory (SPEC.md section 8, "Caches"); off when caching is off
      (`HLOBUNDLE_NO_CACHE=1`) or the directory is not safe to use.
    - `distributed`: `jax.distributed.initialize()` from `JAX_COORDINATOR_ADDRESS`,
      `JAX_NUM_PROCESSES` and `JAX_PROCESS_ID`, with gloo collectives on CPU.
    """
    import jax

    if x64:
        jax.config.update("jax_enable_x64", True)
    if compile_cache:
        enable_compilation_cache()
    if distributed:
        initialize_distributed()


class Start:
    """The runtime's start begun by `devices_started` (in a thread), if any."""

    def __init__(self, begun: bool) -> None:
        self.error: Exception | None = None
        self._thread: threading.Thread | None = None
        if begun:
            self._thread = threading.Thread(
                target=self._open, name="hlobundle-devices", daemon=True
            )
            self._thread.start()

    def _open(self) -> None:
        import jax

        try:
            jax.devices()
        except Exception as e:  # said by `wait`, in the caller's thread, coded
            self.error = e

    def under_way(self) -> bool:
        """Whether the runtime is still starting: a first use of the devices would wait."""
        return self._thread is not None and self._thread.is_alive()

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()

    def wait(self) -> None:
        """Wait for the start to end; a start that failed is a DevicesUnavailableError."""
        self.join()
        if self.error is not None:
            raise DevicesUnavailableError(
                f"JAX could not start its runtime: {' '.join(str(self.error).split())[:600]}"
            )


@contextlib.contextmanager
def devices_started(start: bool) -> Iterator[Start]:
    """With `start`, the JAX runtime's start (`jax.devices()`: on a TPU most of a fresh
    process's first result, 13-14 s) begun in a thread of its own while the caller reads,
    verifies and prepares what it will run (`hlobundle run`), then calls `wait()` before its
    first use of the devices. Nothing may need to come before the runtime's start
    (`jax.distributed.initialize()` does: don't start it then).

    jax itself is imported here, in the caller's thread: two threads importing modules of one
    package can deadlock in Python's import system. The thread's `jax.devices()` releases the
    GIL while the runtime starts; what it raises, `wait()` raises coded (DEVICES_UNAVAILABLE).
    The thread is joined before this returns, on an error too: nothing of it outlives the
    command."""
    if start:
        import jax  # noqa: F401  # here, not in the thread
    begun = Start(start)
    try:
        yield begun
    finally:
        begun.join()


def enable_x64() -> None:
    import jax

    jax.config.update("jax_enable_x64", True)


def inline_cpu_calls() -> None:
    """JAX's CPU computations run in the thread that calls them (`jax_cpu_enable_async_dispatch`
    off), for a process that waits for every result as soon as it asks for it (`hlobundle
    serve`): no hand-off to another thread and back per call, which cost a LeNet call (batch
    4) 30 to 100 us of its 450 to 560 us of CPU (measured on 2 cores). The thread still leaves
    the GIL while the computation runs. Takes effect where JAX's CPU backend is not made yet."""
    import jax

    jax.config.update("jax_cpu_enable_async_dispatch", False)


def initialize_distributed() -> None:
    """`jax.distributed.initialize` from JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES, JAX_PROCESS_ID."""
    import jax

    env = os.environ
    if "JAX_CPU_COLLECTIVES_IMPLEMENTATION" not in env:  # CPU processes talk over gloo
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    try:
        jax.distributed.initialize(
            coordinator_address=env.get("JAX_COORDINATOR_ADDRESS"),
            num_processes=int(env["JAX_NUM_PROCESSES"]) if "JAX_NUM_PROCESSES" in env else None,
            process_id=int(env["JAX_PROCESS_ID"]) if "JAX_PROCESS_ID" in env else None,
        )
    except (ValueError, RuntimeError) as e:
        raise DevicesUnavailableError(
            f"jax.distributed.initialize() failed: {e}. Set JAX_COORDINATOR_ADDRESS (host:port of "
            "process 0), JAX_NUM_PROCESSES and JAX_PROCESS_ID on every host",
        ) from None


def enable_compilation_cache() -> None:
    """JAX's persistent compilation cache, for every compiled program, in our private cache
    directory; off (whatever JAX was configured with) when there is none or caching is off.
    XLA reads its entries unchecked: they are trusted as this user's own files (SPEC.md
    section 8, "Compile caches")."""
    import jax

    from .._read import _cache

    where = _cache.directory(_cache.JAX)
    if where is None:
        jax.config.update("jax_enable_compilation_cache", False)
        return
    jax.config.update("jax_enable_compilation_cache", True)
    jax.config.update("jax_compilation_cache_dir", str(where))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)

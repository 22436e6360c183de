"""Python's cyclic garbage collector, paused while a bundle's manifest and headers become objects.

Reading a large manifest makes tens of thousands of small objects (pydantic models, dicts,
lists) and no reference cycles. Each allocation past a threshold starts a collection that walks
the objects already alive, so in a process that holds jax's (hundreds of thousands) the
collections cost more than the parse (benchmarks/RESULTS.md, "Cost that grows with what is
used"). Paused, the objects are made and freed by reference counting alone; what the pause
leaves for the collector it collects at its next run, after the read.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the collector for the block, if it runs; another thread's pause, or a user's
    `gc.disable()`, is left as it was."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()

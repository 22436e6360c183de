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
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_pauses = 0  # reads under way in this process (threads may read bundles at once)
_resume = False  # whether the collector ran when the first of them began


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the collector for the block; it runs again when the last block under way in any
    thread ends, if it ran when the first began. A collector already off (a user's
    `gc.disable()`) stays off. One turned off by another thread while a read is under way is
    turned on again when the reads end: the pause cannot tell that from its own."""
    global _pauses, _resume
    with _lock:
        if _pauses == 0:
            _resume = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _lock:
            _pauses -= 1
            if _pauses == 0 and _resume:
                gc.enable()

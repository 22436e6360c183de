"""Progress of long steps (hashing, copying, writing many bytes), for a person at a terminal.

The library reports; it shows nothing unless a front end turns progress on, as the CLI does when
stderr is a terminal and the output is not `--json`. Bars are tqdm's, on stderr, and only for
steps of at least `MIN_BYTES`. This module imports nothing of the package (a leaf of the layers).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

MIN_BYTES = 64 << 20  # smaller steps finish before a bar would be read

_enabled = False


def enable(on: bool = True) -> None:
    """Show progress bars on stderr (the CLI calls this on a terminal)."""
    global _enabled
    _enabled = on


def enabled() -> bool:
    return _enabled


def _nothing(_: int) -> None:
    pass


@contextlib.contextmanager
def task(what: str, total: int) -> Iterator[Callable[[int], None]]:
    """A step over `total` bytes: yields `advance(n)`, to call as each `n` bytes are done."""
    if not _enabled or total < MIN_BYTES:
        yield _nothing
        return
    from tqdm import tqdm

    bar: Any = tqdm(
        total=total,
        desc=what,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        file=sys.stderr,
        leave=True,
        dynamic_ncols=True,
    )
    try:
        yield bar.update
    finally:
        bar.close()

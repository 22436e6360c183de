"""Deadlines kept by one sweep: what a request would otherwise arm and cancel a timer for
(a connection's next headers, `_server`; a request's body, `_app`) is a dictionary entry, and
one timer, armed only while some deadline is pending, expires the overdue."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any


class Sweep:
    """Keys each due `timeout_s` after they were `arm`ed; swept every quarter of the timeout
    (at most every second) while any is armed, so that `expire(key, noted)` runs between a
    key's deadline and a quarter of the timeout after it (`noted`: what `arm` was given)."""

    def __init__(self, timeout_s: float, expire: Callable[[Any, Any], None]) -> None:
        self.timeout_s, self.every_s, self.expire = timeout_s, min(1.0, timeout_s / 4), expire
        self.due: dict[Any, tuple[float, Any]] = {}
        self.sweeping = False

    def arm(self, loop: asyncio.AbstractEventLoop, key: Any, noted: Any = None) -> None:
        self.due[key] = (loop.time() + self.timeout_s, noted)
        if not self.sweeping:
            self.sweeping = True
            loop.call_later(self.every_s, self.sweep, loop)

    def drop(self, key: Any) -> None:
        self.due.pop(key, None)

    def sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        now = loop.time()
        for key, (deadline, noted) in list(self.due.items()):
            if deadline <= now:
                del self.due[key]
                self.expire(key, noted)
        self.sweeping = bool(self.due)
        if self.sweeping:
            loop.call_later(self.every_s, self.sweep, loop)

"""Values that JAX's rules look up by a module text (a batching rule or a lowering sees only a
primitive's parameters, and enzyme-ad's carry the module text): each entry is kept while a
function that registered it lives, so the registry is bounded by the functions alive, not by
every module a process ever ran."""

from __future__ import annotations

import threading
import weakref
from typing import Generic, TypeVar

V = TypeVar("V")


class ByText(Generic[V]):
    """A value per module text, counted by its living owners (the callables that run it)."""

    def __init__(self) -> None:
        self._entries: dict[str, tuple[V, int]] = {}
        self._lock = threading.Lock()

    def add(self, text: str, value: V, owner: object) -> None:
        """Keep `value` for `text` while `owner` lives (and while any other owner of it does)."""
        with self._lock:
            _, count = self._entries.get(text, (value, 0))
            self._entries[text] = (value, count + 1)
        weakref.finalize(owner, self._drop, text)

    def _drop(self, text: str) -> None:
        with self._lock:
            entry = self._entries.get(text)
            if entry is not None and entry[1] > 1:
                self._entries[text] = (entry[0], entry[1] - 1)
            else:
                self._entries.pop(text, None)

    def get(self, text: str) -> V | None:
        entry = self._entries.get(text)
        return None if entry is None else entry[0]

    def __len__(self) -> int:
        return len(self._entries)

"""A request's body read within its limits: refused (413) as soon as it is known to be over
its bound, and (408) when it has not all arrived in time, by one sweep of deadlines
(`BodyDeadlines`) or a timer of its own. Every route that reads a body reads it here (the
inference routes, the shared-memory registrations, the engines' adapters)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

from ._protocol import RequestError
from ._sweep import Sweep


def over_limit(limit: int) -> str:
    return (
        f"the request body is over the limit of {limit} bytes (--max-body-bytes, and for "
        "this model 64 KiB + 64 bytes per input value)"
    )


async def read_body(
    receive: Any,
    declared: str | None,
    limit: int,
    timeout_s: float,
    deadlines: BodyDeadlines | None = None,
) -> bytes:
    """The request body (its ASGI messages), refused (413) as soon as it is known to exceed
    `limit` bytes (`declared`: its content-length), or (408) when it has not all arrived within
    `timeout_s` (kept by `deadlines`' sweep where given, else by a timer of its own)."""
    if declared is not None and not (declared.isascii() and declared.isdigit()):
        raise RequestError(400, "content-length is not a number")
    if declared is not None and int(declared) > limit:
        raise RequestError(413, over_limit(limit))
    if deadlines is not None:
        return await deadlines.within(_chunks(receive, limit))
    try:
        async with asyncio.timeout(timeout_s):
            return await _chunks(receive, limit)
    except TimeoutError:
        raise RequestError(408, late(timeout_s)) from None


async def _chunks(receive: Any, limit: int) -> bytes:
    chunks, size, more = [], 0, True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise RequestError(400, "the client left before sending the whole body")
        chunk, more = message.get("body", b""), message.get("more_body", False)
        size += len(chunk)
        if size > limit:
            raise RequestError(413, over_limit(limit))
        chunks.append(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def late(timeout_s: float) -> str:
    return f"the request body did not arrive within {timeout_s:g} s"


class BodyDeadlines:
    """The requests whose bodies are being read, by task: one sweep (`_sweep.Sweep`) cancels a
    read that is overdue, which then answers 408, rather than a timer armed per request."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s, self.overdue = timeout_s, set[asyncio.Task[Any]]()
        self.sweep = Sweep(timeout_s, self._expire)

    async def within(self, reading: Awaitable[bytes]) -> bytes:
        task = asyncio.current_task()
        if task is None:  # an ASGI application runs in a task; anything else is a caller's bug
            raise RuntimeError("read_body with deadlines must run in an asyncio task")
        self.sweep.arm(task.get_loop(), task)
        try:
            return await reading
        except asyncio.CancelledError:
            if task not in self.overdue:
                raise  # cancelled by someone else: the server shutting down
            self.overdue.discard(task)
            task.uncancel()
            raise RequestError(408, late(self.timeout_s)) from None
        finally:
            self.sweep.drop(task)

    def _expire(self, task: asyncio.Task[Any], _: Any) -> None:
        self.overdue.add(task)
        task.cancel()

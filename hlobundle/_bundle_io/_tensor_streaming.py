"""A held tensor file (`_tensors.TensorFile`) streamed onto a JAX device as it is
hashed, without a private copy of it: read in runs of whole chunks, each run into a buffer of
its own, hashed there (its chunk digests, in a pool's threads; the file's sha256, in order, in
this thread) and its tensors' pieces put on the device from that very buffer, which nothing
writes again until the device has its bytes. Each tensor is then joined on the device from its
pieces. What reaches the device is what was hashed, whatever the file holds by then; the caller
checks the digests before it uses an array (issue 66, section 4: a copy into fresh memory costs
0.8-0.96 s a GiB on a TPU host, more than hashing it on every core).

On a device with memory of its own the run buffers are few and used again (`RunBuffers`, one
for all the files of a load): a run's buffer goes back as soon as its pieces are on the device
and, where the file's sha256 is computed, that hash has passed it; and the device reads the
buffer itself (`may_alias`), with no staging copy of it made inside `device_put`."""

from __future__ import annotations

import bisect
import hashlib
import queue
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._file_io import _hashing_reader
from .._format._errors import TensorFileError
from .._terminal import _progress

if TYPE_CHECKING:
    from concurrent.futures import Executor, Future

    import numpy as np

    from ._tensors import TensorFile

RUN_BYTES = _hashing_reader.STEP_BYTES  # what one buffer holds, at most (whole chunks)
ALIAS = True  # device_put's may_alias: the device reads the buffer (HLOBUNDLE_BENCH_STREAM tries)
# A load's pool when it streams: threads per host core, each reading and hashing a run, then
# waiting for its transfer, and runs in flight per thread (HLOBUNDLE_BENCH_STREAM tries both).
THREADS_PER_CORE = 1.0
IN_FLIGHT = 2


def threads(cores: int) -> int:
    """The threads of a streaming load's pool, on a host of `cores` cores."""
    return max(1, round(cores * THREADS_PER_CORE))


@dataclass(frozen=True)
class Planned:
    """A tensor to put on the device: bytes `[begin, end)` of its file, seen as `dtype` (the
    stored bytes' own, little-endian) and `shape`."""

    key: str
    begin: int
    end: int
    dtype: np.dtype
    shape: tuple[int, ...]


def streamable(tensors: list[Planned]) -> bool:
    """Whether each tensor can be cut at any run's edge into whole elements (runs are whole
    chunks, a power of two of at least 64 KiB, or `RUN_BYTES`): it begins on a multiple of its
    element's size."""
    return all(t.begin % t.dtype.itemsize == 0 for t in tensors)


def to_device(
    tf: TensorFile,
    tensors: list[Planned],
    device: Any,
    chunk: int | None,
    whole: bool,
    pool: Executor | None,
    buffers: RunBuffers | None = None,
) -> tuple[str | None, list[str] | None, dict[str, Any]]:
    """Stream `tf` onto `device`: its runs read and hashed by `pool`'s threads (or this one),
    `tensors` put there from the hashed buffers, taken from `buffers` (shared by the files of
    one load; default: this file's own).

    **Returns:** (the file's sha256 when `whole`, else None; its chunk digests when `chunk`,
    else None; each tensor's array by key), of the bytes read: not yet checked.
    """
    step, runs = runs_of(tf.size, chunk)
    ordered = sorted((t for t in tensors if t.end > t.begin), key=lambda t: t.begin)
    h = hashlib.sha256() if whole else None
    digests: list[str] = []
    joined = _Joiner(ordered, runs)
    buffers = RunBuffers(device) if buffers is None else buffers
    ends = [t.end for t in ordered]
    plan = _Plan(tf.fd, ordered, ends, chunk, device, buffers, step, whole)
    try:
        with _progress.task(f"reading {tf.name} onto {device}", tf.size) as advance:
            for digests_of_run, pieces, buffer in _each_run(plan, runs, pool):
                digests += digests_of_run
                if h is not None:
                    h.update(buffer)
                    buffers.give_back(buffer)  # the last to read it: the pieces are on the device
                joined.add(pieces)
                advance(len(buffer))
    except _hashing_reader.ShrankError:
        raise TensorFileError(f"{tf.name} shrank while it was read", path=tf.name) from None
    arrays = joined.arrays | _empty(tensors, device)
    return (None if h is None else h.hexdigest()), (None if chunk is None else digests), arrays


def runs_of(size: int, chunk: int | None) -> tuple[int, list[tuple[int, int]]]:
    """(the bytes a run holds, at most; each run's bytes `[begin, end)`) of a file of `size`
    bytes: whole chunks of `chunk` bytes, about `RUN_BYTES`."""
    step = RUN_BYTES if chunk is None else max(1, RUN_BYTES // chunk) * chunk
    return step, [(begin, min(size, begin + step)) for begin in range(0, size, step)]


@dataclass(frozen=True)
class _Plan:
    """What each run of one file needs: where to read, what goes where, and whether this
    thread's sha256 of the file reads the buffer after the run's worker (`whole`)."""

    fd: int
    ordered: list[Planned]
    ends: list[int]
    chunk: int | None
    device: Any
    buffers: RunBuffers
    step: int
    whole: bool

    def run(self, begin: int, end: int) -> tuple[list[str], list[tuple[str, Any]], np.ndarray]:
        buffer = self.buffers.take(self.step)[: end - begin]
        pieces = _pieces(self.ordered, self.ends, begin, end)
        got = _put_run(self.fd, begin, buffer, pieces, self.chunk, self.device)
        if not self.whole:  # nothing reads it after: free for the next run at once
            self.buffers.give_back(buffer)
        return got


def _each_run(plan: _Plan, runs: list[tuple[int, int]], pool: Executor | None) -> Any:
    """Each run's (chunk digests, pieces on the device, buffer), in order; a pool keeps a few
    runs in flight, so that the buffers held stay bounded."""
    if pool is None:
        for begin, end in runs:
            yield plan.run(begin, end)
        return
    window = IN_FLIGHT * max(1, getattr(pool, "_max_workers", 1))
    pending: deque[Future[Any]] = deque()
    try:
        for begin, end in runs:
            pending.append(pool.submit(plan.run, begin, end))
            if len(pending) >= window:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        for future in pending:  # after an error: what has not started never will
            future.cancel()


def _pieces(
    ordered: list[Planned], ends: list[int], begin: int, end: int
) -> list[tuple[Planned, int, int]]:
    """The tensors with bytes in `[begin, end)`, and which of their bytes (of the file)."""
    found = []
    for t in ordered[bisect.bisect_right(ends, begin) :]:
        if t.begin >= end:
            break
        found.append((t, max(t.begin, begin), min(t.end, end)))
    return found


def _put_run(
    fd: int,
    begin: int,
    buffer: np.ndarray,
    pieces: list[tuple[Planned, int, int]],
    chunk: int | None,
    device: Any,
) -> tuple[list[str], list[tuple[str, Any]], np.ndarray]:
    """Read the bytes from `begin` on into `buffer`, hash it, and put each piece of a tensor
    it holds on `device` from it, waited for: the device then holds its own copy (a CPU
    device's may be the buffer itself: `RunBuffers` never hands one out again there)."""
    digests = _hash_run(fd, begin, buffer, chunk)
    sent = [_put(buffer[lo - begin : hi - begin].view(t.dtype), device) for t, lo, hi in pieces]
    put = [(t.key, x) for (t, _, _), x in zip(pieces, _wait(sent), strict=True)]
    return digests, put, buffer


def _hash_run(fd: int, begin: int, buffer: np.ndarray, chunk: int | None) -> list[str]:
    """The run read into `buffer`, and its chunk digests (a test's hook: the bytes hashed)."""
    return _hashing_reader.read_run(fd, begin, buffer.data, chunk)


def _put(piece: np.ndarray, device: Any) -> Any:
    """`piece` on its way to `device`: read from the buffer by the device itself with `ALIAS`
    (JAX's `may_alias`: no staging copy in the call), until its transfer is done."""
    import jax

    return jax.device_put(piece, device, may_alias=ALIAS)


def _wait(sent: list[Any]) -> list[Any]:
    """The arrays `_put` sent, once each is on its device: its run's buffer is no longer read."""
    import jax

    return list(jax.block_until_ready(sent))


def own_memory(device: Any) -> bool:
    """Whether `device` holds its arrays in memory of its own: not a CPU, whose `device_put`
    of a NumPy array may keep the array itself (even with `may_alias=False`)."""
    devices = getattr(device, "device_set", None) or [device]
    return all(getattr(d, "platform", "cpu") != "cpu" for d in devices)


class RunBuffers:
    """Run buffers for streaming onto `device`: used again once given back where the device
    copies out of them (memory of its own), so that a load costs about a buffer a thread of
    fresh memory, not its size; each one fresh otherwise (a CPU device's array may be the
    buffer), and never written after it was hashed."""

    def __init__(self, device: Any) -> None:
        self._reuse = own_memory(device)
        self._free: queue.SimpleQueue[np.ndarray] = queue.SimpleQueue()

    def take(self, size: int) -> np.ndarray:
        """A buffer of at least `size` bytes."""
        import numpy as np

        try:
            buffer = self._free.get_nowait()
        except queue.Empty:
            return np.empty(size, np.uint8)
        if len(buffer) >= size:
            return buffer
        return np.empty(size, np.uint8)  # one left by a file of smaller runs: let it go

    def give_back(self, buffer: np.ndarray) -> None:
        """`buffer`'s pieces are on the device and nothing reads it any more."""
        if self._reuse:
            self._free.put(buffer.base if buffer.base is not None else buffer)


class _Joiner:
    """Each tensor's pieces, as their runs come, in order, joined on the device once the
    last one is in."""

    def __init__(self, ordered: list[Planned], runs: list[tuple[int, int]]) -> None:
        step = runs[0][1] - runs[0][0] if runs else 1
        self._left = {t.key: (t.end - 1) // step - t.begin // step + 1 for t in ordered}
        self._shape = {t.key: t.shape for t in ordered}
        self._parts: dict[str, list[Any]] = {}
        self.arrays: dict[str, Any] = {}

    def add(self, pieces: list[tuple[str, Any]]) -> None:
        for key, piece in pieces:
            self._parts.setdefault(key, []).append(piece)
            self._left[key] -= 1
            if self._left[key] == 0:
                self.arrays[key] = _join(self._parts.pop(key), self._shape[key])


def _join(parts: list[Any], shape: tuple[int, ...]) -> Any:
    if len(parts) == 1:
        return parts[0].reshape(shape)
    return _joined()(parts, shape)


_JOIN: list[Callable[..., Any]] = []


def _joined() -> Callable[..., Any]:
    """`jnp.concatenate` of a tensor's flat pieces, reshaped, compiled once per shape."""
    if not _JOIN:
        import jax
        import jax.numpy as jnp

        def join(parts: list[Any], shape: tuple[int, ...]) -> Any:
            return jnp.concatenate(parts).reshape(shape)

        _JOIN.append(jax.jit(join, static_argnums=1))
    return _JOIN[0]


def _empty(tensors: list[Planned], device: Any) -> dict[str, Any]:
    """Tensors of no bytes, which no run holds."""
    import jax
    import numpy as np

    return {
        t.key: jax.device_put(np.zeros(t.shape, t.dtype), device)
        for t in tensors
        if t.end == t.begin
    }

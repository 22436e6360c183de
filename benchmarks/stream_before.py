"""The streaming onto a device as it was before its run buffers were shared by a load's files
and read by the device in place (hlobundle/_bundle_io/_tensor_streaming.py at 679b408, its
imports made absolute), kept verbatim for one measurement: `HLOBUNDLE_BENCH_STREAM=before`
(benchmarks/accelerator.py, `verify`). Delete it once RESULTS-tpu.md has that figure.

A held tensor file (`_tensors.TensorFile`) streamed onto a JAX device as it is
hashed, without a private copy of it: read in runs of whole chunks, each run into a buffer of
its own, hashed there (its chunk digests, in a pool's threads; the file's sha256, in order, in
this thread) and its tensors' pieces put on the device from that very buffer, which nothing
writes again. Each tensor is then joined on the device from its pieces. What reaches the
device is what was hashed, whatever the file holds by then; the caller checks the digests
before it uses an array (issue 66, section 4: a copy into fresh memory costs 0.8-0.96 s a GiB
on a TPU host, more than hashing it on every core)."""

from __future__ import annotations

import bisect
import hashlib
import queue
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hlobundle._file_io import _hashing_reader
from hlobundle._format._errors import TensorFileError
from hlobundle._terminal import _progress

if TYPE_CHECKING:
    from concurrent.futures import Executor, Future

    import numpy as np

    from hlobundle._bundle_io._tensors import TensorFile

RUN_BYTES = _hashing_reader.STEP_BYTES  # what one buffer holds, at most (whole chunks)


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
) -> tuple[str | None, list[str] | None, dict[str, Any]]:
    """Stream `tf` onto `device`: its runs read and hashed by `pool`'s threads (or this one),
    `tensors` put there from the hashed buffers.

    **Returns:** (the file's sha256 when `whole`, else None; its chunk digests when `chunk`,
    else None; each tensor's array by key), of the bytes read: not yet checked.
    """
    size = tf.size
    step = RUN_BYTES if chunk is None else max(1, RUN_BYTES // chunk) * chunk
    runs = [(begin, min(size, begin + step)) for begin in range(0, size, step)]
    ordered = sorted((t for t in tensors if t.end > t.begin), key=lambda t: t.begin)
    h = hashlib.sha256() if whole else None
    digests: list[str] = []
    joined = _Joiner(ordered, runs)
    buffers = _Buffers(step, reuse=own_memory(device))
    try:
        with _progress.task(f"reading {tf.name} onto {device}", size) as advance:
            for digests_of_run, pieces, buffer in _each_run(
                tf.fd, runs, ordered, chunk, device, pool, buffers
            ):
                digests += digests_of_run
                if h is not None:
                    h.update(buffer)
                buffers.give_back(buffer)
                joined.add(pieces)
                advance(len(buffer))
    except _hashing_reader.ShrankError:
        raise TensorFileError(f"{tf.name} shrank while it was read", path=tf.name) from None
    arrays = joined.arrays | _empty(tensors, device)
    return (None if h is None else h.hexdigest()), (None if chunk is None else digests), arrays


def _each_run(
    fd: int,
    runs: list[tuple[int, int]],
    ordered: list[Planned],
    chunk: int | None,
    device: Any,
    pool: Executor | None,
    buffers: _Buffers,
) -> Any:
    """Each run's (chunk digests, pieces on the device, buffer), in order; a pool keeps a few
    runs in flight, so that the buffers held stay bounded."""
    ends = [t.end for t in ordered]

    def job(begin: int, end: int) -> tuple[list[str], list[tuple[str, Any]], np.ndarray]:
        buffer = buffers.take()[: end - begin]
        pieces = _pieces(ordered, ends, begin, end)
        return _put_run(fd, begin, buffer, pieces, chunk, device)

    if pool is None:
        for begin, end in runs:
            yield job(begin, end)
        return
    window = 2 * max(1, getattr(pool, "_max_workers", 1))
    pending: deque[Future[Any]] = deque()
    try:
        for begin, end in runs:
            pending.append(pool.submit(job, begin, end))
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
    it holds on `device` from it, copied (`may_alias=False`) and waited for: the buffer is
    then the caller's to hash in order, and the device's bytes are its own (a CPU device's
    may be the buffer itself: `_Buffers` never hands one out again there)."""
    import jax

    digests = _hash_run(fd, begin, buffer, chunk)
    put = [
        (t.key, jax.device_put(buffer[lo - begin : hi - begin].view(t.dtype), device, may_alias=False))
        for t, lo, hi in pieces
    ]  # fmt: skip
    jax.block_until_ready([x for _, x in put])
    return digests, put, buffer


def _hash_run(fd: int, begin: int, buffer: np.ndarray, chunk: int | None) -> list[str]:
    """The run read into `buffer`, and its chunk digests (a test's hook: the bytes hashed)."""
    return _hashing_reader.read_run(fd, begin, buffer.data, chunk)


def own_memory(device: Any) -> bool:
    """Whether `device` holds its arrays in memory of its own: not a CPU, whose `device_put`
    of a NumPy array may keep the array itself (even with `may_alias=False`)."""
    devices = getattr(device, "device_set", None) or [device]
    return all(getattr(d, "platform", "cpu") != "cpu" for d in devices)


class _Buffers:
    """Run buffers of `size` bytes: used again once given back where the device copies out of
    them (`reuse`), so that a file costs a few buffers of fresh memory, not its size; each one
    fresh otherwise, and never written after it was hashed."""

    def __init__(self, size: int, *, reuse: bool) -> None:
        self._size, self._reuse = size, reuse
        self._free: queue.SimpleQueue[np.ndarray] = queue.SimpleQueue()

    def take(self) -> np.ndarray:
        import numpy as np

        try:
            return self._free.get_nowait()
        except queue.Empty:
            return np.empty(self._size, np.uint8)

    def give_back(self, buffer: np.ndarray) -> None:
        """`buffer` is hashed and its pieces are on the device."""
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

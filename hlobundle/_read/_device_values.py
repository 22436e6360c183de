"""Stored tensors verified onto a JAX device (`load(verify=True, device=...)`): which tensor
files go there, and how. A device with memory of its own (a TPU, a GPU) gets them streamed as
they are hashed (`_bundle_io/_tensor_streaming.py`), without a private copy on the host; a CPU
device gets them from the verified private copy itself, which its arrays then use in place
(`device_put` of a NumPy array there keeps the array's memory): one copy either way. A file
that cannot go (a bool or sub-byte tensor, whose values verify checks on the host; a tensor
read as two dtypes; one JAX would convert, such as float64 without x64; an element cut at a
run's edge) is copied and hashed as without a device, and its tensors stay on the host."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._bundle_io._tensor_streaming import Planned, own_memory, streamable
from .._format import _dtypes
from .._format._errors import InputError
from .._format._fields import static_shape
from ._tensor_files import stored_tensors

if TYPE_CHECKING:
    from .._bundle_io._tensors import TensorFile
    from ._files import AnyManifest


STREAM_ON_CPU = False  # a test's switch: stream onto a CPU device too (its arrays alias buffers)


def streams(device: Any) -> bool:
    """Whether tensors go to `device` streamed, else from the verified private copy."""
    return STREAM_ON_CPU or own_memory(device)


def from_copy(tf: TensorFile, tensors: list[Planned], device: Any) -> dict[str, Any]:
    """Each tensor put on `device` from `tf`'s private copy, which was hashed: a CPU device's
    array uses the copy's own memory."""
    import jax

    memory = tf.bytes_in_use
    return {
        t.key: jax.device_put(memory[t.begin : t.end].view(t.dtype).reshape(t.shape), device)
        for t in tensors
    }


def chosen(device: Any) -> Any:
    """`True`: JAX's default device; else the `jax.Device` given (None: none)."""
    if device is None or device is False:
        return None
    import jax

    if device is True:
        return jax.devices()[0]
    if not isinstance(device, jax.Device):
        raise InputError(
            f"device must be a jax.Device or True (JAX's default device), not "
            f"{type(device).__name__}",
            argument="device",
        )
    return device


def planned(manifest: AnyManifest, name: str, tf: TensorFile) -> list[Planned] | None:
    """The tensors of file `name` as they go to the device, or None where the file is not
    streamed (the module's docstring says when)."""
    import jax

    found: dict[str, Planned] = {}
    for _, ref, dtype, shape in stored_tensors(manifest):
        if ref.file != name:
            continue
        row = _dtypes.BY_NAME[dtype]
        if dtype == "bool" or dtype in _dtypes.SUB_BYTE_BITS:
            return None
        as_stored = row.numpy.newbyteorder("<")
        if jax.dtypes.canonicalize_dtype(as_stored) != as_stored:
            return None
        entry = tf.entries[ref.key]
        symbolic = any(isinstance(d, str) for d in shape)
        logical = row.logical_shape(entry.shape) if symbolic else static_shape(shape)
        begin, end = tf.span_of(ref.key)
        t = Planned(ref.key, begin, end, as_stored, tuple(logical))
        if found.setdefault(ref.key, t) != t:  # one tensor read as two dtypes or shapes
            return None
    tensors = list(found.values())
    return tensors if streamable(tensors) else None

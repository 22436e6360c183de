"""Stored tensors verified onto a JAX device (`load(verify=True, device=...)`): which tensor
files can be streamed there as they are hashed (`_bundle_io/_tensor_streaming.py`), without a
private copy, and which device to use. A file that cannot (a bool or sub-byte tensor, whose
values verify checks on the host; a tensor read as two dtypes; one JAX would convert, such as
float64 without x64; an element cut at a run's edge) is copied and hashed as before."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._bundle_io._tensor_streaming import Planned, streamable
from .._format import _dtypes
from .._format._fields import static_shape
from ._tensor_files import stored_tensors

if TYPE_CHECKING:
    from .._format._tensors import TensorFile
    from ._files import AnyManifest


def chosen(device: Any) -> Any:
    """`True`: JAX's default device; else the `jax.Device` (or sharding) given."""
    if device is True:
        import jax

        return jax.devices()[0]
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

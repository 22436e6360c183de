"""Tensor files written in safetensors' layout (`_format/_safetensors_layout.py`), in steps,
hashed in a second thread (`_file_io/_hashing_writer.py`) and followed by a progress bar.

Written here rather than by safetensors' `serialize_file` (which writes elsewhere and renames at
the end, in Rust): so a progress bar follows the bytes and Ctrl-C acts at once.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from .._file_io import _hashing_writer
from .._format import _chunks, _dtypes, _safetensors_layout
from .._format._errors import TensorFileError
from .._terminal import _progress

if TYPE_CHECKING:
    import numpy as np


def write(
    path: Path,
    arrays: dict[str, tuple[np.ndarray, _dtypes.DType]],
    metadata: dict[str, str] | None = None,
    *,
    fsync: bool = False,
    chunks: _chunks.ChunkHasher | None = None,
) -> str:
    """Write `{key: (array, dtype row)}` as a new safetensors file, laid out as safetensors
    lays it out (deterministic); `metadata` adds `__metadata__` entries; `fsync` syncs the file;
    `chunks` is given every byte written too (its chunk digests, format 2.1).

    Each array is converted to its stored form (`_dtypes.to_storage`: a copy only for a
    transposed or converted array) just before its bytes are written, so that only a few such
    copies exist at once, and hashed in a second thread as it is written (`_hashing_writer`).

    **Returns:** the file's sha256, computed from the bytes as they are written.
    """
    planned = {key: _safetensors_layout.planned(a, row) for key, (a, row) in arrays.items()}
    order, header = _safetensors_layout.layout(planned, metadata or {})
    size = len(header.raw) + sum(p.nbytes for p in planned.values())

    def buffers() -> Iterator[memoryview]:
        yield memoryview(header.raw)
        for key in order:
            a, row = arrays[key]
            data = _bytes_of(_dtypes.to_storage(a, row))
            if len(data) != planned[key].nbytes:  # an array-like whose shape said otherwise
                raise TensorFileError(
                    f"{path.name}: tensor {key!r} has {len(data)} bytes, its header "
                    f"{planned[key].nbytes} (shape {planned[key].shape})",
                    path=path.name,
                )
            yield data

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    try:
        with (
            _progress.task(f"writing {path.name}", size) as advance,
            _hashing_writer.HashingWriter(fd, None if chunks is None else chunks.update) as writer,
        ):
            for step in _hashing_writer.steps(buffers()):
                advance(writer.write(step))
            return writer.finish(fsync=fsync)
    finally:
        os.close(fd)


def _bytes_of(a: np.ndarray) -> memoryview:
    import numpy as np

    return np.ascontiguousarray(a).reshape(-1).view(np.uint8).data

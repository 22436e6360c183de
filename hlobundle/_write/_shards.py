"""Sharded tensor files (SPEC.md 2.10): a tensor file whose tensors hold more than
`max_shard_size` bytes is written as shards `STEM-00001-of-0000N.safetensors`, its tensors in
key order, a new shard begun before a tensor that would take the current one past the size (a
tensor never straddles shards; one larger than the size has a shard of its own). Every
reference to a tensor names its shard: the references are the index."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from .._format._bundle_manifest import BundleManifest, combine, functions_of
from .._format._errors import InputError
from .._format._manifest import Manifest, TensorRef

Arrays = dict[str, dict[str, tuple[np.ndarray, Any]]]
_SHARD = re.compile(r"(.*)-(\d{5})-of-(\d{5})\.safetensors")
MAX_SHARDS = 99_999  # what five digits name


def shard_name(file: str, index: int, count: int) -> str:
    """`weights.safetensors`, shard 1 of 3: `weights-00001-of-00003.safetensors`."""
    return f"{file.removesuffix('.safetensors')}-{index:05d}-of-{count:05d}.safetensors"


def unsharded(file: str) -> str:
    """The tensor file a shard is part of (`weights-00001-of-00003.safetensors` is part of
    `weights.safetensors`); any other name is its own."""
    match = _SHARD.fullmatch(file)
    return f"{match[1]}.safetensors" if match else file


def split(
    manifest: Manifest | BundleManifest, arrays: Arrays, limit: int | None
) -> tuple[Manifest | BundleManifest, Arrays]:
    """The tensor files over `limit` bytes as shards, and the manifest naming them (no limit:
    as they are)."""
    if limit is None:
        return manifest, arrays
    if limit < 1:
        raise InputError(
            f"max_shard_size is {limit}; a size is at least 1", argument="max_shard_size"
        )
    placed: dict[tuple[str, str], str] = {}
    out: Arrays = {}
    for file, tensors in arrays.items():
        sizes = {key: np.asarray(array).nbytes for key, (array, _) in tensors.items()}
        if sum(sizes.values()) <= limit:
            out[file] = tensors
            continue
        groups: list[list[str]] = [[]]
        held = 0
        for key in sorted(tensors):
            if groups[-1] and held + sizes[key] > limit:
                groups.append([])
                held = 0
            groups[-1].append(key)
            held += sizes[key]
        if len(groups) > MAX_SHARDS:
            raise InputError(
                f"{file} would have {len(groups)} shards of at most {limit} bytes; five digits "
                f"name at most {MAX_SHARDS}: give a larger max_shard_size",
                argument="max_shard_size",
            )
        for i, keys in enumerate(groups, 1):
            name = shard_name(file, i, len(groups))
            out[name] = {key: tensors[key] for key in keys}
            placed.update({(file, key): name for key in keys})
    return with_files(manifest, lambda ref: placed.get((ref.file, ref.key), ref.file)), out


def with_files(manifest: Manifest | BundleManifest, file_of: Any) -> Manifest | BundleManifest:
    """The manifest with each tensor reference naming the file `file_of(ref)` gives."""

    def moved(ref: TensorRef | None) -> TensorRef | None:
        return None if ref is None else TensorRef(file=file_of(ref), key=ref.key)

    views, default = functions_of(manifest)
    changed = [
        v.model_copy(
            update={
                "arguments": [a.model_copy(update={"value": moved(a.value)}) for a in v.arguments],
                "results": [
                    r.model_copy(update={"expected": moved(r.expected)}) for r in v.results
                ],
            }
        )
        for v in views.values()
    ]
    if isinstance(manifest, Manifest):
        return changed[0]
    return combine(changed, default, {})

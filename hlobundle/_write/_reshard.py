"""`reshard()`: the same bundle with its tensor files cut into other shards (SPEC.md 2.10), or
joined into one file each: every function, module, tensor value and listed file the same, only
which file holds which tensor changed. The bundle is verified first, and written from the bytes
that were checked."""

from __future__ import annotations

import os
from pathlib import Path

from .._read._reader import Bundle, load
from ._atomic import write_bundle
from ._functions import _store
from ._options import PackOptions, takes
from ._shards import Arrays, split, unsharded, with_files


@takes("max_shard_size", "force", "sign_key")
def reshard(
    bundle: Bundle | str | os.PathLike[str], out: str | os.PathLike[str], *, opt: PackOptions
) -> Path:
    """Write `bundle` again at `out`, each tensor file of it (its shards joined) cut into shards
    of at most `max_shard_size` bytes, or, without it, as one file. A signature is not carried
    over (its files changed): `sign_key` signs the new bundle.

    **Returns:** the new bundle's path.
    """
    b = bundle if isinstance(bundle, Bundle) else load(bundle)
    b.verify()  # every tensor read into memory and hashed: these bytes are written
    files: dict[str, bytes] = {}
    arrays: Arrays = {}
    for name in b.functions:
        view = b.select(name)
        for stored in view.modules.values():
            files[stored.text_file] = stored.text_bytes
            files[stored.portable_file] = stored.portable
        for e in view.manifest.executables or []:
            files[e.file] = view.executable(e.target, e.sizes) or b""
        stored_values = [(a.value, a.dtype, a.shape) for a in view.arguments if a.value]
        stored_values += [(r.expected, r.dtype, r.shape) for r in view.results if r.expected]
        for ref, dtype, shape in stored_values:
            # Two shards' tensors of one key joined: one value, or a TensorConflictError.
            _store(
                arrays, unsharded(ref.file), ref.key, view._array(ref, dtype, shape), dtype, name
            )
    for name, held_file in b._unreferenced.items():
        files[name] = held_file.read()
    manifest = with_files(b.bundle_manifest, lambda ref: unsharded(ref.file))
    manifest, arrays = split(manifest, arrays, opt.max_shard_size)
    return write_bundle(
        Path(out), manifest, files, arrays, force=opt.force, signing_key=opt.signing_key
    )

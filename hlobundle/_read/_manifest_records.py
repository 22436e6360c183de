"""A manifest's bytes to its records (`_format/_records.py`), through a remembered verdict.

The models validate a manifest's bytes once; what they made of them, their dump, is kept in the
private cache (`_cache.py`, directory `manifests/`) under a key of the bytes' sha256 and of
the code that validated them (every source file of `_format`, this module, pydantic's and
packaging's versions). Reading the same bytes again builds the records from that dump and
imports no pydantic. What the models refuse is never remembered, so this path refuses exactly
what they refuse. A manifest read tolerantly (a newer minor version, whose unknown fields are
dropped after a warning) is not remembered: each read warns again. A missing, unreadable or
malformed entry is a miss: the models validate the bytes again.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._format import _records
from .._format._errors import NotABundleError, UnsafePathError
from .._format._fields import FUNCTION_FIELDS, MANIFEST_NAME, SHARED_FIELDS, read_manifest_bytes
from . import _cache, _modules

if TYPE_CHECKING:
    from ._files import AnyManifest

MANIFESTS = _cache.MANIFESTS  # the cache's subdirectory
# the models' fields, in order (tests/test_records.py checks them against model_fields)
_MANIFEST_FIELDS = (*FUNCTION_FIELDS, "format", "format_version", "function", *SHARED_FIELDS)
_BUNDLE_FIELDS = ("format", "format_version", "default_function", "functions", *SHARED_FIELDS)
_SUFFIX = ".json"


def read_manifest(root: Path) -> tuple[AnyManifest, str]:
    """The bundle's manifest, parsed and checked, and the sha256 of the bytes it was parsed from."""
    if not root.exists():
        raise NotABundleError(f"{str(root)!r} does not exist", path=root)
    if not root.is_dir():
        raise NotABundleError(
            f"{str(root)!r} is not a directory; a bundle is one{_parent_bundle(root)}", path=root
        )
    path = root / MANIFEST_NAME
    if path.is_symlink():
        raise UnsafePathError(f"{MANIFEST_NAME} is a symlink", path=MANIFEST_NAME)
    if not path.is_file():
        raise NotABundleError(
            f"{str(root)!r} has no {MANIFEST_NAME}; it is not a bundle{_packed_how(root)}",
            path=MANIFEST_NAME,
        )
    data = read_manifest_bytes(path)
    digest = hashlib.sha256(data).hexdigest()
    return parse(data, digest, MANIFEST_NAME), digest


def _parent_bundle(path: Path) -> str:
    """The bundle a file given as one lies in (`inspect B/manifest.json`): its directory."""
    if not (path.parent / MANIFEST_NAME).is_file():
        return ""
    what = f"a bundle's {MANIFEST_NAME}" if path.name == MANIFEST_NAME else "a file of a bundle"
    return f": it is {what}: give the bundle's directory, {path.parent}"


def _packed_how(root: Path) -> str:
    """How to make a bundle of a directory that a producer wrote instead: a Reactant export
    (`export_to_enzymejax`'s `.py`, `.mlir` and `_inputs.npz`) is what users try to run."""
    if all(any(root.glob(pattern)) for pattern in ("*_inputs.npz", "*.mlir", "*.py")):
        return (
            ". It looks like a Reactant export (export_to_enzymejax): make a bundle of it with "
            f"`hlobundle pack --from-reactant {root} -o OUT` (hlobundle.from_reactant in Python)"
        )
    return ""


def parse(raw: bytes, sha256: str, path: str) -> Any:
    """The records of manifest bytes `raw` (whose sha256 is `sha256`): from the verdict
    remembered for them, else validated by the models (a coded error when they refuse)."""
    where = _cache.directory(MANIFESTS)
    key = _key(sha256) if where is not None else ""
    if where is not None:
        entry = _cache.read(where, key, _SUFFIX)
        if entry is not None:
            records = _recall(entry)
            if records is not None:
                return records
    dump, several, tolerant = _validated(raw, path)
    if where is not None and not tolerant:
        data = json.dumps({"several": several, "dump": dump}, separators=(",", ":")).encode()
        _cache.write(where, key, data, _SUFFIX)
    return _records.manifest_record(dump, several)


def _validated(raw: bytes, path: str) -> tuple[dict[str, Any], bool, bool]:
    """The models' dump of manifest bytes, whether it is a manifest of several functions, and
    whether it was read tolerantly; a coded error when the models refuse the bytes."""
    from .._format._fields import BundleManifestMethods
    from .._format._manifest_json import validate_manifest

    model, tolerant = validate_manifest(raw, path=path)
    return model.model_dump(mode="json"), isinstance(model, BundleManifestMethods), tolerant


def _recall(entry: bytes) -> Any:
    try:
        data = json.loads(entry)
        several, dump = data["several"], data["dump"]
        if type(several) is not bool or type(dump) is not dict:
            return None
        if tuple(dump) != (_BUNDLE_FIELDS if several else _MANIFEST_FIELDS):
            return None  # not a dump of the model: a miss
        return _records.manifest_record(dump, several)
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None  # not one we wrote: a miss


def _key(sha256: str) -> str:
    return hashlib.sha256(f"manifest\n{_code_digest()}\n{sha256}".encode()).hexdigest()


@functools.cache
def _code_digest() -> str:
    """The validating code's identity: the module checks' (every source file of `_format`,
    jaxlib's version and the interpreter's), this file, and the versions of pydantic and of packaging (which
    canonicalizes a license), read from their files without importing them."""
    digest = hashlib.sha256(_modules.code_digest().encode())
    digest.update(Path(__file__).read_bytes())
    for package, file in (("pydantic", "version.py"), ("packaging", "__init__.py")):
        spec = importlib.util.find_spec(package)
        where = spec.submodule_search_locations if spec is not None else None
        for folder in where or ():
            digest.update(package.encode() + b"\0" + (Path(folder) / file).read_bytes())
    return digest.hexdigest()

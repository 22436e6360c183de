"""Reading a bundle's module forms: each form's two files read once, hashed, parsed and checked
(SPEC.md 8), and the checks' verdicts kept in the private cache (`_cache`, directory `checks/`).

A verdict is keyed by the sha256 of everything the checks read: the text's and the artifact's
bytes (as read and hashed here, never the manifest's word for them), the function's manifest,
the artifact's target, the form, and the checking code itself (every source file of `_format`
and `_isolation`, this module, the interpreter's version and jaxlib's). It holds what the checks
found that later steps use (`@main`'s signature and the custom call targets), so a second load of
the same bytes by the same code skips parsing: no MLIR is imported. A missing, unreadable or
malformed entry is a miss, and the form is checked in full. Only forms that passed every check (the artifact shown
to be the text's program included) are recorded.
"""

from __future__ import annotations

import functools
import hashlib
import json
import sys
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._format import _dtypes
from .._format._errors import ManifestError, ModuleError
from .._parse import _artifacts, _main_signature, _mlir, _portable, _stored

if TYPE_CHECKING:
    from .._format._manifest import Manifest
from . import _cache, _files

CHECKS = _cache.CHECKS  # the cache's subdirectory
_SUFFIX = ".json"


@dataclass
class StoredModule:
    """One form of a function's program, as read and checked (`_stored.FORMS`)."""

    form: _stored.Form
    text_file: str
    text_bytes: bytes
    text_sha256: str  # computed from the bytes read, never taken from the manifest
    portable_file: str
    portable: bytes
    portable_sha256: str
    target_version: str
    signature: _main_signature.Signature | None  # `@main`'s, when the form's check read it
    custom_calls: tuple[str, ...]  # every custom call target, as the check found them
    bundle: str = ""  # the bundle's directory, for what an error tells to run
    same_program: bool = False  # the artifact was shown to be the text's program
    verdict_key: str | None = None  # where to record the verdict; None when it was recalled
    _parsed: Any = field(default=None, repr=False)

    @functools.cached_property
    def text(self) -> str:
        return self.text_bytes.decode("utf-8")  # checked to decode when read

    @property
    def parsed(self) -> Any:
        """The text, parsed (from the bytes hashed at load; parsed on first use after a cached
        verdict)."""
        if self._parsed is None:
            self._parsed = _mlir.parse(self.text_bytes, path=self.text_file)
        return self._parsed

    def check_artifact(self) -> None:
        """Show the artifact to be the text's program (once), then record the verdict."""
        if self.same_program:
            return
        _artifacts.check_same_program(
            self.parsed,
            self.portable,
            self.target_version,
            text=self.text_file,
            path=self.portable_file,
            bundle=self.bundle,
        )
        self.same_program = True


def read_form(root: Path, view: Manifest, form: _stored.Form) -> StoredModule:
    """Read a form's two files once and check their sha256; parse and check the text unless a
    verdict for these bytes is cached (then the artifact is known to be the text's program)."""
    entry = form.entry(view)
    if entry is None:
        raise ManifestError(f"the manifest has no {form.key}", field=form.key)
    text_bytes, text_sha = _files.read_module_file(root, view, entry.text)
    portable, portable_sha = _files.read_module_file(root, view, entry.portable.file)
    _files.module_text(text_bytes, entry.text)  # UTF-8, or a coded error
    stored = StoredModule(
        form,
        entry.text,
        text_bytes,
        text_sha,
        entry.portable.file,
        portable,
        portable_sha,
        entry.portable.target_version,
        None,
        (),
        str(root),
    )
    key = _key(stored, view)
    cached = _recall(key, form)
    if cached is not None:
        stored.signature, stored.custom_calls = cached
        stored.same_program = True
        return stored
    stored.signature, stored.custom_calls = _stored.check(form, _parse(stored), view, entry.text)
    stored.verdict_key = key
    return stored


def _parse(stored: StoredModule) -> Any:
    """The form's text, parsed; one that does not parse beside an artifact newer than this
    jaxlib reads is a VersionError (`_portable.check_text_version`)."""
    try:
        return stored.parsed
    except ModuleError as e:
        _portable.check_text_version(
            stored.target_version,
            e.message,
            text=stored.text_file,
            path=stored.portable_file,
            bundle=stored.bundle,
        )
        raise


def remember(stored: StoredModule) -> None:
    """Record a form's verdict once every check passed (best effort)."""
    key = stored.verdict_key
    if key is None or not stored.same_program:
        return
    where = _cache.directory(CHECKS)
    if where is not None:
        data = json.dumps(
            {"signature": _encode(stored.signature), "custom_calls": list(stored.custom_calls)}
        ).encode()
        _cache.write(where, key, data, _SUFFIX)
        stored.verdict_key = None


def _key(stored: StoredModule, view: Manifest) -> str:
    parts = [
        code_digest(),
        stored.form.key,
        stored.text_file,
        stored.text_sha256,
        stored.portable_file,
        stored.portable_sha256,
        stored.target_version,
        hashlib.sha256(_dump(view)).hexdigest(),
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _dump(view: Manifest) -> bytes:
    """The function's manifest as the key holds it: its model's dump."""
    dump = view.model_dump(mode="json")
    return json.dumps(dump, sort_keys=True, separators=(",", ":")).encode()


@functools.cache
def code_digest() -> str:
    """The checking code's identity: every source file of `_format` and `_isolation` (whose
    child deserializes artifacts) and this one, the interpreter's version, and jaxlib's (its
    parser and serializer decide the verdicts too)."""
    from jaxlib.version import __version__ as jaxlib_version

    digest = hashlib.sha256(jaxlib_version.encode())
    # the interpreter's: `str.isidentifier` (the manifest's names) follows its Unicode tables,
    # and a cache is shared by every Python of the user (3.11 has Unicode 14.0, 3.12 15.0)
    interpreter = (sys.version, sys.implementation.cache_tag, unicodedata.unidata_version)
    digest.update(repr(interpreter).encode())
    here = Path(__file__)
    rooms = [here.parent.parent / room for room in ("_format", "_isolation")]
    for path in [*(p for room in rooms for p in sorted(room.glob("*.py"))), here]:
        digest.update(f"{path.parent.name}/{path.name}".encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _recall(
    key: str, form: _stored.Form
) -> tuple[_main_signature.Signature | None, tuple[str, ...]] | None:
    where = _cache.directory(CHECKS)
    data = _cache.read(where, key, _SUFFIX) if where is not None else None
    if data is None:
        return None
    try:
        entry = json.loads(data)
        signature = _decode(entry["signature"])
        calls = tuple(_str(t) for t in _list(entry["custom_calls"]))
    except (
        ValueError,
        KeyError,
        TypeError,
        IndexError,
        AttributeError,
        ArithmeticError,
        RecursionError,
    ):
        return None  # not one we wrote: a miss
    if (signature is None) != (form.key != "module"):  # only the module form's check reads it
        return None
    return signature, calls


def _int(x: Any, none: bool = False) -> Any:
    """`x` when it is a non-negative int (or None, where `none`); else a TypeError."""
    if type(x) is int and x >= 0 or none and x is None:
        return x
    raise TypeError(f"not a verdict: {x!r:.40}")


def _list(x: Any) -> list[Any]:
    """`x` when it is a list (a string is iterable too, one character at a time); else a TypeError."""
    if isinstance(x, list):
        return x
    raise TypeError(f"not a verdict: {x!r:.40}")


def _str(x: Any, none: bool = False) -> Any:
    """`x` when it is a string (or None, where `none`); else a TypeError."""
    if isinstance(x, str) or none and x is None:
        return x
    raise TypeError(f"not a verdict: {x!r:.40}")


def _encode(sig: _main_signature.Signature | None) -> Any:
    if sig is None:
        return None
    types = lambda ts: [[list(t.shape), t.dtype.name] for t in ts]  # noqa: E731
    s = sig.sharding
    return {
        "module_name": sig.module_name,
        "arguments": types(sig.arguments),
        "results": types(sig.results),
        "aliases": [[k, v] for k, v in sig.aliases.items()],
        "unused": sorted(sig.unused),
        "sharding": None
        if s is None
        else {
            "mesh": s.mesh,
            "device_ids": s.device_ids,
            "arguments": s.arguments,
            "results": s.results,
            "hlo_arguments": s.hlo_arguments,
            "hlo_results": s.hlo_results,
        },
        "argument_info": list(sig.argument_info),
        "result_info": list(sig.result_info),
    }


def _decode(d: Any) -> _main_signature.Signature | None:
    """What `_encode` wrote, each value's type checked: anything else raises (a miss)."""
    if d is None:
        return None
    s = d["sharding"]
    sharding = (
        None
        if s is None
        else _main_signature.Sharding(
            None if s["mesh"] is None else tuple((_str(n), _int(k)) for n, k in _list(s["mesh"])),
            tuple(_int(i) for i in _list(s["device_ids"])),
            _partitions(s["arguments"]),
            _partitions(s["results"]),
            _strings(s["hlo_arguments"]),
            _strings(s["hlo_results"]),
        )
    )
    return _main_signature.Signature(
        _str(d["module_name"], none=True),
        _types(d["arguments"]),
        _types(d["results"]),
        {_int(k): _int(v) for k, v in _list(d["aliases"])},
        frozenset(_int(i) for i in _list(d["unused"])),
        sharding,
        _strings(d["argument_info"]),
        _strings(d["result_info"]),
    )


def _types(ts: Any) -> tuple[_main_signature.TensorType, ...]:
    return tuple(
        _main_signature.TensorType(
            tuple(_int(n, none=True) for n in _list(shape)), _dtypes.BY_NAME[_str(name)]
        )
        for shape, name in _list(ts)
    )


def _strings(xs: Any) -> tuple[str | None, ...]:
    return tuple(_str(x, none=True) for x in _list(xs))


def _partitions(ps: Any) -> tuple[tuple[tuple[str, ...], ...] | None, ...]:
    axes = lambda p: tuple(tuple(_str(n) for n in _list(a)) for a in _list(p))  # noqa: E731
    return tuple(None if p is None else axes(p) for p in _list(ps))

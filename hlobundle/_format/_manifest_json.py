"""Reading `manifest.json`: size, UTF-8, JSON (within the limits), the version policy, then the
model (SPEC.md sections 2, 5 and 8)."""

from __future__ import annotations

import json
import re
import warnings
from typing import Any

from pydantic import ValidationError

from . import _prechecks
from ._bundle_manifest import BundleManifest
from ._errors import (
    HloBundleWarning,
    LimitError,
    ManifestError,
    ManifestTooLargeError,
    VersionError,
)
from ._manifest import FORMAT, MANIFEST_NAME, MAX_MANIFEST_BYTES, NEWEST_MINOR, Manifest

_SURROGATE_ESCAPE = re.compile(r"\\[uU][dD][89a-fA-F]")


def parse_manifest(raw: bytes, *, path: str = MANIFEST_NAME) -> Manifest | BundleManifest:
    """Validate manifest bytes: size, UTF-8, JSON, version, then the model: a `Manifest` for a
    1.x bundle (one function), a `BundleManifest` for 2.x (SPEC.md 2.8)."""
    return validate_manifest(raw, path=path)[0]


def validate_manifest(
    raw: bytes, *, path: str = MANIFEST_NAME
) -> tuple[Manifest | BundleManifest, bool]:
    """`parse_manifest`, and whether the bytes were read tolerantly (a newer minor version:
    unknown fields dropped, after a warning)."""
    if len(raw) > MAX_MANIFEST_BYTES:
        raise ManifestTooLargeError(
            f"manifest is {len(raw)} bytes; the limit is {MAX_MANIFEST_BYTES} "
            "(SPEC.md, 'Reader safety')",
            path=path,
        )
    data = _decode_json(raw, path)
    major, tolerant = _check_version(data, path)
    model = BundleManifest if major == 2 else Manifest
    try:
        # A newer minor version's unknown fields are dropped, at every level, by pydantic itself
        # (a Python validator on every model cost a third of a large manifest's validation).
        return model.model_validate(data, extra="ignore" if tolerant else None), tolerant
    except ValidationError as e:
        raise _manifest_error(e, path) from None


def _decode_json(raw: bytes, path: str) -> dict[str, Any]:
    try:
        _prechecks.check_json(raw, path=path)
        text = raw.decode("utf-8")
        data = json.loads(text, parse_int=_prechecks.parse_json_int)
        if _SURROGATE_ESCAPE.search(text):  # only an escape makes one: the bytes are UTF-8
            json.dumps(data, ensure_ascii=False).encode("utf-8")
    except LimitError as e:
        e.path = path
        raise
    except UnicodeDecodeError as e:
        raise ManifestError(f"manifest is not UTF-8: {e}", path=path) from None
    except UnicodeEncodeError:
        raise ManifestError(
            "manifest has a lone surrogate (an unpaired \\uD800-\\uDFFF escape): no UTF-8 text",
            path=path,
        ) from None
    except (json.JSONDecodeError, RecursionError, ValueError) as e:
        raise ManifestError(
            f"manifest is not JSON: {_prechecks.short(str(e), 300)}", path=path
        ) from None
    if not isinstance(data, dict):
        raise ManifestError(f"manifest must be a JSON object, got {type(data).__name__}", path=path)
    return data


def _check_version(data: dict[str, Any], path: str) -> tuple[int, bool]:
    """The major version, and whether the manifest is a newer minor one, read tolerantly."""
    version = data.get("format_version")
    if data.get("format") != FORMAT or not isinstance(version, str):
        raise ManifestError(
            f"expected format = {FORMAT!r} and a format_version string, got "
            f"format = {data.get('format')!r}, format_version = {version!r}",
            path=path,
            field="format",
        )
    theirs = _major_minor(version)
    if theirs is None or theirs[0] not in NEWEST_MINOR:
        raise VersionError(
            f"format_version {version!r} is not readable by this reader, which reads major "
            f"versions {sorted(NEWEST_MINOR)} (SPEC.md, 'Versions')",
            path=path,
            field="format_version",
        )
    newest = f"{theirs[0]}.{NEWEST_MINOR[theirs[0]]}"
    if theirs[1] > NEWEST_MINOR[theirs[0]]:
        warnings.warn(
            f"{path}: format_version {version} is newer than this reader's {newest}; fields "
            "it does not know are ignored",
            HloBundleWarning,
            stacklevel=3,
        )
        return theirs[0], True
    return theirs[0], False


def _major_minor(version: str) -> tuple[int, int] | None:
    parts = version.split(".")
    if len(parts) != 2 or not all(p.isascii() and p.isdigit() and len(p) <= 9 for p in parts):
        return None
    return int(parts[0]), int(parts[1])


def _field(error: Any) -> list[Any]:
    """An error's location without the union branches pydantic names (`constrained-int`)."""
    return [p for p in error["loc"] if isinstance(p, int) or not ("-" in p or "[" in p)]


def _manifest_error(e: ValidationError, path: str) -> ManifestError:
    errors = e.errors()
    # A dimension is an integer or an expression: for "b +", pydantic's first error is the
    # integer branch's ("a valid integer"); the expression check's own reason says what is wrong.
    ours = [x for x in errors if x["type"] == "value_error" and _field(x) == _field(errors[0])]
    first = ours[0] if ours else errors[0]
    loc = _field(first)
    field = "".join(
        f"[{p}]" if isinstance(p, int) else (f".{p}" if i else str(p)) for i, p in enumerate(loc)
    )
    got = f" (got {first.get('input')!r:.80})" if field else ""
    return ManifestError(
        f"manifest field {field or '(root)'}: {first['msg']}{got}; "
        f"{e.error_count()} error(s) in all",
        path=path,
        field=field or None,
    )

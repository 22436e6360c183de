"""A bundle's metadata and model card as the writers take them (SPEC.md 2.12): `metadata=`
(a mapping of its fields) and `card=` (a Hugging Face model card: its YAML header gives
metadata, its markdown the card's text). The bundle's `README.md` is that card with a header
made from the metadata, which is what the manifest says; a field given in `metadata` wins
over the card's.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .._format import _card, _yaml
from .._format._errors import InputError
from .._format._manifest import Manifest
from .._format._metadata import CARD_NAME, Metadata
from .._format._model import first_error
from .._interop._sources import read_regular

MAX_CARD_BYTES = 1 << 20
MAX_HEADER_CHARS = 64 << 10


def metadata_of(value: Mapping[str, Any] | Metadata) -> Metadata:
    """The `metadata` option, checked (an `InputError` naming the field it refuses)."""
    if isinstance(value, Metadata):
        return value
    if not isinstance(value, Mapping):
        raise InputError(
            f"metadata must be a mapping of its fields, not {type(value).__name__}",
            argument="metadata",
        )
    return _valid(dict(value), "metadata")


def _valid(fields: dict[str, Any], argument: str) -> Metadata:
    try:
        return Metadata.model_validate(fields, strict=False)
    except ValidationError as e:
        where, why = first_error(e)
        raise InputError(
            f"{argument}: {where}: {why}", argument=argument, field=f"metadata.{where}"
        ) from None


def read_card(path: str | os.PathLike[str]) -> tuple[dict[str, Any], str]:
    """A model card's metadata fields (from its YAML header, if it has one) and its markdown."""
    data = read_regular(Path(path), MAX_CARD_BYTES, what="the model card")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"the model card {path} is not UTF-8: {e}", argument="card") from None
    lines = text.removeprefix("\ufeff").splitlines(keepends=True)  # a BOM is no character
    if not lines or lines[0].rstrip() != "---":
        return {}, text
    end = next((i for i, line in enumerate(lines[1:], 1) if line.rstrip() == "---"), None)
    if end is None:
        raise InputError(f"the model card {path}: its YAML header has no closing ---")
    raw = "".join(lines[1:end])
    if len(raw) > MAX_HEADER_CHARS:  # YAML parses slowly: a header is a few lines
        raise InputError(
            f"the model card {path}: its YAML header is {len(raw):,} characters; at most "
            f"{MAX_HEADER_CHARS:,}",
            argument="card",
        )
    header = _yaml.load(raw, f"the model card {path}'s header")
    if header is not None and not isinstance(header, dict):
        raise InputError(f"the model card {path}: its YAML header is not a mapping")
    return _card.from_card_data(header or {}), "".join(lines[end + 1 :]).lstrip("\n")


def with_card(
    manifest: Manifest,
    files: dict[str, bytes],
    metadata: Mapping[str, Any] | Metadata | None,
    card: str | os.PathLike[str] | None,
) -> Manifest:
    """`manifest` with its metadata, and `files` with `README.md`, when either is given."""
    if metadata is None and card is None:
        return manifest
    fields, text = read_card(card) if card is not None else ({}, "")
    if metadata is not None:
        fields |= metadata_of(metadata).model_dump(exclude_none=True)
    full = _valid({**fields, "card": CARD_NAME}, "card" if card is not None else "metadata")
    header = _yaml.dump(_card.to_card_data(full))
    files[CARD_NAME] = f"---\n{header}---\n\n{text or _card.body(full, manifest.function)}".encode()
    return manifest.model_copy(update={"metadata": full})

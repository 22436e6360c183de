"""The metadata as a Hugging Face model card's YAML header, both ways (SPEC.md 2.12).

Hugging Face's keys where it has one (`license`, `tags`, `library_name`, `base_model`), the
field's own name elsewhere (`description`, `authors`, `source_url`, `citation`). Hugging Face
spells licenses in lower case and takes an expression of several as `other` with a
`license_name`; the reverse canonicalizes the SPDX spelling, so a round trip is exact.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._metadata import Metadata

_HF_KEYS = {"framework": "library_name"}  # our field -> the card's key, where they differ
_FIELDS = tuple(f for f in Metadata.model_fields if f != "card")  # the card is the file


def to_card_data(metadata: Metadata) -> dict[str, Any]:
    """The YAML header's data of a card of `metadata`."""
    data: dict[str, Any] = {}
    for field in _FIELDS:
        value = getattr(metadata, field)
        if value is not None:
            data[_HF_KEYS.get(field, field)] = value
    license = metadata.license
    if license is not None:
        single = " " not in license
        data["license"] = license.lower() if single else "other"
        if not single:
            data["license_name"] = license
    return data


def from_card_data(data: Mapping[str, Any]) -> dict[str, Any]:
    """The metadata's fields that a card's YAML header gives (keys it does not know are left
    out; the values are checked when a `Metadata` is made of them)."""
    fields = {f: data[_HF_KEYS.get(f, f)] for f in _FIELDS if data.get(_HF_KEYS.get(f, f))}
    for name in ("authors", "tags"):  # a YAML set (!!set) has no order: give it one
        if isinstance(fields.get(name), (set, frozenset)):
            fields[name] = sorted(fields[name], key=str)
    if data.get("license") == "other":
        fields.pop("license")
        if data.get("license_name"):
            fields["license"] = data["license_name"]
    if isinstance(fields.get("base_model"), list) and len(fields["base_model"]) == 1:
        fields["base_model"] = fields["base_model"][0]  # Hugging Face allows a list
    return fields


def body(metadata: Metadata, title: str) -> str:
    """A card's markdown body when the producer gave none: a title, the description, how to
    run the bundle, and the citation."""
    parts = [f"# {title}", metadata.description or ""]
    parts.append(
        "A bundle of compiled StableHLO functions and their weights (hlobundle). Run it with "
        "`hlobundle run .`, or from Python with `hlobundle.load(path).function()`."
    )
    if metadata.citation:
        parts.append(f"## Citation\n\n```\n{metadata.citation}\n```")
    return "\n\n".join(p for p in parts if p) + "\n"

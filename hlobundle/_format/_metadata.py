"""A bundle's metadata (format 2.1, SPEC.md 2.12): what a model card says of it.

Every field is optional and bounded; the license is an SPDX expression, checked by
`packaging.licenses` after its length and nesting are bounded here. None of it changes what a
function computes, so none of it is in the fingerprint (SPEC.md 2.11).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator

from ._model import _Model

CARD_NAME = "README.md"  # the model card's one name (Hugging Face's)
MAX_TEXT = 8192  # description, citation
MAX_LICENSE_CHARS = 256
MAX_LICENSE_DEPTH = 4  # parentheses nested in a license expression
MAX_ITEMS = 64  # authors, tags

# No control, format or separator character in a one-line field; a text may break lines.
_LINE = r"^[^\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]*$"
_TEXT = r"^[^\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]*$"

Line = Annotated[str, Field(min_length=1, max_length=256, pattern=_LINE)]
Text = Annotated[str, Field(min_length=1, max_length=MAX_TEXT, pattern=_TEXT)]
Tag = Annotated[str, Field(min_length=1, max_length=64, pattern=_LINE)]


def check_license(expression: str) -> str:
    """An SPDX license expression, in its canonical spelling (`mit or apache-2.0` ->
    `MIT OR Apache-2.0`); ValueError when it is not one, or longer or deeper than allowed."""
    if len(expression) > MAX_LICENSE_CHARS:
        raise ValueError(
            f"license is {len(expression)} characters; an SPDX expression here has at most "
            f"{MAX_LICENSE_CHARS}"
        )
    depth = deepest = 0
    for c in expression:
        depth += (c == "(") - (c == ")")
        deepest = max(deepest, depth)
    if deepest > MAX_LICENSE_DEPTH:
        raise ValueError(
            f"license nests parentheses {deepest} deep; at most {MAX_LICENSE_DEPTH} here"
        )
    from packaging.licenses import InvalidLicenseExpression, canonicalize_license_expression

    try:
        return str(canonicalize_license_expression(expression))
    except InvalidLicenseExpression as e:
        raise ValueError(f"license is not an SPDX expression: {e}") from None


# SPDX's characters alone (letters, digits, `.-+:()` and spaces): no tab, control or separator
# character, which `packaging` would take for a space and hide.
License = Annotated[
    str, Field(min_length=1, pattern=r"^[A-Za-z0-9.+:() -]+$"), AfterValidator(check_license)
]


class Metadata(_Model):
    """What a model card says of a bundle (SPEC.md 2.12): each field optional."""

    description: Text | None = Field(None, description="what the model does, in a few lines")
    license: License | None = Field(None, description="an SPDX license expression: Apache-2.0")
    authors: list[Line] | None = Field(None, max_length=MAX_ITEMS, description="who made it")
    source_url: str | None = Field(
        None,
        max_length=2048,
        pattern=r"^https?://[^\s\x00-\x1f\x7f-\x9f]+$",
        description="where its source lives (http or https)",
    )
    tags: list[Tag] | None = Field(None, max_length=MAX_ITEMS, description="search keywords")
    citation: Text | None = Field(None, description="how to cite it (BibTeX, say)")
    framework: Line | None = Field(None, description="the framework it was written in: Lux")
    base_model: Line | None = Field(None, description="the model it came from")
    card: Literal["README.md"] | None = Field(
        None, description="the bundle's model card, a listed file"
    )

    @field_validator("authors", "tags")
    @classmethod
    def _unique(cls, items: list[str] | None) -> list[str] | None:
        if items is not None and len(set(items)) != len(items):
            raise ValueError("lists a name twice")
        return items

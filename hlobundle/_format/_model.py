"""The base of the manifest's models: strict and frozen. A newer minor version's fields are
dropped only when the reader asks (`model_validate(..., extra="ignore")`, SPEC.md "Versions")."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, ValidationError


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


def first_error(e: ValidationError) -> tuple[str, str]:
    """Where the first error of a validation is (`a.b.0`) and why, without pydantic's
    "Value error, " prefix."""
    err = e.errors()[0]
    return ".".join(map(str, err["loc"])), err["msg"].removeprefix("Value error, ")

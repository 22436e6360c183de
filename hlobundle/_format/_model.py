"""The base of the manifest's models: strict, frozen, and tolerant of a newer minor version's
fields only when asked (SPEC.md, "Versions")."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, model_validator


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    @model_validator(mode="before")
    @classmethod
    def _drop_unknown_when_tolerant(cls, data: Any, info: ValidationInfo) -> Any:
        if info.context and info.context.get("tolerant") and isinstance(data, dict):
            return {k: v for k, v in data.items() if k in cls.model_fields}
        return data


def first_error(e: ValidationError) -> tuple[str, str]:
    """Where the first error of a validation is (`a.b.0`) and why, without pydantic's
    "Value error, " prefix."""
    err = e.errors()[0]
    return ".".join(map(str, err["loc"])), err["msg"].removeprefix("Value error, ")

"""The base of the manifest's models: strict and frozen. A newer minor version's fields are
dropped only when the reader asks (`model_validate(..., extra="ignore")`, SPEC.md "Versions")."""

from __future__ import annotations

from collections.abc import Generator, Mapping
from functools import cache, cached_property
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError


class _Model(BaseModel):
    """A model may keep what it derives from its fields in a `cached_property` (frozen, its
    fields never change): a copy drops them, and iterating gives the fields alone."""

    # Each model's validator is built when it is first used, not when its class is made: a
    # reader uses the manifest's (which holds every nested model's), and making twenty was a
    # fifth of what the models cost `inspect` (47 ms against 38 here, pydantic imported).
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, defer_build=True)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Any:
        """A copy whose cached properties are made again from its own fields (pydantic copies
        them with `__dict__`, which `update` may have made stale)."""
        copy = super().model_copy(update=update, deep=deep)
        for name in _cached_properties(type(self)):
            copy.__dict__.pop(name, None)
        return copy

    def __iter__(self) -> Generator[tuple[str, Any], None, None]:
        """The fields (and extras), so that `dict(model)` is what validates as the model again:
        pydantic's iterates over `__dict__`, where each `cached_property` keeps its value
        (`Manifest.symbolic`, `arguments_by_name`, `BundleManifest.views`)."""
        fields = type(self).model_fields
        yield from [(k, v) for k, v in self.__dict__.items() if k in fields]
        if self.__pydantic_extra__:
            yield from self.__pydantic_extra__.items()


def first_error(e: ValidationError) -> tuple[str, str]:
    """Where the first error of a validation is (`a.b.0`) and why, without pydantic's
    "Value error, " prefix."""
    err = e.errors()[0]
    return ".".join(map(str, err["loc"])), err["msg"].removeprefix("Value error, ")


@cache
def _cached_properties(cls: type) -> tuple[str, ...]:
    """The names of the `cached_property` attributes of `cls` and its bases."""
    return tuple(
        name for k in cls.__mro__ for name, v in vars(k).items() if isinstance(v, cached_property)
    )

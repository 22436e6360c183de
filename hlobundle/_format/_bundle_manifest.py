"""Format 2.0's manifest (SPEC.md 2.8): several named functions over one set of files.

`BundleManifest` is what a 2.x `manifest.json` holds; each of its functions is checked, and
used, as the one-function `Manifest` of `_manifest` (`view`), so that everything that reads a
function reads the same model whatever the version. `minimum_version` gives the oldest format
version that can express a one-function bundle (SPEC.md 5).
"""

from __future__ import annotations

import json
from functools import cached_property
from typing import Literal

from pydantic import Field, field_validator, model_validator

from ._dtypes import SUB_BYTE_BITS
from ._fields import FUNCTION_FIELDS, SHARED_FIELDS
from ._manifest import (
    FORMAT,
    FORMAT_VERSION,
    MAX_FUNCTIONS,
    FileEntry,
    FunctionFields,
    Manifest,
    Provenance,
    RelPath,
    _Model,
    identifier,
)
from ._manifest_checks import check_identifier, check_unique, fields_of_2_2
from ._metadata import Metadata


class FunctionEntry(FunctionFields):
    """One function of a 2.0 bundle (SPEC.md 2.8): what a 1.x manifest holds for its one
    function, under a name."""

    name: str

    @field_validator("name")
    @classmethod
    def _identifier(cls, name: str) -> str:
        return check_identifier(name)


class BundleManifest(_Model):
    """`manifest.json` of a 2.0 bundle: several named functions over one set of files."""

    format: Literal["hlobundle"]
    format_version: str = Field(pattern=r"^2\.\d+$")
    default_function: str | None = None
    functions: list[FunctionEntry] = Field(min_length=1, max_length=MAX_FUNCTIONS)
    provenance: Provenance
    files: dict[RelPath, FileEntry]
    metadata: Metadata | None = None  # since 2.1 (SPEC.md 2.12)

    @model_validator(mode="after")
    def _consistent(self) -> BundleManifest:
        names = [f.name for f in self.functions]
        check_unique(names, "functions")
        if self.default_function is not None and self.default_function not in names:
            raise ValueError(f"default_function {self.default_function!r} is not among {names}")
        self.views  # noqa: B018  (each function validated as a manifest of its own, once)
        return self

    @cached_property
    def views(self) -> dict[str, Manifest]:
        """Each function as a manifest of its own (validated as one), by name, in order."""
        views = {}
        for i, f in enumerate(self.functions):
            data = {k: getattr(f, k) for k in FUNCTION_FIELDS}
            try:
                views[f.name] = Manifest.model_validate(
                    {
                        **data,
                        "format": self.format,
                        "format_version": self.format_version,
                        "function": f.name,
                        **{k: getattr(self, k) for k in SHARED_FIELDS},
                    },
                    strict=False,
                )
            except ValueError as e:  # pydantic's ValidationError is one
                raise ValueError(f"functions[{i}] ({f.name}): {_first_error(e)}") from None
        return views

    def view(self, name: str) -> Manifest:
        """Function `name` as a manifest of its own."""
        return self.views[name]

    def to_json(self) -> bytes:
        data = self.model_dump(mode="json", exclude_none=True)
        return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()


def functions_of(m: Manifest | BundleManifest) -> tuple[dict[str, Manifest], str | None]:
    """Each function's manifest by name, in manifest order, and the default function's name
    (a 1.x manifest's one function is its default)."""
    if isinstance(m, Manifest):
        return {m.function: m}, m.function
    return dict(m.views), m.default_function


def combine(
    views: list[Manifest], default: str | None, files: dict[str, FileEntry]
) -> BundleManifest:
    """A 2.x manifest of several functions, each given as a manifest of its own: 2.0, 2.1
    when a file has chunk digests (or another 2.1 field is used), 2.2 with `expected_from` or an XLA executable."""
    first = views[0]
    newer = any(e.chunks for e in files.values()) or first.metadata is not None
    newer = newer or any(v.independent_rows or v.platforms for v in views)
    newest = any(fields_of_2_2(v) for v in views)
    return BundleManifest(
        format=FORMAT,
        # 2.1 and 2.2 only for what needs them (SPEC.md 5, the oldest version that can)
        format_version=FORMAT_VERSION if newest else "2.1" if newer else "2.0",
        default_function=None if default is None else identifier(default),
        functions=[
            FunctionEntry(
                name=identifier(v.function), **{k: getattr(v, k) for k in FUNCTION_FIELDS}
            )
            for v in views
        ],
        provenance=first.provenance,
        files=files,
        metadata=first.metadata,
    )


def _first_error(e: ValueError) -> str:
    errors = getattr(e, "errors", None)
    if callable(errors):
        first = errors()[0]
        where = ".".join(map(str, first["loc"]))
        return f"{where + ': ' if where else ''}{first['msg']}"
    return str(e)


def minimum_version(m: Manifest) -> str:
    """The oldest format version that can express a one-function bundle (SPEC.md 5)."""
    if fields_of_2_2(m):
        return FORMAT_VERSION
    if m.metadata is not None or m.independent_rows is not None or m.platforms:
        return "2.1"
    if m.symbolic or m.constraints:
        return "2.0"
    if m.executables:
        return "1.3"
    if any(v.dtype in SUB_BYTE_BITS for v in m.tensors()):
        return "1.2"
    return "1.1" if m.batched is not None else "1.0"

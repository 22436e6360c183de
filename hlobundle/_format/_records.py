"""A validated manifest as plain records: what a bundle read from disk holds, without pydantic.

The models (`_manifest.py`, `_bundle_manifest.py`, `_metadata.py`) decide what a manifest may
say. A record holds what they made of it: it is built only from a model's `model_dump(mode=
"json")`, by the reader right after the models accepted the bytes, or from the verdict it
remembered for the same bytes (`_read/_manifest_records.py`), so that loading them again
imports no pydantic. A record has its model's fields, as attributes of the same values, and
its methods and properties (the mixins of `_fields.py`); `tests/test_records.py` proves it,
field by field, over every manifest the suite's cases hold.

Records are read-only. What a model offers beyond that (`model_dump`, `model_copy`,
`model_dump_json`, `to_json`) a record takes from its model, rebuilt from its dump on first
use (importing pydantic then); a record equals its model, and passing one where a model is
expected (`as_model`) gives the model.
"""

from __future__ import annotations

import importlib
from typing import Any, ClassVar

from ._fields import (
    FUNCTION_FIELDS,
    SHARED_FIELDS,
    BundleManifestMethods,
    DeviceMeshMethods,
    FunctionMethods,
    ManifestMethods,
)


class Record:
    """A model's fields as attributes. `_NESTED`: the fields that hold models, each with how
    (`one`, a `list` of, or a `dict` of) and the record class of that model."""

    MODEL: ClassVar[tuple[str, str]]  # the model's module (in `_format`) and class name
    _NESTED: ClassVar[dict[str, tuple[str, type[Record]]]] = {}

    def __init__(self, data: dict[str, Any], built: dict[str, Any] | None = None) -> None:
        """The record of a model whose dump is `data`; `built`: fields whose records exist."""
        d = self.__dict__
        d.update(data)  # the plain fields as they are: only nested models are made records
        for name, (how, cls) in self._NESTED.items():
            value = data.get(name)
            if value is None or built is not None and name in built:
                continue
            if how == "one":
                d[name] = cls(value)
            elif how == "list":
                d[name] = [cls(v) for v in value]
            else:
                d[name] = {k: cls(v) for k, v in value.items()}
        if built is not None:
            d.update(built)
        d["_dump"] = data

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).MODEL[1]} is read-only (its field {name!r})")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).MODEL[1]} is read-only (its field {name!r})")

    def __getattr__(self, name: str) -> Any:
        """What the model offers beyond its fields: from the model, rebuilt once."""
        if name.startswith("model_") or name == "to_json":
            return getattr(self.as_model(), name)
        raise AttributeError(f"{type(self).MODEL[1]} has no attribute {name!r}")

    def as_model(self) -> Any:
        """This record's model, validated from its dump (once: then kept)."""
        model = self.__dict__.get("_model")
        if model is None:
            module, cls = type(self).MODEL
            kind = getattr(importlib.import_module(f"hlobundle._format.{module}"), cls)
            model = self.__dict__["_model"] = kind.model_validate(self._dump)
        return model

    def __iter__(self) -> Any:
        """The fields, as `dict(model)` gives them."""
        return iter([(k, self.__dict__[k]) for k in self._dump])

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Record):
            return type(self) is type(other) and self._dump == other._dump
        if hasattr(type(other), "__pydantic_fields__"):  # a model: pydantic is imported
            return bool(self.as_model() == other)
        return NotImplemented

    # unhashable, as the models are (they hold lists)
    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={self.__dict__[k]!r}" for k in self._dump)
        return f"{type(self).MODEL[1]}({fields})"


def as_model(value: Any) -> Any:
    """`value`'s model where it is a record, else `value` (a model, or anything else)."""
    return value.as_model() if isinstance(value, Record) else value


class TensorRefRecord(Record):
    MODEL = ("_manifest", "TensorRef")


class MeshAxisRecord(Record):
    MODEL = ("_manifest", "MeshAxis")


class DeviceMeshRecord(DeviceMeshMethods, Record):
    MODEL = ("_manifest", "DeviceMesh")
    _NESTED = {"axes": ("list", MeshAxisRecord)}


class ArgumentRecord(Record):
    MODEL = ("_manifest", "Argument")
    _NESTED = {"value": ("one", TensorRefRecord)}


class ResultRecord(Record):
    MODEL = ("_manifest", "Result")
    _NESTED = {"expected": ("one", TensorRefRecord)}


class PortableArtifactRecord(Record):
    MODEL = ("_manifest", "PortableArtifact")


class ModuleRecord(Record):
    MODEL = ("_manifest", "Module")
    _NESTED = {"portable": ("one", PortableArtifactRecord)}


class BatchedModuleRecord(Record):
    MODEL = ("_manifest", "BatchedModule")
    _NESTED = {"portable": ("one", PortableArtifactRecord)}


class ExecutableRecord(Record):
    MODEL = ("_manifest", "Executable")


class ProvenanceRecord(Record):
    MODEL = ("_manifest", "Provenance")


class ChunksRecord(Record):
    MODEL = ("_manifest", "Chunks")


class FileEntryRecord(Record):
    MODEL = ("_manifest", "FileEntry")
    _NESTED = {"chunks": ("one", ChunksRecord)}


class IndependentRowsRecord(Record):
    MODEL = ("_manifest", "IndependentRows")


class ExpectedFromRecord(Record):
    MODEL = ("_manifest", "ExpectedFrom")


class MetadataRecord(Record):
    MODEL = ("_metadata", "Metadata")


_FUNCTION_NESTED: dict[str, tuple[str, type[Record]]] = {
    "arguments": ("list", ArgumentRecord),
    "results": ("list", ResultRecord),
    "module": ("one", ModuleRecord),
    "vjp": ("one", ModuleRecord),
    "batched": ("one", BatchedModuleRecord),
    "mesh": ("one", DeviceMeshRecord),
    "executables": ("list", ExecutableRecord),
    "independent_rows": ("one", IndependentRowsRecord),
    "expected_from": ("one", ExpectedFromRecord),
}
_BUNDLE_NESTED: dict[str, tuple[str, type[Record]]] = {
    "provenance": ("one", ProvenanceRecord),
    "files": ("dict", FileEntryRecord),
    "metadata": ("one", MetadataRecord),
}


class ManifestRecord(ManifestMethods, Record):
    MODEL = ("_manifest", "Manifest")
    _NESTED = {**_FUNCTION_NESTED, **_BUNDLE_NESTED}


class FunctionEntryRecord(FunctionMethods, Record):
    MODEL = ("_bundle_manifest", "FunctionEntry")
    _NESTED = _FUNCTION_NESTED


class BundleManifestRecord(BundleManifestMethods, Record):
    MODEL = ("_bundle_manifest", "BundleManifest")
    _NESTED = {"functions": ("list", FunctionEntryRecord), **_BUNDLE_NESTED}

    def __init__(self, data: dict[str, Any], built: dict[str, Any] | None = None) -> None:
        super().__init__(data, built)
        self.__dict__["views"] = {f.name: self._view(f) for f in self.functions}

    def _view(self, f: FunctionEntryRecord) -> ManifestRecord:
        """Function `f` as a manifest of its own, as `BundleManifest.views` makes it: its
        fields, and the bundle's, sharing their records."""
        data = {
            **{k: f._dump[k] for k in FUNCTION_FIELDS},
            "format": self.format,
            "format_version": self.format_version,
            "function": f.name,
            **{k: self._dump[k] for k in SHARED_FIELDS},
        }
        built = {k: f.__dict__[k] for k in FUNCTION_FIELDS}
        built.update((k, self.__dict__[k]) for k in SHARED_FIELDS)
        return ManifestRecord(data, built)


def manifest_record(dump: dict[str, Any], several: bool) -> Any:
    """The record of a validated manifest from its model's dump: a `BundleManifest`'s where
    `several`, else a `Manifest`'s."""
    return BundleManifestRecord(dump) if several else ManifestRecord(dump)

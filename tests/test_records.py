"""A read manifest as plain records (`_format/_records.py`, `_format/_fields.py`), and the
verdict that remembers one by content (`_read/_manifest_records.py`): the records are their
models, field by field, over every manifest the cases hold; a second read of the same bytes
imports no pydantic; and nothing but the same bytes, accepted by the same code, is ever
recalled."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import types
import typing
import warnings
from pathlib import Path

import pytest
from helpers import ROOT, edit_manifest
from pydantic import BaseModel

import hlobundle
from hlobundle._format import _bundle_manifest, _manifest, _metadata, _records
from hlobundle._format._errors import HloBundleWarning, ManifestError
from hlobundle._format._fields import FUNCTION_FIELDS
from hlobundle._format._manifest_json import parse_manifest
from hlobundle._read import _cache, _manifest_records

LENET = ROOT / "examples" / "lenet5.hlobundle"
CASES = ROOT / "hlobundle" / "conformance_cases"
MANIFESTS = sorted(
    [
        *CASES.glob("valid_*/**/manifest.json"),
        *(ROOT / "tests" / "corpus").glob("*/*/manifest.json"),
        *(ROOT / "examples").glob("*.hlobundle/manifest.json"),
    ]
)


def _with_mesh() -> bytes:
    """A 1.x manifest of a sharded function (no case holds a mesh)."""
    data = json.loads((ROOT / "tests/corpus/1.0/predict.hlobundle/manifest.json").read_text())
    data["mesh"] = {
        "axes": [{"name": "x", "size": 2}, {"name": "y", "size": 1}],
        "device_ids": [0, 1],
    }
    first = data["arguments"][0]
    first["sharding"] = [["x"]] + [[] for _ in first["shape"][1:]]
    return json.dumps(data).encode()


def _accepted() -> list[tuple[str, bytes]]:
    """Every manifest of the cases, the corpus and the examples that the models accept."""
    found = [(str(p.relative_to(ROOT).parent), p.read_bytes()) for p in MANIFESTS]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HloBundleWarning)  # a newer minor version's
        return [
            (name, raw) for name, raw in [*found, ("with a mesh", _with_mesh())] if _parses(raw)
        ]


def _parses(raw: bytes) -> bool:
    try:
        parse_manifest(raw)
    except ManifestError:
        return False
    return True


def _same(record, model, where: str = "manifest") -> None:
    """`record` is `model`: each field the same value, a nested model's as a record of it."""
    if isinstance(model, BaseModel):
        assert isinstance(record, _records.Record), where
        assert record.MODEL[1] == type(model).__name__, where
        assert list(record._dump) == list(type(model).model_fields), where
        for name in type(model).model_fields:
            _same(getattr(record, name), getattr(model, name), f"{where}.{name}")
    elif isinstance(model, list):
        assert isinstance(record, list) and len(record) == len(model), where
        for i, (r, m) in enumerate(zip(record, model, strict=True)):
            _same(r, m, f"{where}[{i}]")
    elif isinstance(model, dict):
        assert isinstance(record, dict) and list(record) == list(model), where
        for k in model:
            _same(record[k], model[k], f"{where}[{k!r}]")
    else:
        assert type(record) is type(model) and record == model, where


def _same_methods(record, model) -> None:
    """What the mixins of `_fields` give: the same answers on both."""
    if isinstance(model, _bundle_manifest.BundleManifest):
        assert list(record.views) == list(model.views)
        for name, view in model.views.items():
            _same(record.view(name), view, f"views[{name!r}]")
            _same_methods(record.view(name), view)
        return
    _same(record.tensors(), model.tensors(), "tensors()")
    assert record.symbolic is model.symbolic
    assert record.row_symbol == model.row_symbol
    assert list(record.arguments_by_name) == list(model.arguments_by_name)
    for a in model.arguments:
        _same(record.argument(a.name), a, f"argument({a.name!r})")
    if model.mesh is not None:
        assert record.mesh.size == model.mesh.size


ACCEPTED = _accepted()


def test_the_cases_hold_every_kind_of_field():
    """The comparison below meets every nested model: a corpus without, say, a mesh would
    leave its record unchecked."""
    seen: set[str] = set()

    def walk(model) -> None:
        if isinstance(model, BaseModel):
            seen.add(type(model).__name__)
            for name in type(model).model_fields:
                walk(getattr(model, name))
        elif isinstance(model, list):
            for m in model:
                walk(m)
        elif isinstance(model, dict):
            for m in model.values():
                walk(m)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HloBundleWarning)
        for _, raw in ACCEPTED:
            walk(parse_manifest(raw))
    assert seen == {cls.MODEL[1] for cls in _record_classes()}
    assert len(ACCEPTED) >= 50


@pytest.mark.parametrize(("name", "raw"), ACCEPTED, ids=[name for name, _ in ACCEPTED])
def test_a_record_is_its_model_field_by_field(name, raw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HloBundleWarning)
        model = parse_manifest(raw)
    several = isinstance(model, _bundle_manifest.BundleManifest)
    dump = json.loads(json.dumps(model.model_dump(mode="json")))  # as the cache keeps it
    record = _records.manifest_record(dump, several)
    _same(record, model)
    _same_methods(record, model)
    assert record == model and model == record
    assert record.to_json() == model.to_json()  # what a record takes from its model


def _record_classes() -> list[type[_records.Record]]:
    return [
        v
        for v in vars(_records).values()
        if isinstance(v, type) and issubclass(v, _records.Record) and v is not _records.Record
    ]


def _models_in(annotation) -> list[tuple[str, type]]:
    """The models an annotation holds, each with how: `one`, a `list` of or a `dict` of."""
    origin = typing.get_origin(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [("one", annotation)]
    if origin in (typing.Union, types.UnionType):
        return [m for a in typing.get_args(annotation) for m in _models_in(a)]
    if origin is list and _models_in(typing.get_args(annotation)[0]):
        return [("list", typing.get_args(annotation)[0])]
    if origin is dict and _models_in(typing.get_args(annotation)[1]):
        return [("dict", typing.get_args(annotation)[1])]
    return []


@pytest.mark.parametrize("cls", _record_classes(), ids=lambda c: c.__name__)
def test_a_record_class_builds_records_of_every_nested_model(cls):
    """Each record class's table of nested fields is what its model's annotations say, so a
    field that holds a model never stays a dict in a record."""
    module = {"_manifest": _manifest, "_bundle_manifest": _bundle_manifest, "_metadata": _metadata}
    model = getattr(module[cls.MODEL[0]], cls.MODEL[1])
    want = {}
    for name, field in model.model_fields.items():
        found = _models_in(field.annotation)
        if found:
            (how, nested_model), *_ = found
            want[name] = (how, nested_model.__name__)
    got = {name: (how, c.MODEL[1]) for name, (how, c) in cls._NESTED.items()}
    assert got == want


def test_a_record_is_read_only_and_gives_its_model_where_one_is_expected():
    view = _manifest_records.read_manifest(LENET)[0]  # a 1.x manifest: its function's
    with pytest.raises(AttributeError, match="read-only"):
        view.function = "other"
    with pytest.raises(AttributeError, match="read-only"):
        view.arguments[0].name = "other"
    # a writer's model takes records for its fields (validated again)
    moved = view.arguments[0].model_copy(update={"name": "renamed"})
    assert isinstance(moved, _manifest.Argument) and moved.name == "renamed"
    fields = {k: getattr(view, k) for k in FUNCTION_FIELDS}  # records, as `combine` passes
    entry = _bundle_manifest.FunctionEntry(name="again", **fields)
    assert isinstance(entry.module, _manifest.Module) and entry.arguments == view.arguments
    rebuilt = _manifest.Manifest.model_validate(view)
    assert rebuilt == view


def _fresh(code: str, cache: Path, **env: str) -> dict:
    """`code` in a fresh process with its own cache root; what it prints, as JSON."""
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "HLOBUNDLE_CACHE_DIR": str(cache), **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(out.stdout.splitlines()[-1])


RUN = """
import contextlib, io, json, sys
import hlobundle
from hlobundle._cli._main import main
ran = {{}}
for backend in {backends!r}:
    b = hlobundle.load({bundle!r})
    shape = list(b.tensor(b.arguments[0].name).shape)
    with contextlib.redirect_stdout(io.StringIO()):
        code = main(["run", {bundle!r}, "--backend", backend])
    ran[backend] = {{"pydantic": "pydantic" in sys.modules, "shape": shape, "code": code}}
print(json.dumps(ran))
"""


@pytest.mark.slow
@pytest.mark.subprocess
def test_a_second_load_and_run_of_the_same_bytes_imports_no_pydantic(tmp_path):
    """Once a manifest's bytes are remembered, loading them and running the bundle on any
    backend imports no pydantic (with the models, about a tenth of `hlobundle run` of the LeNet):
    what running imports needs the models only for their types. The backends run one after
    another in one fresh process, each after a load, and each is asked after its run."""
    from hlobundle._run import _backends

    bundle = tmp_path / "b.hlobundle"
    shutil.copytree(LENET, bundle)
    on_xla = RUN.format(bundle=str(bundle), backends=["xla"])
    first = _fresh(on_xla, tmp_path / "cache")
    off = _fresh(on_xla, tmp_path / "cache", HLOBUNDLE_NO_CACHE="1")
    assert first == off == {"xla": {"pydantic": True, "shape": [6], "code": 0}}, (first, off)
    backends = [k for k in ("xla", "iree", "enzyme") if _backends.kind(k).available()]
    again = _fresh(RUN.format(bundle=str(bundle), backends=backends), tmp_path / "cache")
    assert list(again) == backends
    for backend, ran in again.items():
        assert ran == {"pydantic": False, "shape": [6], "code": 0}, (backend, ran)


def test_other_bytes_are_validated_again_whatever_was_remembered(tmp_path):
    """The verdict is for the bytes it was made from: an edited manifest is checked in full,
    and refused, though the bundle's earlier bytes were remembered as accepted."""
    bundle = tmp_path / "b.hlobundle"
    shutil.copytree(LENET, bundle)
    hlobundle.load(bundle)
    hlobundle.load(bundle)  # recalled
    edit_manifest(bundle, lambda m: m["arguments"][0].update(dtype="float17"))
    with pytest.raises(ManifestError, match="dtype"):
        hlobundle.load(bundle)


def test_an_entry_that_is_not_a_dump_we_wrote_is_a_miss(tmp_path, monkeypatch):
    """Junk stored under the right key, well named (so `_cache` reads it), is not recalled:
    the models validate the bytes again, and the load succeeds."""
    raw = (LENET / "manifest.json").read_bytes()
    digest = __import__("hashlib").sha256(raw).hexdigest()
    where = _cache.directory(_manifest_records.MANIFESTS)
    key = _manifest_records._key(digest)
    validated = []
    real = _manifest_records._validated
    monkeypatch.setattr(_manifest_records, "_validated", lambda *a: validated.append(1) or real(*a))
    junk_entries = (
        b"[]",
        b'{"several": 1, "dump": {}}',
        b'{"several": false, "dump": []}',
        b'{"several": false, "dump": {}}',  # a dict, without the model's fields
        b"{",
    )
    for junk in junk_entries:
        for old in _cache.shard(where, key).glob(f"{key}.*"):
            old.unlink()
        _cache.write(where, key, junk, ".json")
        assert _cache.read(where, key, ".json") == junk
        record = _manifest_records.parse(raw, digest, "manifest.json")
        assert record.arguments[0].name == "params_conv1_b"
    assert len(validated) == len(junk_entries)


def test_a_manifest_read_tolerantly_warns_on_every_read(tmp_path):
    """A newer minor version's unknown fields are dropped after a warning; such a manifest is
    never remembered, so no read is silent."""
    bundle = tmp_path / "newer.hlobundle"
    shutil.copytree(CASES / "valid_newer_minor_version" / "bundle", bundle)
    for _ in range(2):
        with pytest.warns(HloBundleWarning, match="newer"):
            _manifest_records.read_manifest(bundle)


def test_the_fields_a_remembered_dump_must_have_are_the_models():
    assert FUNCTION_FIELDS == tuple(_manifest.FunctionFields.model_fields)
    assert _manifest_records._MANIFEST_FIELDS == tuple(_manifest.Manifest.model_fields)
    assert _manifest_records._BUNDLE_FIELDS == tuple(_bundle_manifest.BundleManifest.model_fields)


def test_the_key_holds_the_interpreter(monkeypatch):
    """`str.isidentifier`, which the models' name checks call, follows the interpreter's
    Unicode tables: Python 3.12 (Unicode 15.0) takes `x` + U+1E030 as a name, 3.11 (14.0) does
    not. A cache is shared by every Python of the user, so a verdict one interpreter made is not
    another's (a helper's review found this: 3.11 loaded what its models refuse)."""
    import unicodedata

    from hlobundle._read import _modules

    def key() -> str:
        _modules.code_digest.cache_clear()
        _manifest_records._code_digest.cache_clear()
        return _manifest_records._key("0" * 64)

    before = key()
    monkeypatch.setattr(unicodedata, "unidata_version", "15.0.0")
    try:
        assert key() != before
        monkeypatch.undo()
        monkeypatch.setattr(sys, "version", "3.12.1 (main) [GCC]")
        assert key() != before
    finally:
        monkeypatch.undo()
        key()


def test_a_loaded_bundle_s_metadata_is_taken_by_the_writers():
    """`Bundle.metadata` is a record: a writer's `metadata` option takes it as its model."""
    from hlobundle._write._card import metadata_of

    loaded = hlobundle.load(CASES / "valid_metadata" / "bundle").metadata
    assert isinstance(loaded, _records.Record)
    assert metadata_of(loaded) == loaded and isinstance(metadata_of(loaded), _metadata.Metadata)


def test_with_the_cache_off_no_key_is_made(monkeypatch):
    """The key hashes the validating code's files: not needed when nothing is remembered."""
    monkeypatch.setenv("HLOBUNDLE_NO_CACHE", "1")
    made = []
    monkeypatch.setattr(_manifest_records, "_key", lambda d: made.append(d) or "0" * 64)
    _manifest_records.read_manifest(LENET)
    assert not made

"""Manifest validation and the version policy."""

from __future__ import annotations

import json
import re

import pytest
from helpers import ROOT, copy_of, edit_manifest, small_bundle

import hlobundle
from hlobundle._format._manifest import MAX_MANIFEST_BYTES


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    return small_bundle(tmp_path_factory.mktemp("manifest"))


@pytest.fixture
def bundle(written, tmp_path):
    """The module's bundle, each test's own copy to edit."""
    return copy_of(written, tmp_path)


def test_unknown_major_version_is_refused(bundle):
    edit_manifest(bundle, lambda m: m.update(format_version="3.0"))
    with pytest.raises(
        hlobundle.errors.VersionError,
        match=r"format_version '3.0' is not readable by this reader, which reads major versions \[1, 2\]",
    ) as e:
        hlobundle.load(bundle)
    assert e.value.code == "VERSION_UNSUPPORTED" and e.value.field == "format_version"


def test_newer_minor_version_warns_and_ignores_new_fields(bundle):
    def edit(m):
        m["format_version"] = "1.7"
        m["future_field"] = {"anything": 1}
        m["arguments"][0]["future_flag"] = True

    edit_manifest(bundle, edit)
    with pytest.warns(
        hlobundle.HloBundleWarning,
        match="format_version 1.7 is newer than this reader's 1.3",
    ):
        b = hlobundle.load(bundle)
    b.verify()


def test_unknown_field_in_current_version_is_refused(bundle):
    edit_manifest(bundle, lambda m: m.update(surprise=1))
    with pytest.raises(
        hlobundle.errors.ManifestError,
        match=r"manifest field surprise: Extra inputs are not permitted",
    ) as e:
        hlobundle.load(bundle)
    assert e.value.field == "surprise"


def test_wrong_format_name(bundle):
    edit_manifest(bundle, lambda m: m.update(format="onnx"))
    with pytest.raises(hlobundle.errors.ManifestError, match="expected format = 'hlobundle'"):
        hlobundle.load(bundle)


@pytest.mark.parametrize(
    ("edit", "field", "message"),
    [
        (lambda m: m["arguments"][1].update(name="x"), None, "duplicate arguments name 'x'"),
        (
            lambda m: m["arguments"][0].update(name="not-an-id"),
            "arguments[0].name",
            "is not a Python identifier",
        ),
        (
            lambda m: m["arguments"][0].update(name="class"),
            "arguments[0].name",
            "is not a Python identifier",
        ),
        (
            lambda m: m["arguments"][0].update(dtype="float128"),
            "arguments[0].dtype",
            "Input should be 'bool'",
        ),
        (
            lambda m: m["arguments"][0].update(shape=[-1, 3]),
            "arguments[0].shape[0]",
            "greater than or equal to 0",
        ),
        (
            lambda m: m["arguments"][0].update(layout="diagonal"),
            "arguments[0].layout",
            "Input should be 'row_major'",
        ),
        (
            lambda m: m["results"][0].update(aliases=9),
            None,
            "results[0].aliases = 9 but there are 2 arguments",
        ),
        (
            lambda m: m["files"]["module.mlir"].update(sha256="xyz"),
            "files.module.mlir.sha256",
            "should match pattern",
        ),
    ],
)
def test_invalid_fields(bundle, edit, field, message):
    edit_manifest(bundle, edit)
    with pytest.raises(hlobundle.errors.ManifestError, match=re.escape(message)) as e:
        hlobundle.load(bundle)
    assert e.value.code == "MANIFEST_INVALID"
    if field:
        assert e.value.field == field


def test_invalid_utf8_and_json(bundle):
    path = bundle / "manifest.json"
    path.write_bytes(b'{"format": "\xff"}')
    with pytest.raises(hlobundle.errors.ManifestError, match="manifest is not UTF-8"):
        hlobundle.load(bundle)
    path.write_bytes(b'{"format": ')
    with pytest.raises(hlobundle.errors.ManifestError, match="manifest is not JSON"):
        hlobundle.load(bundle)
    path.write_bytes(b"[1, 2]")
    with pytest.raises(
        hlobundle.errors.ManifestError, match="manifest must be a JSON object, got list"
    ):
        hlobundle.load(bundle)


def _function(m: dict) -> dict:
    return m["functions"][0] if "functions" in m else m


@pytest.mark.parametrize(
    "edit",
    [
        lambda m: _function(m).update(input_tree={"\ud800": _function(m)["input_tree"]}),
        lambda m: m["provenance"].update(producer="jax\udfff"),  # a plain string
    ],
    ids=["tree key", "string"],
)
def test_a_lone_surrogate_is_a_coded_refusal(bundle, edit):  # a tree key: of an Any field
    """JSON may escape half of a UTF-16 pair (`\\ud800`), which no UTF-8 text holds: the
    reader refuses it as the bytes are decoded (before, a tree key was a traceback where the
    models' dump encoded it, and a string was read as it came)."""
    original = (bundle / "manifest.json").read_text()
    data = json.loads(original)
    edit(data)
    (bundle / "manifest.json").write_text(json.dumps(data))  # ASCII, with the escape
    with pytest.raises(hlobundle.errors.ManifestError, match="lone surrogate") as e:
        hlobundle.load(bundle)
    assert e.value.code == "MANIFEST_INVALID" and e.value.path == "manifest.json"
    data = json.loads(original)
    data["provenance"]["producer"] = "jax \U0001f600"  # a whole pair, escaped: a character
    (bundle / "manifest.json").write_text(json.dumps(data))
    assert hlobundle.load(bundle).manifest.provenance.producer == "jax \U0001f600"


def test_oversized_manifest(bundle):
    path = bundle / "manifest.json"
    path.write_bytes(b" " * (MAX_MANIFEST_BYTES + 1))
    with pytest.raises(
        hlobundle.errors.ManifestError, match=r"manifest is \d+ bytes; the limit is 16777216"
    ) as e:
        hlobundle.load(bundle)
    assert e.value.code == "MANIFEST_TOO_LARGE"


def test_manifest_json_is_canonical(bundle):
    raw = (bundle / "manifest.json").read_bytes()
    m = hlobundle.load(bundle).manifest
    assert m.to_json() == raw


def test_a_copy_of_a_2_0_manifest_has_its_own_views(tmp_path):
    from hlobundle._format._manifest_json import parse_manifest

    m = parse_manifest((ROOT / "examples" / "lm.hlobundle" / "manifest.json").read_bytes())
    assert list(m.views) == ["prefill", "decode"]
    one = m.model_copy(update={"functions": m.functions[1:], "default_function": None})
    assert list(one.views) == ["decode"] and list(m.views) == ["prefill", "decode"]


def test_an_argument_is_found_by_name_and_a_copy_finds_its_own(bundle):
    """`Manifest.argument` looks names up in a mapping made once (a scan of the list per lookup
    made reading every tensor quadratic); a copy with other arguments makes its own."""
    m = hlobundle.load(bundle).manifest
    first = m.arguments[0]
    assert m.argument(first.name) is first
    with pytest.raises(KeyError):
        m.argument("no_such_argument")
    renamed = first.model_copy(update={"name": "renamed"})
    copy = m.model_copy(update={"arguments": [renamed, *m.arguments[1:]]})
    assert copy.argument("renamed") is renamed
    with pytest.raises(KeyError):
        copy.argument(first.name)
    assert m.argument(first.name) is first


def test_a_copy_with_a_symbolic_argument_is_symbolic(bundle):
    """`symbolic` is computed once per model (a runner asked it once per argument); a copy
    with other shapes computes its own."""
    m = hlobundle.load(bundle).manifest
    assert not m.symbolic
    first = m.arguments[0]
    batched = first.model_copy(update={"shape": ["b", *first.shape[1:]]})
    assert m.model_copy(update={"arguments": [batched, *m.arguments[1:]]}).symbolic
    assert not m.symbolic


def test_a_name_that_cannot_be_a_key_names_no_argument(bundle):
    """Looking an argument up in the cached mapping must refuse a bad name as the scan did: a
    list is no argument's name (a `KeyError` from `argument`, an `InputError` from the bundle),
    not a `TypeError` from hashing it."""
    b = hlobundle.load(bundle)
    with pytest.raises(KeyError):
        b.manifest.argument(["x"])  # type: ignore[arg-type]
    with pytest.raises(hlobundle.InputError, match=r"no argument named \['x'\]"):
        b.tensor(["x"])  # type: ignore[arg-type]
    with pytest.raises(hlobundle.InputError, match=r"argument \['x'\] has no stored value"):
        b.tensor_sha256(["x"])  # type: ignore[arg-type]


def test_a_manifest_iterates_over_its_fields_only(bundle):
    """`dict(model)` (pydantic's iteration) gives the fields: the cached `symbolic` and
    `arguments_by_name` live in the instance's `__dict__` but are not fields, and a manifest
    made again from `dict(m)` must not be refused for them as extra inputs."""
    from hlobundle._format._manifest import Manifest
    from hlobundle._format._manifest_json import parse_manifest

    m = hlobundle.load(bundle).manifest
    m.argument(m.arguments[0].name)
    assert not m.symbolic
    assert list(dict(m)) == list(Manifest.model_fields)
    assert Manifest(**dict(m)) == m
    lm = parse_manifest((ROOT / "examples" / "lm.hlobundle" / "manifest.json").read_bytes())
    assert "views" not in dict(lm) and type(lm)(**dict(lm)) == lm


def test_a_read_manifest_is_the_model_and_read_only(bundle):
    """One manifest type (issue 69): what `load` and `inspect` hold is the pydantic model, its
    nested values the nested models, frozen; and a 2.0 bundle's views and metadata are too."""
    from pydantic import ValidationError

    from hlobundle._format._bundle_manifest import BundleManifest
    from hlobundle._format._manifest import Argument, Manifest, TensorRef
    from hlobundle._format._metadata import Metadata
    from hlobundle._read._inspect import summarize

    for m in (hlobundle.load(bundle).manifest, summarize(bundle).bundle_manifest):
        assert type(m) is Manifest and type(m.arguments[0]) is Argument
        assert type(m.arguments[0].value) is TensorRef
        with pytest.raises(ValidationError, match="frozen"):
            m.arguments[0].name = "other"  # type: ignore[misc]
    several = hlobundle.load(ROOT / "hlobundle" / "conformance_cases" / "valid_metadata" / "bundle")
    assert type(several.bundle_manifest) is BundleManifest
    assert type(several.manifest) is Manifest and type(several.metadata) is Metadata

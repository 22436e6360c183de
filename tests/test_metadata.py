"""The metadata of a model card (format 2.1, SPEC.md 2.12): the model, its bounds, the writers'
`metadata=` and `card=`, the `README.md` card, and the Hugging Face card header both ways."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import ROOT, cli
from pydantic import ValidationError

import hlobundle
from hlobundle._format import _card
from hlobundle._format._bundle_manifest import BundleManifest
from hlobundle._format._metadata import MAX_LICENSE_CHARS, Metadata
from hlobundle._oci import _artifact
from hlobundle._write._card import read_card
from hlobundle.errors import HashMismatchError, InputError

LENET = ROOT / "examples" / "lenet5.hlobundle" / "module.mlir"

FULL = {
    "description": "A LeNet-5.\nTrained on MNIST.",
    "license": "Apache-2.0",
    "authors": ["Ada Lovelace", "Bob"],
    "source_url": "https://example.org/lenet",
    "tags": ["vision", "mnist"],
    "citation": "@article{lecun1998, title={Gradient-based learning}}",
    "framework": "Lux",
    "base_model": "lenet-5",
}


def _tanh(x):
    import jax.numpy as jnp

    return jnp.tanh(x)


@pytest.fixture(scope="module")
def carded(tmp_path_factory):
    out = tmp_path_factory.mktemp("card") / "t.hlobundle"
    return hlobundle.export(_tanh, np.ones((2, 3), np.float32), out=out, metadata=FULL)


def test_the_license_is_an_spdx_expression_in_its_canonical_spelling():
    assert Metadata(license="mit or apache-2.0").license == "MIT OR Apache-2.0"
    with pytest.raises(ValidationError, match="Unknown license: 'use-it-at-midnight'"):
        Metadata(license="Use-it-at-midnight")


def test_a_long_license_expression_is_refused_before_it_is_parsed():
    bomb = " OR ".join(["MIT"] * 100)  # a valid expression, 696 characters
    assert len(bomb) > MAX_LICENSE_CHARS
    with pytest.raises(ValidationError, match="license is 696 characters"):
        Metadata(license=bomb)


def test_a_deeply_nested_license_expression_is_refused():
    deep = "(" * 6 + "MIT" + ")" * 6  # packaging's own limit is far deeper
    with pytest.raises(ValidationError, match="nests parentheses 6 deep"):
        Metadata(license=deep)


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"authors": ["Ada\x1b[31m"]}, "authors.0"),
        ({"tags": ["a\u202eb"]}, "tags.0"),
        ({"tags": ["x", "x"]}, "tags"),
        ({"source_url": "javascript:alert(1)"}, "source_url"),
        ({"description": "x" * 8193}, "description"),
        ({"tags": [f"t{i}" for i in range(65)]}, "tags"),
        ({"card": "LICENSE"}, "card"),
    ],
)
def test_every_field_is_bounded_and_has_no_control_characters(fields, where):
    with pytest.raises(ValidationError) as e:
        Metadata(**fields)
    assert ".".join(map(str, e.value.errors()[0]["loc"])) == where


def test_export_writes_the_metadata_and_a_readme_card_as_format_2_1(carded):
    manifest = json.loads((carded / "manifest.json").read_text())
    assert manifest["format_version"] == "2.1"
    assert manifest["metadata"] == {**FULL, "card": "README.md"}
    assert "README.md" in manifest["files"]
    b = hlobundle.load(carded)
    assert b.metadata == Metadata(**FULL, card="README.md")
    card = (carded / "README.md").read_text()
    assert card.startswith("---\n") and "license: apache-2.0\n" in card and "# _tanh" in card


def test_the_card_is_a_listed_file_whose_change_is_refused(carded, tmp_path):
    import shutil

    copy = tmp_path / "c.hlobundle"
    shutil.copytree(carded, copy)
    (copy / "README.md").write_text((copy / "README.md").read_text().replace("apache", "apach3"))
    with pytest.raises(HashMismatchError, match="README.md"):
        hlobundle.load(copy).verify()


def test_metadata_is_not_in_the_fingerprint(carded, tmp_path):
    plain = hlobundle.export(_tanh, np.ones((2, 3), np.float32), out=tmp_path / "p.hlobundle")
    assert hlobundle.load(plain).fingerprint() == hlobundle.load(carded).fingerprint()


def test_a_2_0_manifest_with_metadata_is_refused(carded):
    data = json.loads((carded / "manifest.json").read_text())
    data["format_version"] = "2.0"
    with pytest.raises(ValidationError, match="metadata needs format_version 2.1"):
        BundleManifest.model_validate(data)


def test_metadata_card_names_a_listed_file(carded):
    data = json.loads((carded / "manifest.json").read_text())
    del data["files"]["README.md"]
    with pytest.raises(ValidationError, match="metadata.card names 'README.md'"):
        BundleManifest.model_validate(data)


def test_the_writers_refuse_bad_metadata_with_the_field(tmp_path):
    with pytest.raises(InputError, match="metadata: license: ") as e:
        hlobundle.export(
            _tanh, np.ones(2, np.float32), out=tmp_path / "b", metadata={"license": "Nope"}
        )
    assert e.value.field == "metadata.license"
    with pytest.raises(InputError, match="metadata must be a mapping"):
        hlobundle.export(_tanh, np.ones(2, np.float32), out=tmp_path / "b", metadata="MIT")


def test_pack_takes_the_metadata_flags(tmp_path):
    out = tmp_path / "l.hlobundle"
    flags = ["--license", "mit", "--tag", "a", "--tag", "b", "--author", "Ada"]
    done = cli("pack", LENET, "-o", out, *flags, "--framework", "Lux")
    assert done.returncode == 0, done.stderr
    assert hlobundle.load(out).metadata == Metadata(
        license="MIT", tags=["a", "b"], authors=["Ada"], framework="Lux", card="README.md"
    )
    shown = cli("inspect", out).stdout
    assert "license   MIT" in shown and "tags      a, b" in shown


def test_pack_refuses_a_bad_license_flag_with_exit_1(tmp_path):
    done = cli("pack", LENET, "-o", tmp_path / "x", "--license", "MIT OR Nope")
    assert done.returncode == 1 and "[INPUT_INVALID]" in done.stderr
    assert "Unknown license: 'nope'" in done.stderr


HF_CARD = """---
license: other
license_name: MIT OR Apache-2.0
library_name: Lux
tags:
- vision
base_model:
- lenet-5
pipeline_tag: image-classification
---

# My LeNet

It classifies digits.
"""


def test_a_hugging_face_card_gives_the_metadata_and_its_text(tmp_path):
    card = tmp_path / "README.md"
    card.write_text(HF_CARD)
    out = hlobundle.export(
        _tanh,
        np.ones(2, np.float32),
        out=tmp_path / "c.hlobundle",
        card=card,
        metadata={"tags": ["digits"]},  # the option's own fields win over the card's
    )
    assert hlobundle.load(out).metadata == Metadata(
        license="MIT OR Apache-2.0",
        framework="Lux",
        tags=["digits"],
        base_model="lenet-5",
        card="README.md",
    )
    assert (out / "README.md").read_text().endswith("# My LeNet\n\nIt classifies digits.\n")


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("---\na: &x [1]\nb: *x\n---\n", "aliases"),
        ("---\n- a list\n---\n", "not a mapping"),
        ("---\nlicense: MIT\n", "no closing ---"),
        ("---\nlicense: [unclosed\n---\n", "not valid YAML"),
    ],
)
def test_a_hostile_card_header_is_refused(tmp_path, text, why):
    card = tmp_path / "README.md"
    card.write_text(text)
    with pytest.raises(InputError, match=why):
        read_card(card)


def test_a_card_larger_than_its_limit_is_refused_unread(tmp_path):
    card = tmp_path / "README.md"
    with open(card, "wb") as f:
        f.truncate((1 << 20) + 1)
    with pytest.raises(InputError, match="the model card"):
        read_card(card)


@pytest.mark.slow
def test_the_card_header_round_trips_through_hugging_face_s_model_card(carded):
    hub = pytest.importorskip("huggingface_hub", reason="the dev extra installs huggingface_hub")
    text = (carded / "README.md").read_text()
    parsed = hub.ModelCard(text).data.to_dict()  # offline: a card parsed from its text
    assert (
        Metadata(**_card.from_card_data(parsed), card="README.md")
        == hlobundle.load(carded).metadata
    )
    data = hub.ModelCardData(license="mit", library_name="Lux", tags=["vision"])
    made = hub.ModelCard(f"---\n{data.to_yaml()}\n---\n\n# A model\n")
    assert Metadata(**_card.from_card_data(made.data.to_dict())) == Metadata(
        license="MIT", framework="Lux", tags=["vision"]
    )


def test_push_s_modelpack_config_carries_the_metadata():
    config = json.loads(_artifact.config("m", "2.1", [], Metadata(**FULL)))
    assert config["descriptor"] == {
        "name": "m",
        "version": "2.1",
        "description": FULL["description"],
        "authors": FULL["authors"],
        "sourceURL": FULL["source_url"],
        "licenses": ["Apache-2.0"],
    }


def test_diff_shows_a_metadata_change(carded, tmp_path):
    other = hlobundle.export(
        _tanh, np.ones((2, 3), np.float32), out=tmp_path / "o", metadata={**FULL, "license": "MIT"}
    )
    done = cli("diff", carded, other)
    assert done.returncode == 0  # the same computation: equal fingerprints
    assert 'metadata metadata.license: "Apache-2.0" -> "MIT"' in done.stdout


def test_a_card_s_header_is_bounded_and_a_bom_and_a_set_are_read_as_expected(tmp_path):
    card = tmp_path / "README.md"
    card.write_text("---\ndescription: " + "x" * (70 << 10) + "\n---\n")
    with pytest.raises(InputError, match="its YAML header is 71,694 characters"):
        read_card(card)
    card.write_text("\ufeff---\nlicense: mit\ntags: !!set {b: null, a: null}\n---\n# M\n")
    assert read_card(card) == ({"license": "mit", "tags": ["a", "b"]}, "# M\n")


def test_pack_s_metadata_flags_are_the_model_s_fields():
    from hlobundle._write._options import METADATA_FIELDS

    assert METADATA_FIELDS == tuple(f for f in Metadata.model_fields if f != "card")

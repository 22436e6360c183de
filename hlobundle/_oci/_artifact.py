"""A bundle as an OCI artifact of the CNCF ModelPack spec (docs/distribution.md, "The
artifact"): an image manifest of artifactType `application/vnd.cncf.model.manifest.v1+json`,
a ModelPack config built from the bundle's manifest, and one uncompressed layer per listed file
and one for `manifest.json`, each titled with its path, so that `oras pull` rebuilds the
directory. `model.sig` is no layer: it travels as a referrer (`_referrers`).

Reading one back is tolerant of who pushed it (oras' own layers are `...image.layer.v1.tar`):
the layers' titles and digests are what count, and the bundle's manifest is checked against them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from .._format import _paths
from .._format._errors import ArtifactInvalidError, RegistryLimitError, UnsafePathError
from .._format._manifest import MANIFEST_NAME
from .._format._metadata import Metadata
from ._client import INDEX, MANIFEST, MAX_MANIFEST_BYTES

ARTIFACT_TYPE = "application/vnd.cncf.model.manifest.v1+json"
CONFIG_TYPE = "application/vnd.cncf.model.config.v1+json"
IMAGE_CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"  # a container image's (`_image`)
WEIGHT = "application/vnd.cncf.model.weight.v1.raw"
WEIGHT_CONFIG = "application/vnd.cncf.model.weight.config.v1.raw"
CODE = "application/vnd.cncf.model.code.v1.raw"
DOC = "application/vnd.cncf.model.doc.v1.raw"
DATASET = "application/vnd.cncf.model.dataset.v1.raw"
TITLE = "org.opencontainers.image.title"  # oras' name for a layer's file
FILEPATH = "org.cncf.model.filepath"  # ModelPack's
FORMAT_VERSION = "dev.hlobundle.format_version"
MAX_LAYERS = 10_000
MAX_CONFIG_BYTES = MAX_MANIFEST_BYTES
EXAMPLES = ("inputs", "expected")  # stored example inputs and expected outputs: a data set


def media_type(name: str) -> str:
    """The ModelPack layer type of a bundle's file: its manifest (the weights' config), tensor
    files (weights; the stored examples a data set), module and executable files (code), text."""
    path = PurePosixPath(name)
    if name == MANIFEST_NAME:
        return WEIGHT_CONFIG
    if path.suffix == ".safetensors":
        return DATASET if path.stem.startswith(EXAMPLES) else WEIGHT
    if path.suffix in (".mlir", ".mlirbc", ".vmfb") or path.parts[0] == "compiled":
        return CODE
    if path.suffix in (".md", ".txt") or path.name.startswith("LICENSE"):
        return DOC
    return WEIGHT_CONFIG


def layer(name: str, size: int, sha256: str) -> dict[str, Any]:
    return {
        "mediaType": media_type(name),
        "digest": f"sha256:{sha256}",
        "size": size,
        "annotations": {TITLE: name, FILEPATH: name},
    }


def config(
    name: str,
    format_version: str,
    layers: list[dict[str, Any]],
    metadata: Metadata | None = None,
) -> bytes:
    """The ModelPack config: the model's name, its format, what its metadata says (SPEC.md
    2.12) in ModelPack's descriptor fields, and the layers' digests (raw layers: a layer's
    DiffID is its digest). No time stamp: one bundle, one artifact digest."""
    document = {
        "descriptor": {"name": name, "version": format_version, **descriptor(metadata)},
        "config": {"format": "hlobundle"},
        "modelfs": {"type": "layers", "diff_ids": [entry["digest"] for entry in layers]},
    }
    return canonical(document)


def descriptor(metadata: Metadata | None) -> dict[str, Any]:
    """ModelPack's descriptor fields that the metadata gives: `description`, `authors`,
    `sourceURL`, `licenses` (the SPDX expression, one entry)."""
    if metadata is None:
        return {}
    fields = {
        "description": metadata.description,
        "authors": metadata.authors,
        "sourceURL": metadata.source_url,
        "licenses": [metadata.license] if metadata.license else None,
    }
    return {k: v for k, v in fields.items() if v is not None}


def manifest(
    config_blob: bytes, config_digest: str, layers: list[dict[str, Any]], format_version: str
) -> bytes:
    document = {
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "artifactType": ARTIFACT_TYPE,
        "config": {"mediaType": CONFIG_TYPE, "digest": config_digest, "size": len(config_blob)},
        "layers": layers,
        "annotations": {FORMAT_VERSION: format_version},
    }
    return canonical(document)


def canonical(document: Any) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True)
class Layer:
    """A layer of a pulled artifact: the file it is (its checked title), digest and size."""

    path: str
    digest: str
    size: int


@dataclass(frozen=True)
class Artifact:
    """What a pulled manifest says: the config's descriptor (if ModelPack's) and the layers."""

    config: dict[str, Any] | None
    layers: dict[str, Layer]

    @property
    def manifest_layer(self) -> Layer:
        return self.layers[MANIFEST_NAME]


def parse(raw: bytes, media_type_said: str, ref: str, digest: str) -> Artifact:
    """Check a pulled manifest's bytes: an OCI image manifest whose layers are titled files
    (safe, distinct paths, uncompressed, bounded in number), one of them `manifest.json`."""
    try:
        document = json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise _invalid(f"the manifest is not JSON ({str(e)[:100]})", ref, digest) from None
    if not isinstance(document, dict):
        raise _invalid("the manifest is not a JSON object", ref, digest)
    kind = document.get("mediaType", media_type_said)
    if kind == INDEX or "manifests" in document:
        raise _invalid("it is an image index, not one artifact's manifest", ref, digest)
    if kind != MANIFEST or document.get("schemaVersion") != 2:
        raise _invalid(f"its media type is {str(kind)[:100]!r}, not {MANIFEST}", ref, digest)
    layers = document.get("layers")
    if not isinstance(layers, list):
        raise _invalid("the manifest has no list of layers", ref, digest)
    if len(layers) > MAX_LAYERS:
        raise RegistryLimitError(
            f"the manifest has {len(layers)} layers; the limit is {MAX_LAYERS}",
            ref=ref,
            digest=digest,
        )
    if _is_image(document, layers):
        raise _invalid(
            "it is a container image, as `hlobundle push --image` writes for KServe; pull the "
            "artifact `hlobundle push` wrote without --image",
            ref,
            digest,
        )
    found: dict[str, Layer] = {}
    for index, entry in enumerate(layers):
        checked = _layer(entry, index, ref, digest)
        if checked.path in found:
            raise _invalid(f"two layers are titled {checked.path!r}", ref, digest)
        found[checked.path] = checked
    if MANIFEST_NAME not in found:
        raise _invalid(f"no layer is titled {MANIFEST_NAME}: not a bundle", ref, digest)
    return Artifact(_config(document.get("config"), ref, digest), found)


def _is_image(document: dict[str, Any], layers: list[Any]) -> bool:
    """An image's config, and no layer titled with a file's name."""
    config = document.get("config")
    titled = any(
        isinstance(entry, dict)
        and isinstance(entry.get("annotations"), dict)
        and TITLE in entry["annotations"]
        for entry in layers
    )
    return isinstance(config, dict) and config.get("mediaType") == IMAGE_CONFIG_TYPE and not titled


def _layer(entry: Any, index: int, ref: str, digest: str) -> Layer:
    where = f"layers[{index}]"
    if not isinstance(entry, dict):
        raise _invalid(f"{where} is not an object", ref, digest)
    title = (
        (entry.get("annotations") or {}).get(TITLE)
        if isinstance(entry.get("annotations"), dict)
        else None
    )
    if not isinstance(title, str):
        raise _invalid(f"{where} has no {TITLE} annotation (its file name)", ref, digest)
    try:
        _paths.check_name(title, field=where)
    except UnsafePathError as e:
        raise UnsafePathError(f"{ref} ({digest}): {e.message}", path=title, field=where) from None
    kind = entry.get("mediaType")
    if not isinstance(kind, str) or kind.endswith(("+gzip", "+zstd")):
        raise _invalid(
            f"{where} ({title}) is of type {str(kind)[:100]!r}: a bundle's files are uncompressed layers",
            ref,
            digest,
        )
    blob, size = entry.get("digest"), entry.get("size")
    if not (
        isinstance(blob, str)
        and blob.startswith("sha256:")
        and len(blob) == 71
        and all(c in "0123456789abcdef" for c in blob[7:])
    ):
        raise _invalid(
            f"{where} ({title}) has the digest {str(blob)[:100]!r}, not sha256:<64 hex>",
            ref,
            digest,
        )
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise _invalid(f"{where} ({title}) has no size", ref, digest)
    return Layer(title, blob, size)


def _config(entry: Any, ref: str, digest: str) -> dict[str, Any] | None:
    """The config's descriptor when it is ModelPack's (it is fetched and checked), else None."""
    if not isinstance(entry, dict):
        raise _invalid("the manifest has no config", ref, digest)
    if entry.get("mediaType") != CONFIG_TYPE:
        return None
    size = entry.get("size")
    if not isinstance(size, int) or size > MAX_CONFIG_BYTES:
        raise RegistryLimitError(
            f"the config is {size} bytes; the limit is {MAX_CONFIG_BYTES}", ref=ref, digest=digest
        )
    return entry


def check_config(raw: bytes, artifact: Artifact, ref: str, digest: str) -> None:
    """A ModelPack config: a JSON object whose `modelfs.diff_ids` are the layers' digests."""
    try:
        document = json.loads(raw)
        diff_ids = document["modelfs"]["diff_ids"]
    except (ValueError, RecursionError, KeyError, TypeError):
        raise _invalid(
            "the config is not a ModelPack config (modelfs.diff_ids)", ref, digest
        ) from None
    if not isinstance(diff_ids, list) or sorted(map(str, diff_ids)) != sorted(
        entry.digest for entry in artifact.layers.values()
    ):
        raise _invalid("the config's modelfs.diff_ids are not the layers' digests", ref, digest)


def _invalid(why: str, ref: str, digest: str) -> ArtifactInvalidError:
    return ArtifactInvalidError(
        f"{ref} ({digest}) is not a bundle's artifact: {why}", ref=ref, digest=digest
    )


def subject(digest: str, raw: bytes) -> dict[str, Any]:
    """The descriptor of a bundle's artifact manifest (`raw`, of `digest`) that a signature
    referrer names as its `subject`."""
    return {
        "mediaType": MANIFEST,
        "digest": digest,
        "size": len(raw),
        "artifactType": ARTIFACT_TYPE,
    }

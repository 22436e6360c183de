"""Fingerprints (SPEC.md, "Fingerprint"): a digest of what determines what a function computes,
blind to what does not (provenance, file names and order, chunk digests, shards, compiled
executables). A function's is the sha256 of the canonical JSON of `document`: its signature
(with its platforms and declared independent rows, where it has them), its stored module
forms by the sha256 of their portable artifacts, and the sha256 of the
stored bytes of every argument value that is not an example input (its weights and state). A
bundle's is the sha256 of the canonical JSON of its functions' fingerprints by name and its
default function."""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .._format._manifest import Manifest


class Bundle(Protocol):
    """What a fingerprint reads of a `Bundle` (named here, so that this module, which the
    reader's `Bundle.fingerprint` imports, imports no reader back)."""

    manifest: Manifest
    modules: dict[str, Any]
    default_function: str | None

    @property
    def functions(self) -> list[str]: ...

    def select(self, name: str | None = None) -> Bundle: ...

    def artifact(self, key: str) -> bytes | None: ...

    def tensor_sha256(self, name: str) -> str: ...


ALGORITHM = "hlobundle-fingerprint-1"
# The manifest fields of an argument and a result that the signature holds.
ARGUMENT_FIELDS = ("name", "path", "shape", "dtype", "layout", "role", "sharding", "hlo_sharding")
RESULT_FIELDS = ("name", "shape", "dtype", "layout", "aliases", "sharding", "hlo_sharding")
FORMS = ("module", "vjp", "batched")


def canonical(value: Any) -> bytes:
    """JSON with sorted keys, no whitespace, ASCII only (every other character escaped)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def digest(value: Any) -> str:
    return "sha256:" + hashlib.sha256(canonical(value)).hexdigest()


def document(bundle: Bundle) -> dict[str, Any]:
    """What the selected function's fingerprint is the digest of."""
    m = bundle.manifest
    arguments = []
    for a in m.arguments:
        entry = a.model_dump(mode="json", include=set(ARGUMENT_FIELDS))
        weight = a.value is not None and a.role != "input"
        entry["value_sha256"] = bundle.tensor_sha256(a.name) if weight else None
        arguments.append(entry)
    forms: dict[str, Any] = {}
    for key in FORMS:
        stored = bundle.modules.get(key)
        if stored is not None:
            bundle.artifact(key)  # shown to be the text's program, as before it runs
            forms[key] = {"portable_sha256": stored.portable_sha256}
    if m.batched is not None:
        forms["batched"]["arguments"] = list(m.batched.arguments)
    return {
        **_when_present(m),
        "algorithm": ALGORITHM,
        "arguments": arguments,
        "results": [r.model_dump(mode="json", include=set(RESULT_FIELDS)) for r in m.results],
        "constraints": list(m.constraints or []),
        "input_tree": m.input_tree,
        "output_tree": m.output_tree,
        "mesh": m.mesh.model_dump(mode="json") if m.mesh is not None else None,
        "allowed_custom_calls": sorted(m.module.allowed_custom_calls),
        "forms": forms,
    }


def _when_present(m: Manifest) -> dict[str, Any]:
    """Members a function's document has only where the function has them, so that earlier
    fingerprints hold: the platforms of one lowered for several (SPEC.md 2.14: which index
    selects which lowering), and declared independent rows (2.13: they change what a trusted
    `jax.vmap` and a server's joined requests compute; whether the writer checked the claim
    does not)."""
    present: dict[str, Any] = {}
    if m.platforms:
        present["platforms"] = list(m.platforms)
    if m.independent_rows is not None:
        present["independent_rows"] = m.independent_rows.model_dump(
            mode="json", exclude={"checked"}
        )
    return present


def fingerprint(bundle: Bundle, name: str | None = None) -> str:
    """Function `name`'s fingerprint, or with `name` None the bundle's (every function's)."""
    if name is not None:
        return digest(document(bundle.select(name)))
    return of_bundle(bundle, {n: fingerprint(bundle, n) for n in bundle.functions})


def of_bundle(bundle: Bundle, functions: dict[str, str]) -> str:
    """The bundle's fingerprint, from its functions' (`fingerprint(bundle, name)` each)."""
    return digest(
        {
            "algorithm": ALGORITHM,
            "default_function": bundle.default_function,
            "functions": functions,
        }
    )

"""`hlobundle diff A B`: what differs between two bundles, function by function, as their
fingerprints (SPEC.md 2.11) see them: functions added or removed, signature changes (an argument
or result renamed in place, at one position with one dtype and shape, said so), the weights
whose bytes differ (with the largest absolute difference where both are numbers of one shape),
module forms whose portable artifacts differ (their op counts before and after), and the
metadata (provenance, default function, format version, the model card's fields) that
fingerprints leave out."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._format import _agreement, _dtypes
from .._terminal._display import shown
from ._fingerprint import digest, document, of_bundle
from ._inspect import op_histogram
from ._reader import Bundle

_BLOCK = 1 << 20  # elements compared at a time: a difference of large weights in bounded memory
_SIGNATURE = ("constraints", "input_tree", "output_tree", "mesh", "allowed_custom_calls")
# In a function's document only when it has them (SPEC.md 2.14, 2.13).
_WHEN_PRESENT = ("platforms", "independent_rows")


def diff(a: Bundle, b: Bundle) -> dict[str, Any]:
    """The differences, as JSON: `same` (the bundles' fingerprints are equal), `fingerprints`,
    `functions` (by name, each `added`, `removed`, `same` or `changed` with what changed) and
    `metadata` (fields that differ, `[field, a, b]`). Each function's document (its weights
    hashed) is made once."""
    da = {n: document(a.select(n)) for n in a.functions}
    db = {n: document(b.select(n)) for n in b.functions}
    functions: dict[str, Any] = {}
    for name in [*da, *(n for n in db if n not in da)]:
        if name not in db:
            functions[name] = {"status": "removed"}
        elif name not in da:
            functions[name] = {"status": "added"}
        else:
            functions[name] = _function(a.select(name), b.select(name), da[name], db[name])
    fa = of_bundle(a, {n: digest(d) for n, d in da.items()})
    fb = of_bundle(b, {n: digest(d) for n, d in db.items()})
    return {
        "same": fa == fb,
        "fingerprints": [fa, fb],
        "functions": functions,
        "metadata": _metadata(a, b),
    }


def _function(a: Bundle, b: Bundle, da: dict[str, Any], db: dict[str, Any]) -> dict[str, Any]:
    fa, fb = digest(da), digest(db)
    if fa == fb:
        return {"status": "same", "fingerprint": fa}
    return {
        "status": "changed",
        "fingerprints": [fa, fb],
        "signature": _signature(da, db),
        "tensors": _tensors(a, b, da, db),
        "modules": _modules(a, b, da, db),
    }


def _signature(da: dict[str, Any], db: dict[str, Any]) -> list[list[Any]]:
    """`[what, a, b]` for each signature field that differs (a value's bytes are `tensors'`);
    an argument or result renamed in place is `[KIND OLD: renamed, OLD, NEW]` (`renamed`)."""
    changes: list[list[Any]] = []
    for kind in ("arguments", "results"):
        renames = _renamed(da[kind], db[kind])
        before = {e["name"]: e for e in da[kind]}
        after = {e["name"]: e for e in db[kind]}
        for name in [*before, *(n for n in after if n not in before)]:
            if name in renames.values():
                continue  # said under its old name
            new = renames.get(name, name)
            one, other = before.get(name), after.get(new)
            if one is None or other is None:  # added or removed: the whole entry on its side
                changes.append([f"{kind[:-1]} {name}", _fields(one), _fields(other)])
                continue
            if new != name:
                changes.append([f"{kind[:-1]} {name}: renamed", name, new])
            for field in one:
                if field not in ("name", "value_sha256") and one[field] != other.get(field):
                    changes.append([f"{kind[:-1]} {name}: {field}", one[field], other.get(field)])
        if [e["name"] for e in da[kind]] != [e["name"] for e in db[kind]] and set(before) == set(
            after
        ):
            changes.append([f"{kind} order", list(before), list(after)])
    for field in _SIGNATURE:
        if da[field] != db[field]:
            changes.append([field, da[field], db[field]])
    for field in _WHEN_PRESENT:
        if da.get(field) != db.get(field):
            changes.append([field, da.get(field), db.get(field)])
    return changes


def _renamed(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> dict[str, str]:
    """Old name to new of each entry renamed in place: at one position in both, of one dtype
    and shape, its name in A not in B's and its name in B not in A's."""
    names_a, names_b = {e["name"] for e in before}, {e["name"] for e in after}
    return {
        one["name"]: other["name"]
        for one, other in zip(before, after, strict=False)
        if one["name"] not in names_b
        and other["name"] not in names_a
        and (one["dtype"], one["shape"]) == (other["dtype"], other["shape"])
    }


def _fields(entry: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if entry is None else {k: v for k, v in entry.items() if k != "value_sha256"}


def _tensors(a: Bundle, b: Bundle, da: dict[str, Any], db: dict[str, Any]) -> list[dict]:
    """Each weight (an argument of both, or renamed, with a stored non-input value) whose
    bytes differ; a renamed one is named `OLD -> NEW`."""
    after = {e["name"]: e for e in db["arguments"]}
    renames = _renamed(da["arguments"], db["arguments"])
    out = []
    for one in da["arguments"]:
        new = renames.get(one["name"], one["name"])
        other = after.get(new)
        if other is None or one["value_sha256"] == other["value_sha256"]:
            continue
        if one["value_sha256"] is None or other["value_sha256"] is None:
            continue  # a weight in one, not the other: the signature's `role` says so
        name = one["name"]
        x, y = a.tensor(name), b.tensor(new)
        out.append(
            {
                "name": name if new == name else f"{name} -> {new}",
                "dtype": [one["dtype"], other["dtype"]],
                "shape": [list(x.shape), list(y.shape)],
                "max_abs_diff": _largest_difference(x, y, one["dtype"], other["dtype"]),
            }
        )
    return out


def _largest_difference(x: np.ndarray, y: np.ndarray, dx: str, dy: str) -> float | str | None:
    """The largest |x - y| when both are numbers (not bool) of one dtype and shape, in blocks:
    a number, or (strict JSON, as `serve` writes) "Infinity", or "NaN" where one holds a NaN
    and the other a number there; None when they cannot be compared."""
    kind = _dtypes.BY_NAME[dx].numpy.kind
    if dx != dy or x.shape != y.shape or kind not in "iufc":
        return None
    fx, fy = x.reshape(-1), y.reshape(-1)
    largest = 0.0
    for start in range(0, fx.size, _BLOCK):
        end = start + _BLOCK  # float64 or complex128; 64-bit integers as they are, exact
        a, b = _agreement.widened(fx[start:end]), _agreement.widened(fy[start:end])
        if (np.isnan(a) != np.isnan(b)).any():
            return "NaN"
        block = _agreement.difference(a, b)  # NaN where both are NaN (the same, here) or inf - inf
        largest = float(np.fmax.reduce(block, initial=largest))
    return largest if np.isfinite(largest) else "Infinity"


def _modules(a: Bundle, b: Bundle, da: dict[str, Any], db: dict[str, Any]) -> list[dict]:
    """Each form whose portable artifact differs: its op counts before and after (those that
    changed), from the module texts."""
    out = []
    for form in sorted(set(da["forms"]) | set(db["forms"])):
        one, other = da["forms"].get(form), db["forms"].get(form)
        if one == other:
            continue
        before = op_histogram(a.modules[form].text) if form in a.modules else {}
        after = op_histogram(b.modules[form].text) if form in b.modules else {}
        changed = {
            op: [before.get(op, 0), after.get(op, 0)]
            for op in sorted(set(before) | set(after))
            if before.get(op, 0) != after.get(op, 0)
        }
        out.append(
            {
                "form": form,
                "ops": [sum(before.values()), sum(after.values())],
                "changed_ops": changed,
            }
        )
    return out


def _metadata(a: Bundle, b: Bundle) -> list[list[Any]]:
    """`[field, a, b]` for what the fingerprints leave out and a reader shows."""
    ma, mb = a.bundle_manifest, b.bundle_manifest
    pairs = [
        ("format_version", ma.format_version, mb.format_version),
        ("default_function", a.default_function, b.default_function),
    ]
    pa, pb = ma.provenance.model_dump(mode="json"), mb.provenance.model_dump(mode="json")
    pairs += [(f"provenance.{k}", pa.get(k), pb.get(k)) for k in sorted(set(pa) | set(pb))]
    da, db = (m.metadata.model_dump(mode="json") if m.metadata else {} for m in (ma, mb))
    pairs += [(f"metadata.{k}", da.get(k), db.get(k)) for k in sorted(set(da) | set(db))]
    return [[field, x, y] for field, x, y in pairs if x != y]


def render(found: dict[str, Any], a: str, b: str) -> str:
    """`found` (`diff`'s) as text, every name and value from a manifest escaped."""
    lines = [
        f"A {shown(a)}  {found['fingerprints'][0]}",
        f"B {shown(b)}  {found['fingerprints'][1]}",
    ]
    for name, f in found["functions"].items():
        lines.append(f"function {shown(name)}: {f['status']}")
        if f["status"] != "changed":
            continue
        for what, x, y in f["signature"]:
            if what.endswith(": renamed"):
                lines.append(f"  {shown(what)} {shown(y)}")
                continue
            change = "added" if x is None else "removed" if y is None else None
            lines.append(f"  {shown(what)}: {change or f'{_value(x)} -> {_value(y)}'}")
        for t in f["tensors"]:
            dtype, shape = t["dtype"], t["shape"]
            kind = dtype[0] if dtype[0] == dtype[1] else f"{dtype[0]} -> {dtype[1]}"
            dims = shape[0] if shape[0] == shape[1] else f"{shape[0]} -> {shape[1]}"
            d = t["max_abs_diff"]
            largest = (
                "" if d is None else f"; largest |a - b| {d if isinstance(d, str) else f'{d:.6g}'}"
            )
            largest += " (a NaN in one, a number in the other)" if d == "NaN" else ""
            lines.append(f"  tensor {shown(t['name'])} ({kind} {dims}): bytes differ{largest}")
        for m in f["modules"]:
            ops = "; ".join(f"{shown(op)} {x} -> {y}" for op, (x, y) in m["changed_ops"].items())
            lines.append(
                f"  {m['form']}: {m['ops'][0]} ops -> {m['ops'][1]} ops"
                + (f"; {ops}" if ops else "")
            )
    for field, x, y in found["metadata"]:
        lines.append(f"metadata {field}: {_value(x)} -> {_value(y)}")
    lines.append("same fingerprint" if found["same"] else "fingerprints differ")
    return "\n".join(lines)


def _value(value: Any) -> str:
    import json

    text = json.dumps(value)
    return shown(text if len(text) <= 120 else text[:117] + "...")

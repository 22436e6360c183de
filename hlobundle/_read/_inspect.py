"""What `hlobundle inspect` shows: a bundle summarized from its manifest, the safetensors
headers and the module text, without MLIR, numpy or jax (so that it starts fast).

`summarize()` checks what it reads: the manifest, the file set and sizes, that the tensor
headers agree with the manifest, and the module text's sha256. It does not parse the module
or hash the tensors: `load()` and `verify` do.
"""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._bundle_io import _signature_file
from .._format import _dtypes, _signature
from .._format._bundle_manifest import BundleManifest, functions_of
from .._format._fields import made_by, static_shape
from .._format._manifest_checks import executable_key
from .._terminal._display import human_bytes, shown, table
from . import _files, _tensor_files
from ._gc import collector_paused

if TYPE_CHECKING:
    from .._format._manifest import Manifest
    from .._format._metadata import Metadata


@dataclass(frozen=True)
class Summary:
    path: Path
    manifest: Manifest  # the default function's (a 1.x bundle's one function)
    ops: dict[str, int]  # op name -> how many its module text has, most first
    signer: str | None  # who the signature says signed (unverified), or None when unsigned
    bundle_manifest: Manifest | BundleManifest  # what manifest.json holds
    functions: dict[str, Manifest]  # every function's manifest, in manifest order
    function_ops: dict[str, dict[str, int]]  # every function's op histogram
    default: str | None  # the default function's name

    @property
    def several(self) -> bool:
        """Whether the manifest is a 2.0 one of named functions (shown function by function)."""
        return isinstance(self.bundle_manifest, BundleManifest)


def summarize(path: str | os.PathLike[str]) -> Summary:
    """Read and check a bundle's manifest, file set, tensor headers and module texts."""
    with collector_paused():
        return _summarize(Path(path))


def _summarize(root: Path) -> Summary:
    manifest, _ = _files.read_manifest(root)
    _files.check_file_set(root, manifest)
    _tensor_files.open_tensor_files(
        root, manifest, with_safetensors=False
    )  # agree with the manifest
    views, default = functions_of(manifest)
    function_ops = {}
    for name, view in views.items():
        data, _ = _files.read_module_file(root, manifest, view.module.text)
        function_ops[name] = op_histogram(_files.module_text(data, view.module.text))
    shown_first = default or next(iter(views))
    signature = _signature_file.read(root)
    signer = None if signature is None else _signature.signer(signature)
    return Summary(
        root,
        views[shown_first],
        function_ops[shown_first],
        signer,
        manifest,
        views,
        function_ops,
        default,
    )


def shared_tensors(summary: Summary) -> list[tuple[str, str, list[str]]]:
    """(file, key, function names) of each stored tensor more than one function refers to."""
    users: dict[tuple[str, str], list[str]] = {}
    for name, view in summary.functions.items():
        refs = {(a.value.file, a.value.key) for a in view.arguments if a.value is not None}
        refs |= {(r.expected.file, r.expected.key) for r in view.results if r.expected}
        for ref in refs:
            users.setdefault(ref, []).append(name)
    return [(f, k, sorted(names)) for (f, k), names in sorted(users.items()) if len(names) > 1]


# An operation starts a statement: `%r = dialect.op ...`, `%r:2 = "dialect.op"(...)`, or
# `dialect.op ...` with no results; MLIR prints one per line. Inside a function, the func
# dialect's own ops print without their prefix (`return`, `call`).
_OP = re.compile(
    r'^[ \t]*(?:%[^=\n"]*=[ \t]*)?"?([A-Za-z_][\w$]*(?:\.[\w$]+)+|return|call|call_indirect)'
    r'"?(?=[\s(<{@%:]|$)',
    re.M,
)
_FUNC_OPS = {"return", "call", "call_indirect"}
# `stablehlo.reduce(...) applies stablehlo.add ...`: a region of that op and a stablehlo.return.
_APPLIES = re.compile(r"\) applies ([A-Za-z_][\w$]*(?:\.[\w$]+)+) ")


def op_histogram(text: str) -> dict[str, int]:
    """How many of each operation the module text has (`stablehlo.add`: 3, ...), most first."""
    names = Counter(f"func.{n}" if n in _FUNC_OPS else n for n in _OP.findall(text))
    for applied in _APPLIES.findall(text):
        names.update([applied, "stablehlo.return"])
    return dict(names.most_common())


def _nbytes(shape: Sequence[int | str], dtype: str) -> int | None:
    """The tensor's bytes, or None when a dimension is symbolic (format 2.0)."""
    if any(isinstance(d, str) for d in shape):
        return None
    return math.prod(static_shape(shape)) * _dtypes.BY_NAME[dtype].itemsize


def _size(shape: Sequence[int | str], dtype: str) -> str:
    """`96 bytes`, or per symbolic dimension: `32 bytes x b`."""
    n = _nbytes(shape, dtype)
    if n is not None:
        return human_bytes(n)
    fixed = math.prod(d for d in shape if isinstance(d, int)) * _dtypes.BY_NAME[dtype].itemsize
    symbols = [d if d.isidentifier() else f"({d})" for d in shape if isinstance(d, str)]
    return " x ".join([human_bytes(fixed), *symbols])


def _role_totals(arguments: Sequence[Any]) -> list[str]:
    """One line per role: how many values (a parameter count, for `parameter`) and bytes, of
    the tensors of known shape; those of symbolic shape are counted apart."""
    lines = []
    for role in ("parameter", "state", "input"):
        mine = [a for a in arguments if a.role == role]
        if mine:
            known = [a for a in mine if _nbytes(a.shape, a.dtype) is not None]
            count = sum(math.prod(a.shape) for a in known)
            size = sum(_nbytes(a.shape, a.dtype) or 0 for a in known)
            what = {"parameter": "params", "state": "state", "input": "inputs"}[role]
            tensors = f"{len(mine)} tensor{'s' if len(mine) > 1 else ''}"
            symbolic = len(mine) - len(known)
            line = f"{what:<10}{count:,} values in {tensors}, {human_bytes(size)}"
            if symbolic == len(mine):
                line = f"{what:<10}{tensors} of symbolic shape"
            elif symbolic:
                line += f" ({symbolic} of symbolic shape)"
            lines.append(line)
    return lines


def _shape(shape: Sequence[int | str]) -> str:
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def _ops(ops: dict[str, int], shown_kinds: int = 12) -> list[str]:
    """`ops  120 in 9 kinds` and a two-column table of the most frequent."""
    if not ops:
        return ["ops (0)", "  none"]
    rows = [(f"{n:,}", name) for name, n in list(ops.items())[:shown_kinds]]
    more = len(ops) - shown_kinds
    return [
        f"ops ({sum(ops.values()):,} in {len(ops)} kinds, in the module text)",
        table(("count", "op"), rows),
        *([f"  ... and {more} more kinds"] if more > 0 else []),
    ]


def render(summary: Summary) -> str:
    if summary.several:
        return _render_functions(summary)
    m = summary.manifest
    head = [
        f"bundle    {summary.path}",
        f"function  {m.function}    format {m.format_version}",
        *_bundle_lines(summary),
        *_module_lines(m),
        *_file_lines(summary),
        *_role_totals(m.arguments),
        *_custom_calls(m),
    ]
    return "\n".join([*(shown(line) for line in head), *_signature_lines(m, summary.ops), _CHECKED])


_CHECKED = (
    "checked: the manifest, file sizes, tensor headers and the module's sha256; "
    "`hlobundle verify` checks everything"
)


def _render_functions(summary: Summary) -> str:
    """A 2.0 bundle: what the bundle holds, then each function, then the shared tensors."""
    m = summary.bundle_manifest
    default = f", default {summary.default}" if summary.default else ", no default function"
    lines = [
        *(
            shown(line)
            for line in [
                f"bundle    {summary.path}",
                f"format {m.format_version}, {len(summary.functions)} "
                f"function{'s' * (len(summary.functions) != 1)}{default}",
                *_bundle_lines(summary),
                *_file_lines(summary),
            ]
        ),
    ]
    for name, view in summary.functions.items():
        mark = " (default)" if name == summary.default else ""
        head = [
            f"function  {name}{mark}",
            *_module_lines(view),
            *_role_totals(view.arguments),
            *_custom_calls(view),
        ]
        lines += ["", *(shown(line) for line in head)]
        lines += _signature_lines(view, summary.function_ops[name])
    shared = shared_tensors(summary)
    lines += ["", f"shared tensors ({len(shared)})"]
    by_ref = {
        (v.file, v.key): (a.dtype, a.shape)
        for view in summary.functions.values()
        for a in view.arguments
        if (v := a.value) is not None
    }
    rows = [
        (
            f"{file}:{key}",
            by_ref[file, key][0],
            _shape(by_ref[file, key][1]),
            _size(by_ref[file, key][1], by_ref[file, key][0]),
            ", ".join(names),
        )
        for file, key, names in shared
        if (file, key) in by_ref
    ]
    lines.append(
        table(("tensor", "dtype", "shape", "size", "functions"), rows) if rows else "  none"
    )
    return "\n".join([*lines, _CHECKED.replace("module's", "modules'")])


def _bundle_lines(summary: Summary) -> list[str]:
    p = summary.bundle_manifest.provenance
    versions = ", ".join(
        f"{k} {v}"
        for k, v in (
            ("jax", p.jax_version),
            ("jaxlib", p.jaxlib_version),
            ("producer's StableHLO", p.stablehlo_version),  # the artifact's target is another
        )
        if v
    )
    return [
        f"producer  {p.producer} {p.producer_version}"
        + (f" ({versions})" if versions else "")
        + (f", {p.timestamp}" if p.timestamp else ""),
        *_metadata_lines(summary.bundle_manifest.metadata),
    ]


def _metadata_lines(metadata: Metadata | None) -> list[str]:
    """What a model card says (SPEC.md 2.12), a line a field; long texts cut at 100 characters
    (`inspect --json` has them whole)."""
    if metadata is None:
        return []
    cut = lambda text: text if len(text) <= 100 else text[:99] + "…"  # noqa: E731
    rows = [
        ("about", metadata.description and cut(metadata.description)),
        ("license", metadata.license),
        ("authors", metadata.authors and ", ".join(metadata.authors)),
        ("source", metadata.source_url),
        ("framework", metadata.framework),
        ("from", metadata.base_model),
        ("tags", metadata.tags and ", ".join(metadata.tags)),
        ("cite", metadata.citation and cut(metadata.citation)),
        ("card", metadata.card),
    ]
    return [f"{label:<9} {value}" for label, value in rows if value]


def _module_lines(m: Manifest) -> list[str]:
    return [
        f"module    {m.module.text} + {m.module.portable.file} (artifact target StableHLO {m.module.portable.target_version})",
        *([f"backward  {m.vjp.text} + {m.vjp.portable.file}"] if m.vjp else []),
        *(
            [
                f"batched   {m.batched.text} + {m.batched.portable.file}, over {', '.join(m.batched.arguments)}"
            ]
            if m.batched
            else []
        ),
        *(
            f"compiled  {e.file}: {made_by(e)}, {executable_key(e)}, "
            f"{e.device_kind or f'{e.architecture} cpu {e.cpu}'} "
            "(native code: run only from a trusted bundle)"
            for e in m.executables or []
        ),
        *([f"constraints {', '.join(m.constraints)}"] if m.constraints else []),
        *([f"platforms {', '.join(m.platforms)} (@main takes the index)"] if m.platforms else []),
        *_rows_lines(m),
        *_expected_from_lines(m),
    ]


def _expected_from_lines(m: Manifest) -> list[str]:
    """Where the expected outputs were computed (SPEC.md 2.15; printable ASCII, checked)."""
    where = getattr(m, "expected_from", None)
    if where is None:
        return []
    kind = f" ({where.device_kind})" if where.device_kind else ""
    precision = f" at {where.precision}" if where.precision else ""
    jaxlib = f", jaxlib {where.jaxlib_version}" if where.jaxlib_version else ""
    return [f"expected  computed on {where.platform}{kind}{precision}{jaxlib}"]


def _rows_lines(m: Manifest) -> list[str]:
    """Declared independent rows (SPEC.md 2.13): along which symbol, and whether checked."""
    rows = m.independent_rows
    if rows is None:
        return []
    checked = ", checked by its writer" if rows.checked else ""
    return [f"rows      independent along {m.row_symbol}{checked}"]


def _file_lines(summary: Summary) -> list[str]:
    files = summary.bundle_manifest.files
    size = sum(f.size for f in files.values())
    return [
        f"files     {len(files)}, {human_bytes(size)} ({size:,} bytes)",
        "signed    no"
        if summary.signer is None
        else f"signed    by {summary.signer} (unverified: verify --public-key checks it)",
    ]


def _custom_calls(m: Manifest) -> list[str]:
    calls = m.module.allowed_custom_calls
    return [f"custom calls the producer opted in to: {', '.join(calls)}"] if calls else []


def _signature_lines(m: Manifest, ops: dict[str, int]) -> list[str]:
    """The arguments' and results' tables and the op histogram of one function."""
    args = [
        (
            str(i),
            a.name,
            _shape(a.shape),
            a.dtype,
            _size(a.shape, a.dtype),
            a.layout,
            a.role,
            a.path,
            "yes" if a.value else "no",
        )
        for i, a in enumerate(m.arguments)
    ]
    results = [
        (
            str(i),
            r.name,
            _shape(r.shape),
            r.dtype,
            r.layout,
            "" if r.aliases is None else m.arguments[r.aliases].name,
        )
        for i, r in enumerate(m.results)
    ]
    return [
        f"arguments ({len(args)})",
        table(("#", "name", "shape", "dtype", "size", "layout", "role", "path", "stored"), args)
        if args
        else "  none",
        f"results ({len(results)})",
        table(("#", "name", "shape", "dtype", "layout", "aliases"), results)
        if results
        else "  none",
        *_ops(ops),
    ]

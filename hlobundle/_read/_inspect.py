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
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._format import _dtypes, _signature
from .._format._manifest import Manifest
from . import _files


@dataclass(frozen=True)
class Summary:
    path: Path
    manifest: Manifest
    ops: dict[str, int]  # op name -> how many the module text has, most first
    signer: str | None  # who the signature says signed (unverified), or None when unsigned


def summarize(path: str | os.PathLike[str]) -> Summary:
    """Read and check a bundle's manifest, file set, tensor headers and module text."""
    root = Path(path)
    manifest, _ = _files.read_manifest(root)
    _files.check_file_set(root, manifest)
    _files.open_tensor_files(root, manifest, with_safetensors=False)  # agree with the manifest
    data, _ = _files.read_module_file(root, manifest, manifest.module.text)
    ops = op_histogram(_files.module_text(data, manifest.module.text))
    signature = _signature.read(root)
    return Summary(root, manifest, ops, None if signature is None else _signature.signer(signature))


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


# Control, format (bidi overrides), and line/paragraph separator characters: printed as escapes,
# so that a manifest cannot move the cursor, recolour the terminal or hide text.
_HIDDEN = frozenset({"Cc", "Cf", "Zl", "Zp"})


def shown(text: object) -> str:
    """`text` as a terminal may print it: every control or format character escaped."""
    return "".join(
        c.encode("unicode_escape").decode("ascii") if unicodedata.category(c) in _HIDDEN else c
        for c in str(text)
    )


def table(header: Sequence[str], rows: list[Sequence[str]]) -> str:
    rows = [[shown(x) for x in row] for row in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]
    lines = [
        "  ".join(str(x).ljust(w) for x, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]
    return "\n".join("  " + line for line in lines)


def human_bytes(n: int) -> str:
    """`1.5 GiB`, `232 KiB`, `12 bytes`: binary units, three significant digits."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} bytes"


def _nbytes(shape: Sequence[int], dtype: str) -> int:
    return math.prod(shape) * _dtypes.BY_NAME[dtype].itemsize


def _role_totals(arguments: Sequence[Any]) -> list[str]:
    """One line per role: how many values (a parameter count, for `parameter`) and bytes."""
    lines = []
    for role in ("parameter", "state", "input"):
        mine = [a for a in arguments if a.role == role]
        if mine:
            count = sum(math.prod(a.shape) for a in mine)
            size = sum(_nbytes(a.shape, a.dtype) for a in mine)
            what = {"parameter": "params", "state": "state", "input": "inputs"}[role]
            tensors = f"{len(mine)} tensor{'s' if len(mine) > 1 else ''}"
            lines.append(f"{what:<10}{count:,} values in {tensors}, {human_bytes(size)}")
    return lines


def _shape(shape: Sequence[int]) -> str:
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
    m = summary.manifest
    p = m.provenance
    versions = ", ".join(
        f"{k} {v}"
        for k, v in (
            ("jax", p.jax_version),
            ("jaxlib", p.jaxlib_version),
            ("producer's StableHLO", p.stablehlo_version),  # the artifact's target is another
        )
        if v
    )
    args = [
        (
            str(i),
            a.name,
            _shape(a.shape),
            a.dtype,
            human_bytes(_nbytes(a.shape, a.dtype)),
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
    size = sum(f.size for f in m.files.values())
    head = [
            f"bundle    {summary.path}",
            f"function  {m.function}    format {m.format_version}",
            f"producer  {p.producer} {p.producer_version}"
            + (f" ({versions})" if versions else "")
            + (f", {p.timestamp}" if p.timestamp else ""),
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
                f"compiled  {e.file}: IREE {e.compiler_version}, {e.target}, {e.architecture} "
                f"cpu {e.cpu} (native code: run only from a trusted bundle)"
                for e in m.executables or []
            ),
            f"files     {len(m.files)}, {human_bytes(size)} ({size:,} bytes)",
            "signed    no" if summary.signer is None else
            f"signed    by {summary.signer} (unverified: verify --public-key checks it)",
            *_role_totals(m.arguments),
            *(
                [f"custom calls the producer opted in to: {', '.join(m.module.allowed_custom_calls)}"]
                if m.module.allowed_custom_calls
                else []
            ),
    ]  # fmt: skip
    return "\n".join(
        [
            *(shown(line) for line in head),
            f"arguments ({len(args)})",
            table(("#", "name", "shape", "dtype", "size", "layout", "role", "path", "stored"), args)
            if args
            else "  none",
            f"results ({len(results)})",
            table(("#", "name", "shape", "dtype", "layout", "aliases"), results)
            if results
            else "  none",
            *_ops(summary.ops),
            "checked: the manifest, file sizes, tensor headers and the module's sha256; "
            "`hlobundle verify` checks everything",
        ]
    )

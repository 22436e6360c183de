"""ReactantServer.jl's model bundle (EnzymeAD/ReactantServer.jl, `format_version` 2.0): the one
place that knows its layout, both ways. The importer (`_write/_reactant_server.py`,
`from_reactant_server`, `pack --from-reactant-server DIR`) reads one with `read_manifest`,
`module_text` and `weights`; the emitter (`_emit/_reactant_server.py`, `emit_reactant_server`)
writes one with `manifest_yaml` and `write_weights`.

Such a bundle is a directory named after its model with:

- `manifest.yaml`: `name`, `format_version`, `kind` (`model`; a `meta` bundle is Julia code over
  other models and is refused), `executable_inputs` and `executable_outputs` (each a `name`, a
  `dtype` token such as `f32`, and a `shape` of einsum letters in Julia's axis order, with `dims`
  giving each letter's size; `n` or `b` marks the batch axis), and `batching.compiled_batch_sizes`;
- `model.b{N}.mlir` for each compiled batch size `N` (ASCII digits, no leading zero), or, for
  one module, `model.mlir`: the StableHLO module (a portable artifact, or text). Exactly those
  names are read (`module_files`): a directory with any other name a reader could take for a
  batch size's module (`model.b04.mlir`, `model.b٤.mlir`), a module for a size the manifest does
  not list, a listed size without one, or both forms, is refused, whatever its listing's order;
- `weights.safetensors`: the weights, whose `__metadata__` `argument_order` (a JSON list) gives
  their order. `@main` takes the executable inputs in manifest order, then the weights;
- optionally `model.jl`, Julia pre- and post-processing, which is not code this package runs:
  it is left behind, with a warning.

Julia is column-major: a manifest shape lists Julia's axes, the module's tensor types the same
axes reversed, and SafeTensors.jl stores a Julia array so that Python reads the same shape, which
is the axis-reversed view of the tensor `@main` takes. Every value is therefore stored transposed
into the module's orientation and flagged `column_major` (SPEC.md section 4). The YAML is read
with a safe loader that refuses aliases; sizes and counts are bounded; nothing is executed.
Strings reach a written `manifest.yaml` only through a YAML serializer, as quoted data.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .._bundle_io import _tensor_writing, _tensors
from .._format import _dtypes, _limits, _yaml
from .._format._errors import InputError
from .._parse import _main_signature
from ._sources import check_regular, read_regular

MANIFEST, WEIGHTS = "manifest.yaml", "weights.safetensors"
MODULE, JULIA_CODE = "model.mlir", "model.jl"  # or `module_file(N)` per compiled batch size
ARGUMENT_ORDER = "argument_order"  # the weights file's metadata key: a JSON list of names
MAX_YAML_BYTES = 1 << 20
MAX_TENSORS = 100_000
FORMAT_VERSIONS = ("2.0", "2")
BATCH_LETTERS = ("n", "b")
TOKENS = {
    "f16": "float16",
    "f32": "float32",
    "f64": "float64",
    "bf16": "bfloat16",
    "f8_e5m2": "float8_e5m2",
    "f8_e4m3": "float8_e4m3fn",
    "i8": "int8",
    "i16": "int16",
    "i32": "int32",
    "i64": "int64",
    "u8": "uint8",
    "u16": "uint16",
    "u32": "uint32",
    "u64": "uint64",
    "bool": "bool",
}
TOKEN_OF = {name: token for token, name in TOKENS.items()}
# The letters a writer gives axes: `n` marks the batch axis, the others are sized in `dims`.
LETTERS = "".join(c for c in "abcdefghijklmnopqrstuvwxyz" if c not in BATCH_LETTERS) + (
    "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
)
# The name of a batch size's module, and what a reader could take for one (casefolded): a looser
# pattern (Python's `\d` takes any Unicode digit, `$` a final newline) finds the same size twice.
_MODULE_FILE = re.compile(r"model\.b[1-9][0-9]*\.mlir", re.ASCII)
_LIKE_A_MODULE_FILE = re.compile(r"model\.b.*\.mlir\s*", re.DOTALL)
_READ_AS = re.compile(r"model\.b(\d{1,18})\.mlir\s*", re.DOTALL | re.IGNORECASE)


def module_file(batch_size: int) -> str:
    """The module file of one compiled batch size."""
    return f"model.b{batch_size}.mlir"


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: str  # SPEC.md's dtype name
    julia_shape: tuple[int | None, ...]  # None: the batch axis

    def shape(self, batch: int) -> tuple[int, ...]:
        """The module's tensor shape: Julia's axes reversed, the batch axis at `batch`."""
        return tuple(batch if d is None else d for d in reversed(self.julia_shape))


@dataclass(frozen=True)
class ServerBundle:
    root: Path
    name: str
    format_version: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    batch_sizes: tuple[int, ...]


def read_manifest(root: Path) -> ServerBundle:
    """`manifest.yaml`, parsed safely and checked as ReactantServer.jl checks it."""
    path = root / MANIFEST
    raw = _load_yaml(path)
    where = "manifest.yaml"
    if not isinstance(raw, dict):
        raise InputError(f"{where} is not a mapping", path=path)
    version = str(raw.get("format_version"))
    if version not in FORMAT_VERSIONS:
        raise InputError(
            f"{where}: format_version {version!r}; this reader knows "
            f"{FORMAT_VERSIONS[0]} (ReactantServer.jl's)",
            path=path,
        )
    if raw.get("kind", "model") != "model":
        raise InputError(
            f"{where}: kind {raw.get('kind')!r}: a meta bundle is Julia code over other models, "
            "not a compiled function; import the models it calls",
            path=path,
        )
    name = raw.get("name")
    if not isinstance(name, str) or name != root.resolve().name:
        raise InputError(
            f"{where}: name {name!r} is not the directory's name {root.resolve().name!r}", path=path
        )
    batching = raw.get("batching") or {}
    sizes = batching.get("compiled_batch_sizes", []) if isinstance(batching, dict) else None
    if not isinstance(sizes, list) or not all(type(s) is int and s > 0 for s in sizes):
        raise InputError(
            f"{where}: batching.compiled_batch_sizes must be a list of positive integers", path=path
        )
    twice = sorted({s for s in sizes if sizes.count(s) > 1})
    if twice:
        raise InputError(
            f"{where}: batching.compiled_batch_sizes lists batch size {twice[0]} twice", path=path
        )
    return ServerBundle(
        root,
        name,
        version,
        _tensor_list(raw, "executable_inputs", path),
        _tensor_list(raw, "executable_outputs", path),
        tuple(sizes),
    )


def _load_yaml(path: Path) -> object:
    try:
        return _yaml.load(_read_regular(path, MAX_YAML_BYTES).decode("utf-8"), "manifest.yaml")
    except UnicodeDecodeError as e:
        raise InputError(f"manifest.yaml is not UTF-8: {e}", path=path) from None
    except InputError as e:
        raise InputError(e.message, path=path) from None


def _read_regular(path: Path, limit: int) -> bytes:
    return read_regular(path, limit, what=path.name)


def _tensor_list(raw: dict, section: str, path: Path) -> tuple[TensorSpec, ...]:
    items = raw.get(section)
    if not isinstance(items, list) or len(items) > MAX_TENSORS:
        raise InputError(f"manifest.yaml: {section} must be a list", path=path, field=section)
    specs = tuple(_tensor(item, f"{section}[{k}]", path) for k, item in enumerate(items))
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise InputError(f"manifest.yaml: {section} names a tensor twice", path=path, field=section)
    return specs


def _tensor(item: object, where: str, path: Path) -> TensorSpec:
    def bad(why: str) -> InputError:
        return InputError(f"manifest.yaml: {where}: {why}", path=path, field=where)

    if not isinstance(item, dict):
        raise bad("not a mapping")
    name, token, letters = item.get("name"), item.get("dtype"), item.get("shape")
    dims = item.get("dims") or {}
    if not isinstance(name, str) or not name:
        raise bad("no name")
    if not isinstance(token, str) or token not in TOKENS:
        raise bad(f"dtype {token!r} is not one of {sorted(TOKENS)}")
    if not isinstance(letters, str) or not re.fullmatch(r"[A-Za-z]{0,64}", letters):
        raise bad(f"shape {letters!r} is not a string of letters (einsum style)")
    if len(set(letters)) != len(letters) or sum(c in BATCH_LETTERS for c in letters) > 1:
        raise bad(f"shape {letters!r} repeats a letter or has two batch axes")
    if not isinstance(dims, dict) or set(map(str, dims)) != set(letters) - set(BATCH_LETTERS):
        raise bad(f"dims {dims!r} must give the size of each letter of {letters!r} but n and b")
    shape: list[int | None] = []
    for c in letters:
        size = None if c in BATCH_LETTERS else dims[c]
        if size is not None and (type(size) is not int or not 0 < size < 1 << 40):
            raise bad(
                f"dims[{c!r}] = {size!r}: a variable (-1) or invalid size; hlobundle "
                "stores static shapes"
            )
        shape.append(size)
    return TensorSpec(name, TOKENS[token], tuple(shape))


def module_text(server: ServerBundle, batch_size: int | None) -> tuple[str, int]:
    """The module for one batch size (its text) and that batch size."""
    root = server.root
    per_size = module_files(server)
    if per_size:
        size = batch_size if batch_size is not None else min(per_size)
        if size not in per_size:
            raise InputError(
                f"{root.name} has no model.b{size}.mlir (compiled batch sizes: {sorted(per_size)})",
                argument="batch_size",
            )
        path = per_size[size]
    else:
        path = root / MODULE
        size = batch_size or (min(server.batch_sizes) if server.batch_sizes else 1)
    data = _read_regular(path, _limits.MAX_MODULE_BYTES)
    if data.startswith(b"ML\xefR"):  # a portable artifact: read in a child process
        from .._parse._artifacts import canonical_in_child

        return canonical_in_child(data, path=path.name), size
    try:
        return data.decode("utf-8"), size
    except UnicodeDecodeError:
        raise InputError(
            f"{path.name} is neither a StableHLO portable artifact nor UTF-8 text", path=path
        ) from None


def weights(root: Path) -> tuple[list[str], _tensors.TensorFile | None]:
    """The weights' names in `@main` order, and their file."""
    path = root / WEIGHTS
    if not (path.exists() or path.is_symlink()):
        return [], None
    check_regular(path, what="weights.safetensors")  # a FIFO would block the open below
    tf = _tensors.TensorFile(path, name="weights.safetensors")
    order = tf.metadata.get(ARGUMENT_ORDER)
    if order is None:
        if tf.entries:
            raise InputError(
                "weights.safetensors has tensors but no argument_order metadata "
                "(ReactantServer.jl refuses it too)",
                path=path,
            )
        return [], tf
    try:
        names = json.loads(order)
    except ValueError:
        names = None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise InputError(
            "weights.safetensors: argument_order is not a JSON list of names", path=path
        )
    missing = sorted(set(names) - set(tf.entries))
    if missing or len(set(names)) != len(names):
        raise InputError(
            f"weights.safetensors: argument_order names {missing[:5] or 'a weight twice'}, "
            "which the file does not hold once",
            path=path,
        )
    return names, tf


def module_files(server: ServerBundle) -> dict[int, Path]:
    """The module of each compiled batch size the manifest lists, `model.b{N}.mlir` by that
    name exactly; `{}` when the one module is `model.mlir`. Refused (naming the files, in the
    same words whatever order the directory lists them in): a name a reader could take for a
    batch size's module that is not one's (`model.b04.mlir`, `model.b٤.mlir`, `MODEL.B4.MLIR`:
    a second program for one size), a module for a size the manifest does not list, a listed
    size without its module, and `model.mlir` beside `model.b{N}.mlir` files (which
    ReactantServer.jl reads instead)."""
    root = server.root
    names = sorted(os.listdir(root))
    sizes = sorted(server.batch_sizes)
    like = [f for f in names if _LIKE_A_MODULE_FILE.fullmatch(f.casefold())]
    aliases = [f for f in like if not _MODULE_FILE.fullmatch(f)]
    if aliases:
        m = _READ_AS.fullmatch(aliases[0])
        also = f"; {aliases[0]!r} reads as batch size {int(m.group(1))}" if m else ""
        what = "is not a module file name" if len(aliases) == 1 else "are not module file names"
        raise InputError(
            f"{_listed(aliases)} in {root.name} {what} ReactantServer.jl bundles define: the "
            "module of batch size N is model.b{N}.mlir, N in ASCII digits without a leading "
            f"zero{also}; rename or remove {'it' if len(aliases) == 1 else 'them'}",
            path=root / aliases[0],
        )
    listed = {module_file(n) for n in sizes}
    extra = [f for f in like if f not in listed]
    if extra:
        extra_sizes = ", ".join(f[len("model.b") : -len(".mlir")] for f in extra)
        one = len(extra) == 1
        raise InputError(
            f"{_listed(extra)} {'is the module' if one else 'are the modules'} of batch "
            f"size{'' if one else 's'} {extra_sizes}, which manifest.yaml's "
            f"batching.compiled_batch_sizes {sizes} does not list; list "
            f"{'it' if one else 'them'} or remove the file{'' if one else 's'}",
            path=root / extra[0],
        )
    if not like:
        if MODULE not in names:
            raise InputError(
                f"{root.name} has no {MODULE} and no model.b{{N}}.mlir", path=root / MODULE
            )
        return {}
    missing = [n for n in sizes if module_file(n) not in like]
    if missing:
        raise InputError(
            f"manifest.yaml's batching.compiled_batch_sizes lists {missing[0]}, but there is no "
            f"{module_file(missing[0])!r} in {root.name}",
            path=root / module_file(missing[0]),
        )
    if MODULE in names:
        raise InputError(
            f"{root.name} has both {MODULE} and {_listed(like)}: ReactantServer.jl reads the "
            f"per-size files and ignores {MODULE}; keep one form",
            path=root / MODULE,
        )
    return {n: root / module_file(n) for n in sizes}


def _listed(names: list[str]) -> str:
    shown = ", ".join(map(repr, names[:5]))
    return shown + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def weight(tf: _tensors.TensorFile, name: str, t: _main_signature.TensorType) -> np.ndarray:
    """A weight in the module's orientation: SafeTensors.jl's (Python's) view, axes reversed."""
    entry = tf.entries[name]
    row = _dtypes.BY_NAME[t.dtype.name]
    julia = tuple(reversed(t.shape))
    if (entry.code, entry.shape) != (row.safetensors, row.storage_shape(julia)):
        raise InputError(
            f"weights.safetensors[{name!r}] is {entry.code}{list(entry.shape)}; @main takes "
            f"{t.dtype.name}{list(t.shape)}, which Julia stores as {row.safetensors}{list(julia)}",
            argument=name,
        )
    return np.asarray(tf.array(name, row, julia).transpose(), order="C")


def tensor_spec(name: str, dtype: str, shape: list, batch_axis: int | None = None) -> dict:
    """A manifest entry: Julia's axes (the module's reversed), a letter each: `n` the batch
    axis (`batch_axis` in the module's orientation), sized by the module file; every other
    letter's size in `dims`."""
    julia = list(reversed(shape))
    batch = None if batch_axis is None else len(shape) - 1 - batch_axis
    letters = [BATCH_LETTERS[0] if k == batch else c for k, c in enumerate(LETTERS[: len(julia)])]
    return {
        "name": name,
        "dtype": TOKEN_OF[dtype],
        "shape": "".join(letters),
        "dims": {c: d for k, (c, d) in enumerate(zip(letters, julia, strict=True)) if k != batch},
    }


def manifest_yaml(
    name: str, description: str, inputs: list[dict], outputs: list[dict], sizes: list[int]
) -> bytes:
    """`manifest.yaml` of a model bundle: `inputs` and `outputs` are `tensor_spec`s."""
    import yaml

    doc = {
        "format_version": FORMAT_VERSIONS[0],
        "name": name,
        "kind": "model",
        "description": description,
        "executable_inputs": inputs,
        "executable_outputs": outputs,
        "batching": {"compiled_batch_sizes": sizes},
    }
    return yaml.safe_dump(doc, sort_keys=False).encode("utf-8")


def write_weights(path: Path, weights: dict[str, tuple[np.ndarray, str]]) -> None:
    """`weights.safetensors`: each weight (a value in the module's orientation, and its dtype)
    as SafeTensors.jl will read it into the Julia array whose memory is the tensor's row-major
    memory (its axes reversed), in `@main`'s order (the mapping's) as `argument_order`."""
    _tensor_writing.write(
        path,
        {
            name: (np.asarray(np.asarray(value).transpose(), order="C"), _dtypes.BY_NAME[dtype])
            for name, (value, dtype) in weights.items()
        },
        metadata={ARGUMENT_ORDER: json.dumps(list(weights))},
    )

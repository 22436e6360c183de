"""Reading a ReactantServer.jl model bundle (EnzymeAD/ReactantServer.jl, `format_version` 2.0),
for `pack --from-reactant-server DIR`.

Such a bundle is a directory named after its model with:

- `manifest.yaml`: `name`, `format_version`, `kind` (`model`; a `meta` bundle is Julia code over
  other models and is refused), `executable_inputs` and `executable_outputs` (each a `name`, a
  `dtype` token such as `f32`, and a `shape` of einsum letters in Julia's axis order, with `dims`
  giving each letter's size; `n` or `b` marks the batch axis), and `batching.compiled_batch_sizes`;
- `model.mlir`, or `model.b{N}.mlir` per compiled batch size: the StableHLO module (a portable
  artifact, or text);
- `weights.safetensors`: the weights, whose `__metadata__` `argument_order` (a JSON list) gives
  their order. `@main` takes the executable inputs in manifest order, then the weights;
- optionally `model.jl`, Julia pre- and post-processing, which is not code this package runs:
  it is left behind, with a warning.

Julia is column-major: a manifest shape lists Julia's axes, the module's tensor types the same
axes reversed, and SafeTensors.jl stores a Julia array so that Python reads the same shape, which
is the axis-reversed view of the tensor `@main` takes. Every value is therefore stored transposed
into the module's orientation and flagged `column_major` (SPEC.md section 4). The YAML is read
with a safe loader that refuses aliases; sizes and counts are bounded; nothing is executed.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .._format import _dtypes, _limits, _mlir, _tensors
from .._format._errors import HloBundleWarning, InputError
from .._format._manifest import identifier
from ._sources import check_regular, read_regular

MAX_YAML_BYTES = 1 << 20
MAX_TENSORS = 100_000
FORMAT_VERSIONS = ("2.0", "2")
BATCH_LETTERS = ("n", "b")
TOKENS = {
    "f16": "float16", "f32": "float32", "f64": "float64", "bf16": "bfloat16",
    "f8_e5m2": "float8_e5m2", "f8_e4m3": "float8_e4m3fn", "i8": "int8", "i16": "int16",
    "i32": "int32", "i64": "int64", "u8": "uint8", "u16": "uint16", "u32": "uint32",
    "u64": "uint64", "bool": "bool",
}  # fmt: skip
_MODULE_FILE = re.compile(r"^model\.b(\d{1,9})\.mlir$")


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
    path = root / "manifest.yaml"
    raw = _load_yaml(path)
    where = "manifest.yaml"
    if not isinstance(raw, dict):
        raise InputError(f"{where} is not a mapping", path=path)
    version = str(raw.get("format_version"))
    if version not in FORMAT_VERSIONS:
        raise InputError(f"{where}: format_version {version!r}; this reader knows "
                         f"{FORMAT_VERSIONS[0]} (ReactantServer.jl's)", path=path)  # fmt: skip
    if raw.get("kind", "model") != "model":
        raise InputError(
            f"{where}: kind {raw.get('kind')!r}: a meta bundle is Julia code over other models, "
            "not a compiled function; import the models it calls",
            path=path,
        )
    name = raw.get("name")
    if not isinstance(name, str) or name != root.resolve().name:
        raise InputError(f"{where}: name {name!r} is not the directory's name "
                         f"{root.resolve().name!r}", path=path)  # fmt: skip
    batching = raw.get("batching") or {}
    sizes = batching.get("compiled_batch_sizes", []) if isinstance(batching, dict) else None
    if not isinstance(sizes, list) or not all(type(s) is int and s > 0 for s in sizes):
        raise InputError(f"{where}: batching.compiled_batch_sizes must be a list of positive "
                         "integers", path=path)  # fmt: skip
    return ServerBundle(root, name, version, _tensor_list(raw, "executable_inputs", path),
                        _tensor_list(raw, "executable_outputs", path), tuple(sizes))  # fmt: skip


def _load_yaml(path: Path) -> object:
    try:
        import yaml
    except ImportError:
        raise InputError(
            "reading manifest.yaml needs PyYAML: pip install pyyaml",
            argument="from_reactant_server",
        ) from None

    class NoAliases(yaml.SafeLoader):  # an alias can make a small file a huge graph
        def compose_node(self, parent, index):  # type: ignore[no-untyped-def]
            if self.check_event(yaml.AliasEvent):
                raise yaml.YAMLError("aliases (*name) are not accepted")
            return super().compose_node(parent, index)

    data = _read_regular(path, MAX_YAML_BYTES)
    try:
        return yaml.load(data.decode("utf-8"), Loader=NoAliases)  # noqa: S506 (a SafeLoader)
    # Constructors raise plain ValueError, TypeError, OverflowError on values they cannot make
    # (an integer of 5,000 digits, 2023-02-30, a +99:00 offset): each is bad YAML here.
    except (yaml.YAMLError, ValueError, TypeError, ArithmeticError, RecursionError) as e:
        raise InputError(f"manifest.yaml is not valid YAML: {str(e)[:300]}", path=path) from None


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
            raise bad(f"dims[{c!r}] = {size!r}: a variable (-1) or invalid size; hlobundle "
                      "stores static shapes")  # fmt: skip
        shape.append(size)
    return TensorSpec(name, TOKENS[token], tuple(shape))


def module_text(server: ServerBundle, batch_size: int | None) -> tuple[str, int]:
    """The module for one batch size (its text) and that batch size."""
    root = server.root
    per_size = _modules_per_size(root)
    if per_size:
        size = batch_size if batch_size is not None else min(per_size)
        if size not in per_size:
            raise InputError(f"{root.name} has no model.b{size}.mlir (compiled batch sizes: "
                             f"{sorted(per_size)})", argument="batch_size")  # fmt: skip
        path = per_size[size]
    else:
        path = root / "model.mlir"
        size = batch_size or (min(server.batch_sizes) if server.batch_sizes else 1)
    data = _read_regular(path, _limits.MAX_MODULE_BYTES)
    if data.startswith(b"ML\xefR"):  # a portable artifact: read in a child process
        from .._format._portable import canonical_in_child

        return canonical_in_child(data, path=path.name), size
    try:
        return data.decode("utf-8"), size
    except UnicodeDecodeError:
        raise InputError(f"{path.name} is neither a StableHLO portable artifact nor UTF-8 text",
                         path=path) from None  # fmt: skip


def weights(root: Path) -> tuple[list[str], _tensors.TensorFile | None]:
    """The weights' names in `@main` order, and their file."""
    path = root / "weights.safetensors"
    if not (path.exists() or path.is_symlink()):
        return [], None
    check_regular(path, what="weights.safetensors")  # a FIFO would block the open below
    tf = _tensors.TensorFile(path, name="weights.safetensors")
    order = tf.metadata.get("argument_order")
    if order is None:
        if tf.entries:
            raise InputError("weights.safetensors has tensors but no argument_order metadata "
                             "(ReactantServer.jl refuses it too)", path=path)  # fmt: skip
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
        raise InputError(f"weights.safetensors: argument_order names {missing[:5] or 'a weight twice'}, "
                         "which the file does not hold once", path=path)  # fmt: skip
    return names, tf


def from_reactant_server(
    path: str | os.PathLike[str], out: str | os.PathLike[str], *,
    batch_size: int | None = None, **options: object,
) -> Path:  # fmt: skip
    """Pack a ReactantServer.jl model bundle: its module (for one compiled batch size: the
    smallest, or `batch_size`), its weights as stored parameters, its input and output names.
    The inputs have no stored values (a server takes them from requests). Without
    `batch_size`, a bundle compiled for several batch sizes (`model.b{N}.mlir`) becomes one
    function `bN` per size (format 2.0), the smallest the default, the weights stored once.

    **Arguments:** `path`, the bundle's directory; `out`, the hlobundle to write; `options`, as
    for `pack()` (not `names`, `layout` or inputs, which the bundle gives).
    """
    root = Path(path)
    if not root.is_dir():
        raise InputError(f"{str(root)!r} is not a directory (a ReactantServer.jl bundle is one)",
                         path=root)  # fmt: skip
    server = read_manifest(root)
    if (root / "model.jl").exists():
        warnings.warn(f"{root.name}/model.jl (Julia pre- and post-processing) is not carried: "
                      "the bundle holds the compiled function alone", HloBundleWarning,
                      stacklevel=2)  # fmt: skip
    sizes = sorted(_modules_per_size(root))
    if batch_size is not None or len(sizes) < 2:
        return _pack_size(server, Path(out), batch_size, server.name, options)
    return _pack_sizes(server, Path(out), sizes, options)


def _modules_per_size(root: Path) -> dict[int, Path]:
    return {int(m.group(1)): root / f for f in os.listdir(root) if (m := _MODULE_FILE.match(f))}


def _pack_sizes(server: ServerBundle, out: Path, sizes: list[int], options: dict) -> Path:
    """One function `bN` per batch size: the smallest written to `out`, each other packed
    beside it and added (signed once every function is in, when `sign_key` is given)."""
    import shutil
    import tempfile

    from ._functions import add_function

    sign_key = options.pop("sign_key", None)
    if out.exists() and not options.get("force"):
        from .._format._errors import OutputExistsError

        raise OutputExistsError(f"{str(out)!r} already exists; pass force=True (--force)",
                                path=out)  # fmt: skip
    written = _pack_size(server, out, sizes[0], f"b{sizes[0]}", options)
    scratch = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".sizes", dir=out.parent))
    try:
        for i, size in enumerate(sizes[1:], start=1):
            part = _pack_size(server, scratch / f"b{size}", size, f"b{size}", options)
            add_function(out, part, sign_key=sign_key if i == len(sizes) - 1 else None)
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)  # written above: not the bundle asked for
        raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)  # made above
    return written


def _pack_size(
    server: ServerBundle, out: Path, batch_size: int | None, function: str, options: dict
) -> Path:
    from .._read import _inputs
    from ._writer import PackOptions, _pack

    root = server.root
    text, batch = module_text(server, batch_size)
    from . import _normalize

    sig = _mlir.signature(_mlir.parse(_normalize.normalize(text, path="model.mlir").text))
    order, tf = weights(root)
    specs = [*server.inputs]
    if len(sig.arguments) != len(specs) + len(order):
        raise InputError(f"@main takes {len(sig.arguments)} arguments; manifest.yaml names "
                         f"{len(specs)} inputs and argument_order {len(order)} weights",
                         path=root / "manifest.yaml")  # fmt: skip
    _check_types("executable_inputs", specs, sig.arguments[: len(specs)], batch)
    _check_types("executable_outputs", list(server.outputs), sig.results, batch)
    values = {}
    for name, t in zip(order, sig.arguments[len(specs) :], strict=True):
        values[_name(name)] = _weight(tf, name, t)  # type: ignore[arg-type]
    names = [_name(s.name) for s in specs] + [_name(n) for n in order]
    if len(set(names)) != len(names):
        raise InputError("input and weight names collide once made Python identifiers: "
                         f"{names[:10]}", path=root)  # fmt: skip
    items = [_inputs.Keyed(key=k, array=v, source="weights.safetensors") for k, v in values.items()]
    opt = PackOptions(names=names, layout="column_major", already_permuted=True,
                      without_values=names[: len(specs)], function=function,
                      paths=[f"executable_inputs[{s.name!r}]" for s in specs]
                      + [f"weights.safetensors[{n!r}]" for n in order],
                      roles={n: "parameter" for n in names[len(specs) :]},
                      result_names=[_name(o.name) for o in server.outputs],
                      producer=("ReactantServer.jl bundle", server.format_version),
                      **options)  # type: ignore[arg-type]  # fmt: skip
    return _pack(text, items, out, opt)


def _name(text: str) -> str:
    return identifier(text, prefix="t_")


def _check_types(section: str, specs: list[TensorSpec], types: list, batch: int) -> None:
    for spec, t in zip(specs, types, strict=True):
        want = (spec.dtype, spec.shape(batch))
        if (t.dtype.name, t.shape) != want:
            raise InputError(
                f"manifest.yaml: {section} {spec.name!r} is {want[0]}{list(want[1])} in the "
                f"module's orientation (Julia's axes reversed, batch {batch}), but @main has "
                f"{t.dtype.name}{list(t.shape)}",
                field=section,
            )
    if len(specs) != len(types):
        raise InputError(f"manifest.yaml lists {len(specs)} {section}; @main has {len(types)}",
                         field=section)  # fmt: skip


def _weight(tf: _tensors.TensorFile, name: str, t: _mlir.TensorType) -> np.ndarray:
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

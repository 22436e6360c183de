"""The manifest: a pydantic model of `manifest.json` (SPEC.md, "Manifest").

Models are strict (`extra="forbid"`). A manifest with a newer minor version is read
tolerantly: fields this reader does not know are dropped, after a warning (SPEC.md, "Versions").
"""

from __future__ import annotations

import json
import keyword
import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from . import _limits, _symbolic
from ._dtypes import NAMES

# Format version history (SPEC.md, "Versions"):
# 1.0 (2026-12-02): first version.
# 1.1 (2026-12-02): `batched`, an optional batched module.
# 1.2 (2026-12-02): `model.sig` reserved for a signature; sub-byte dtypes.
# 1.3 (2026-12-03): `executables`, ahead-of-time compiled forms of the module.
# 2.0 (2026-12-03): `functions`, several named functions over one set of files, with symbolic
#     dimensions and `constraints`; `default_function`. A writer writes the oldest version that
#     can express a bundle (`minimum_version`): one static function is still 1.x.
FORMAT = "hlobundle"
FORMAT_VERSION = "2.0"
NEWEST_MINOR = {1: 3, 2: 0}  # the newest minor version of each major version this reader knows
MAX_FUNCTIONS = 64
# The provenance's producer, for bundles this package's producers write: `export()` (a JAX
# function) and `from_exported()` (a jax.export.Exported). The runner's hints depend on it.
PRODUCER_JAX = "jax"
PRODUCER_JAX_EXPORT = "jax.export"
MANIFEST_NAME = "manifest.json"
MAX_MANIFEST_BYTES = _limits.MAX_MANIFEST_BYTES

DTypeName = Literal[NAMES]  # type: ignore[valid-type]
Layout = Literal["row_major", "column_major"]
Role = Literal["input", "parameter", "state"]
Dim = Annotated[int, Field(ge=0)]


def _check_expression(text: str) -> str:
    try:
        dim = _symbolic.parse(text)
    except _symbolic.SymbolicError as e:
        raise ValueError(f"not a dimension expression (SPEC.md 2.8): {e}") from None
    if not dim.symbols:
        raise ValueError(f"dimension {text!r} has no symbol: write it as an integer")
    return text


# A symbolic dimension (format 2.0, SPEC.md 2.8): `b`, `2*b`, `b + 1`.
DimExpr = Annotated[str, AfterValidator(_check_expression)]
Shape = list[Dim | DimExpr]
Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
RelPath = Annotated[str, Field(min_length=1, max_length=255)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    @model_validator(mode="before")
    @classmethod
    def _drop_unknown_when_tolerant(cls, data: Any, info: ValidationInfo) -> Any:
        if info.context and info.context.get("tolerant") and isinstance(data, dict):
            return {k: v for k, v in data.items() if k in cls.model_fields}
        return data


class TensorRef(_Model):
    """Where a stored value lives: a safetensors file of the bundle and the key in it."""

    file: RelPath
    key: str = Field(min_length=1)


class MeshAxis(_Model):
    name: str = Field(min_length=1)
    size: int = Field(ge=1)


class DeviceMesh(_Model):
    """The logical device mesh of a sharded module (Shardy's `sdy.mesh`)."""

    axes: list[MeshAxis] = Field(min_length=1)
    device_ids: list[int] | None = None

    @property
    def size(self) -> int:
        n = 1
        for a in self.axes:
            n *= a.size
        return n


# Per tensor dimension, the mesh axes it is split over ([] = not split).
PartitionSpec = list[list[str]]


class Argument(_Model):
    name: str
    path: str
    shape: Shape
    dtype: DTypeName
    layout: Layout = "row_major"
    role: Role = "input"
    value: TensorRef | None = None
    sharding: PartitionSpec | None = None
    hlo_sharding: str | None = None

    @field_validator("name")
    @classmethod
    def _identifier(cls, name: str) -> str:
        return _check_identifier(name)


class Result(_Model):
    name: str
    shape: Shape
    dtype: DTypeName
    layout: Layout = "row_major"
    aliases: int | None = Field(default=None, ge=0)
    expected: TensorRef | None = None
    sharding: PartitionSpec | None = None
    hlo_sharding: str | None = None

    @field_validator("name")
    @classmethod
    def _identifier(cls, name: str) -> str:
        return _check_identifier(name)


class PortableArtifact(_Model):
    file: RelPath
    target_version: str = Field(pattern=r"^\d+\.\d+\.\d+$")


class Module(_Model):
    text: RelPath
    portable: PortableArtifact
    normalizations: list[str] = Field(default_factory=list)
    allowed_custom_calls: list[str] = Field(default_factory=list)


class BatchedModule(_Model):
    """A module of the function over a batch (SPEC.md, "Batched module"; format 1.1)."""

    text: RelPath
    portable: PortableArtifact
    arguments: list[str] = Field(min_length=1)


class Executable(_Model):
    """An ahead-of-time compiled form of `module` (SPEC.md, "Executables"; format 1.3): native
    code, which a reader runs only from a bundle it trusts and otherwise ignores."""

    target: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,63}$")  # IREE's target backend: llvm-cpu
    file: RelPath
    compiler: Literal["iree"]
    compiler_version: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9.+_-]{0,63}$")
    architecture: str = Field(pattern=r"^[A-Za-z0-9_-]{1,32}$")  # e.g. x86_64, aarch64
    cpu: str = Field(pattern=r"^[A-Za-z0-9_.+-]{1,64}$")  # "generic" runs on any CPU of it
    flags: list[str] = Field(default_factory=list)
    source_sha256: Sha256  # the portable artifact (module.portable.file) it was compiled from


class Provenance(_Model):
    producer: str
    producer_version: str
    jax_version: str | None = None
    jaxlib_version: str | None = None
    stablehlo_version: str | None = None
    timestamp: str | None = None


class FileEntry(_Model):
    size: int = Field(ge=0)
    sha256: Sha256


class FunctionFields(_Model):
    """What describes one function: a 1.x manifest's own fields, and each of a 2.0 manifest's
    `functions` (SPEC.md 2.8)."""

    arguments: list[Argument]
    results: list[Result]
    input_tree: Any = None
    output_tree: Any = None
    module: Module
    vjp: Module | None = None
    batched: BatchedModule | None = None
    mesh: DeviceMesh | None = None
    executables: list[Executable] | None = None
    constraints: list[str] | None = None  # on the symbols of the shapes (2.0, SPEC.md 2.8)


class Manifest(FunctionFields):
    format: Literal["hlobundle"]
    format_version: str = Field(pattern=r"^\d+\.\d+$")
    function: str = Field(min_length=1)
    provenance: Provenance
    files: dict[RelPath, FileEntry]

    @model_validator(mode="after")
    def _consistent(self) -> Manifest:
        _check_symbols(self)
        _check_unique([a.name for a in self.arguments], "arguments")
        _check_unique([r.name for r in self.results], "results")
        _check_unique([e.target for e in self.executables or []], "executables target")
        if self.batched is not None:
            _check_unique(self.batched.arguments, "batched.arguments")
            unknown = sorted(set(self.batched.arguments) - {a.name for a in self.arguments})
            if unknown:
                raise ValueError(f"batched.arguments names {unknown}, which are not arguments")
        axes = {a.name for a in self.mesh.axes} if self.mesh else set()
        for what, values in (("arguments", self.arguments), ("results", self.results)):
            for i, v in enumerate(values):
                if v.sharding is None:
                    continue
                if len(v.sharding) != len(v.shape):
                    raise ValueError(
                        f"{what}[{i}].sharding has {len(v.sharding)} entries for {len(v.shape)} dimensions"
                    )
                unknown = {a for dim in v.sharding for a in dim} - axes
                if unknown:
                    raise ValueError(
                        f"{what}[{i}].sharding uses mesh axes {sorted(unknown)} that mesh does not define"
                    )
        _check_tree(self.input_tree, {a.name for a in self.arguments}, "input_tree")
        _check_tree(self.output_tree, {r.name for r in self.results}, "output_tree")
        for i, r in enumerate(self.results):
            if r.aliases is not None and r.aliases >= len(self.arguments):
                raise ValueError(
                    f"results[{i}].aliases = {r.aliases} but there are "
                    f"{len(self.arguments)} arguments"
                )
        return self

    @property
    def symbolic(self) -> bool:
        """Whether any argument or result has a symbolic dimension (format 2.0)."""
        return any(isinstance(d, str) for v in [*self.arguments, *self.results] for d in v.shape)

    def argument(self, name: str) -> Argument:
        for a in self.arguments:
            if a.name == name:
                return a
        raise KeyError(name)

    def to_json(self) -> bytes:
        """Canonical bytes: sorted keys, two-space indent, trailing newline."""
        data = self.model_dump(mode="json", exclude_none=True)
        return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()


def _check_symbols(m: Manifest) -> None:
    """Symbolic dimensions and constraints: format 2.0 only, bounded, constraints over known
    symbols, and no batched module or mesh beside them (SPEC.md 2.8)."""
    dims = [d for v in [*m.arguments, *m.results] for d in v.shape if isinstance(d, str)]
    if not dims and not m.constraints:
        return
    if m.format_version.split(".")[0] == "1":
        raise ValueError("symbolic dimensions and constraints need format_version 2.0")
    arg_dims = [d for a in m.arguments for d in a.shape if isinstance(d, str)]
    symbols = {s for d in dims for s in _symbolic.parse(d).symbols}
    if len(symbols) > _symbolic.MAX_SYMBOLS:
        raise ValueError(f"{len(symbols)} symbols; the limit is {_symbolic.MAX_SYMBOLS}")
    arg_symbols = {s for d in arg_dims for s in _symbolic.parse(d).symbols}
    if symbols - arg_symbols:
        raise ValueError(
            f"result dimensions use symbols {sorted(symbols - arg_symbols)} that no argument's "
            "shape has: a caller could not determine them (SPEC.md 2.8)"
        )
    if len(m.constraints or []) > _symbolic.MAX_CONSTRAINTS:
        raise ValueError(f"more than {_symbolic.MAX_CONSTRAINTS} constraints")
    for text in m.constraints or []:
        try:
            left, _, right = _symbolic.parse_constraint(text)
        except _symbolic.SymbolicError as e:
            raise ValueError(f"constraints: {e}") from None
        unknown = (left.symbols | right.symbols) - symbols
        if unknown:
            raise ValueError(f"constraint {text!r} uses symbols {sorted(unknown)} no shape has")
    if m.batched is not None or m.mesh is not None:
        raise ValueError("a function with symbolic dimensions has no batched module or mesh")


X64_DTYPES = frozenset({"int64", "uint64", "float64", "complex128"})


def needs_x64(manifest: Manifest) -> bool:
    """Whether a bundle has 64-bit values (JAX truncates them unless `jax_enable_x64` is on)."""
    return any(v.dtype in X64_DTYPES for v in [*manifest.arguments, *manifest.results])


def identifier(text: str, prefix: str = "_") -> str:
    """An ASCII Python identifier made from `text` (a path, a key, a function name): every other
    character becomes `_`, and `prefix` goes first when it would start with a digit, be empty or
    be a keyword. The one sanitiser of the package: producers name values with it, the runner
    and the emitter name functions with it."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", text)
    return prefix + name if not name or name[0].isdigit() or keyword.iskeyword(name) else name


def _check_identifier(name: str) -> str:
    if not name.isidentifier() or keyword.iskeyword(name):
        raise ValueError(f"{name!r} is not a Python identifier")
    return name


def unflatten(tree: Any, by_name: dict[str, Any]) -> Any:
    """Values by name, nested as a pytree of SPEC 2.3 says (JSON arrays become tuples)."""
    if isinstance(tree, str):
        return by_name[tree]
    if isinstance(tree, list):
        return tuple(unflatten(t, by_name) for t in tree)
    if isinstance(tree, dict):
        return {k: unflatten(t, by_name) for k, t in tree.items()}
    return None


def _check_tree(tree: Any, names: set[str], field: str) -> None:
    """A pytree of SPEC 2.3: arrays, objects, null, and strings that name a value, each once."""
    leaves: list[str] = []
    pending = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, str):
            leaves.append(node)
        elif isinstance(node, list):
            pending.extend(node)
        elif isinstance(node, dict):
            pending.extend(node.values())
        elif node is not None:
            raise ValueError(f"{field} holds {type(node).__name__} {node!r:.40}; only arrays, "
                             "objects, null and names are allowed (SPEC.md 2.3)")  # fmt: skip
    unknown = sorted(set(leaves) - names)
    if unknown:
        raise ValueError(
            f"{field} names {unknown[:5]}, which are not its values' names (SPEC.md 2.3)"
        )
    if len(leaves) != len(set(leaves)):
        raise ValueError(f"{field} names a value twice (SPEC.md 2.3)")


def _check_unique(names: list[str], what: str) -> None:
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise ValueError(f"duplicate {what} name {n!r}")
        seen.add(n)

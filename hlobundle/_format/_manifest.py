"""The manifest: a pydantic model of `manifest.json` (SPEC.md, "Manifest").

Models are strict (`extra="forbid"`). A manifest with a newer minor version is read
tolerantly: fields this reader does not know are dropped, after a warning (SPEC.md, "Versions").
"""

from __future__ import annotations

import json
from functools import cached_property
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from . import _chunks, _manifest_checks
from ._dtypes import NAMES
from ._fields import (  # noqa: F401  (the format's names, here too for the writers)
    CPU_NAME,
    FORMAT,
    FORMAT_VERSION,
    FUNCTION_FIELDS,
    MANIFEST_NAME,
    MAX_FUNCTIONS,
    MAX_MANIFEST_BYTES,
    MAX_PLATFORMS,
    NEWEST_MINOR,
    PRODUCER_JAX,
    PRODUCER_JAX_EXPORT,
    X64_DTYPES,
    identifier,
    needs_x64,
    static_shape,
    unflatten,
)
from ._metadata import Metadata
from ._model import _Model

DTypeName = Literal[NAMES]  # type: ignore[valid-type]
Layout = Literal["row_major", "column_major"]
Role = Literal["input", "parameter", "state"]
Dim = Annotated[int, Field(ge=0)]


# A symbolic dimension (format 2.0, SPEC.md 2.8): `b`, `2*b`, `b + 1`.
DimExpr = Annotated[str, AfterValidator(_manifest_checks.check_expression)]
Shape = list[Dim | DimExpr]
Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
RelPath = Annotated[str, Field(min_length=1, max_length=255)]
Platform = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,15}$")]  # jax's: cpu, cuda, tpu
SymbolName = Annotated[str, Field(pattern=r"^[a-z_][a-z0-9_]{0,31}$")]  # SPEC.md 2.8's SYMBOL
SymbolValue = Annotated[int, Field(ge=1, le=999_999_999)]  # a symbol's value: 1 to 9 digits


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
        return _manifest_checks.check_identifier(name)


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
        return _manifest_checks.check_identifier(name)


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
    """An ahead-of-time compiled form of `module` (SPEC.md, "Executables"; format 1.3; XLA's,
    2.1): native code, which a reader runs only from a bundle it trusts and otherwise ignores."""

    target: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,63}$")  # IREE's llvm-cpu; xla-tpu
    file: RelPath
    compiler: Literal["iree", "xla"]
    compiler_version: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9.+_-]{0,63}$")  # xla: jaxlib's
    architecture: str = Field(pattern=r"^[A-Za-z0-9_-]{1,32}$")  # e.g. x86_64, aarch64
    cpu: str = Field(pattern=f"^{CPU_NAME}$")  # "generic" runs on any CPU of it
    flags: list[str] = Field(default_factory=list)
    source_sha256: Sha256  # the portable artifact (module.portable.file) it was compiled from
    # XLA's (format 2.1), each part of the key it runs under (SPEC.md 2.7):
    device_kind: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9 ._-]{0,63}$")
    topology: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9x:._-]{0,63}$")
    libtpu_version: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9.+_-]{0,63}$")
    # XLA's of a function with symbolic dimensions (format 2.2, 2026-12-07): the value of each
    # of its symbols that it was compiled for (SPEC.md 2.7, "Executables for several sizes").
    sizes: dict[SymbolName, SymbolValue] | None = Field(None, min_length=1, max_length=32)


class Provenance(_Model):
    producer: str
    producer_version: str
    jax_version: str | None = None
    jaxlib_version: str | None = None
    stablehlo_version: str | None = None
    timestamp: str | None = None


class Chunks(_Model):
    """A file's chunk digests (format 2.1, SPEC.md 2.9): `sha256[i]` is that of bytes
    `[i * size, (i + 1) * size)`, the last chunk shorter."""

    size: int
    sha256: list[Sha256]

    @field_validator("size")
    @classmethod
    def _power_of_two(cls, size: int) -> int:
        if not _chunks.valid_size(size):
            raise ValueError(
                f"chunks.size {size} is not a power of two from {_chunks.MIN_CHUNK} to "
                f"{_chunks.MAX_CHUNK}"
            )
        return size


class FileEntry(_Model):
    size: int = Field(ge=0)
    sha256: Sha256
    chunks: Chunks | None = None  # since 2.1

    @model_validator(mode="after")
    def _chunk_count(self) -> FileEntry:
        if self.chunks is not None:
            want = _chunks.count(self.size, self.chunks.size)
            if len(self.chunks.sha256) != want:
                raise ValueError(
                    f"chunks.sha256 has {len(self.chunks.sha256)} digests; a file of "
                    f"{self.size} bytes has {want} chunks of {self.chunks.size}"
                )
        return self


class IndependentRows(_Model):
    """A producer's claim that a function's rows are independent along one symbolic dimension
    (format 2.1, SPEC.md 2.13): the axis of each argument and result that the symbol sizes.
    Calls on blocks of rows joined along those axes give those calls' results joined, so a
    runner may fold a `jax.vmap` into the symbol, and a server join requests along it. Trusted
    only as a batched module is: under the user's key, or with `Trust.BATCHED`."""

    arguments: dict[str, Dim] = Field(min_length=1)  # names checked against the arguments
    results: dict[str, Dim] = Field(min_length=1)
    checked: bool = False  # the writer compared joined calls with calls on each block


class ExpectedFrom(_Model):
    """Where a function's expected outputs were computed (format 2.2, SPEC.md 2.15): jax's
    platform name and device kind, the jaxlib that computed them, and the lowest precision
    the module's dot and convolution ops asked for as they ran (None: it has none)."""

    platform: Platform
    device_kind: str | None = Field(None, pattern=r"^[ -~]{1,256}$")  # printable ASCII
    jaxlib_version: str | None = Field(None, pattern=r"^[0-9A-Za-z.+_-]{1,64}$")
    precision: Literal["DEFAULT", "HIGH", "HIGHEST"] | None = None


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
    independent_rows: IndependentRows | None = None  # since 2.1 (SPEC.md 2.13)
    # Lowered for each (jax.export's `platforms`): @main takes the index first (2.1, 2.14)
    platforms: list[Platform] | None = Field(None, min_length=2, max_length=MAX_PLATFORMS)
    expected_from: ExpectedFrom | None = None  # since 2.2 (SPEC.md 2.15)

    def tensors(self) -> list[Argument | Result]:
        """The arguments, then the results (what a loop over both reads: name, shape, dtype)."""
        return [*self.arguments, *self.results]


# A manifest of one function: a 1.x manifest, or a 2.0 bundle's view of one of its functions
# (`BundleManifest.views`). (No docstring: the schema would take it as a description.)
class Manifest(FunctionFields):
    format: Literal["hlobundle"]
    format_version: str = Field(pattern=r"^\d+\.\d+$")
    function: str = Field(min_length=1)
    provenance: Provenance
    files: dict[RelPath, FileEntry]
    metadata: Metadata | None = None  # the bundle's, as provenance is (2.1, SPEC.md 2.12)

    @model_validator(mode="after")
    def _consistent(self) -> Manifest:
        _manifest_checks.check_function(self)
        return self

    @cached_property
    def symbolic(self) -> bool:
        """Whether any argument or result has a symbolic dimension (format 2.0)."""
        return any(isinstance(d, str) for v in self.tensors() for d in v.shape)

    @property
    def row_symbol(self) -> str | None:
        """The symbol of the declared independent rows (SPEC.md 2.13), or None without them."""
        if self.independent_rows is None:
            return None
        name, axis = next(iter(self.independent_rows.arguments.items()))
        return str(self.argument(name).shape[axis])

    def argument(self, name: str) -> Argument:
        """The argument named `name` (a `KeyError` when there is none, an unhashable `name`
        such as a list included: no argument has it, as the scan of the list said)."""
        try:
            return self.arguments_by_name[name]
        except TypeError:
            raise KeyError(name) from None

    @cached_property
    def arguments_by_name(self) -> dict[str, Argument]:
        """The arguments by name (unique, `_manifest_checks`): looking each one up in the list
        made reading every tensor of a bundle quadratic, 0.5 s for 4,096 arguments."""
        return {a.name: a for a in self.arguments}

    def to_json(self) -> bytes:
        """Canonical bytes: sorted keys, two-space indent, trailing newline."""
        data = self.model_dump(mode="json", exclude_none=True)
        return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()

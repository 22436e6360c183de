"""The format's names and constants (and the manifest file's bytes, read within its limit), and
helpers over shapes and trees, without pydantic: what the manifest's models (`_manifest.py`)
are built with, and what runners and writers use of the format without needing the models."""

from __future__ import annotations

import keyword
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from . import _limits

# Format version history (SPEC.md, "Versions"):
# 1.0 (2026-12-02): first version.
# 1.1 (2026-12-02): `batched`, an optional batched module.
# 1.2 (2026-12-02): `model.sig` reserved for a signature; sub-byte dtypes.
# 1.3 (2026-12-03): `executables`, ahead-of-time compiled forms of the module.
# 2.0 (2026-12-03): `functions`, several named functions over one set of files, with symbolic
#     dimensions and `constraints`; `default_function`. A writer writes the oldest version that
#     can express a bundle (`minimum_version`): one static function is still 1.x.
# 2.1 (2026-12-04): `files[NAME].chunks`, a digest per fixed-size chunk of a file, so that a
#     byte range is checked on its own (remote loading); bundles of several functions have them.
#     (2026-12-05): `metadata`, what a model card says, and its `README.md` (SPEC.md 2.12);
#     `independent_rows`, a function's rows declared independent along a symbol (2.13);
#     `platforms`, a function lowered for several platforms, selected by an index (2.14).
# 2.2 (2026-12-06): `expected_from`, where a function's expected outputs were computed and at
#     what precision its dot and convolution ops ran (2.15), which a check's tolerance follows.
#     And `executables` of compiler `xla`, PJRT's serialization of XLA's executable, with their
#     key: `device_kind`, `topology`, `libtpu_version` (2.7).
FORMAT: Literal["hlobundle"] = "hlobundle"
FORMAT_VERSION = "2.2"
NEWEST_MINOR = {1: 3, 2: 2}  # the newest minor version of each major version this reader knows
MAX_FUNCTIONS = 64
# The provenance's producer, for bundles this package's producers write: `export()` (a JAX
# function), `from_exported()` (a jax.export.Exported) and `from_torch()` (a torch.export
# program; its version is torch's). The runner's hints depend on it.
PRODUCER_JAX = "jax"
PRODUCER_JAX_EXPORT = "jax.export"
PRODUCER_TORCH = "torch"
MANIFEST_NAME = "manifest.json"
MAX_MANIFEST_BYTES = _limits.MAX_MANIFEST_BYTES
CPU_NAME = r"[A-Za-z0-9_.+-]{1,64}"  # an executable's target CPU: generic, host's name, znver3
MAX_PLATFORMS = 8


@dataclass(frozen=True)
class CompilerRule:
    """What one compiler's `executables` entries are (SPEC.md 2.7): what made them, as a
    person reads it beside `compiler_version`, the prefix of their targets, the key fields they
    give (the others of `EXECUTABLE_KEY_FIELDS` they leave out, `optional` aside), the
    format version they need, and whether a function with symbolic dimensions has one for each
    of its `sizes` (its module compiled at static shapes) rather than one that runs every size."""

    made_by: str
    target_prefix: str
    key: tuple[str, ...]
    optional: tuple[str, ...]
    version: tuple[int, int]
    per_size: bool = False


EXECUTABLE_KEY_FIELDS = ("device_kind", "topology", "libtpu_version")
COMPILERS = {
    "iree": CompilerRule("IREE", "", (), (), (1, 3)),
    "xla": CompilerRule(
        "XLA, jaxlib", "xla-", ("device_kind", "topology"), ("libtpu_version",), (2, 2), True
    ),
}


def compiler_of(target: str) -> str:
    """The compiler whose targets `target` is one of: the longest prefix that it bears."""
    return max(
        (c for c, r in COMPILERS.items() if target.startswith(r.target_prefix)),
        key=lambda c: len(COMPILERS[c].target_prefix),
    )


X64_DTYPES = frozenset({"int64", "uint64", "float64", "complex128"})


def made_by(entry: Any) -> str:
    """What made an `executables` entry, as a person reads it: `IREE 3.13.0`."""
    return f"{COMPILERS[entry.compiler].made_by} {entry.compiler_version}"


# The fields that describe one function: a 1.x manifest's own, and each of a 2.0 manifest's
# `functions` (SPEC.md 2.8); `_bundle_manifest.py` checks that the model has exactly these.
FUNCTION_FIELDS = (
    "arguments",
    "results",
    "input_tree",
    "output_tree",
    "module",
    "vjp",
    "batched",
    "mesh",
    "executables",
    "constraints",
    "independent_rows",
    "platforms",
    "expected_from",
)
# What each function's view takes from a manifest of several functions: the bundle's own fields.
SHARED_FIELDS = ("provenance", "files", "metadata")


def static_shape(shape: Sequence[int | str]) -> tuple[int, ...]:
    """A shape the caller knows has no symbolic dimension (a 1.x function's, say), as a tuple."""
    dims = tuple(d for d in shape if isinstance(d, int))
    assert len(dims) == len(shape), f"{shape}: the caller expects no symbolic dimension"
    return dims


def needs_x64(manifest: Any) -> bool:
    """Whether a bundle has 64-bit values (JAX truncates them unless `jax_enable_x64` is on)."""
    return any(v.dtype in X64_DTYPES for v in manifest.tensors())


def identifier(text: str, prefix: str = "_") -> str:
    """An ASCII Python identifier made from `text` (a path, a key, a function name): every other
    character becomes `_`, and `prefix` goes first when it would start with a digit, be empty or
    be a keyword. The one sanitiser of the package: producers name values with it, the runner
    and the emitter name functions with it."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", text)
    return prefix + name if not name or name[0].isdigit() or keyword.iskeyword(name) else name


def unflatten(tree: Any, by_name: dict[str, Any]) -> Any:
    """Values by name, nested as a pytree of SPEC 2.3 says (JSON arrays become tuples)."""
    if isinstance(tree, str):
        return by_name[tree]
    if isinstance(tree, list):
        return tuple(unflatten(t, by_name) for t in tree)
    if isinstance(tree, dict):
        return {k: unflatten(t, by_name) for k, t in tree.items()}
    return None

"""`emit_script()`: a minimal, standalone `run.py` for a bundle.

The script is `run_template.py`, a real, linted Python file, with its data slots filled in with
`repr()` literals of the bundle's values, and one function appended: the bundle's, named after
it, with one documented parameter per argument (`_template` writes it). Manifest strings reach
the script only as such literals; the only names written as code are plain ASCII identifiers
checked there. The script
imports only jax and numpy, and enzyme_ad for the enzyme backend (never hlobundle), and reads
the bundle at its path relative to the script (`bundle_path="relative"`), or at the absolute
path `bundle_path="absolute"` pins; away from it, the script exits naming the path it needs.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Literal

from .._format._errors import InputError, OutputExistsError
from .._format._manifest import Executable, needs_x64
from .._format._policy import calls_lapack
from .._format._sharding import partition_spec_entries
from .._read._reader import Bundle, load
from .._run import _backends
from .._run._backends._enzyme import prepared_for_hlo_call
from .._version import __version__
from .._write._atomic import write_file_atomically
from .._write._target import refuse_inside_a_bundle
from . import _template


def emit_script(
    bundle: Bundle | str | os.PathLike[str],
    path: str | os.PathLike[str] | None = None,
    *,
    backend: str = "auto",
    force: bool = False,
    trust_executables: bool = False,
    bundle_path: Literal["relative", "absolute"] = "relative",
) -> str:
    """Write (when `path` is given) and return the source of a standalone script for `bundle`.

    **Arguments:**

    - `bundle`: a `Bundle` or a bundle's path.
    - `path`: where to write the script; it reaches the bundle by a path relative to this
      location. Without `path`, the script is returned and expects to sit beside the bundle.
    - `backend`: how the script calls the module: `"xla"` (needs only jax; differentiable when
      the bundle stores a backward module), `"enzyme"` (enzyme_ad's `hlo_call`, Python 3.11), or
      `"auto"` (enzyme where it is installed here, else xla, as `run` chooses), or `"iree"`
      (needs only iree-base-runtime: the bundle's stored executable, from `hlobundle compile`).
    - `force`: replace an existing file at `path`.
    - `trust_executables`: iree: write a script that runs the stored executable (native code)
      of a bundle whose signature was not verified with a key (`load(..., public_key=...)`).
    - `bundle_path`: how the script finds the bundle: `"relative"` (its path relative to the
      script: move or copy both together) or `"absolute"` (the bundle's absolute path: the
      script may go anywhere on this machine, the bundle may not move).

    **Returns:** the script's source.
    """
    bundle = bundle if isinstance(bundle, Bundle) else load(bundle)
    chosen = script_backend(bundle, backend)
    # A script outside JAX (iree) runs a stored executable: chosen and checked before anything
    # is written.
    outside_jax = not _backends.kind(chosen).JAX
    stored = _executable_for_script(bundle, trust_executables) if outside_jax else None
    if bundle_path not in ("relative", "absolute"):
        raise InputError(f"bundle_path must be 'relative' or 'absolute', got {bundle_path!r}",
                         argument="bundle_path")  # fmt: skip
    absolute = str(bundle.path.resolve()) if bundle_path == "absolute" else None
    if path is None:
        return _source(bundle, absolute or bundle.path.resolve().name, chosen, stored)
    target = Path(path)
    refuse_inside_a_bundle(target)
    if target.exists() and not force:
        raise OutputExistsError(
            f"{str(target)!r} already exists; pass --force to replace it", path=target
        )
    where = absolute or os.path.relpath(bundle.path.resolve(), target.resolve().parent)
    source = _source(bundle, where, chosen, stored)
    write_file_atomically(target, source.encode("utf-8"))
    return source


def script_backend(bundle: Bundle, backend: str) -> str:
    """The backend the script uses: xla for symbolic shapes, which hlo_call cannot take."""
    if not bundle.manifest.symbolic:  # a script outside JAX needs no backend installed here
        kind = _backends.kind(backend)
        return kind.NAME if not kind.JAX else _backends.resolve(backend).NAME
    if backend not in ("auto", "xla"):
        raise InputError(
            f"function {bundle.manifest.function!r} has symbolic shapes (SPEC.md 2.8), which "
            f"an emitted {backend} script cannot call: emit it with --backend xla",
            argument="backend",
        )
    return "xla"


def _source(
    bundle: Bundle, where: str, backend: str, stored: tuple[Executable, bytes] | None = None
) -> str:
    if stored is not None:
        return _iree_source(bundle, where, *stored)
    m = bundle.manifest
    enzyme = backend == "enzyme"
    prepared = prepared_for_hlo_call(bundle) if enzyme else None
    vjp = m.vjp.portable.file if m.vjp else None
    modules = [m.module.portable.file, vjp] if backend == "xla" else [m.module.text]
    read = modules if not (prepared and prepared.changed) else []
    slots = {
        **_data_slots(bundle, where, read),
        "BACKEND": backend,
        "CONSTRAINTS": list(m.constraints or ()),
        "X64": needs_x64(m),
        "ARGUMENT_CARRIERS": list(prepared.argument_carriers) if prepared else [],
        "RESULT_CARRIERS": list(prepared.result_carriers) if prepared else [],
        "MESH_AXES": [(a.name, a.size) for a in m.mesh.axes] if m.mesh else None,
        "DEVICE_ORDER": (m.mesh.device_ids or list(range(m.mesh.size))) if m.mesh else None,
        "ARGUMENT_SHARDINGS": [list(partition_spec_entries(a.sharding)) for a in m.arguments]
        if m.mesh else None,
        "PORTABLE_FILE": m.module.portable.file,
        "BACKWARD_FILE": vjp,
        "MODULE_FILE": m.module.text,
        "MODULE_LINES": prepared.text.split("\n") if prepared and prepared.changed else [],
        "CALLS_LAPACK": enzyme and calls_lapack(bundle.modules["module"].custom_calls),
    }  # fmt: skip
    return _template.written("run_template.py", slots, bundle.manifest, "JAX or NumPy")


def _data_slots(bundle: Bundle, where: str, modules: list[str | None]) -> dict[str, Any]:
    """The slots every template has: where the bundle is, what it is, its values' files, and
    the sha256 of each file the script reads (`modules` and the tensor files), as checked here."""
    m = bundle.manifest
    inputs = [(a.value.file, a.value.key) for a in m.arguments  # type: ignore[union-attr]
              ] if bundle.has_example_inputs else None  # fmt: skip
    expected = [(r.expected.file, r.expected.key) for r in m.results  # type: ignore[union-attr]
                ] if all(r.expected for r in m.results) else []  # fmt: skip
    read = {*modules, *(f for f, _ in [*(inputs or []), *expected])} - {None}
    return {
        "WHERE": where,
        "ABOUT": {"function": m.function, "format_version": m.format_version,
                  "producer": m.provenance.producer, "producer_version": m.provenance.producer_version,
                  "emitted_by": f"hlobundle {__version__}"},
        "ARGUMENTS": [(a.name, tuple(a.shape), a.dtype) for a in m.arguments],
        "RESULTS": [(r.name, tuple(r.shape), r.dtype) for r in m.results],
        "PATHS": {a.name: a.path for a in m.arguments},
        "INPUTS": inputs,
        "EXPECTED": expected,
        "SHA256": {name: bundle.checked_sha256(name) for name in sorted(read)},  # type: ignore[arg-type]
    }  # fmt: skip


def _executable_for_script(bundle: Bundle, trusted: bool) -> tuple[Executable, bytes]:
    """The stored executable an IREE script runs: one this runtime can use, checked."""
    from .._run._backends import _iree

    if not bundle.manifest.executables:  # nothing to trust yet: say what to do first
        raise InputError(
            f"{bundle.path} has no stored executable for an iree script to run; compile "
            f"first: store one with: hlobundle compile {bundle.path}",
            argument="backend",
        )
    if not (trusted or bundle.trusted):
        raise InputError(
            "an iree script runs the bundle's stored executable, which is native code: verify "
            "the bundle's signature (--public-key) or pass --trust-executables",
            argument="trust_executables",
        )
    reasons = []
    for entry in bundle.manifest.executables or []:
        why = _iree.usable(entry, bundle)
        if why is None:
            return entry, bundle.executable(entry.target)  # type: ignore[return-value]
        reasons.append(f"{entry.file}: {why}")
    raise InputError(
        f"{bundle.path} has no executable this IREE runtime can run"
        + (f" ({'; '.join(reasons)})" if reasons else "")
        + f": store one with: hlobundle compile {bundle.path}",
        argument="backend",
    )


def _iree_source(bundle: Bundle, where: str, entry: Executable, data: bytes) -> str:
    from .._run._backends import _iree

    m = bundle.manifest
    dtypes = sorted({v.dtype for v in [*m.arguments, *m.results]})
    slots = {
        **_data_slots(bundle, where, []),
        "EXECUTABLE_FILE": entry.file,
        "EXECUTABLE_SHA256": hashlib.sha256(data).hexdigest(),
        "IREE_VERSION": entry.compiler_version,
        "ELEMENT_TYPES": {d: _iree.element_type_name(d) for d in dtypes},
    }
    return _template.written("run_iree_template.py", slots, bundle.manifest, "NumPy")

"""`emit_script()`: a minimal, standalone `run.py` for a bundle.

The script is `run_template.py`, a real, linted Python file, with its data slots filled in with
`repr()` literals of the bundle's values, and one function appended: the bundle's, named after
it, with one documented parameter per argument (`_template` writes it). Manifest strings reach
the script only as such literals; the only names written as code are plain ASCII identifiers
checked there. The script
imports only jax and numpy, and enzyme_ad for the enzyme backend or where the default, auto,
finds it (never hlobundle), and reads
the bundle at its path relative to the script (`bundle_path="relative"`), or at the absolute
path `bundle_path="absolute"` pins; away from it, the script exits naming the path it needs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from .._file_io._durable import write_file_atomically
from .._format._errors import InputError, OutputExistsError
from .._format._paths import is_remote
from .._output._target import refuse_inside_a_bundle
from .._read._reader import Bundle, load
from .._read._trust import Trust, trust_from
from .._run import _backends
from .._run._backends import Script
from .._version import __version__
from . import _template


def emit_script(
    bundle: Bundle | str | os.PathLike[str],
    path: str | os.PathLike[str] | None = None,
    *,
    backend: str = "auto",
    force: bool = False,
    trust: Trust = Trust.NOTHING,
    bundle_path: Literal["relative", "absolute"] = "relative",
    trust_executables: bool | None = None,
) -> str:
    """Write (when `path` is given) and return the source of a standalone script for `bundle`.

    **Arguments:**

    - `bundle`: a `Bundle` or a bundle's path.
    - `path`: where to write the script; it reaches the bundle by a path relative to this
      location. Without `path`, the script is returned and expects to sit beside the bundle.
    - `backend`: how the script calls the module: `"xla"` (needs only jax; differentiable when
      the bundle stores a backward module), `"enzyme"` (enzyme_ad's `hlo_call`, Python 3.11;
      it must be installed where the script runs), `"auto"` (the default: a script that needs
      only jax and calls the module with enzyme_ad where it imports when the script runs, else
      with xla; xla alone for symbolic shapes), or `"iree"` (needs only iree-base-runtime: the
      bundle's stored executable, from `hlobundle compile`).
    - `force`: replace an existing file at `path`.
    - `trust`: `hlobundle.Trust.EXECUTABLES`: iree: write a script that runs the stored
      executable (native code) of a bundle whose signature was not verified with a key
      (`load(..., public_key=...)`). (`trust_executables=True`, before 2.1, goes in 3.0.)
    - `bundle_path`: how the script finds the bundle: `"relative"` (its path relative to the
      script: move or copy both together) or `"absolute"` (the bundle's absolute path: the
      script may go anywhere on this machine, the bundle may not move).

    **Returns:** the script's source.
    """
    trust = trust_from(trust, trust_executables, "emit_script")
    refuse_remote(bundle)
    bundle = bundle if isinstance(bundle, Bundle) else load(bundle)
    # What the script is (a stored executable it runs, for one) is checked before anything is
    # written.
    script = _backends.script(backend, bundle, trust)
    if bundle_path not in ("relative", "absolute"):
        raise InputError(
            f"bundle_path must be 'relative' or 'absolute', got {bundle_path!r}",
            argument="bundle_path",
        )
    absolute = str(bundle.path.resolve()) if bundle_path == "absolute" else None
    if path is None:
        return _source(bundle, absolute or bundle.path.resolve().name, script)
    target = Path(path)
    refuse_inside_a_bundle(target)
    if target.exists() and not force:
        raise OutputExistsError(
            f"{str(target)!r} already exists; pass --force to replace it", path=target
        )
    where = absolute or os.path.relpath(bundle.path.resolve(), target.resolve().parent)
    source = _source(bundle, where, script)
    write_file_atomically(target, source.encode("utf-8"))
    return source


def refuse_remote(bundle: Bundle | str | os.PathLike[str]) -> None:
    """An `InputError` for a remote bundle (loaded, or a reference), before anything is
    fetched: a script reads its bundle's files from a directory, and a remote bundle's are
    fetched only in part."""
    ref = bundle.remote if isinstance(bundle, Bundle) else os.fspath(bundle)
    if isinstance(ref, str) and is_remote(ref):
        raise InputError(
            f"{ref[:200]}: a script reads its bundle's files from a directory, and a remote "
            "bundle's files are fetched only in part: pull it first (hlobundle pull REF -o "
            "DIR) and emit a script of that",
            argument="bundle",
        )


def script_backend(bundle: Bundle, backend: str) -> str:
    """The backend the script uses (`_backends.script_name`): `auto`, which picks when the
    script runs, or xla for symbolic shapes, which hlo_call cannot take."""
    return _backends.script_name(backend, bundle.manifest)


def _source(bundle: Bundle, where: str, script: Script) -> str:
    slots = {**_data_slots(bundle, where, list(script.reads)), **script.slots}
    return _template.written(script.template, slots, bundle.manifest, script.takes)


def _expected_from(bundle: Bundle) -> tuple[str, str | None, str | None, str | None, str | None]:
    """Where the expected outputs were computed (SPEC.md 2.15; a CPU, with the writer's jaxlib,
    where the bundle records nothing) and the lowest precision the module's dot and
    convolution ops ask for (None: it has none, so that no precision can matter)."""
    from .._run._run import believed, lowest_asked, written_by
    from .._run._tolerance import Computed

    asked = lowest_asked(bundle)
    record = bundle.manifest.expected_from
    if record is None:
        return ("cpu", None, asked, written_by(bundle), asked)
    claim = Computed(record.platform, record.device_kind, record.precision, record.jaxlib_version)
    claim = believed(claim, asked)
    return (claim.platform, claim.device_kind, claim.precision, claim.jaxlib_version, asked)


def _data_slots(bundle: Bundle, where: str, modules: list[str | None]) -> dict[str, Any]:
    """The slots every template has: where the bundle is, what it is, its values' files, and
    the sha256 of each file the script reads (`modules` and the tensor files), as checked here."""
    m = bundle.manifest
    inputs = (
        [(a.value.file, a.value.key) for a in m.arguments if a.value]
        if bundle.has_example_inputs
        else None
    )
    expected = (
        [(r.expected.file, r.expected.key) for r in m.results if r.expected]
        if all(r.expected for r in m.results)
        else []
    )
    read = {n for n in [*modules, *(f for f, _ in [*(inputs or []), *expected])] if n is not None}
    return {
        "WHERE": where,
        "ABOUT": {
            "function": m.function,
            "format_version": m.format_version,
            "producer": m.provenance.producer,
            "producer_version": m.provenance.producer_version,
            "emitted_by": f"hlobundle {__version__}",
        },
        "ARGUMENTS": [(a.name, tuple(a.shape), a.dtype) for a in m.arguments],
        "RESULTS": [(r.name, tuple(r.shape), r.dtype) for r in m.results],
        "OUTPUT_TREE": m.output_tree,
        "COLUMN_MAJOR": {
            "arguments": [a.name for a in m.arguments if a.layout == "column_major"],
            "results": [r.name for r in m.results if r.layout == "column_major"],
        },
        "PATHS": {a.name: a.path for a in m.arguments},
        "INPUTS": inputs,
        "EXPECTED": expected,
        "EXPECTED_FROM": _expected_from(bundle) if expected else None,
        "SHA256": {name: bundle.checked_sha256(name) for name in sorted(read)},
    }

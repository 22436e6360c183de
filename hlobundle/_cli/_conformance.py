"""`hlobundle conformance`: run the conformance cases against this or another implementation.

A case is a folder (SPEC.md, "Conformance"):

- `bundle/`: a bundle, valid or deliberately broken;
- `case.json`: `{"description", "expect": "ok" or an error code, "rtol", "atol"}`;
- for valid cases, `outputs.safetensors`: the expected results, keyed by result name and stored
  by SPEC.md's dtype rules; and `inputs.npz` when the bundle stores no example inputs.

Another implementation is held to the suite through a command (`--implementation CMD`) that
accepts `CMD verify BUNDLE --json`, printing `{"ok": bool, "code": ...}`, and
`CMD run BUNDLE [--inputs FILE] --save-outputs OUT.safetensors --json`, as `hlobundle` does.

A valid case an implementation cannot run (a dtype or op its runtime lacks) may be refused with
`BACKEND_UNSUPPORTED`: it is reported as refused, neither passed nor failed. A case whose
`needs` names an optional part (`signatures`) that the implementation lacks, answered with
`BACKEND_UNAVAILABLE`, is reported as skipped, with the implementation's message (for this
library, the `pip install` line).

A case whose bundle holds a symlink (which a wheel cannot carry) names it in `symlinks`
(`{"bundle/LINK": "TARGET"}`, relative to the case's folder): the runner makes it in a private
temporary copy of the case and runs that, never writing into the case's folder.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shlex
import shutil
import subprocess
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .._bundle_io import _tensors
from .._format import _dtypes
from .._format._errors import HloBundleError, InputError
from .._format._manifest import Manifest
from .._run._tolerance import CPU, F32_ROUNDOFF, Computed, compare, widened, widening

if TYPE_CHECKING:
    from .._run._backends import BackendName

REFUSAL = "BACKEND_UNSUPPORTED"  # a valid case the implementation says it cannot run
ABSENT = "BACKEND_UNAVAILABLE"  # an optional part a case `needs` is not there: skipped


@dataclasses.dataclass(frozen=True)
class Outcome:
    case: str
    expect: str
    got: str
    passed: bool
    detail: str = ""

    @property
    def refused(self) -> bool:
        return self.expect == "ok" and self.got == REFUSAL

    skipped: bool = False  # it `needs` an optional part the implementation lacks

    @property
    def result(self) -> str:
        if self.skipped:
            return "skipped"
        return "pass" if self.passed else "refused" if self.refused else "FAIL"


# The cases shipped with the package (package data), which `hlobundle conformance` runs by default.
INSTALLED = Path(__file__).resolve().parent.parent / "conformance_cases"


def cases(root: Path) -> list[Path]:
    found = sorted(p.parent for p in root.glob("*/case.json"))
    if not found:
        raise InputError(f"no conformance cases (*/case.json) under {str(root)!r}", path=root)
    return found


def run_case(
    case: Path, implementation: list[str] | None = None, backend: BackendName = "auto"
) -> Outcome:
    with prepared(case) as here:  # a copy keeps the case's name
        return _run_prepared(here, implementation, backend)


@contextlib.contextmanager
def prepared(case: Path) -> Iterator[Path]:
    """The case's folder, or, when its `case.json` names `symlinks`, a private temporary copy
    of it with each link made (SPEC.md 9): a wheel cannot carry a symlink, and the installed
    package is never written to. A link must land inside the copy, where nothing is yet."""
    links = json.loads((case / "case.json").read_text()).get("symlinks")
    if links is None:
        yield case
        return
    with tempfile.TemporaryDirectory(prefix="hlobundle-case-") as tmp:
        copy = Path(tmp) / case.name
        shutil.copytree(case, copy, symlinks=True)
        for link, target in _links(case, links):
            where = copy / link
            inside = where.parent.resolve().is_relative_to(copy.resolve())
            if not inside or not where.parent.is_dir() or os.path.lexists(where):
                raise InputError(
                    f"case.json `symlinks`: {link!r} is not a new name inside the case's folder",
                    path=case / "case.json",
                )
            os.symlink(target, where)
        yield copy


def _links(case: Path, links: object) -> list[tuple[str, str]]:
    if not isinstance(links, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in links.items()
    ):
        raise InputError(
            "case.json `symlinks` must map link paths to targets, both strings",
            path=case / "case.json",
        )
    return list(links.items())


def _run_prepared(case: Path, implementation: list[str] | None, backend: BackendName) -> Outcome:
    spec = json.loads((case / "case.json").read_text())
    expect = spec["expect"]
    key = case / spec["public_key"] if "public_key" in spec else None  # verify its signature
    got, detail, outputs, here = (
        _run_external(case, implementation, key)
        if implementation
        else _run_here(case, key, backend)
    )
    if got == "ok" and expect == "ok":
        # The outputs were computed on a CPU (generate.py), by a jaxlib the suite does not
        # record: widened as `run` widens (SPEC.md 2.15) for another computation, the more
        # where the implementation computed dots and convolutions with fewer bits, which its
        # module must have for any precision to matter.
        here = _believed(case, spec.get("function"), here)
        u = widening(Computed("cpu", None, here.precision), here)
        detail = _compare(case, outputs, spec["rtol"], spec["atol"], u)
        if not detail and "fingerprint" in spec:
            detail = _check_fingerprint(case, implementation, spec["fingerprint"])
        passed = not detail
    elif got == ABSENT != expect and spec.get("needs"):
        return Outcome(case.name, expect, got, False, detail, skipped=True)
    else:
        passed = got == expect
    return Outcome(case.name, expect, got, passed, detail)


def _believed(case: Path, function: str | None, here: Computed) -> Computed:
    """Where the implementation says it computed, taken as `run` takes a manifest's record
    (`_run.believed`): its precision never lower than the case's module asks for, and none
    where the module has no dot or convolution op. A claim of float32 widens nothing anyway,
    and is taken as it is."""
    from .._read._reader import load
    from .._run._run import believed, lowest_asked

    if here.roundoff <= F32_ROUNDOFF:
        return here
    with warnings.catch_warnings():  # a newer minor version's, as `_run_here` reads it
        warnings.simplefilter("ignore")
        bundle = load(case / "bundle").select(function)
    return believed(here, lowest_asked(bundle))


def _check_fingerprint(case: Path, implementation: list[str] | None, expected: str) -> str:
    """What is wrong with the bundle's fingerprint (SPEC.md 2.11) as computed here, or by
    `CMD fingerprint BUNDLE --json` (its `bundle`); "" when it is the case's."""
    if implementation:
        got = _call([*implementation, "fingerprint", str(case / "bundle"), "--json"]).get("bundle")
    else:
        from .._read._reader import load

        with warnings.catch_warnings():  # a newer minor version's, as `_run_here` reads it
            warnings.simplefilter("ignore")
            got = load(case / "bundle").fingerprint()
    return "" if got == expected else f"fingerprint {str(got)[:80]}, expected {expected}"


_Ran = tuple[str, str, dict[str, np.ndarray], Computed]


def _run_here(case: Path, key: Path | None, backend: BackendName) -> _Ran:
    from .._read._reader import load
    from .._run._run import sides

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            bundle = load(case / "bundle")
            bundle.verify(public_key=key)
            bundle = bundle.select(json.loads((case / "case.json").read_text()).get("function"))
            fn = bundle.function(backend)
            args = _inputs(case, bundle.manifest) or [
                bundle.tensor(a.name) for a in bundle.arguments
            ]
            results = fn.call_flat(*args)
            here = sides(bundle, fn)[1]
    except HloBundleError as e:
        return e.code, e.message, {}, CPU
    outputs = {r.name: np.asarray(x) for r, x in zip(bundle.results, results, strict=True)}
    return "ok", "", outputs, here


def _inputs(case: Path, manifest: Manifest) -> list[np.ndarray] | None:
    path = case / "inputs.npz"
    if not path.exists():
        return None
    with np.load(path, allow_pickle=False) as npz:
        return [npz[a.name] for a in manifest.arguments]


def _run_external(case: Path, command: list[str], key: Path | None) -> _Ran:
    bundle = case / "bundle"
    signed = ["--public-key", str(key)] if key else []
    verdict = _call([*command, "verify", str(bundle), "--json", *signed])
    if not verdict.get("ok"):
        return str(verdict.get("code")), str(verdict.get("message", "")), {}, CPU
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "outputs.safetensors"
        extra = ["--inputs", str(case / "inputs.npz")] if (case / "inputs.npz").exists() else []
        function = json.loads((case / "case.json").read_text()).get("function")
        extra += ["--function", function] if function else []
        ran = _call(
            [
                *command,
                "run",
                str(bundle),
                *extra,
                "--save-outputs",
                str(out),
                "--json",
                "--rtol",
                "inf",
                "--atol",
                "inf",
            ]
        )
        if not out.exists():
            if ran.get("code") == REFUSAL:
                return REFUSAL, str(ran.get("message", "")), {}, CPU
            return "NO_OUTPUTS", f"{shlex.join(command)} run wrote no outputs", {}, CPU
        return "ok", "", _read_outputs(out, _manifest(bundle, function)), _where(ran)


def _where(ran: dict) -> Computed:
    """Where an implementation says its run computed (`run --json`'s `platform`, `device_kind`,
    `precision` and `jaxlib_version`); a CPU when it says nothing. Anything but a string of a
    known precision is taken as nothing said."""
    platform, kind, precision, jaxlib = (
        ran.get(k) for k in ("platform", "device_kind", "precision", "jaxlib_version")
    )
    if not isinstance(platform, str):
        return CPU
    known = precision if precision in ("DEFAULT", "HIGH", "HIGHEST") else None
    string = [x if isinstance(x, str) else None for x in (kind, jaxlib)]
    return Computed(platform, string[0], known, string[1])


def _call(argv: list[str]) -> dict:
    r = subprocess.run(argv, capture_output=True, text=True)
    try:
        report = json.loads(r.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError, RecursionError):
        report = None
    if isinstance(report, dict):
        return report
    return {  # no JSON, or JSON that is no object (`1`, `[]`): the protocol is not kept
        "ok": False,
        "code": "PROTOCOL_ERROR",
        "message": f"{argv[0]} printed no JSON object: {r.stderr[-300:]}",
    }


def _manifest(bundle: Path, function: str | None) -> Manifest:
    """The manifest of the function run, of a bundle the implementation accepted (parsed as
    the reference reader parses it: tolerantly, when it is a newer minor version)."""
    from .._format._bundle_manifest import functions_of
    from .._format._manifest_json import parse_manifest

    with warnings.catch_warnings():  # a newer minor version: warned about when it was run
        warnings.simplefilter("ignore")
        manifest = parse_manifest((bundle / "manifest.json").read_bytes())
    views, default = functions_of(manifest)
    return views[function or default or next(iter(views))]


def _read_outputs(path: Path, manifest: Manifest) -> dict[str, np.ndarray]:
    tf = _tensors.TensorFile(path, name=path.name)
    return {
        # as the file stores it: a symbolic shape has no one size
        r.name: tf.array(r.name, row, row.logical_shape(tf.entries[r.name].shape))
        for r in manifest.results
        if r.name in tf.entries and (row := _dtypes.BY_NAME[r.dtype])
    }


def _compare(case: Path, got: dict[str, np.ndarray], rtol: float, atol: float, u: float) -> str:
    function = json.loads((case / "case.json").read_text()).get("function")
    want = _read_outputs(case / "outputs.safetensors", _manifest(case / "bundle", function))
    for name, w in want.items():
        g = got.get(name)
        if g is None or g.shape != w.shape or g.dtype != w.dtype:
            return f"result {name}: expected {w.dtype}{list(w.shape)}, got {None if g is None else f'{g.dtype}{list(g.shape)}'}"
        wide = widened(atol, w, u) if w.dtype.kind in "fcV" else atol
        worst = compare(g, w, rtol, wide)[2]
        if worst is not None:
            return f"result {name}{worst.index}: {worst.told()} (rtol={rtol}, atol={wide:.3g})"
    return ""


def render(outcomes: list[Outcome]) -> str:
    from .._terminal._display import table

    rows = [(o.case, o.expect, o.got, o.result, o.detail[:60]) for o in outcomes]
    passed = sum(o.passed for o in outcomes)
    refused = sum(o.refused for o in outcomes)
    skipped = [o for o in outcomes if o.skipped]
    failed = len(outcomes) - passed - refused - len(skipped)
    return "\n".join(
        [
            table(("case", "expect", "got", "result", "detail"), rows),
            *(f"skipped {o.case}: {o.detail}" for o in skipped),
            f"{passed} passed, "
            + (f"{refused} refused ({REFUSAL}), " if refused else "")
            + (f"{len(skipped)} skipped (an optional part is absent), " if skipped else "")
            + f"{failed} failed, {len(outcomes)} cases",
        ]
    )

"""`hlobundle run`: call a bundle on its example (or given, or generated) inputs and check results."""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .._bundle_io import _tensor_writing
from .._format import _dtypes, _limits
from .._format._errors import InputError, LimitError
from .._format._fields import static_shape
from .._parse import _main_signature
from .._read import _inputs
from .._read._reader import Bundle
from .._read._trust import Trust
from . import _placement
from ._function import function_on
from ._tolerance import (
    F32_ROUNDOFF,
    FACTOR,
    Computed,
    Worst,
    compare,
    differences,
    tolerance,
    widening,
)

if TYPE_CHECKING:
    from .._format._manifest import Result
    from ._backends import Backend


@dataclass(frozen=True)
class OutputReport:
    name: str
    shape: list[int]
    dtype: str
    # The largest |got - expected| among the elements where both are finite: an infinity or a
    # NaN elsewhere says nothing of the others (that one is `worst`, with why).
    max_abs_diff: float | None
    ok: bool | None
    rtol: float | None = None  # what the check used (None: nothing to check)
    atol: float | None = None
    worst: Worst | None = None  # on a mismatch, the element furthest beyond its tolerance


@dataclass(frozen=True)
class RunReport:
    ok: bool
    backend: str
    inputs: str  # "stored", "given" or "generated"
    outputs: list[OutputReport]
    first_call_s: float
    second_call_s: float
    module: str | None = None  # iree: a stored executable, the compile cache, or compiled now
    # Seconds making the function: iree compiles or loads its module then, not in the first call.
    function_s: float | None = None
    platform: str | None = None  # where this run computed (jax's name), and its dot precision
    device_kind: str | None = None
    precision: str | None = None  # the lowest its dot and convolution ops asked for
    # Why the tolerance is wider than the dtype's (SPEC.md 2.15), or None when it is not.
    widened: str | None = None
    # What `precision="highest"` left as it was (ops with an explicit algorithm), or None.
    precision_kept: str | None = None
    jaxlib_version: str | None = None  # the jaxlib whose XLA this run computed with (not IREE)

    def to_json(self) -> dict[str, Any]:
        """The report as strict JSON's values: an infinity or NaN (an expected value, an
        allowance) as the string "Infinity", "-Infinity" or "NaN", as `serve` and `diff` write it."""
        return _strict(asdict(self))


def _strict(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_strict(v) for v in value]
    return value


def example_arguments(
    bundle: Bundle,
    given: list[_inputs.Keyed] | None,
    *,
    producer_layout: bool = False,
    seed: int = 0,
) -> tuple[list[Any], str]:
    """The values to run on, and where they came from."""
    arguments = bundle.arguments
    if given is not None:
        # Arguments given by name take the given values; the others their stored ones.
        stored = [a.name for a in arguments if a.value is not None]
        inputs = [a.name for a in arguments if a.role == "input"]
        ordered = _inputs.assign(given, [a.name for a in arguments], optional=stored, inputs=inputs)
        values = [
            bundle.tensor(a.name)
            if item is None
            else _inputs.check(
                item,
                _main_signature.TensorType(tuple(a.shape), _dtypes.BY_NAME[a.dtype]),  # type: ignore[arg-type]
                name=a.name,
                path=a.path,
                column_major=producer_layout and a.layout == "column_major",
                reversed_hint=""
                if producer_layout and a.layout == "column_major"
                else _inputs.reversed_hint(a.layout, "--layout producer"),
            )
            for item, a in zip(ordered, arguments, strict=True)
        ]
        return values, "given" if None not in ordered else "given and stored"
    if bundle.has_example_inputs:
        return [bundle.tensor(a.name) for a in arguments], "stored"  # mapped, read on use
    # Invented values for the arguments without stored ones; stored weights stay what they are.
    missing = [a for a in arguments if a.value is None]
    shapes = _generated_shapes(bundle)
    _check_generated_size([(shapes[a.name], a.dtype) for a in missing])
    rng = np.random.default_rng(seed)
    values = [
        generate(rng, shapes[a.name], a.dtype) if a.value is None else bundle.tensor(a.name)
        for a in arguments
    ]
    return values, "generated" if len(missing) == len(arguments) else "generated and stored"


def _generated_shapes(bundle: Bundle) -> dict[str, tuple[int, ...]]:
    """Each argument's shape for invented inputs: the manifest's, with each symbol the stored
    arguments do not bind set to 1 (the smallest size), when the constraints allow it."""
    from .._format import _symbolic

    arguments = bundle.arguments
    if not bundle.manifest.symbolic:
        return {a.name: static_shape(a.shape) for a in arguments}
    stored = [a for a in arguments if a.value is not None]
    env = _symbolic.bind_shapes(
        [(a.name, a.shape) for a in stored], [tuple(bundle.tensor(a.name).shape) for a in stored]
    )
    free = {
        s
        for a in arguments
        for d in a.shape
        if isinstance(d, str)
        for s in _symbolic.parse(d).symbols
    } - set(env)
    env.update(dict.fromkeys(free, 1))
    shapes = {a.name: _symbolic.evaluate(a.shape, env) for a in arguments}
    try:
        _symbolic.bind_shapes(
            [(a.name, a.shape) for a in arguments],
            [shapes[a.name] for a in arguments],
            bundle.manifest.constraints or (),
        )
    except _symbolic.ShapeError as e:
        raise InputError(
            f"the bundle stores no inputs, and inventing them with each free symbol 1 "
            f"({', '.join(sorted(free))}) does not fit its symbolic shapes: {e}. Give inputs "
            "with --inputs",
            argument=e.where.split(".")[0],
        ) from None
    return shapes


def _check_generated_size(values: list[tuple[tuple[int, ...], str]]) -> None:
    """Refuse, before allocating, inputs a manifest's shapes would make too large to invent."""
    total = sum(math.prod(shape) * _dtypes.BY_NAME[dtype].numpy.itemsize for shape, dtype in values)
    if total > _limits.MAX_GENERATED_INPUT_BYTES:
        raise LimitError(
            f"the bundle stores no inputs, and inventing its arguments would take {total:,} "
            f"bytes; the limit is {_limits.MAX_GENERATED_INPUT_BYTES:,}. Give inputs with "
            "--inputs (SPEC.md, 'Reader safety and security')",
            field="arguments",
        )


def generate(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Random values of the right kind: small non-negative ints, bools, normal floats."""
    np_dtype = _dtypes.BY_NAME[dtype].numpy
    if np_dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if np_dtype.kind in "iu":
        return rng.integers(0, 10, shape).astype(np_dtype)
    if np_dtype.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np_dtype)
    return rng.standard_normal(shape).astype(np_dtype)


def run(
    bundle: Bundle,
    given: list[_inputs.Keyed] | None = None,
    *,
    backend: Backend,
    rtol: float | None = None,
    atol: float | None = None,
    producer_layout: bool = False,
    devices: int | None = None,
    trust: Trust = Trust.NOTHING,
    precision: str | None = None,
) -> tuple[RunReport, list[np.ndarray]]:
    """Run once to compile and once more to time; compare with the stored expected outputs.
    `backend` is resolved by the caller, once (`_backends.resolve`; for `auto`, a forward run
    needs only jax: `_backends.for_forward_calls`). `precision="highest"`: dot and convolution
    ops run at HIGHEST (SPEC.md 2.15)."""
    start = time.perf_counter()
    fn = function_on(bundle, backend, devices=devices, trust=trust, precision=precision)
    made = time.perf_counter() - start
    wait = _ready if fn.jax_function else lambda x: x  # others return NumPy arrays
    args, source = example_arguments(bundle, given, producer_layout=producer_layout)
    start = time.perf_counter()
    outputs = wait(fn.call_flat(*args))
    first = time.perf_counter() - start
    start = time.perf_counter()
    wait(fn.call_flat(*args))
    second = time.perf_counter() - start
    arrays = [_placement.to_host(o) for o in outputs]
    expected = bundle.expected_outputs() if source == "stored" else {}
    recorded, here = sides(bundle, fn)
    u = widening(recorded, here) if expected else 0.0
    reports = [
        _compare(r, a, expected.get(r.name), rtol, atol, u, producer_layout)
        for r, a in zip(bundle.results, arrays, strict=True)
    ]
    ok = all(r.ok is not False for r in reports)
    module = getattr(fn, "source", None)
    widened = told_widened(recorded, here, u) if u else None
    return RunReport(
        ok,
        fn.backend,
        source,
        reports,
        first,
        second,
        module,
        made,
        here.platform,
        here.device_kind,
        here.precision,
        widened,
        _kept(bundle, fn) if precision == "highest" else None,
        here.jaxlib_version,
    ), arrays


def sides(bundle: Bundle, fn: Any) -> tuple[Computed, Computed]:
    """Where the expected outputs were computed (the manifest's `expected_from`; a bundle that
    records nothing: a CPU, with the jaxlib of its `provenance`) and where `fn` computes, each
    with the jaxlib whose XLA computes and the lowest precision its dot and convolution ops
    asked for. The modules are walked only where a precision can matter."""
    from ._tolerance import ROUNDOFF

    record = getattr(bundle.manifest, "expected_from", None)
    platform, kind = _device(fn)
    jaxlib = _jaxlib(fn)
    reduced = {p for p, _ in ROUNDOFF}
    if platform not in reduced and (record is None or record.platform not in reduced):
        here = Computed(platform, kind, None, jaxlib)
        if record is None:
            return Computed("cpu", None, None, written_by(bundle)), here
        return Computed(record.platform, record.device_kind, None, record.jaxlib_version), here
    asked = lowest_asked(bundle)
    here = Computed(
        platform, kind, asked if fn.bundle is bundle else lowest_asked(fn.bundle), jaxlib
    )
    if record is None:
        return Computed("cpu", None, asked, written_by(bundle)), here
    claim = Computed(record.platform, record.device_kind, record.precision, record.jaxlib_version)
    return believed(claim, asked), here


def told_widened(recorded: Computed, here: Computed, u: float) -> str:
    """Which sides differed, and what was widened."""
    return (
        f"expected outputs computed on {recorded.describe()}, this run on {here.describe()} "
        f"(they differ in {'; '.join(differences(recorded, here))}): atol = {FACTOR:g} * "
        f"{u:.3g} * max|expected| of each floating result (SPEC.md 2.15)"
    )


def written_by(bundle: Bundle) -> str | None:
    """The jaxlib its writer ran (`provenance.jaxlib_version`): what computed expected outputs
    that a bundle without `expected_from` says were computed on a CPU (SPEC.md 2.15)."""
    provenance = getattr(bundle.manifest, "provenance", None)
    return getattr(provenance, "jaxlib_version", None)


def _jaxlib(fn: Any) -> str | None:
    """The jaxlib whose XLA a function computes with; None for IREE's runtime."""
    if not fn.jax_function:
        return None
    import jaxlib

    return str(jaxlib.__version__)


def _kept(bundle: Bundle, fn: Any) -> str | None:
    from ._precision import kept_in

    return None if fn.bundle is bundle else kept_in(fn.bundle)


def believed(claim: Computed, asked: str | None) -> Computed:
    """A claim of where results were computed (a manifest's `expected_from`, an implementation's
    `run --json`) as SPEC.md 2.15 lets a check take it, for a module whose dot and convolution
    ops ask for `asked` at the lowest (`lowest_asked`): its precision never lower than that,
    and none where the module has no such op, since what the module refutes widens nothing."""
    from ._precision_rewrite import possible

    return dataclasses.replace(claim, precision=possible(claim.precision, asked))


def lowest_asked(bundle: Bundle) -> str | None:
    """The lowest precision the bundle's module's dot and convolution ops ask for; None when
    it has none."""
    from . import _precision_rewrite

    return _precision_rewrite.lowest_asked(bundle.modules["module"].parsed)


def _device(fn: Any) -> tuple[str, str | None]:
    """The platform and device kind a function computes on: a JAX one's default device (a
    mesh's devices are of one kind); IREE's CPU runtime otherwise."""
    if not fn.jax_function:
        return "cpu", None
    import jax

    device = jax.devices()[0]
    return device.platform, device.device_kind


def _ready(x: Any) -> Any:
    import jax

    return jax.block_until_ready(x)


def _compare(
    result: Result,
    got: np.ndarray,
    want: np.ndarray | None,
    rtol: float | None,
    atol: float | None,
    u: float,
    producer_layout: bool,
) -> OutputReport:
    """`got` against `want`, both in the stored orientation; the shape shown is the one the
    outputs are saved in (`_oriented`)."""
    name, dtype = result.name, result.dtype
    shape = list(_oriented(result, got, producer_layout).shape)
    if want is None:
        return OutputReport(name, shape, dtype, None, None)
    rtol, atol = tolerance(dtype, want, u, rtol, atol)
    ok, largest, worst = compare(got, want, rtol, atol)
    if worst is not None and producer_layout and result.layout == "column_major":
        worst = dataclasses.replace(worst, index=worst.index[::-1])  # as the table shows it
    return OutputReport(name, shape, dtype, largest, ok, rtol, atol, worst)


def _oriented(result: Result, array: np.ndarray, producer_layout: bool) -> np.ndarray:
    """A result as `--layout producer` gives it: a column-major one (Julia's) reversed. The
    table and the saved outputs both show this, so that their shapes agree."""
    return array.T if producer_layout and result.layout == "column_major" else array


def save_outputs(
    path: Path, bundle: Bundle, arrays: list[np.ndarray], *, producer_layout: bool
) -> None:
    results = bundle.results
    named = {r.name: _oriented(r, a, producer_layout) for r, a in zip(results, arrays, strict=True)}
    suffix = path.suffix.lower()
    if suffix == ".npz":
        _write_npz(path, named)
    elif suffix == ".safetensors":
        _tensor_writing.write(
            path, {r.name: (named[r.name], _dtypes.BY_NAME[r.dtype]) for r in results}
        )
    else:
        raise InputError(
            f"--save-outputs {str(path)!r}: expected a .npz or .safetensors file", path=path
        )


def _write_npz(path: Path, named: dict[str, np.ndarray]) -> None:
    """What `np.savez(path, **named)` writes (a stored zip of NAME.npy members), for any result
    names: `np.savez` takes `file` and `allow_pickle` as its own parameters, not as arrays."""
    import zipfile

    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, array in named.items():
            with zf.open(f"{name}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(array), allow_pickle=False)


def render(report: RunReport, path: Path | str) -> str:
    rows = [
        (
            o.name,
            str(tuple(o.shape)),
            o.dtype,
            "-" if o.max_abs_diff is None else f"{o.max_abs_diff:.3g}",
            {None: "no expected", True: "ok", False: "MISMATCH"}[o.ok],
        )
        for o in report.outputs
    ]
    from .._terminal._display import shown, table

    lines = [
        f"{shown(str(path))}: {len(report.outputs)} output(s), backend {report.backend}"
        + (f" ({report.module})" if report.module else "")
        + f", {report.inputs} inputs",
        table(("name", "shape", "dtype", "max_abs_diff", "check"), rows)
        if rows
        else "  no outputs",
        *_mismatches(report),
        f"time: {_first_call(report)}, second call {report.second_call_s * 1e3:.2f} ms",
        "ok" if report.ok else "FAILED: outputs differ from the expected outputs",
    ]
    return "\n".join(lines)


def _mismatches(report: RunReport) -> list[str]:
    """Each mismatched result's worst element against its tolerance, and how to loosen it."""
    lines = [f"tolerance widened: {report.widened}"] if report.widened else []
    worst = [(o, o.worst) for o in report.outputs if o.worst is not None]
    for o, w in worst:
        # an infinity or a NaN fails whatever the tolerance: then it is not shown
        tolerance = f" (rtol {o.rtol:.3g}, atol {o.atol:.3g})" if math.isfinite(w.diff) else ""
        lines.append(f"  {o.name}{w.index}: {w.told()}{tolerance}")
    if not worst:
        return lines
    loosen = (
        "give --rtol and --atol to compare more loosely"
        + (", or --precision highest" if _reduced_here(report) else "")
        if any(math.isfinite(w.diff) for _, w in worst)
        else "no tolerance lets an infinity or NaN agree with anything else"
    )
    lines.append(f"  (the worst element: the one furthest beyond its own tolerance; {loosen})")
    return lines


def _reduced_here(report: RunReport) -> bool:
    """Whether this run's dot and convolution ops computed with fewer bits than float32."""
    here = Computed(report.platform or "cpu", report.device_kind, report.precision)
    return here.roundoff > F32_ROUNDOFF


def _first_call(report: RunReport) -> str:
    """What the first call did. XLA and enzyme compile in it; iree compiled (or loaded) its
    module when the function was made, so that is timed apart and the first call only runs."""
    first = f"first call {report.first_call_s * 1e3:.1f} ms"
    if report.module is None:
        return f"{first} (compile + run)"
    made = f"{(report.function_s or 0.0) * 1e3:.1f} ms"
    if report.module.startswith("stored executable") or report.module == "compile cache":
        return f"module loaded in {made} (nothing compiled), {first} (run)"
    return f"module compiled by IREE in {made}, {first} (run)"

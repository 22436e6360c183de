"""Every comparison with expected outputs survives IEEE's special values (SPEC.md 2.15): NaN
agrees with NaN, an infinity with the same infinity, and nothing else with either, whatever the
allowance; each implementation of the check (the library's, `run`, `run --verify`, the
conformance runner and the emitted scripts) gives one table of cases the same verdicts.

The attack (issue 64, §2): `inf - inf` is NaN and NaN is never "greater than the allowance",
so an expected -inf agreed with 1.6 and `run` said "ok" (max difference inf); an infinite
allowance let a NaN or a wrong-signed infinity through alike.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers import cli, pack_identity
from safetensors.numpy import save_file

import hlobundle
from hlobundle._cli import _conformance

INF, NAN = np.inf, np.nan
DEFAULT = (None, None)  # each dtype's own rtol and atol
TOLERANCES = {"default": DEFAULT, "atol_inf": (None, INF), "rtol_inf": (INF, None)}
# (name, expected, got, verdict under each of TOLERANCES); float32 elements, one per row.
ROWS = [
    ("inf_inf", INF, INF, (True, True, True)),
    ("neg_inf_neg_inf", -INF, -INF, (True, True, True)),
    ("nan_nan", NAN, NAN, (True, True, True)),  # SPEC.md 2.15: NaN agrees with NaN
    ("neg_inf_got_pos_inf", -INF, INF, (False, False, False)),
    ("neg_inf_got_finite", -INF, 1.6, (False, False, False)),  # the model
    ("finite_got_inf", 1.0, INF, (False, False, False)),
    ("inf_got_nan", INF, NAN, (False, False, False)),
    ("nan_got_inf", NAN, INF, (False, False, False)),
    ("nan_got_finite", NAN, 1.0, (False, False, False)),
    ("finite_got_nan", 1.0, NAN, (False, False, False)),
    ("finite_close", 1.0, 1.000001, (True, True, True)),
    ("finite_far", 1.0, 1.1, (False, True, True)),
    ("zero_got_one", 0.0, 1.0, (False, True, False)),  # rtol scales |expected|: 0 has none
]
WANT = [np.float32([w]) for _, w, _, _ in ROWS]
GOT = [np.float32([g]) for _, _, g, _ in ROWS]


def verdicts(tolerance: str) -> list[bool]:
    return [v[list(TOLERANCES).index(tolerance)] for *_, v in ROWS]


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> Path:
    """A bundle of the identity of one argument per row, stored as each row's `got`, with each
    row's `expected`: its results are the rows' outputs."""
    return pack_identity(tmp_path_factory.mktemp("ieee"), *GOT, expected=WANT)


def _library(table: Path, rtol: float | None, atol: float | None) -> list[bool]:
    from hlobundle._run._tolerance import compare, default_tolerance

    base = default_tolerance("float32")
    r, a = base if rtol is None else rtol, base if atol is None else atol
    return [compare(g, w, r, a)[0] for g, w in zip(GOT, WANT, strict=True)]


def _run(table: Path, rtol: float | None, atol: float | None, *flags: str) -> list[bool]:
    given = [*(["--rtol", str(rtol)] if rtol is not None else [])]
    given += ["--atol", str(atol)] if atol is not None else []
    r = cli("run", table, "--json", *flags, *given)
    report = json.loads(r.stdout, parse_constant=_strict)
    assert r.returncode == (0 if report["ok"] else 1), r.stdout
    return [o["ok"] for o in report["outputs"]]


def _run_verify(table: Path, rtol: float | None, atol: float | None) -> list[bool]:
    return _run(table, rtol, atol, "--verify")


def _conformance_runner(table: Path, rtol: float | None, atol: float | None) -> list[bool]:
    """The conformance runner's check of each row alone: a case of the table's bundle whose
    outputs are the rows' expected values, against outputs that differ from them only there."""
    from hlobundle._run._tolerance import default_tolerance

    case = table.parent / "case"
    if not case.exists():
        shutil.copytree(table, case / "bundle")
        names = [r.name for r in hlobundle.load(table).results]
        save_file(dict(zip(names, WANT, strict=True)), str(case / "outputs.safetensors"))
        (case / "case.json").write_text(json.dumps({"expect": "ok", "description": "ieee"}))
    names = [r.name for r in hlobundle.load(table).results]
    base = default_tolerance("float32")
    r, a = base if rtol is None else rtol, base if atol is None else atol
    out = []
    for k, got in enumerate(GOT):
        outputs = {n: (got if j == k else WANT[j]) for j, n in enumerate(names)}
        out.append(_conformance._compare(case, outputs, r, a, 0.0) == "")
    return out


CHECKS = {
    "library": _library,
    "run": _run,
    "run_verify": _run_verify,
    "conformance": _conformance_runner,
}


def _strict(constant: str) -> None:
    raise AssertionError(f"run --json printed {constant}, which is no JSON")


@pytest.mark.parametrize("tolerance", list(TOLERANCES))
@pytest.mark.parametrize("check", list(CHECKS))
def test_every_check_gives_the_table_its_verdicts(table, check, tolerance):
    got = CHECKS[check](table, *TOLERANCES[tolerance])
    want = verdicts(tolerance)
    wrong = [name for (name, *_), g, w in zip(ROWS, got, want, strict=True) if g != w]
    assert not wrong, f"{check} at {tolerance}: wrong verdicts for {wrong}"


def test_complex_parts_are_compared_each_by_the_rule():
    from hlobundle._run._tolerance import compare

    def ok(want: complex, got: complex, atol: float = 1e-5) -> bool:
        return compare(np.complex64([got]), np.complex64([want]), 1e-5, atol)[0]

    assert ok(complex(INF, 1), complex(INF, 1)) and ok(complex(NAN, 0), complex(NAN, 0))
    assert not ok(complex(1, INF), complex(1, -INF))
    assert not ok(complex(1, INF), complex(1, 2), atol=INF)
    assert not ok(complex(NAN, 0), complex(0, 0), atol=INF)
    assert ok(complex(1, 2), complex(3, 4), atol=INF)


def test_run_names_the_element_and_why_and_reports_a_finite_difference(tmp_path):
    # The model: its output moved from -inf to 1.6. `run` said "ok", max diff inf.
    got = np.float32([0.5, 1.6, 2.0])
    bundle = pack_identity(tmp_path, got, expected=[np.float32([0.5, -INF, 2.0])])
    r = cli("run", bundle)
    assert r.returncode == 1, r.stdout
    assert "result_0[1]: got 1.6, expected -inf: an infinity agrees only with the same " in r.stdout
    assert r.stdout.rstrip().endswith("FAILED: outputs differ from the expected outputs")
    report = json.loads(cli("run", bundle, "--json").stdout, parse_constant=_strict)
    (out,) = report["outputs"]
    assert out["ok"] is False and out["max_abs_diff"] == 0.0  # of the elements both finite
    assert out["worst"]["index"] == [1] and out["worst"]["expected"] == "-Infinity"
    assert "infinity" in out["worst"]["why"]


@pytest.mark.slow
@pytest.mark.subprocess
def test_the_emitted_script_gives_the_table_its_verdicts(table, tmp_path, script_zygote):
    hlobundle.emit_script(hlobundle.load(table), tmp_path / "run.py", backend="xla")
    r = script_zygote(tmp_path / "run.py")
    names = [r.name for r in hlobundle.load(table).results]
    failed = [n for n, ok in zip(names, verdicts("default"), strict=True) if not ok]
    assert r.returncode == 1 and f"FAILED: {', '.join(failed)} differ" in r.stderr, (
        r.stdout[-3000:] + r.stderr[-2000:]
    )
    assert "max abs diff from expected inf" not in r.stdout
    assert "result_4[0]: got 1.6, expected -inf: an infinity agrees only" in r.stdout, r.stdout


def test_the_emitted_scripts_compare_with_the_library_s_own_definition():
    """The scripts import nothing of the package; the comparison they carry is the text of the
    library's (`_format/_agreement.py`), written in by `emit`, not a copy kept beside it."""
    from hlobundle._emit import _template
    from hlobundle._format import _agreement

    written = _template.template()
    source = Path(_agreement.__file__).read_text()
    body = source[source.index("\n", source.index(_template._SHARED_FROM)) + 1 :].strip()
    assert body and body in written
    for name in ("run_iree_template.py",):
        assert body in _template.template(name)
    helpers: dict = {}
    exec(compile("import numpy as np\n" + body, "script", "exec"), helpers)
    base = 1e-5
    for tolerance, (rtol, atol) in TOLERANCES.items():
        r, a = base if rtol is None else rtol, base if atol is None else atol
        got = [
            helpers["mismatch"](g.astype(np.float64), w.astype(np.float64), r, a) is None
            for g, w in zip(GOT, WANT, strict=True)
        ]
        assert got == verdicts(tolerance), tolerance


_RETURNS = """\
import json, sys
import numpy as np
from safetensors.numpy import load_file, save_file

case, change, command, args = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4:]
if command == "verify":
    print(json.dumps({"ok": True}))
elif command == "fingerprint":
    print(json.dumps({"bundle": json.load(open(case + "/case.json"))["fingerprint"]}))
else:  # run: the expected outputs, with one element changed
    got = load_file(case + "/outputs.safetensors")
    if change:
        got[change[0]][change[1]] = change[2]
    save_file(got, args[args.index("--save-outputs") + 1])
    print(json.dumps({"ok": True}))
"""


@pytest.mark.subprocess
@pytest.mark.slow
@pytest.mark.parametrize(
    "change",
    [None, ["result0", 1, 1.6], ["result0", 2, 0.0], ["result1", 0, float("inf")]],
    ids=["exact", "neg_inf_got_finite", "nan_got_zero", "neg_inf_got_pos_inf"],
)
def test_the_conformance_suite_holds_an_implementation_to_the_special_values(tmp_path, change):
    """valid_special_values computes inf, -inf and NaN: an implementation whose outputs match
    them passes, and one that moved a single element (-inf to 1.6, NaN to 0, -inf to inf)
    fails, naming it."""
    import sys

    script = tmp_path / "returns.py"
    script.write_text(_RETURNS)
    case = _conformance.INSTALLED / "valid_special_values"
    command = [sys.executable, str(script), str(case), json.dumps(change)]
    outcome = _conformance.run_case(case, command)
    assert outcome.passed is (change is None), outcome
    if change:
        assert outcome.detail.startswith(f"result {change[0]}[{change[1]}]: got "), outcome
        assert "agrees only with" in outcome.detail, outcome


# The attack (issue 64's independent attack): int64 and uint64 hold integers beyond float64's
# 53 bits, and every check widened both sides to float64 first, where 2**53 + 1 rounds to 2**53:
# an exact result (atol 0) that was off by one there said "ok". Each pair differs by one.
WIDE_INTS = [np.int64([2**53, 2**62 + 1]), np.uint64([2**53 + 1, 2**64 - 1])]
WIDE_WANT = [np.int64([2**53 + 1, 2**62]), np.uint64([2**53, 2**64 - 2])]


@pytest.mark.parametrize("check", [*CHECKS, "script"])
def test_every_check_tells_64_bit_integers_apart_beyond_float64_s_53_bits(tmp_path, check):
    from hlobundle._emit import _template
    from hlobundle._run._tolerance import compare

    table = pack_identity(tmp_path, *WIDE_INTS, expected=WIDE_WANT)
    if check == "script":  # what an emitted script carries: run_shared's, then _agreement's
        helpers: dict = {}
        body = _template.template()
        shared = body[body.index("def safetensors_header") : body.index("# named:")]
        exec(compile("import numpy as np\n" + shared, "script", "exec"), helpers)
        wide = helpers["widened"]
        got = [
            helpers["mismatch"](wide(g), wide(w), 0.0, 0.0) is None
            for g, w in zip(WIDE_INTS, WIDE_WANT, strict=True)
        ]
    elif check == "library":
        got = [compare(g, w, 0.0, 0.0)[0] for g, w in zip(WIDE_INTS, WIDE_WANT, strict=True)]
    elif check == "conformance":
        case = tmp_path / "case"
        shutil.copytree(table, case / "bundle")
        names = [r.name for r in hlobundle.load(table).results]
        save_file(dict(zip(names, WIDE_WANT, strict=True)), str(case / "outputs.safetensors"))
        (case / "case.json").write_text(json.dumps({"expect": "ok", "description": "ints"}))
        got = []
        for k, one in enumerate(WIDE_INTS):  # each result differs alone
            outputs = {n: (one if j == k else WIDE_WANT[j]) for j, n in enumerate(names)}
            got.append(_conformance._compare(case, outputs, 0.0, 0.0, 0.0) == "")
    else:
        got = CHECKS[check](table, None, None)
    assert not any(got), f"{check}: off-by-one 64-bit integers agreed"


def test_64_bit_integers_are_named_exactly_where_they_differ():
    from hlobundle._run._tolerance import compare

    ok, largest, worst = compare(WIDE_INTS[0], WIDE_WANT[0], 0.0, 0.0)
    assert not ok and largest == 1.0 and worst is not None
    assert worst.index == [0] and worst.diff == 1.0
    assert worst.told().startswith("got 9007199254740992, expected 9007199254740993, |diff| 1 ")
    assert compare(np.int8([-128]), np.int8([127]), 0.0, 1.0)[0] is False  # no wrapping
    assert compare(np.int64([-(2**63)]), np.int64([2**63 - 1]), 0.0, 1.0)[0] is False
    assert compare(np.bool_([True]), np.bool_([False]), 0.0, 0.0)[0] is False

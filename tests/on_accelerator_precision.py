"""Run by hand on a machine with an accelerator (not collected: CI has none): checks that mean
the same on every platform (SPEC.md 2.15, docs/accelerators.md).

    python tests/on_accelerator_precision.py [LUX_BUNDLE] [--backends xla enzyme]

LUX_BUNDLE: the seed's Lux export packed on a CPU (`hlobundle pack --from-reactant
../shared/fixtures/reactant/export_to_enzymejax_lux -o lux.hlobundle --compute-expected`, run
here, beside the checkout; ../shared does not travel to the device machine: carry the bundle).
Every step is a `python -m hlobundle` process of its own (one process at a time holds a TPU);
this script imports no jax. On a TPU it checks, for each backend:

- `run` passes, as shipped, on the LeNet example, both functions of the language model and
  the Lux bundle (their expected outputs computed on a CPU; the tolerance is widened);
- each of LeNet's weight matrices, and the Lux LeNet's last one, scaled by 1.01 fails;
- `run --precision highest` passes, widened by float32's roundoff on the CPU's side and the TPU's
  floor (2^-16, its float32 is not IEEE's) on the other (another platform);
- the script `emit` writes for the LeNet example passes (its check widened too);
- LeNet exported there (examples/lenet5.py) records `expected_from` and runs there unwidened;
- the Lux export packed here with `--compute-expected` (when its three files were copied into
  `.tpu-lux/` of the checkout, listed in .git/info/exclude, and carried) records
  `expected_from` (tpu, DEFAULT) and runs here without widening.
It prints each run's largest difference against its atol.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

ROOT = Path(__file__).resolve().parent.parent
LENET = ROOT / "examples" / "lenet5.hlobundle"
LM = ROOT / "examples" / "lm.hlobundle"


def hlobundle(*args: object) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "hlobundle", *map(str, args)]
    return subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)


def run(bundle: Path, backend: str, *extra: str, function: str | None = None) -> dict:
    """`run --json`'s report, with its exit status under `rc`."""
    named = ["--function", function] if function else []
    r = hlobundle("run", bundle, "--backend", backend, "--json", *named, *extra)
    try:
        report = json.loads(r.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        raise AssertionError(f"no report from run {bundle}: {r.stderr[-2000:]}") from None
    report["rc"] = r.returncode
    shown = ", ".join(
        f"{o['name']} {o['max_abs_diff']:.3g} / atol {o['atol']:.3g}"
        for o in report.get("outputs", [])
        if o.get("atol") is not None
    )
    where = f"{report.get('platform')} {report.get('precision')}"
    print(
        f"  {bundle.name} {function or ''} {backend} {' '.join(extra)}: rc {r.returncode}, {where}: {shown}"
    )
    if report.get("widened"):
        print(f"    widened: {report['widened']}")
    return report


def perturbed(source: Path, into: Path, name: str) -> Path:
    """A copy of `source` with argument `name`'s stored value scaled by 1.01."""
    shutil.copytree(source, into)
    manifest = json.loads((into / "manifest.json").read_text())
    (argument,) = [a for a in manifest["arguments"] if a["name"] == name]
    file = argument["value"]["file"]
    stored = load_file(str(into / file))
    stored[name] = (stored[name] * np.float32(1.01)).astype(np.float32)
    save_file(stored, str(into / file))
    data = (into / file).read_bytes()  # the manifest's size and digest of the edited file
    manifest["files"][file].update(size=len(data), sha256=hashlib.sha256(data).hexdigest())
    (into / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return into


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("lux", nargs="?", type=Path)
    parser.add_argument("--backends", nargs="+", default=["xla", "enzyme"])
    args = parser.parse_args()
    out = Path(tempfile.mkdtemp())
    failures: list[str] = []

    def expect(ok: bool, what: str) -> None:
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            failures.append(what)

    for backend in args.backends:
        print(f"backend {backend}")
        expect(run(LENET, backend)["rc"] == 0, f"{backend}: LeNet passes as shipped")
        for function in ("prefill", "decode"):
            report = run(LM, backend, function=function)
            expect(report["rc"] == 0, f"{backend}: lm {function} passes as shipped")
        strict = run(LENET, backend, "--precision", "highest")
        expect(
            strict["rc"] == 0 and "atol = 2 * 1.53e-05 *" in (strict["widened"] or ""),
            f"{backend}: LeNet at --precision highest passes at the TPU's float32 roundoff",
        )
        for layer in ("conv1", "conv2", "dense1", "dense2", "dense3"):
            name = f"params_{layer}_w"
            bad = perturbed(LENET, out / f"{backend}_{layer}", name)
            expect(run(bad, backend)["rc"] == 1, f"{backend}: LeNet with {name} * 1.01 fails")
        if args.lux is not None:
            expect(run(args.lux, backend)["rc"] == 0, f"{backend}: the Lux bundle passes")
            bad = perturbed(args.lux, out / f"{backend}_lux", "arg_3_6_3_1")
            expect(run(bad, backend)["rc"] == 1, f"{backend}: Lux with arg_3_6_3_1 * 1.01 fails")
    script = out / "lenet_run.py"
    r = hlobundle("emit", LENET, "-o", script, "--backend", "xla", "--bundle-path", "absolute")
    expect(r.returncode == 0, "emit LeNet's script")
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    print("  " + "\n  ".join(line for line in r.stdout.splitlines() if "widened" in line))
    expect(r.returncode == 0, f"LeNet's emitted script passes: {r.stderr[-300:]}")
    exported = out / "lenet_here.hlobundle"  # export() computes expected outputs here
    r = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "lenet5.py"), str(exported)],
        capture_output=True,
        text=True,
    )
    expect(r.returncode == 0, f"export LeNet here: {r.stderr[-300:]}")
    manifest = json.loads((exported / "manifest.json").read_text())
    record = manifest.get("functions", [manifest])[0].get("expected_from")
    print(f"  expected_from: {record} (none on a CPU)")
    report = run(exported, "xla")
    expect(report["rc"] == 0 and report["widened"] is None, "LeNet exported here runs unwidened")
    fixture = ROOT / ".tpu-lux"  # the export's files, if carried: packed here, on the TPU
    if fixture.is_dir():
        packed = out / "lux_here.hlobundle"
        r = hlobundle("pack", "--from-reactant", fixture, "-o", packed, "--compute-expected")
        expect(r.returncode == 0, f"pack --compute-expected here: {r.stderr[-300:]}")
        manifest = json.loads((packed / "manifest.json").read_text())
        record = manifest.get("functions", [{}])[0].get("expected_from")
        print(f"  expected_from: {record}")
        expect(bool(record) and record.get("platform") != "cpu", "it records where it computed")
        report = run(packed, "xla")
        expect(report["rc"] == 0 and report["widened"] is None, "it runs here unwidened")
    print("ok" if not failures else f"{len(failures)} FAILED: {failures}")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())

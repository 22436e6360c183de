"""Mutation fuzzing of every file a reader parses, past the hash checks (run in child processes).

    python fuzz/fuzz_forms.py --runs 10000 --jobs 2

A seed bundle holds all three module forms (module, backward, batched), each as text and as a
portable artifact, plus tensor files and the manifest. Each run mutates 1-4 bytes of one file
(flip, truncate or insert), or, in half the text modules' cases, replaces names and strings
(symbols, attribute names, string values, locations) by escapes of random bytes, then rehashes it in the manifest so the mutation reaches the parser
instead of stopping at the sha256 check, and calls `load()`, `verify()` and reads every tensor.
The only allowed outcomes are success and an `HloBundleError`; anything else is a finding, and
so is a worker that dies (a crash in a parser): the case it was on is reported, and the exit
status is 1. The test suite runs 400 of these each run, from a random first case
(`tests/test_hostile.py`; `--first N` repeats a run).
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

import hlobundle

# Relative weights: artifacts cost a child process each (about 0.2 s), so they are drawn less.
WEIGHTS = {
    "module.mlir": 3,
    "vjp.mlir": 3,
    "batched.mlir": 3,
    "module.mlirbc": 1,
    "vjp.mlirbc": 1,
    "batched.mlirbc": 1,
    "inputs.safetensors": 2,
    "weights.safetensors": 2,
    "expected.safetensors": 1,
    "manifest.json": 3,
}


def seed_bundle(root: Path) -> Path:
    """f(w, x) = tanh(x @ w) with a backward module and a batched module over x."""
    import jax

    w = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    x = np.linspace(0, 1, 8, dtype=np.float32).reshape(2, 4)
    return hlobundle.export(
        lambda w, x: jax.numpy.tanh(x @ w),
        w,
        x,
        out=root / "seed",
        roles={"w": "parameter"},
        with_vjp=True,
        vmap_in_axes=(None, 0),
    )


def mutate(data: bytes, rng: random.Random) -> bytes:
    raw = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        kind = rng.choice(["flip", "flip", "truncate", "insert"])
        pos = rng.randrange(max(len(raw), 1))
        if kind == "flip" and raw:
            raw[pos] ^= rng.randint(1, 255)
        elif kind == "truncate":
            del raw[pos:]
        else:
            raw[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
    return bytes(raw)


# Names and strings of a text module: symbols (`@main`, `@"x"`), attribute names and string
# values, locations. MLIR reads escapes in them (`\\FF`); jaxlib's bindings once aborted on
# a name whose escapes decode to invalid UTF-8.
_NAMES = re.compile(rb'@[A-Za-z_][\w$.]*|@?"(?:[^"\\\n]|\\.)*"|\b[a-z_]+\.[a-z_.]+(?= = )')


def mutate_names(data: bytes, rng: random.Random) -> bytes:
    """Replace 1-3 names or strings by quoted strings of random escapes (often not UTF-8)."""
    spans = [m.span() for m in _NAMES.finditer(data)]
    raw = data
    for start, end in sorted(rng.sample(spans, min(len(spans), rng.randint(1, 3))), reverse=True):
        escapes = b"".join(
            b"\\%02X" % rng.choice([rng.randrange(256), rng.randrange(0x80, 0x100)])
            for _ in range(rng.randint(1, 4))
        )
        quoted = (b"@" if raw[start : start + 1] == b"@" else b"") + b'"' + escapes + b'"'
        raw = raw[:start] + quoted + raw[end:]
    return raw


def rehash(bundle: Path, name: str) -> None:
    manifest = json.loads((bundle / "manifest.json").read_text())
    data = (bundle / name).read_bytes()
    manifest["files"][name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    overwrite(bundle / "manifest.json", json.dumps(manifest))


def attempt(bundle: Path) -> str:
    """The outcome's name: "ok" or the error code. Any other exception propagates (a finding)."""
    try:
        b = hlobundle.load(bundle)
        b.verify()
        for a in b.arguments:
            if a.value is not None:
                np.asarray(b.tensor(a.name)).sum()
        b.expected_outputs()
    except hlobundle.HloBundleError as e:
        crashed = "crashed MLIR's bytecode reader" in e.message
        return f"{e.code} (a reader crash, caught in its child process)" if crashed else e.code
    return "ok"


def overwrite(path: Path, text: str) -> None:
    """`path.write_text(text)` without first truncating the file to nothing: on ext4 a file
    truncated to zero and written again is flushed to the disk as it is closed (its
    `auto_da_alloc`), 2 ms of waiting a write, each case's (0.2 s over 100 cases here)."""
    data = text.encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))
    finally:
        os.close(fd)


def _replace(path: Path, data: bytes) -> None:
    path.unlink()
    path.write_bytes(data)


def work(seed: Path, first: int, runs: int, progress: Path) -> collections.Counter[str]:
    names = [n for n in WEIGHTS if (seed / n).exists()]
    weights = [WEIGHTS[n] for n in names]
    outcomes: collections.Counter[str] = collections.Counter()
    scratch = Path(tempfile.mkdtemp(prefix="fuzz-case-"))
    # One copy of the seed for every case: a case changes one file and the manifest, which
    # are put back after it (each written as a new file: nothing still maps the one before).
    bundle = shutil.copytree(seed, scratch / "bundle")
    try:
        for case in range(first, first + runs):
            rng = random.Random(case)
            name = rng.choices(names, weights)[0]
            data = (seed / name).read_bytes()
            in_names = name.endswith(".mlir") and rng.random() < 0.5
            _replace(bundle / name, mutate_names(data, rng) if in_names else mutate(data, rng))
            if name != "manifest.json":
                rehash(bundle, name)
            overwrite(progress, f"case {case}: {name}\n")
            outcomes[f"{name}{' (names)' if in_names else ''}: {attempt(bundle)}"] += 1
            for changed in {name, "manifest.json"}:
                _replace(bundle / changed, (seed / changed).read_bytes())
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return outcomes


def fresh(script: Path, argv: list[str]) -> Any:
    """A worker, `python SCRIPT ARGV`, in a fresh interpreter, its stdout and stderr piped as
    text: `main`'s `start` (the tests start it as a fork of a process that imported jax)."""
    cmd = [sys.executable, str(script), *argv]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def main(
    argv: list[str] | None = None,
    *,
    script: Path = Path(__file__),
    seed_bundle: Any = seed_bundle,
    work: Any = work,
    description: str = __doc__.split("\n")[0],
    start: Any = fresh,
) -> int:
    """The command line of a fuzzer: this one, or another (`fuzz_shapes.py`) that passes its
    own `script`, `seed_bundle(root)` and `work(seed, first, runs, progress)`. `start(script,
    argv)` starts each worker as a process of its own, answering as `fresh`'s Popen does."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--runs", type=int, default=10_000)
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--first", type=int, default=0, help="number of the first case (a seed)")
    p.add_argument("--worker", nargs=2, metavar=("SEED_BUNDLE", "PROGRESS"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        outcomes = work(Path(args.worker[0]), args.first, args.runs, Path(args.worker[1]))
        print(json.dumps(outcomes))
        return 0
    root = Path(tempfile.mkdtemp(prefix="hlobundle-fuzz-"))
    try:
        return _drive(seed_bundle(root), root, args.runs, args.jobs, args.first, script, start)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _drive(
    seed: Path, root: Path, runs: int, jobs: int, first: int, script: Path, start: Any
) -> int:
    """Split the cases over `jobs` worker processes; a dead worker is a finding."""
    share = -(-runs // jobs)
    workers = []
    for j in range(jobs):
        begin, count = first + j * share, min(share, runs - j * share)
        if count <= 0:
            continue
        progress = root / f"progress-{j}"
        cmd = ["--worker", str(seed), str(progress), "--first", str(begin), "--runs", str(count)]
        workers.append((start(script, cmd), progress))
    total: collections.Counter[str] = collections.Counter()
    failed = False
    for proc, progress in workers:
        out, err = proc.communicate()
        if proc.returncode != 0:
            failed = True
            where = progress.read_text().strip() if progress.exists() else "before the first case"
            print(
                f"FINDING: a worker ended with status {proc.returncode} at {where}\n{err[-3000:]}"
            )
            continue
        total.update(json.loads(out.strip().splitlines()[-1]))
    done = sum(total.values())
    for outcome, n in sorted(total.items()):
        print(f"{n:6d}  {outcome}")
    print(f"{done} mutations, {'FAILED' if failed else 'no findings'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

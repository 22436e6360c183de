"""Cost that grows with what is used (section `usage`): one function of a big bundle against
the same function alone, and how the reading commands grow with the manifest."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

from benchmarks.bundles import many_functions
from benchmarks.harness import ROOT, interleaved


def usage_cost(tmp: Path, quick: bool) -> list[dict]:
    """What one function costs in a big bundle against the same function alone, and how the
    reading commands grow with the manifest (in process: the process's start is the same for
    every size)."""
    import jax

    import hlobundle
    from hlobundle._read._inspect import summarize

    functions, per = (8, 16) if quick else (64, 156)  # 64 x 156: 9,984 tensors
    big = many_functions(tmp / "usage-big", functions, per)
    alone = many_functions(tmp / "usage-alone", 1, per)  # its f0 is the big bundle's f0

    def call(path: Path) -> None:
        b = hlobundle.load(path, functions=["f0"])
        f = b.function("xla")
        jax.block_until_ready(f.call_flat(*[b.tensor(a.name) for a in b.arguments]))

    res = interleaved({"big": lambda: call(big), "alone": lambda: call(alone)}, 5 if quick else 15)
    rows = [
        {
            "case": f"load one function of {functions} over {functions * per:,} tensors and "
            "call it / the same function in a bundle of its own (goal <= 1.2)",
            "s": res["big"][0],
            "ratio": res["big"][0] / res["alone"][0],
            "spread": res["big"][1],
        },
        *_one_function_phases(big, alone, res["big"][0] - res["alone"][0], 5 if quick else 15),
    ]
    rows.append(_cache_growth(tmp, quick))
    # Growth: seconds per tensor (one function) and per function (16 tensors each), each
    # against the smallest size on its axis: 1.0 is linear, above it grows faster.
    axes = {
        "tensor": [(1, 100), (1, 1000)] + ([] if quick else [(1, 10000)]),
        "function": [(1, 16), (4 if quick else 8, 16)] + ([] if quick else [(64, 16)]),
    }
    made = {s: many_functions(tmp / f"usage-{s[0]}-{s[1]}", *s) for a in axes.values() for s in a}
    for what, fn in (
        ("inspect (summarize)", summarize),
        ("verify --quick (load)", hlobundle.load),
    ):
        times = interleaved({s: (lambda p=p: fn(p)) for s, p in made.items()}, 3 if quick else 7)
        for unit, sizes in axes.items():
            count = (lambda s: s[1]) if unit == "tensor" else (lambda s: s[0])  # noqa: E731
            first = times[sizes[0]][0] / count(sizes[0])
            for size in sizes[1:]:
                rows.append(
                    {
                        "case": f"{what}: {size[0]} function(s) of {size[1]:,} tensors, seconds "
                        f"per {unit} / at {count(sizes[0]):,} (1.0 = linear)",
                        "s": times[size][0],
                        "ratio": times[size][0] / count(size) / first,
                        "spread": times[size][1],
                    }
                )
    rows += _use_growth(made, axes["tensor"], 3 if quick else 7)
    return rows


def _use_growth(made: dict, sizes: list[tuple[int, int]], reps: int) -> list[dict]:
    """What a user does with every argument of a function of many (load, each tensor,
    `function("xla")`, the source of its script): seconds per argument against the smallest
    size, in process (1.0 = linear; each of four steps was quadratic once)."""
    import hlobundle

    def use(path: Path) -> None:
        b = hlobundle.load(path)
        for a in b.arguments:
            b.tensor(a.name)
        b.function("xla")
        hlobundle.emit_script(b, backend="xla")

    times = interleaved({s: (lambda p=made[s]: use(p)) for s in sizes}, reps)
    first = times[sizes[0]][0] / sizes[0][1]
    return [
        {
            "case": f"load, every tensor, function('xla') and emit_script: 1 function of "
            f"{size[1]:,} tensors, seconds per tensor / at {sizes[0][1]:,} (1.0 = linear)",
            "s": times[size][0],
            "ratio": times[size][0] / size[1] / first,
            "spread": times[size][1],
        }
        for size in sizes[1:]
    ]


def _gc_paused(step: Callable[[], object]) -> None:
    from hlobundle._read._gc import collector_paused

    with collector_paused():
        step()


def _one_function_phases(big: Path, alone: Path, extra: float, reps: int) -> list[dict]:
    """Where loading one function of the big bundle spends the time (`extra`) it takes beyond
    the bundle of its own: each whole-manifest step of `load`, and the whole load, timed alone
    on both (seconds: the big bundle's; ratio: its extra seconds / `extra`)."""
    import hlobundle
    from hlobundle._format import _manifest_json
    from hlobundle._read import _files, _tensor_files

    def steps(path: Path) -> dict[str, Callable[[], object]]:
        raw = (path / "manifest.json").read_bytes()
        data = json.loads(raw)
        manifest = _manifest_json.parse_manifest(raw)  # 1.x (one function) or 2.x
        present = _files.files_of(manifest, ["f0"])
        return {
            "JSON (limits, then json.loads)": lambda: _manifest_json._decode_json(raw, "m"),
            "the models (pydantic, every function)": lambda: type(manifest).model_validate(data),
            "the tensor file's header, against every function's references": lambda: (
                _tensor_files.open_tensor_files(path, manifest, only=present)
            ),
            "the whole load (functions=['f0'])": lambda: hlobundle.load(path, functions=["f0"]),
        }

    def paused(step: Callable[[], object]) -> Callable[[], object]:
        return lambda: _gc_paused(step)  # as load() runs them (_read/_gc.py)

    mine, theirs = steps(big), steps(alone)
    timed = interleaved(
        {f"{k} big": paused(v) for k, v in mine.items()}
        | {f"{k} alone": paused(v) for k, v in theirs.items()},
        reps,
    )
    return [
        {
            "case": f"  in which: {k} (ratio: its extra seconds over the bundle of its own / "
            "those of the whole load and call)",
            "s": timed[f"{k} big"][0],
            "ratio": (timed[f"{k} big"][0] - timed[f"{k} alone"][0]) / extra,
        }
        for k in mine
    ]


def _cache_growth(tmp: Path, quick: bool) -> dict:
    """load() of the LeNet (its check verdicts recalled) with a cache holding 10,000 other
    verdicts, as a user's does after many bundles / with a cache holding its own alone."""
    import hlobundle
    from hlobundle._read import _cache

    example = ROOT / "examples" / "lenet5.hlobundle"
    roots = {"full": tmp / "cache-full", "own": tmp / "cache-own"}
    for root in roots.values():
        root.mkdir(mode=0o700)
        (root / "checks").mkdir(mode=0o700)
    for i in range(1000 if quick else 10_000):
        _cache.write(
            roots["full"] / "checks", hashlib.sha256(b"%d" % i).hexdigest(), b"{}", ".json"
        )

    def load(root: Path) -> None:
        before = os.environ.get("HLOBUNDLE_CACHE_DIR")
        os.environ["HLOBUNDLE_CACHE_DIR"] = str(root)
        try:
            hlobundle.load(example)
        finally:
            os.environ.pop("HLOBUNDLE_CACHE_DIR")
            if before is not None:
                os.environ["HLOBUNDLE_CACHE_DIR"] = before

    for root in roots.values():
        load(root)  # its own verdicts recorded
    res = interleaved({k: (lambda r=r: load(r)) for k, r in roots.items()}, 7 if quick else 31)
    return {
        "case": f"load() of the LeNet with {1000 if quick else 10_000:,} other verdicts in the "
        "cache / with its own alone (goal <= 1.1)",
        "s": res["full"][0],
        "ratio": res["full"][0] / res["own"][0],
        "spread": res["full"][1],
    }

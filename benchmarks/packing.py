"""Pack and load: load to device-ready arrays and pack with checksums against npz, jax.export
and safetensors (section `pack`), column-major packing (`column`), and a sparse bundle of many
GiB (`scale`)."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from benchmarks.bundles import module_for, weights
from benchmarks.harness import PEAK_RSS, PY, GiB, run_py, user_env

LOAD = """
import time, numpy as np, jax, json
jax.config.update("jax_platforms", "cpu")
t0 = time.perf_counter()
{body}
jax.block_until_ready(arrays)
dt = time.perf_counter() - t0
hwm = {peak_rss}
print(json.dumps({{"s": dt, "peak": hwm}}))
"""


BASELINE_RSS = LOAD.format(body="arrays = []", peak_rss=PEAK_RSS)


BODIES = {
    "bundle": "import hlobundle\nb = hlobundle.load({bundle!r})\narrays = jax.device_put([b.tensor(a.name) for a in b.arguments])",
    "npz": "z = np.load({npz!r})\narrays = jax.device_put([z[k] for k in z.files])",
    "jax.export + npz": "from jax import export\ne = export.deserialize(open({exp!r}, 'rb').read())\n"
    "z = np.load({npz!r})\narrays = jax.device_put([z[k] for k in z.files])",
}


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)


class PackPhases(dict):
    """Where the time of `hlobundle.pack` goes: wrappers around its steps add each step's own
    time (less that of wrapped steps inside it) to this dict, by phase, while in the block."""

    def __enter__(self) -> PackPhases:
        from hlobundle._bundle_io import _tensor_writing
        from hlobundle._file_io import _durable, _hashing_writer
        from hlobundle._parse import _main_signature, _mlir
        from hlobundle._read import _inputs
        from hlobundle._write import _atomic, _normalize, _writer

        steps = {
            "module checks (normalize, parse, @main's signature)": [
                (_normalize, "normalize"),
                (_mlir, "parse"),
                (_main_signature, "signature"),
            ],
            "example inputs checked, manifest planned (pydantic)": [
                (_inputs, "from_python"),
                (_writer, "plan"),
            ],
            "portable artifact of the module": [(_mlir, "to_portable")],
            "tensor file: written in steps, sha256 in a second thread": [
                (_tensor_writing, "write")
            ],
            "tensor file: its fsync, and the end of its sha256": [
                (_hashing_writer.HashingWriter, "finish")
            ],
            "manifest.json (final manifest validated, JSON)": [(_atomic, "_finish")],
            "fsync of the other files and the directory": [(_durable, "fsync_tree")],
        }
        self._restore: list[tuple[object, str, object]] = []
        inner = [0.0]  # time of wrapped steps inside the current one

        def timed(phase: str, fn: Callable) -> Callable:
            def step(*args: object, **kwargs: object) -> object:
                outer, inner[0] = inner[0], 0.0
                start = time.perf_counter()
                try:
                    return fn(*args, **kwargs)
                finally:
                    took = time.perf_counter() - start
                    self[phase] = self.get(phase, 0.0) + took - inner[0]
                    inner[0] = outer + took

            return step

        for phase, places in steps.items():
            for owner, name in places:
                fn = getattr(owner, name)
                self._restore.append((owner, name, fn))
                setattr(owner, name, timed(phase, fn))
        return self

    def __exit__(self, *exc: object) -> None:
        for owner, name, fn in reversed(self._restore):
            setattr(owner, name, fn)


def phase_rows(spent: dict[str, float], total: float, synced: float) -> list[dict]:
    """`in which` rows: each phase's seconds in one pack, and its share of the ratio against
    save_file + fsync (the rows add up to the pack's)."""
    rest = total - sum(spent.values())
    return [
        {"case": f"  in which: {phase}", "fastest_s": s, "fastest_vs_save_file_fsync": s / synced}
        for phase, s in [*spent.items(), ("the rest (temp dir, module files, rename)", rest)]
    ]


def sha256_alone(arrays: list[np.ndarray]) -> float:
    """Seconds to hash the arrays' bytes in one thread: the floor of a pack on this machine."""
    import hashlib

    start = time.perf_counter()
    h = hashlib.sha256()
    for a in arrays:
        h.update(memoryview(a).cast("B"))
    return time.perf_counter() - start


def load_and_pack(tmp: Path, quick: bool) -> tuple[list[dict], list[dict]]:
    import jax
    from jax import export
    from safetensors.numpy import save_file

    import hlobundle

    total = 64 * 1024**2 if quick else GiB
    base_rss = json.loads(run_py(BASELINE_RSS)[1])["peak"]
    load_rows, pack_rows = [], []
    for count in (64, 4096):
        arrays = weights(total, count)
        text = module_for(arrays)
        names = [f"w{i}" for i in range(count)]
        writers = {
            "hlobundle.pack (with sha256, fsync)": (
                tmp / "b",
                lambda: hlobundle.pack(text, arrays, tmp / "b", names=names),
            ),
            "np.savez": (tmp / "w.npz", lambda: np.savez(tmp / "w.npz", *arrays)),
            "safetensors save_file": (
                tmp / "w.safetensors",
                lambda: save_file(
                    dict(zip(names, arrays, strict=True)), str(tmp / "w.safetensors")
                ),
            ),
            "safetensors save_file + fsync": (
                tmp / "d.safetensors",
                lambda: (
                    save_file(dict(zip(names, arrays, strict=True)), str(tmp / "d.safetensors")),
                    _fsync(tmp / "d.safetensors"),
                ),
            ),
        }
        times: dict[str, list[float]] = {k: [] for k in writers}
        phases: list[dict[str, float]] = []  # of each pack run
        for _ in range(2 if quick else 3):
            for k, (target, write) in writers.items():
                shutil.rmtree(target, ignore_errors=True) if target.is_dir() else target.unlink(
                    missing_ok=True
                )
                os.sync()  # nobody pays for another's dirty pages
                with PackPhases() as spent:
                    start = time.perf_counter()
                    write()
                    times[k].append(time.perf_counter() - start)
                if k.startswith("hlobundle.pack"):
                    phases.append(spent)
        base = statistics.median(times["safetensors save_file"])
        synced = min(times["safetensors save_file + fsync"])  # the baseline: fastest runs
        for k in (
            "hlobundle.pack (with sha256, fsync)",
            "np.savez",
            "safetensors save_file + fsync",
        ):
            med = statistics.median(times[k])
            pack_rows.append(
                {
                    "case": f"{total / GiB:.3g} GiB in {count} tensors",
                    "what": k,
                    "ratio": med / base,
                    "s": med,
                    "baseline_s": base,
                    "fastest_s": min(times[k]),
                    "fastest_vs_save_file_fsync": min(times[k]) / synced,
                }
            )
        fastest = min(
            range(len(phases)), key=lambda i: times["hlobundle.pack (with sha256, fsync)"][i]
        )
        pack_rows += phase_rows(
            phases[fastest], times["hlobundle.pack (with sha256, fsync)"][fastest], synced
        )
        alone = min(sha256_alone(arrays) for _ in range(2 if quick else 3))
        pack_rows.append(
            {
                "case": "  for reference: sha256 of the same bytes alone, one core",
                "fastest_s": alone,
                "fastest_vs_save_file_fsync": alone / synced,
            }
        )
        exp = export.export(jax.jit(lambda *a: a[0]))(
            *[jax.ShapeDtypeStruct(a.shape, a.dtype) for a in arrays]
        )
        (tmp / "fn.jaxexport").write_bytes(exp.serialize())
        paths = {
            "bundle": str(tmp / "b"),
            "npz": str(tmp / "w.npz"),
            "exp": str(tmp / "fn.jaxexport"),
        }
        measured = {k: [] for k in BODIES}
        for _ in range(2 if quick else 3):
            for k, body in BODIES.items():
                subprocess.run(["sync"])
                measured[k].append(
                    json.loads(run_py(LOAD.format(body=body.format(**paths), peak_rss=PEAK_RSS))[1])
                )
        med = {k: statistics.median(m["s"] for m in v) for k, v in measured.items()}
        peak = {k: max(m["peak"] for m in v) - base_rss for k, v in measured.items()}
        for k in ("npz", "jax.export + npz"):
            load_rows.append(
                {
                    "case": f"{total / GiB:.3g} GiB in {count} tensors",
                    "baseline": k,
                    "speedup": med[k] / med["bundle"],
                    "bundle_peak_x": peak["bundle"] / total,
                    "baseline_peak_x": peak[k] / total,
                }
            )
    return load_rows, pack_rows


COLUMN_MAJOR = """
import numpy as np, json, hlobundle
from pathlib import Path
files = sorted(Path({dir!r}).glob("*.npy"))
hlobundle.pack_files({module!r}, files, {out!r}, layout="column_major", force=True)
hwm = {peak_rss}
print(json.dumps({{"peak": hwm}}))
"""


def column_major(tmp: Path, quick: bool) -> list[dict]:
    total = 64 * 1024**2 if quick else GiB
    n = int((total // 4 // 16) ** 0.5)
    rows = []
    base_rss = json.loads(
        run_py(
            "import numpy, hlobundle, json\n"
            + f"hwm = {PEAK_RSS}\nprint(json.dumps({{'peak': hwm}}))"
        )[1]
    )["peak"]
    for order, label in (
        ("F", "Julia-written (column-major memory, as NPZ.jl writes)"),
        ("C", "row-major memory (a transpose per tensor)"),
    ):
        d = tmp / f"cm-{order}"
        d.mkdir()
        for i in range(16):
            np.save(
                d / f"w{i:02d}.npy",
                np.asarray(
                    np.random.default_rng(i).standard_normal((n, n + 1), np.float32), order=order
                ),
            )
        shapes = ", ".join(f"%a{i}: tensor<{n + 1}x{n}xf32>" for i in range(16))
        (tmp / "cm.mlir").write_text(
            f"func.func @main({shapes}) -> tensor<{n + 1}x{n}xf32> {{\n  return %a0 : tensor<{n + 1}x{n}xf32>\n}}\n"
        )
        peak = json.loads(
            run_py(
                COLUMN_MAJOR.format(
                    dir=str(d),
                    module=str(tmp / "cm.mlir"),
                    out=str(tmp / "cm.hlobundle"),
                    peak_rss=PEAK_RSS,
                )
            )[1]
        )["peak"]
        rows.append(
            {
                "case": f"{16 * n * (n + 1) * 4 / GiB:.3g} GiB, 16 tensors, {label}",
                "peak_x": (peak - base_rss) / total,
            }
        )
        shutil.rmtree(d)
    return rows


def scale(tmp: Path, quick: bool) -> list[dict]:
    """A bundle of 10 GiB of (sparse) weights: what touches the data and what does not."""
    import hlobundle
    from hlobundle._write._atomic import sha256_file

    per, count = (64 * 1024**2, 4) if quick else (GiB, 10)
    n = per // 4
    args = ", ".join(f"%a{i}: tensor<{n}xf32>" for i in range(count))
    text = f"func.func @main({args}) -> tensor<4xf32> {{\n  %s = stablehlo.slice %a0 [0:4] : (tensor<{n}xf32>) -> tensor<4xf32>\n  return %s : tensor<4xf32>\n}}\n"
    out = hlobundle.pack(text, None, tmp / "big", names=[f"w{i}" for i in range(count)])
    header = {
        f"w{i}": {"dtype": "F32", "shape": [n], "data_offsets": [i * per, (i + 1) * per]}
        for i in range(count)
    }
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    path = out / "weights.safetensors"
    with open(path, "wb") as f:
        f.write(len(raw).to_bytes(8, "little") + raw)
        f.truncate(8 + len(raw) + count * per)  # sparse: no disk blocks, zeros on read
    m = json.loads((out / "manifest.json").read_text())
    for i, a in enumerate(m["arguments"]):
        a["value"] = {"file": "weights.safetensors", "key": f"w{i}"}
    m["files"]["weights.safetensors"] = {"size": path.stat().st_size, "sha256": sha256_file(path)}
    (out / "manifest.json").write_text(json.dumps(m, indent=2, sort_keys=True) + "\n")
    total = count * per
    rows = []
    looks = (
        ("inspect", ["inspect"], "the first look at its files"),
        ("inspect", ["inspect"], "again"),
        ("verify --quick", ["verify", "--quick"], "after inspect"),
    )
    for label, cmd, when in looks:
        start = time.perf_counter()
        subprocess.run(
            [PY, "-m", "hlobundle", *cmd, str(out)], check=True, capture_output=True, env=user_env()
        )
        rows.append(
            {
                "case": f"{label}, {total / GiB:.3g} GiB bundle (fresh process; {when})",
                "s": time.perf_counter() - start,
            }
        )
    start = time.perf_counter()
    b = hlobundle.load(out)
    rows.append({"case": "load() in process", "s": time.perf_counter() - start})
    start = time.perf_counter()
    b.verify(in_memory=False)  # hashing through the mapping, as `hlobundle verify` does
    ours = time.perf_counter() - start
    start = time.perf_counter()
    subprocess.run(["sha256sum", str(path)], check=True, capture_output=True)
    theirs = time.perf_counter() - start
    rows.append(
        {
            "case": f"full verify vs sha256sum of the data file ({total / GiB:.3g} GiB)",
            "s": ours,
            "ratio": ours / theirs,
        }
    )
    code = (
        "import json, hlobundle\nfrom hlobundle._run._run import run\n"
        "from hlobundle._run._backends import resolve\n"
        f"report, _ = run(hlobundle.load({str(out)!r}), backend=resolve('xla'))\n"
        f"hwm = {PEAK_RSS}\n"
        "print(json.dumps({'peak': hwm}))\n"
    )
    peak = json.loads(run_py(code)[1])["peak"]
    rows.append(
        {
            "case": f"run a function reading 1 of {count} weights ({per / GiB:.3g} GiB each): peak RSS / one weight",
            "ratio": peak / per,
        }
    )
    return rows

"""Does the speed machinery earn its place? `python benchmarks/machinery.py [--quick] [--out FILE]`.

For each piece of machinery that exists only to save time (verdict caches, the fork servers,
the hand-written safetensors writer, the store of what remote loads fetched), the figure a user sees, measured in one run with it and without it,
where "without" is a real path: the cache's directory emptied before each run, a private
switch, or the alternative called directly. Medians of interleaved repetitions. `--out` writes
the table (benchmarks/RESULTS-machinery.md from a full run on a quiet machine); `--quick` uses
tiny sizes, a smoke run.
"""

from __future__ import annotations

import argparse
import ast
import compileall
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.append(str(Path(__file__).resolve().parent.parent))  # the checkout: `benchmarks`
from benchmarks import harness  # noqa: E402
from benchmarks.distribution import _functions_bundle, _static_server  # noqa: E402
from benchmarks.harness import PY, ROOT, user_env  # noqa: E402
from benchmarks.trust import _written_by_another_jaxlib  # noqa: E402

MiB = 1 << 20


def interleaved(
    fns: dict[str, Callable[[], object]],
    reps: int,
    setup: dict[str, Callable[[], object]] | None = None,
) -> dict[str, float]:
    """The median seconds of each function (`harness.interleaved`, run in turns)."""
    return {k: median for k, (median, _) in harness.interleaved(fns, reps, setup).items()}


def lines(*parts: str) -> int:
    """Lines of code of `parts`: a file (`hlobundle/_read/_cache.py`), or named top-level
    functions and classes of one (`hlobundle/_read/_tensor_files.py:_validated_by_safetensors`)."""
    total = 0
    for part in parts:
        path, _, names = part.partition(":")
        text = (ROOT / path).read_text()
        if not names:
            total += len(text.splitlines())
            continue
        wanted = set(names.split(","))
        for node in ast.parse(text).body:
            if getattr(node, "name", None) in wanted:
                total += node.end_lineno - node.lineno + 1  # type: ignore[attr-defined,operator]
    return total


def hlobundle_cli(*args: str, cache: Path | None) -> None:
    """`hlobundle ARGS` in a fresh process, a user's environment, this checkout's package;
    its caches under `cache` (None: `HLOBUNDLE_NO_CACHE=1`)."""
    where = {"HLOBUNDLE_CACHE_DIR": str(cache)} if cache else {"HLOBUNDLE_NO_CACHE": "1"}
    full = user_env({"PYTHONPATH": str(ROOT), **where})
    subprocess.run([PY, "-m", "hlobundle", *args], env=full, check=True, capture_output=True)


def row(
    machinery: str, code: list[str], figure: str, with_: float, without: float, goal: str
) -> dict[str, Any]:
    """One row of the table: `code`'s lines (as `lines` counts them), and the ratio."""
    return {
        "machinery": machinery,
        "lines": lines(*code),
        "figure": figure,
        "with": with_,
        "without": without,
        "ratio": with_ / without,
        "goal": goal,
    }


# --- verdict caches -----------------------------------------------------------------------------

VERDICT_CODE = {
    "checks": [
        "hlobundle/_read/_modules.py:remember,_key,_dump,code_digest,_recall,_int,_list,_str,"
        "_encode,_decode,_types,_strings,_partitions"
    ],
    "safetensors-headers": ["hlobundle/_read/_tensor_files.py:_validated_by_safetensors"],
}
VERDICT_NAMES = {
    "checks": "module check verdicts (`checks/`)",
    "safetensors-headers": "safetensors header verdicts",
}


def verdicts(tmp: Path, quick: bool) -> list[dict]:
    """`hlobundle verify --quick` and `inspect` of the LeNet, fresh processes: every verdict
    remembered / one cache's directory removed before each run (so that run checks in full and
    remembers again), and / no cache at all (`HLOBUNDLE_NO_CACHE=1`)."""
    bundle = tmp / "lenet5.hlobundle"
    shutil.copytree(ROOT / "examples" / "lenet5.hlobundle", bundle)
    cache = tmp / "verdicts-cache"
    reps = 3 if quick else 15
    rows = []
    for command in (["verify", "--quick"], ["inspect"]):
        hlobundle_cli(*command, str(bundle), cache=cache)  # remembers every verdict

        def without(name: str, command: list[str] = command) -> None:
            shutil.rmtree(cache / name, ignore_errors=True)
            hlobundle_cli(*command, str(bundle), cache=cache)

        runs: dict[str, Callable[[], object]] = {
            "warm": lambda command=command: hlobundle_cli(*command, str(bundle), cache=cache),
            "none": lambda command=command: hlobundle_cli(*command, str(bundle), cache=None),
        }
        runs |= {name: lambda name=name: without(name) for name in VERDICT_CODE}
        t = interleaved(runs, reps)
        figure = f"`hlobundle {' '.join(command)}` LeNet, fresh process (s)"
        goal = "inspect and verify start fast (RESULTS.md, 'Start-up')"
        for name, code in VERDICT_CODE.items():
            rows.append(row(VERDICT_NAMES[name], code, figure, t["warm"], t[name], goal))
        every = ["hlobundle/_read/_cache.py", *sum(VERDICT_CODE.values(), [])]
        every_cache = "every verdict cache (`_read/_cache.py` with the above)"
        rows.append(row(every_cache, every, figure, t["warm"], t["none"], goal))
    return rows


def file_digests(tmp: Path, quick: bool) -> list[dict]:
    """`hlobundle verify` (full) of a bundle whose weights have chunk digests (format 2.1),
    fresh processes: the file's sha256 recalled from its chunk digests / the cache's
    `file-digests/` removed before each run (the sha256 computed)."""

    count, size = (2, 40 * MiB) if quick else (4, 128 * MiB)
    out = _functions_bundle(tmp / "chunked.hlobundle", count, size, distinct=True)
    cache = tmp / "digests-cache"
    hlobundle_cli("verify", str(out), cache=cache)

    def without() -> None:
        shutil.rmtree(cache / "file-digests", ignore_errors=True)
        hlobundle_cli("verify", str(out), cache=cache)

    t = interleaved(
        {"warm": lambda: hlobundle_cli("verify", str(out), cache=cache), "without": without},
        3 if quick else 10,
    )
    return [
        row(
            "file digests recalled from chunk digests",
            ["hlobundle/_read/_file_digests.py"],
            f"`hlobundle verify` of {count * size // MiB} MiB in chunks, fresh process (s)",
            t["warm"],
            t["without"],
            "full verify <= 1.15 x one core's sha256 (RESULTS.md, 'Signing and full verify')",
        )
    ]


# --- the fork servers ---------------------------------------------------------------------------

FORK_CODE = ["hlobundle/_isolation/_fork_servers.py", "hlobundle/_isolation/_fork_server.py"]


def fork_servers(tmp: Path, quick: bool) -> list[dict]:
    """Untrusted bytes read in a child: forks of one server / a fresh interpreter each.
    `hlobundle verify` (no cache) of a bundle of three forms another jaxlib wrote (each form's
    artifact is deserialized in a child), switched by `_artifacts.FORK_SERVER`; and three
    Exporteds' backward modules lowered in one process (`from_exported`'s session)."""
    import jax

    import hlobundle

    w = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    x = np.linspace(0, 1, 8, dtype=np.float32).reshape(2, 4)
    fn = lambda w, x: jax.numpy.tanh(x @ w)  # noqa: E731
    bundle = hlobundle.export(
        fn, w, x, out=tmp / "foreign.hlobundle", with_vjp=True, vmap_in_axes=(None, 0)
    )
    _written_by_another_jaxlib(bundle)
    code = (
        "import sys\nfrom hlobundle._parse import _artifacts\n"
        "_artifacts.FORK_SERVER = sys.argv[1] == 'forked'\n"
        "from hlobundle._cli._main import main\nsys.exit(main(['verify', sys.argv[2]]))"
    )
    env = {**os.environ, "HLOBUNDLE_NO_CACHE": "1", "PYTHONPATH": str(ROOT)}

    def verify(how: str) -> None:
        subprocess.run([PY, "-c", code, how, str(bundle)], env=env, check=True, capture_output=True)

    t = interleaved({k: lambda k=k: verify(k) for k in ("forked", "once")}, 3 if quick else 10)
    rows = [
        row(
            "fork servers",
            FORK_CODE,
            "`hlobundle verify` of a 3-form bundle another jaxlib wrote, no cache (s)",
            t["forked"],
            t["once"],
            "none stated: a foreign bundle's first verify",
        )
    ]
    rows.append(_backward_modules(quick))
    return rows


def _backward_modules(quick: bool) -> dict:
    """Three Exporteds' backward modules lowered in a child each, in one process, as
    `pack --from-jax-export A B C` does: forks of one server (the first starts it) / a fresh
    interpreter each."""
    import jax

    from hlobundle._isolation import _child, _fork_servers
    from hlobundle._parse import _children
    from hlobundle._write import _jax_export

    blobs = []
    for k in range(3):
        specs = [
            jax.ShapeDtypeStruct((4, 3 + k), np.float32),
            jax.ShapeDtypeStruct((2, 4), np.float32),
        ]
        exported = jax.export.export(jax.jit(lambda w, x: jax.numpy.tanh(x @ w)))(*specs)
        blobs.append(bytes(exported.serialize(vjp_order=1)))

    def three(forked: bool) -> None:
        if forked:
            _fork_servers._stop_servers()  # each round starts its server, as a new session does
            _fork_servers._servers.clear()
        for blob in blobs:
            _children.run_child(
                _child.JAX_EXPORT_CHILD,
                _jax_export.backward_child_args(blob),
                blob,
                path="the Exported",
                what="the Exported's VJP",
                max_output=1 << 24,
                forked=forked,
            )

    t = interleaved(
        {"forked": lambda: three(True), "once": lambda: three(False)}, 2 if quick else 6
    )
    return row(
        "fork servers",
        FORK_CODE,
        "three Exporteds' backward modules in one session (`pack --from-jax-export`) (s)",
        t["forked"],
        t["once"],
        "none stated: a session importing several Exporteds",
    )


# --- the safetensors writer ---------------------------------------------------------------------


WRITER_CODE = [
    "hlobundle/_format/_safetensors_layout.py",
    "hlobundle/_file_io/_hashing_writer.py",
    "hlobundle/_bundle_io/_tensor_writing.py:write,_bytes_of",
]


def writer(tmp: Path, quick: bool) -> list[dict]:
    """A tensor file written as `pack` writes it (`_tensor_writing.write`: laid out by hand, written in
    steps, hashed in a second thread, fsync'd) / `safetensors.numpy.save_file`, fsync, then the
    file's sha256 read back (the same tensors; ours pads the header so that the data is
    aligned for use in place)."""
    from safetensors.numpy import load_file, save_file

    from hlobundle._bundle_io import _tensor_writing
    from hlobundle._format import _dtypes

    total = (16 if quick else 512) * MiB
    f32 = _dtypes.BY_NAME["float32"]
    rows = []
    for count in (64, 4096):
        arrays = {f"t{i:05d}": np.full(total // count // 4, i, np.float32) for i in range(count)}
        ours, theirs = tmp / "ours.safetensors", tmp / "theirs.safetensors"

        def hand() -> str:
            ours.unlink(missing_ok=True)
            return _tensor_writing.write(ours, {k: (a, f32) for k, a in arrays.items()}, fsync=True)

        def library() -> str:
            theirs.unlink(missing_ok=True)
            save_file(arrays, str(theirs))
            with open(theirs, "rb") as f:
                os.fsync(f.fileno())
                return hashlib.file_digest(f, "sha256").hexdigest()

        hand(), library()
        mine, its = load_file(str(ours)), load_file(str(theirs))
        if mine.keys() != its.keys() or any((mine[k] != its[k]).any() for k in mine):
            raise RuntimeError("the two writers wrote different tensors")
        t = interleaved({"hand": hand, "library": library}, 3 if quick else 9)
        rows.append(
            row(
                "hand-written safetensors writer",
                WRITER_CODE,
                f"a tensor file of {total // MiB} MiB in {count} tensors, sha256, fsync (s)",
                t["hand"],
                t["library"],
                "pack with checksums <= 1.3 x save_file + fsync (RESULTS.md, 'Pack')",
            )
        )
        ours.unlink(missing_ok=True)
        theirs.unlink(missing_ok=True)
    rows.append(_writer_peak(tmp, total))
    return rows


WRITE_PEAK = """
import hashlib, os, sys
from pathlib import Path
import numpy as np
from safetensors.numpy import save_file
from hlobundle._bundle_io import _tensor_writing
from hlobundle._format import _dtypes
total, count, how, out = int(sys.argv[1]), 64, sys.argv[2], sys.argv[3]
shape = (256, total // count // 4 // 256)
arrays = {f"t{i:05d}": np.full(shape, i + 1, np.float32, order="F") for i in range(count)}
f32 = _dtypes.BY_NAME["float32"]
tiny = {"t": np.ones((2, 2), np.float32, order="F")}  # what each imports lazily, imported
_tensor_writing.write(Path(out), {k: (a, f32) for k, a in tiny.items()}, fsync=True)
save_file({k: np.ascontiguousarray(a) for k, a in tiny.items()}, out)
def peak():  # this image's high-water mark (ru_maxrss keeps the parent's across exec)
    status = open("/proc/self/status").read()
    return int(status.split("VmHWM:")[1].split()[0]) * 1024
before = peak()
if how == "hand":
    _tensor_writing.write(Path(out), {k: (a, f32) for k, a in arrays.items()}, fsync=True)
else:
    save_file({k: np.ascontiguousarray(a) for k, a in arrays.items()}, out)
    with open(out, "rb") as f:
        os.fsync(f.fileno())
        hashlib.file_digest(f, "sha256")
print(peak() - before)
"""


def _writer_peak(tmp: Path, total: int) -> dict:
    """Memory: the peak RSS a write adds to a process that holds the arrays / their bytes,
    each way in a fresh process, for arrays that must be copied to be stored (Fortran-ordered,
    stored row-major): `_tensor_writing.write` copies one at a time as it writes, `save_file` takes
    them all copied."""
    env = user_env({"PYTHONPATH": str(ROOT)})

    def peak(how: str) -> float:
        out = tmp / f"peak-{how}.safetensors"
        done = subprocess.run(
            [PY, "-c", WRITE_PEAK, str(total), how, str(out)],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        out.unlink()
        return int(done.stdout) / total

    return row(
        "hand-written safetensors writer",
        WRITER_CODE,
        f"peak RSS a write of {total // MiB} MiB in 64 Fortran-ordered tensors adds / their bytes",
        peak("hand"),
        peak("library"),
        "pack does not double memory (RESULTS.md, 'Column-major packing')",
    )


# --- the store of remote loads ------------------------------------------------------------------


def store(tmp: Path, quick: bool) -> list[dict]:
    """A remote load over https:// (Starlette's StaticFiles on loopback) of a bundle of four
    functions over one chunked weights file: bytes on the disk under the cache directory
    afterwards / those of the remote bundle's directory, which holds each fetched file and
    chunk once (1.0: nothing kept twice); and a new version whose one weight changed, loaded
    after the old: seconds with the store / with an empty one."""
    import hlobundle

    count, size = 4, (2 if quick else 64) * MiB
    root = tmp / "served"
    root.mkdir()
    _functions_bundle(root / "v1.hlobundle", count, size, distinct=True)
    _functions_bundle(root / "v2.hlobundle", count, size, changed=1, distinct=True)
    server, base = _static_server(root)
    every = [f"f{k}" for k in range(count)]
    code = ["hlobundle/_read/_store.py"]
    try:
        cache = tmp / "store-once"
        os.environ["HLOBUNDLE_CACHE_DIR"] = str(cache)
        hlobundle.load(base + "v1.hlobundle/", functions=every)
        fetched, on_disk = _allocated(cache / "remote"), _allocated(cache)
        reps = 2 if quick else 5

        def copied(empty: bool) -> None:
            """The store as the first load left it, or an empty one, in a cache of its own."""
            where = tmp / ("empty" if empty else "kept")
            shutil.rmtree(where, ignore_errors=True)
            shutil.copytree(cache, where, symlinks=True)
            if empty:
                for name in ("remote", "located", "blobs", "pulled"):  # this store's and the last's
                    shutil.rmtree(where / name, ignore_errors=True)
            os.environ["HLOBUNDLE_CACHE_DIR"] = str(where)

        t = interleaved(
            {
                k: lambda: hlobundle.load(base + "v2.hlobundle/", functions=every)
                for k in ("kept", "empty")
            },
            reps,
            {"kept": lambda: copied(False), "empty": lambda: copied(True)},
        )
    finally:
        os.environ.pop("HLOBUNDLE_CACHE_DIR", None)
        server.should_exit = True
    return [
        {
            "machinery": "the store of remote loads",
            "lines": lines(*code),
            "figure": f"bytes on disk under the cache after a remote load ({count} x {size // MiB} "
            "MiB) / those of the remote bundle's directory (what was fetched, once)",
            "with": on_disk,
            "without": fetched,
            "ratio": on_disk / fetched,
            "goal": "fetched chunks are stored once (1.0)",
        },
        row(
            "the store of remote loads",
            code,
            "a new version (one weight of four changed) loaded after the old (s)",
            t["kept"],
            t["empty"],
            "a new version fetches only what changed (docs/distribution.md)",
        ),
    ]


def _allocated(directory: Path) -> int:
    total = 0
    for top, _, files in os.walk(directory):
        for name in files:
            st = os.lstat(os.path.join(top, name))
            total += st.st_blocks * 512
    return total


# --- the table ----------------------------------------------------------------------------------

SECTIONS = {
    "verdicts": verdicts,
    "file_digests": file_digests,
    "fork_servers": fork_servers,
    "writer": writer,
    "store": store,
}
COLUMNS = ("machinery", "lines", "figure", "with", "without", "ratio", "goal")


def _cell(value: object) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def table(rows: list[dict]) -> str:
    head = "| " + " | ".join(COLUMNS) + " |\n|" + "---|" * len(COLUMNS) + "\n"
    return head + "".join("| " + " | ".join(_cell(r[c]) for c in COLUMNS) + " |\n" for r in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    parser.add_argument("--only", default="", help=f"comma-separated, of {list(SECTIONS)}")
    parser.add_argument("--out", default=None, help="write the section to this file too")
    args = parser.parse_args()
    chosen = [name for name in args.only.split(",") if name] or list(SECTIONS)
    unknown = sorted(set(chosen) - set(SECTIONS))
    if unknown:
        parser.error(f"unknown sections {unknown}; choose from {list(SECTIONS)}")
    import jax

    compileall.compile_dir(ROOT / "hlobundle", quiet=1)  # as `pip install` compiles it
    tmp = Path(tempfile.mkdtemp(prefix="hlobundle-machinery-"))
    try:
        rows = [r for name in chosen for r in SECTIONS[name](tmp, args.quick)]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    machine = (
        f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"jax {jax.__version__}"
    )
    text = (
        "## Speed machinery: each figure with it / without it (issue 60, section 6)\n\n"
        f"Generated by `python benchmarks/machinery.py{' --quick' if args.quick else ''}` on "
        f'{time.strftime("%Y-%m-%d")}: {machine}. "without" is a real path (the cache\'s '
        "directory emptied before each run, a private switch, or the alternative called "
        "directly); medians of interleaved repetitions; lines: of the machinery's code.\n\n"
        + table(rows)
    )
    if args.out:
        Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()

"""What the checks cost: the checking reader against the one before it (section `trust`),
untrusted artifacts read in child processes (`children`, `foreign`), and signing and a full
verify against one core's sha256 (`sign`)."""

from __future__ import annotations

import hashlib
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
from benchmarks.harness import PY, ROOT, GiB, interleaved

# The last commit before the reader checked module hashes on load, held files open, and proved
# each portable artifact to be its text's program (issue 12).
TRUST_BASELINE = "ea0a2c9"


def trust_cost(tmp: Path, quick: bool) -> list[dict]:
    """`load()` and `verify --quick` of this reader / the baseline commit's, fresh processes."""
    import hlobundle

    worktree = tmp / "baseline"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(worktree), TRUST_BASELINE],
        check=True,
        capture_output=True,
    )
    try:
        arrays = weights(64 * 1024**2 if quick else GiB, 64)
        big = hlobundle.pack(module_for(arrays), arrays, tmp / "trust-big")
        del arrays
        # `from hlobundle import load` first: the imports are not load()'s work (and hlobundle
        # now imports its modules on first use, the baseline on `import hlobundle`).
        load = "import sys, time\nfrom hlobundle import load\nt = time.perf_counter()\nload(sys.argv[1])\nprint(time.perf_counter() - t)"
        rows = []
        for label, bundle in (
            ("LeNet", ROOT / "examples" / "lenet5.hlobundle"),
            (f"{'64 MiB' if quick else '1 GiB'}, 64 tensors", big),
        ):
            for what, argv, inner in (
                ("load()", ["-c", load, str(bundle)], True),
                (
                    "verify --quick (whole process)",
                    ["-m", "hlobundle", "verify", "--quick", str(bundle)],
                    False,
                ),
            ):
                times: dict[str, list[float]] = {"ours": [], "baseline": []}
                for _ in range(5 if quick else 15):
                    for name, path in (("ours", ROOT), ("baseline", worktree)):
                        start = time.perf_counter()
                        r = subprocess.run(
                            [PY, *argv],
                            capture_output=True,
                            text=True,
                            cwd=tmp,
                            env={**os.environ, "PYTHONPATH": str(path)},
                            check=True,
                        )
                        wall = time.perf_counter() - start
                        times[name].append(float(r.stdout.strip()) if inner else wall)
                ours, base = (statistics.median(times[k]) for k in ("ours", "baseline"))
                rows.append(
                    {
                        "case": f"{what}, {label}: this reader / {TRUST_BASELINE} (goal <= 1.2)",
                        "s": ours,
                        "ratio": ours / base,
                    }
                )
        return rows
    finally:
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(worktree)],
            capture_output=True,
        )


def children_cost(tmp: Path, quick: bool) -> list[dict]:
    """Untrusted bytes read in a child process: a fork of the script's server
    (`_isolation/_fork_servers.py`) / a fresh `python -E -s SCRIPT` each time (`_isolation/
    _child.py`, as the script runs alone), with the same input and limits and the same output.
    An untrusted portable artifact deserialized and printed (LeNet's); an Exported's backward
    module lowered through its VJP (`from_exported`, `pack --from-jax-export`: a session that
    imports several Exporteds pays for jax's import once)."""
    import jax
    import jax.numpy as jnp

    from hlobundle._format import _limits
    from hlobundle._isolation import _child
    from hlobundle._parse import _artifacts
    from hlobundle._write import _jax_export

    artifact = (ROOT / "examples" / "lenet5.hlobundle" / "module.mlirbc").read_bytes()
    specs = [jax.ShapeDtypeStruct((4, 3), np.float32), jax.ShapeDtypeStruct((2, 4), np.float32)]
    exported = jax.export.export(jax.jit(lambda w, x: jnp.tanh(x @ w)))(*specs)
    blob = bytes(exported.serialize(vjp_order=1))
    return [
        *_fork_against_fresh(
            ("one artifact", "the first"),
            lambda: _artifacts.canonical_in_child(artifact, path="module.mlirbc"),
            [
                PY,
                "-E",
                "-s",
                str(_artifacts.CHILD),
                *_artifacts.child_args(_limits.MAX_MODULE_BYTES, len(artifact)),
            ],
            artifact,
            5 if quick else 30,
        ),
        *_fork_against_fresh(
            ("an Exported's backward module", "the first backward module"),
            lambda: _jax_export._backward_in_child(exported, blob),
            [PY, "-E", "-s", str(_child.JAX_EXPORT_CHILD), *_jax_export.backward_child_args(blob)],
            blob,
            3 if quick else 10,
        ),
    ]


def _fork_against_fresh(
    cases: tuple[str, str], forked: Callable[[], str], fresh: list[str], data: bytes, rounds: int
) -> list[dict]:
    """Rows for one child script: a call `forked` in its server / `fresh`, the script run alone
    on `data`; and the first call, which starts the server (it imports the heavy modules once)."""

    def alone() -> str:
        return subprocess.run(fresh, input=data, capture_output=True, check=True).stdout.decode()

    start = time.perf_counter()
    first = forked()
    started = time.perf_counter() - start
    assert first == alone(), f"{cases[0]}: the two ways print different texts"
    t = interleaved({"forked": forked, "alone": alone}, rounds)
    return [
        {
            "case": f"{cases[0]}: a fork of the server / a fresh process",
            "s": t["forked"][0],
            "ratio": t["forked"][0] / t["alone"][0],
            "spread": t["forked"][1],
        },
        {
            "case": f"{cases[1]}, starting the server / a fresh process",
            "s": started,
            "ratio": started / t["alone"][0],
            "spread": "",
        },
    ]


def _written_by_another_jaxlib(bundle: Path) -> Path:
    """`bundle` with every form's artifact serialized for StableHLO 1.0.0 and the manifest's
    target left as it was: the same programs, in bytes this jaxlib does not write for that
    target (as another jaxlib's serializer writes them; `tests/test_trust.py` does the same)."""
    from hlobundle._parse import _mlir

    manifest = json.loads((bundle / "manifest.json").read_text())
    for form in ("module", "vjp", "batched"):
        if manifest.get(form) is None:
            continue
        text, name = manifest[form]["text"], manifest[form]["portable"]["file"]
        data = _mlir.to_portable(_mlir.parse((bundle / text).read_text()), "1.0.0")
        (bundle / name).write_bytes(data)
        manifest["files"][name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    return bundle


def foreign_verify_cost(tmp: Path, quick: bool) -> list[dict]:
    """`hlobundle verify`, whole process, of a bundle another jaxlib wrote, with no verdict
    cached (its first verify): each form's artifact is deserialized in a child. The reader's
    way (forks of one server, `_parse/_artifacts.FORK_SERVER`) / a fresh interpreter per
    artifact (`_isolation/_child.py`), run in turns; one form, and three (module, backward,
    batched)."""
    import jax

    import hlobundle

    w = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    x = np.linspace(0, 1, 8, dtype=np.float32).reshape(2, 4)
    fn = lambda w, x: jax.numpy.tanh(x @ w)  # noqa: E731
    bundles = {
        "1 form (module)": hlobundle.export(fn, w, x, out=tmp / "foreign-1"),
        "3 forms (module, backward, batched)": hlobundle.export(
            fn, w, x, out=tmp / "foreign-3", with_vjp=True, vmap_in_axes=(None, 0)
        ),
    }
    code = (
        "import sys\nfrom hlobundle._parse import _artifacts\n"
        "_artifacts.FORK_SERVER = sys.argv[1] == 'forked'\n"
        "from hlobundle._cli._main import main\nsys.exit(main(['verify', sys.argv[2]]))"
    )
    env = {**os.environ, "HLOBUNDLE_NO_CACHE": "1"}
    rows = []
    for label, bundle in bundles.items():
        _written_by_another_jaxlib(bundle)

        def verify(how: str) -> None:
            subprocess.run(
                [PY, "-c", code, how, str(bundle)], env=env, check=True, capture_output=True
            )

        t = interleaved({k: lambda k=k: verify(k) for k in ("forked", "once")}, 5 if quick else 20)
        rows.append(
            {
                "case": f"{label}: forks of one server / a fresh process per artifact",
                "s": t["forked"][0],
                "ratio": t["forked"][0] / t["once"][0],
                "spread": t["forked"][1],
            }
        )
    return rows


def _sha256_of(path: Path) -> str:
    """One core's sha256 of a file, read in 8 MiB steps: the hash bound of a verify."""
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        while block := f.read(8 << 20):
            h.update(block)
    return h.hexdigest()


def sign_cost(tmp: Path, quick: bool) -> list[dict]:
    """Signing a bundle / verifying it: both hash every byte, and signing reuses the hashes its
    own verification computed (goal <= 1.2). The standard tool, which hashes again, for scale.
    And a full verify (`load(path).verify()`: every tensor file read into private memory, its
    sha256 computed from the copy) / one core's sha256 of the same tensor file, the bound of any
    verify of one file, whose sha256 is one sequential pass (goal <= 1.15): 64 and 4,096
    tensors."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    import hlobundle

    arrays = weights(64 * 1024**2 if quick else GiB, 64)
    path = hlobundle.pack(module_for(arrays), arrays, tmp / "sign-big")
    del arrays
    key = ec.generate_private_key(ec.SECP256R1())
    (tmp / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    tool = [
        str(Path(PY).parent / "model_signing"),
        "sign",
        "key",
        str(path),
        "--signature",
        str(tmp / "tool.sig"),
        "--private_key",
        str(tmp / "key.pem"),
    ]
    (data,) = path.glob("*.safetensors")
    res = interleaved(
        {
            "verify": lambda: hlobundle.load(path).verify(),
            "sign": lambda: hlobundle.sign(path, tmp / "key.pem", force=True),
            "tool": lambda: subprocess.run(tool, check=True, capture_output=True),
            "sha256": lambda: _sha256_of(data),
        },
        3 if quick else 5,
    )
    size = "64 MiB" if quick else "1 GiB"
    base = res["verify"][0]
    rows = [
        {
            "case": f"hlobundle sign / full verify, {size} (goal <= 1.2)",
            "s": res["sign"][0],
            "ratio": res["sign"][0] / base,
        },
        {
            "case": f"model_signing sign key (the standard tool, hashing itself) / full verify, {size}",
            "s": res["tool"][0],
            "ratio": res["tool"][0] / base,
        },
        {"case": f"full verify, {size}", "s": base, "ratio": 1.0},
        {
            "case": f"hlobundle sign / one core's sha256 of the tensor file, {size} in 64 "
            "tensors (goal <= 1.1)",
            "s": res["sign"][0],
            "ratio": res["sign"][0] / res["sha256"][0],
        },
    ]
    shutil.rmtree(path)
    for count in (64, 4096):
        arrays = weights(64 * 1024**2 if quick else GiB, count)
        path = hlobundle.pack(module_for(arrays), arrays, tmp / f"verify-{count}")
        del arrays
        (data,) = path.glob("*.safetensors")
        res = interleaved(
            {
                "verify": lambda path=path: hlobundle.load(path).verify(),
                "command": lambda path=path: hlobundle.load(path).verify(in_memory=False),
                "sha256": lambda data=data: _sha256_of(data),
            },
            3 if quick else 7,
        )
        rows.append(
            {
                "case": f"full verify / one core's sha256 of the tensor file, {size} in {count:,} "
                "tensors (goal <= 1.15)",
                "s": res["verify"][0],
                "ratio": res["verify"][0] / res["sha256"][0],
            }
        )
        rows.append(
            {
                "case": "  as `hlobundle verify` does it (nothing runs after: hashed through two "
                "buffers, no private copy) / the same sha256",
                "s": res["command"][0],
                "ratio": res["command"][0] / res["sha256"][0],
            }
        )
        shutil.rmtree(path)
    return rows

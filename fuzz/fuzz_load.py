"""Coverage-guided fuzzing of the reader with atheris (not part of the test suite).

    pip install atheris && python fuzz/fuzz_load.py -runs=20000

Each input replaces one file of a small valid bundle, rehashed in the manifest so that it
reaches its parser; `load()`, `verify()` and reading every tensor may only end in an
`HloBundleError`. Any other exception is a finding. (`fuzz_forms.py` mutates every module form.)
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import tempfile
from pathlib import Path

import atheris

with atheris.instrument_imports():
    import numpy as np

    import hlobundle

FILES = ["manifest.json", "module.mlir", "module.mlirbc", "inputs.safetensors"]
WORK = Path(tempfile.mkdtemp(prefix="hlobundle-fuzz-"))
BASE = hlobundle.pack(
    "func.func @main(%x: tensor<2x3xf32>, %n: tensor<i64>) -> tensor<2x3xf32> {\n"
    "  return %x : tensor<2x3xf32>\n}\n",
    {"x": np.ones((2, 3), np.float32), "n": np.int64(3)},
    WORK / "base",
    names=["x", "n"],
)


def one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    name = FILES[fdp.ConsumeIntInRange(0, len(FILES) - 1)]
    bundle = WORK / "case"
    shutil.rmtree(bundle, ignore_errors=True)
    shutil.copytree(BASE, bundle)
    original = (bundle / name).read_bytes()
    keep = fdp.ConsumeIntInRange(0, len(original))
    data = original[:keep] + fdp.ConsumeBytes(fdp.remaining_bytes())
    (bundle / name).write_bytes(data)
    if name != "manifest.json":
        manifest = json.loads((bundle / "manifest.json").read_text())
        manifest["files"][name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        (bundle / "manifest.json").write_text(json.dumps(manifest))
    try:
        b = hlobundle.load(bundle)
        b.verify()
        for a in b.arguments:
            np.asarray(b.tensor(a.name)).sum()
    except hlobundle.HloBundleError:
        pass


if __name__ == "__main__":
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()

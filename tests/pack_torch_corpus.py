"""Pack the PyTorch corpus (tests/torch_models.py: its cases, and the `transformers` ones where
that imports) on this CPU machine, for tests/on_accelerator_corpus.py to run on an accelerator,
which has no torch (docs/accelerators.md, "Measured on a TPU"):

    python tests/pack_torch_corpus.py OUT_DIR

OUT_DIR gets, for each model that builds, `NAME.hlobundle` (written by `hlobundle.from_torch`:
its expected outputs eager torch's, here); for the CNN and BERT, the backward module too,
`NAME.cotangent.safetensors` (a fixed random weight of each element of one result) and
`NAME.grads.safetensors`: torch's autograd gradient of the sum of that result's elements times
their weights by each parameter that gets one (and by the CNN's float input), keyed by the
bundle's argument names; and
`index.json`: the models written, those that did not build (and why), each loss, and the
versions of torch and transformers. It replaces a corpus an earlier run wrote there, and
refuses a folder that holds anything else.
"""

from __future__ import annotations

import json
import shutil
import sys
import traceback
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.numpy import save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch_models  # noqa: E402  (the corpus, beside this file)

import hlobundle  # noqa: E402

# The losses whose gradients are compared: the sum of one result's elements, each times a fixed
# random weight (`NAME.cotangent.safetensors`), so that the gradient is the backward pass of that
# cotangent. Not a plain sum, nor a sum of squares: BERT's last LayerNorm (weight 1, bias 0 as
# transformers initialises it) makes both the same for any input, and every gradient under it
# rounding noise.
LOSSES = {"cnn": None, "bert": "last_hidden_state"}


def builders() -> tuple[dict[str, Any], dict[str, str]]:
    """Each case's builder by name (returning the module and its Case), and the reason the
    transformers ones are missing where that does not import."""
    made: dict[str, Any] = {n: make for n, make in torch_models.cases().items()}
    try:
        hf = torch_models.hf_cases()
    except ImportError as e:
        return made, {"transformers": f"transformers does not import: {e}"}
    for name, (make, args) in hf.items():
        made[name] = lambda make=make, args=args: torch_models.Case(make(), args)
    return made, {}


def gradients(
    case: torch_models.Case, bundle: hlobundle.Bundle, result: str | None, cotangent: np.ndarray
) -> dict[str, np.ndarray]:
    """torch's autograd of sum(result * cotangent) by each parameter that gets a gradient and by
    each float input, keyed by the bundle's argument names (bound by `state_dict` key: `path`)."""
    module = case.module
    module.zero_grad()
    args = tuple(a.clone().requires_grad_(True) if a.is_floating_point() else a for a in case.args)
    out = module(*args)
    chosen = out if result is None else out[result]
    (chosen * torch.from_numpy(cotangent)).sum().backward()
    by_path = {a.path: a.name for a in bundle.manifest.arguments}
    inputs = [a.name for a in bundle.manifest.arguments if a.role == "input"]
    grads = {
        by_path[key]: p.grad.numpy().copy()
        for key, p in module.named_parameters()
        if p.grad is not None
    }
    for name, a in zip(inputs, args, strict=False):
        if a.grad is not None:
            grads[name] = a.grad.numpy().copy()
    return grads


def pack(out: Path, name: str, make: Any, index: dict[str, Any]) -> None:
    case = make()
    graded = name in LOSSES
    written = hlobundle.from_torch(
        case.module,
        case.args,
        out=out / f"{name}.hlobundle",
        dynamic_shapes=case.dynamic_shapes,
        with_vjp=graded,
        force=True,
    )
    index["models"].append(name)
    if graded:
        bundle = hlobundle.load(written)
        result = LOSSES[name]
        shape = bundle.expected_outputs()[result or bundle.results[0].name].shape
        cotangent = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        grads = gradients(case, bundle, result, cotangent)
        save_file(grads, str(out / f"{name}.grads.safetensors"))
        save_file({"cotangent": cotangent}, str(out / f"{name}.cotangent.safetensors"))
        index["grads"][name] = {"result": result, "tensors": len(grads)}


def main(out: Path) -> int:
    if (out / "index.json").is_file():  # what an earlier run wrote
        shutil.rmtree(out)
    elif out.exists() and any(out.iterdir()):
        sys.exit(f"{out} is not empty and holds no corpus this script wrote (index.json)")
    out.mkdir(parents=True, exist_ok=True)
    made, missing = builders()
    index: dict[str, Any] = {"models": [], "skipped": dict(missing), "grads": {}}
    for name, make in made.items():
        try:
            pack(out, name, make, index)
        except Exception as e:  # a model that does not build is listed, not fatal
            traceback.print_exc()
            index["skipped"][name] = f"{type(e).__name__}: {e}"
        said = index["skipped"].get(name, "packed")
        print(f"{name}: {said}", flush=True)
    versions = {"torch": torch.__version__}
    if "transformers" not in missing:
        import transformers

        versions["transformers"] = transformers.__version__
    index["versions"] = versions
    (out / "index.json").write_text(json.dumps(index, indent=2) + "\n")
    print(f"{len(index['models'])} packed, {len(index['skipped'])} skipped into {out}")
    return 0 if index["models"] else 1


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(Path(sys.argv[1])))

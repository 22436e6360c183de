"""The language model (examples/lm.hlobundle, section `lm`): decode per token under jit
against native, and its tensor bytes against one copy of the weights."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from benchmarks.harness import ROOT, interleaved


def lm_cost(tmp: Path, quick: bool) -> list[dict]:
    """Decode per token through the committed bundle under jit / native jax.jit of lm.decode
    (goal <= 1.05), at batch 1 and 8; and its tensor bytes / one copy of the weights plus the
    stored examples (goal <= 1.02)."""
    import jax
    import lm

    import hlobundle

    path = ROOT / "examples" / "lm.hlobundle"
    bundle = hlobundle.load(path)
    params = jax.device_put(bundle.select("decode").example_args()[0])
    rows = []
    for batch in (1, 8):
        tokens = np.random.default_rng(0).integers(32, 127, (batch, 16)).astype(np.int32)
        _, cache = jax.jit(lm.prefill)(params, tokens)
        token = jax.device_put(tokens[:, -1])
        native = jax.jit(lm.decode)
        fns = {
            "native jax.jit": lambda n=native, c=cache, t=token: jax.block_until_ready(
                n(params, c, t)
            )
        }
        for backend in ("enzyme", "xla"):
            f = bundle.function(backend, name="decode")
            j = jax.jit(lambda p, c, t, f=f: f(p, c, t))
            fns[backend] = lambda j=j, c=cache, t=token: jax.block_until_ready(j(params, c, t))
        for f in fns.values():
            f()  # compile
        res = interleaved(fns, 30 if quick else 300)
        base = res["native jax.jit"][0]
        for backend in ("enzyme", "xla"):
            rows.append(
                {
                    "case": f"decode one token, batch {batch}",
                    "backend": backend,
                    "native_s": base,
                    "bundle_s": res[backend][0],
                    "ratio": res[backend][0] / base,
                    "spread": res[backend][1],
                }
            )
    size = lm.storage(path)
    rows.append(
        {
            "case": "tensor bytes / (one copy of the weights + stored examples)",
            "backend": "",
            "native_s": "",
            "bundle_s": "",
            "ratio": size["stored"] / (size["weights"] + size["examples"]),
            "spread": "",
        }
    )
    return rows

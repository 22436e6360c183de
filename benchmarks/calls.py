"""A bundle's function under `jax.jit` against native `jax.jit` of the same JAX function
(sections `overhead` and `vmap`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from benchmarks.harness import interleaved


def overhead(tmp: Path, quick: bool) -> list[dict]:
    import jax
    import jax.numpy as jnp
    import lenet5

    import hlobundle

    rows = []
    mlp_width = 256 if quick else 4096

    def mlp(params, x):
        return jnp.maximum(x @ params["w1"], 0) @ params["w2"]

    cases = [
        (
            "LeNet, batch 4",
            lenet5.lenet5,
            lenet5.init_params(),
            np.random.default_rng(0).random((4, 1, 28, 28), np.float32),
        ),
        (
            "LeNet, batch 256",
            lenet5.lenet5,
            lenet5.init_params(),
            np.random.default_rng(0).random((16 if quick else 256, 1, 28, 28), np.float32),
        ),
        (
            f"2-layer MLP, width {mlp_width}, batch 64",
            mlp,
            {
                "w1": np.random.default_rng(1).standard_normal((mlp_width, mlp_width), np.float32)
                / 64,
                "w2": np.random.default_rng(2).standard_normal((mlp_width, mlp_width), np.float32)
                / 64,
            },
            np.random.default_rng(3).standard_normal((64, mlp_width), np.float32),
        ),
    ]
    for name, fn, params, x in cases:
        out = tmp / f"overhead-{len(rows)}"
        bundle = hlobundle.load(hlobundle.export(fn, params, x, out=out, store_expected=False))
        params_d = jax.device_put(params)
        x_d = jax.device_put(x)
        native = jax.jit(fn)
        fns = {"native jax.jit": lambda: jax.block_until_ready(native(params_d, x_d))}
        for backend in ("enzyme", "xla"):
            f = bundle.function(backend)
            jitted = jax.jit(lambda p, x, f=f: f(p, x))
            fns[backend] = lambda j=jitted: jax.block_until_ready(j(params_d, x_d))
        for f in fns.values():
            f()  # compile
        res = interleaved(fns, 30 if quick else 200)
        base = res["native jax.jit"][0]
        for backend in ("enzyme", "xla"):
            rows.append(
                {
                    "case": name,
                    "backend": backend,
                    "native_s": base,
                    "bundle_s": res[backend][0],
                    "ratio": res[backend][0] / base,
                    "spread": res[backend][1],
                }
            )
    return rows


def vmap_cost(tmp: Path, quick: bool) -> list[dict]:
    import jax
    import lenet5

    import hlobundle

    params, x = lenet5.init_params(), lenet5.example_images()
    bundle = hlobundle.load(
        hlobundle.export(
            lenet5.lenet5, params, x, out=tmp / "vmap", store_expected=False, with_vjp=True
        )
    )
    batched = hlobundle.load(
        hlobundle.export(
            lenet5.lenet5,
            params,
            x,
            out=tmp / "vmap-batched",
            store_expected=False,
            with_vjp=True,
            vmap_in_axes=(None, 0),
        )
    )
    declared = hlobundle.load(  # SPEC.md 2.13: rows independent along b, no batched module
        hlobundle.export(
            lenet5.lenet5,
            params,
            x,
            out=tmp / "vmap-declared",
            store_expected=False,
            with_vjp=True,
            shapes_specs=(None, "b, 1, 28, 28"),
            independent_rows="b",
        )
    )
    assert declared.manifest.batched is None and declared.manifest.independent_rows is not None
    batch = np.stack([x * (i + 1) for i in range(4 if quick else 16)])
    native = jax.jit(jax.vmap(lambda xi: lenet5.lenet5(params, xi)))
    fns = {"native": lambda: jax.block_until_ready(native(batch))}
    grads = {
        "native": jax.jit(jax.vmap(jax.grad(lambda xi: (lenet5.lenet5(params, xi) ** 2).sum())))
    }
    for backend in ("enzyme", "xla"):
        f = bundle.function(backend)
        v = jax.jit(jax.vmap(lambda xi, f=f: f(params, xi)))
        fns[backend] = lambda v=v: jax.block_until_ready(v(batch))
        grads[backend] = jax.jit(jax.vmap(jax.grad(lambda xi, f=f: (f(params, xi) ** 2).sum())))
        f = batched.function(backend)
        v = jax.jit(jax.vmap(lambda xi, f=f: f(params, xi)))
        fns[f"{backend}, batched module"] = lambda v=v: jax.block_until_ready(v(batch))
        f = declared.function(backend, trust=hlobundle.Trust.BATCHED)
        v = jax.jit(jax.vmap(lambda xi, f=f: f(params, xi)))
        fns[f"{backend}, declared rows"] = lambda v=v: jax.block_until_ready(v(batch))
        g = jax.grad(lambda xi, f=f: (f(params, xi) ** 2).sum())
        grads[f"{backend}, declared rows"] = jax.jit(jax.vmap(g))
    gfns = {k: (lambda g=g: jax.block_until_ready(g(batch))) for k, g in grads.items()}
    for f in [*fns.values(), *gfns.values()]:
        f()
    rows = []
    for label, group in (("vmap forward", fns), ("vmap of grad (per-example gradients)", gfns)):
        res = interleaved(group, 10 if quick else 50)
        for backend in [k for k in group if k != "native"]:
            rows.append(
                {
                    "case": f"{label}, {len(batch)} x LeNet batch 4",
                    "backend": backend,
                    "ratio": res[backend][0] / res["native"][0],
                    "spread": res[backend][1],
                }
            )
    return rows

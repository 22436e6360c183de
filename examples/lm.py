"""A small byte-level decoder-only transformer language model, written in JAX.

Two layers, d_model 128, 4 heads, a context of 128 bytes, tied input and output embeddings.
`prefill(params, tokens)` reads a prompt of any batch size and length (up to CONTEXT) and
returns the next byte's logits and a KV cache; `decode(params, cache, token)` takes one byte
per sequence and returns the next logits and the cache one position further on. The cache is
fixed at CONTEXT positions, with each sequence's position in `cache["pos"]`.

`python examples/lm.py` trains the model for about a minute on SPEC.md (fixed seed, CPU) and
writes `examples/lm.hlobundle`: both functions over one weights file, with symbolic batch `b`
(and, for prefill, length `s`). `generate()` samples text through any prefill/decode pair:
these functions, or the bundle's.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

VOCAB, CONTEXT, D_MODEL, HEADS, LAYERS = 256, 128, 128, 4, 2
HEAD = D_MODEL // HEADS
ROOT_HEAD = float(np.sqrt(HEAD))  # a Python float: weakly typed, float32 stays float32 with x64
HERE = Path(__file__).resolve().parent
CORPUS = HERE.parent / "SPEC.md"

Params = dict[str, Any]
Cache = dict[str, Any]


def init_params(seed: int = 0) -> Params:
    rng = np.random.default_rng(seed)

    def normal(*shape: int, scale: float = 0.02) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    def layer() -> Params:
        return {
            "norm1": np.ones(D_MODEL, np.float32),
            "qkv": normal(D_MODEL, 3 * D_MODEL),
            "out": normal(D_MODEL, D_MODEL, scale=0.02 / np.sqrt(2 * LAYERS)),
            "norm2": np.ones(D_MODEL, np.float32),
            "up": normal(D_MODEL, 4 * D_MODEL),
            "down": normal(4 * D_MODEL, D_MODEL, scale=0.02 / np.sqrt(2 * LAYERS)),
        }

    return {
        "embed": normal(VOCAB, D_MODEL),
        "position": normal(CONTEXT, D_MODEL, scale=0.01),
        "layers": [layer() for _ in range(LAYERS)],
        "norm": np.ones(D_MODEL, np.float32),
    }


def _norm(x: jax.Array, scale: jax.Array) -> jax.Array:
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * scale


def _heads(x: jax.Array) -> jax.Array:
    """(..., D_MODEL) -> (..., HEADS, HEAD)"""
    return x.reshape(*x.shape[:-1], HEADS, HEAD)


def _mlp(x: jax.Array, p: Params) -> jax.Array:
    return x + jax.nn.gelu(_norm(x, p["norm2"]) @ p["up"]) @ p["down"]


def _logits(x: jax.Array, params: Params) -> jax.Array:
    return _norm(x, params["norm"]) @ params["embed"].T


def forward(params: Params, tokens: jax.Array) -> tuple[jax.Array, list[tuple[jax.Array, ...]]]:
    """Logits at every position of `tokens` (b, s), and each layer's keys and values
    (b, HEADS, s, HEAD)."""
    s = tokens.shape[1]
    x = params["embed"][tokens] + params["position"][:s]
    causal = jnp.tril(jnp.ones((s, s), bool))
    kv = []
    for p in params["layers"]:
        q, k, v = jnp.split(_norm(x, p["norm1"]) @ p["qkv"], 3, axis=-1)
        q, k, v = (_heads(t).transpose(0, 2, 1, 3) for t in (q, k, v))
        scores = jnp.where(causal, q @ k.transpose(0, 1, 3, 2) / ROOT_HEAD, -1e9)
        att = jax.nn.softmax(scores, axis=-1) @ v  # (b, HEADS, s, HEAD)
        x = x + att.transpose(0, 2, 1, 3).reshape(x.shape) @ p["out"]
        x = _mlp(x, p)
        kv.append((k, v))
    return _logits(x, params), kv


def prefill(params: Params, tokens: jax.Array) -> tuple[jax.Array, Cache]:
    """The next byte's logits (b, VOCAB) after `tokens` (b, s), and the cache holding them."""
    b, s = tokens.shape
    logits, kv = forward(params, tokens)
    empty = jnp.zeros((LAYERS, b, HEADS, CONTEXT, HEAD), jnp.float32)
    keys = jax.lax.dynamic_update_slice(empty, jnp.stack([k for k, _ in kv]), (0, 0, 0, 0, 0))
    values = jax.lax.dynamic_update_slice(empty, jnp.stack([v for _, v in kv]), (0, 0, 0, 0, 0))
    return logits[:, -1], {"k": keys, "v": values, "pos": jnp.full((b,), s, jnp.int32)}


def decode(params: Params, cache: Cache, token: jax.Array) -> tuple[jax.Array, Cache]:
    """The logits (b, VOCAB) after one more byte per sequence, and the cache with it."""
    pos = cache["pos"]
    x = params["embed"][token] + params["position"][jnp.minimum(pos, CONTEXT - 1)]
    slots = jnp.arange(CONTEXT)
    here = (slots[None, :] == pos[:, None])[:, None, :, None]  # (b, 1, CONTEXT, 1)
    seen = (slots[None, :] <= pos[:, None])[:, None, :]  # (b, 1, CONTEXT)
    keys, values = [], []
    for i, p in enumerate(params["layers"]):
        q, k, v = (_heads(t) for t in jnp.split(_norm(x, p["norm1"]) @ p["qkv"], 3, axis=-1))
        ks = jnp.where(here, k[:, :, None, :], cache["k"][i])
        vs = jnp.where(here, v[:, :, None, :], cache["v"][i])
        scores = jnp.where(seen, jnp.einsum("bhd,bhtd->bht", q, ks) / ROOT_HEAD, -1e9)
        att = jnp.einsum("bht,bhtd->bhd", jax.nn.softmax(scores, axis=-1), vs)
        x = _mlp(x + att.reshape(x.shape) @ p["out"], p)
        keys.append(ks)
        values.append(vs)
    cache = {"k": jnp.stack(keys), "v": jnp.stack(values), "pos": pos + 1}
    return _logits(x, params), cache


def generate(
    prefill_fn: Callable[..., Any],
    decode_fn: Callable[..., Any],
    params: Params,
    prompts: list[str],
    steps: int,
    temperature: float = 0.0,
    seed: int = 0,
) -> list[str]:
    """Continue each prompt (the same length in bytes) by `steps` bytes: greedy at temperature
    0, else sampled. `prefill_fn` and `decode_fn` are `prefill` and `decode` or the bundle's."""
    if len({len(p.encode()) for p in prompts}) != 1:
        raise ValueError("the prompts must have the same length in bytes")
    tokens = np.array([list(p.encode()) for p in prompts], np.int32)
    if tokens.shape[1] + steps > CONTEXT:
        raise ValueError(f"prompt and continuation exceed the context of {CONTEXT} bytes")
    rng = np.random.default_rng(seed)
    logits, cache = prefill_fn(params, tokens)
    out = []
    for _ in range(steps):
        token = _choose(np.asarray(logits), temperature, rng)
        out.append(token)
        logits, cache = decode_fn(params, cache, token)
    continuation = np.stack(out, axis=1).astype(np.uint8)
    return [
        p + bytes(row).decode("utf-8", "replace")
        for p, row in zip(prompts, continuation, strict=True)
    ]


def _choose(logits: np.ndarray, temperature: float, rng: np.random.Generator) -> np.ndarray:
    if temperature == 0:
        return logits.argmax(-1).astype(np.int32)
    z = logits.astype(np.float64) / temperature
    p = np.exp(z - z.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.array([rng.choice(VOCAB, p=row) for row in p], np.int32)


# --- training -----------------------------------------------------------------------------------


def loss(params: Params, batch: jax.Array) -> jax.Array:
    logits, _ = forward(params, batch[:, :-1])
    picked = jnp.take_along_axis(jax.nn.log_softmax(logits), batch[:, 1:, None], axis=-1)
    return -picked.mean()


def train(steps: int = 700, batch: int = 16, seed: int = 0, log: bool = True) -> Params:
    """Adam on random 129-byte windows of SPEC.md, with a fixed seed."""
    data = np.frombuffer(CORPUS.read_bytes(), np.uint8).astype(np.int32)
    rng = np.random.default_rng(seed)
    params = jax.tree.map(jnp.asarray, init_params(seed))
    moments = jax.tree.map(lambda p: (jnp.zeros_like(p), jnp.zeros_like(p)), params)

    @jax.jit
    def step(params: Params, moments: Any, batch: jax.Array, t: jax.Array) -> Any:
        value, grads = jax.value_and_grad(loss)(params, batch)
        rate = 3e-3 * jnp.minimum(1.0, t / 50) * (1 - 0.9 * t / steps)
        flat, tree = jax.tree.flatten(params)
        new, moms = [], []
        for p, g, (m, v) in zip(
            flat, tree.flatten_up_to(grads), tree.flatten_up_to(moments), strict=True
        ):
            m, v = 0.9 * m + 0.1 * g, 0.99 * v + 0.01 * g * g
            mhat, vhat = m / (1 - 0.9**t), v / (1 - 0.99**t)
            new.append(p - rate * mhat / (jnp.sqrt(vhat) + 1e-8))
            moms.append((m, v))
        return tree.unflatten(new), tree.unflatten(moms), value

    start = time.perf_counter()
    for t in range(1, steps + 1):
        starts = rng.integers(0, len(data) - CONTEXT - 1, batch)
        windows = np.stack([data[i : i + CONTEXT + 1] for i in starts])
        params, moments, value = step(params, moments, windows, jnp.float32(t))
        if log and (t % 100 == 0 or t == 1):
            print(f"step {t}: loss {float(value):.3f} ({time.perf_counter() - start:.0f} s)")
    return jax.tree.map(np.asarray, params)


# --- export -------------------------------------------------------------------------------------

PROMPTS = ["A bundle ", "Each file"]  # the stored examples: a batch of 2, 9 bytes


def example_cache(params: Params) -> tuple[Cache, np.ndarray]:
    """The stored decode example: the cache after PROMPTS, and each prompt's next byte."""
    logits, cache = jax.jit(prefill)(params, np.array([list(p.encode()) for p in PROMPTS]))
    return jax.tree.map(np.asarray, cache), np.asarray(logits).argmax(-1).astype(np.int32)


CACHE_SPEC = {
    "k": f"{LAYERS}, b, {HEADS}, {CONTEXT}, {HEAD}",
    "v": f"{LAYERS}, b, {HEADS}, {CONTEXT}, {HEAD}",
    "pos": "b",
}


def export(params: Params, out: str | Path) -> Path:
    import hlobundle

    tokens = np.array([list(p.encode()) for p in PROMPTS], np.int32)
    hlobundle.export(
        prefill,
        params,
        tokens,
        out=out,
        name="prefill",
        force=True,
        roles={"params": "parameter"},
        shapes_specs=(None, "b, s"),
        constraints=(f"s <= {CONTEXT}",),
    )
    cache, token = example_cache(params)
    return hlobundle.export(
        decode,
        params,
        cache,
        token,
        out=out,
        name="decode",
        add=True,
        roles={"params": "parameter"},
        shapes_specs=(None, CACHE_SPEC, "b"),
    )


def main(out: str = str(HERE / "lm.hlobundle"), steps: str = "700") -> None:
    params = train(int(steps))
    print("".join(generate(prefill, decode, params, ["A bundle "], 80)))
    print(f"wrote {export(params, out)}")


if __name__ == "__main__":
    main(*sys.argv[1:])


def storage(path: str | Path) -> dict[str, int]:
    """The bytes of the bundle's tensor files, against one copy of the weights plus the stored
    examples (every function's other example inputs and expected outputs)."""
    import hlobundle

    bundle = hlobundle.load(path)
    weights = sum(a.nbytes for a in jax.tree.leaves(init_params()))
    examples = 0
    for name in bundle.functions:
        function = bundle.select(name)
        inputs = function.example_inputs()
        examples += sum(inputs[a.name].nbytes for a in function.arguments if a.role != "parameter")
        examples += sum(x.nbytes for x in function.expected_outputs().values())
    files = [f for f in bundle.manifest.files if f.endswith(".safetensors")]
    stored = sum((Path(path) / f).stat().st_size for f in files)
    return {"stored": stored, "weights": weights, "examples": examples}

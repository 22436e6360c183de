"""Generate text with the language model through two scripts `hlobundle emit` wrote, without
hlobundle: `python examples/lm_generate.py PREFILL.py DECODE.py "A prompt" [BYTES]`.

    hlobundle emit examples/lm.hlobundle --function prefill -o prefill.py
    hlobundle emit examples/lm.hlobundle --function decode -o decode.py

Each script calls its function with flat arrays, in its ARGUMENTS' order: the weights
(`params_...`, which the prefill script reads from the bundle as its example inputs), then
prefill's tokens, or decode's cache (`cache_k`, `cache_pos`, `cache_v`) and token. Both return
the logits first, then the cache in that same order, so decode's results feed its next call.
Greedy decoding; this file needs only numpy and the two scripts (and their jax).
"""

import importlib.util
import sys

import numpy as np


def load_script(path):
    spec = importlib.util.spec_from_file_location(f"emitted_{len(sys.modules)}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def generate(prefill, decode, prompt, steps):
    names = [name for name, _, _ in prefill.ARGUMENTS]
    weights = [
        x
        for name, x in zip(names, prefill.example_inputs(), strict=True)
        if name.startswith("params_")
    ]
    tokens = np.array([list(prompt.encode())], np.int32)
    logits, *cache = prefill.call(*weights, tokens)
    out = []
    for _ in range(steps):
        token = np.asarray(logits).argmax(-1).astype(np.int32)
        out.append(int(token[0]))
        logits, *cache = decode.call(*weights, *cache, token)
    return prompt + bytes(out).decode("utf-8", "replace")


if __name__ == "__main__":
    prefill_path, decode_path, prompt, *steps = sys.argv[1:]
    print(
        generate(load_script(prefill_path), load_script(decode_path), prompt, int(*steps or [60]))
    )

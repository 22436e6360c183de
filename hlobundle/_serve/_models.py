"""The served models: each bundle loaded and checked once, its stored parameters kept, its
function compiled before the server says it is ready."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from .._format import _dtypes
from .._format._errors import InputError
from .._format._manifest import needs_x64
from .._read._reader import Bundle, load
from ._protocol import BY_DTYPE


@dataclass
class Served:
    """One bundle behind the protocol. Arguments with role `input` come from requests; the
    others (parameters, state) are the bundle's stored values."""

    bundle: Bundle
    names: tuple[str, ...]  # the function's name, then the directory's stem
    version: str  # the first 12 hex digits of the manifest's sha256: it changes with the content
    function: Any
    inputs: dict[str, tuple[str, tuple[int, ...]]] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)
    stored: dict[str, Any] = field(default_factory=dict)
    trust_batched: bool = False  # run the batched module for requests though no key verified it

    @property
    def name(self) -> str:
        return self.names[0]

    def metadata(self) -> dict[str, Any]:
        def tensor(name: str, dtype: str, shape: Sequence[int]) -> dict[str, Any]:
            return {"name": name, "datatype": BY_DTYPE[dtype], "shape": list(shape)}

        m = self.bundle.manifest
        return {
            "name": self.name,
            "versions": [self.version],
            "platform": "hlobundle",
            "inputs": [tensor(n, d, s) for n, (d, s) in self.inputs.items()],
            "outputs": [tensor(r.name, r.dtype, r.shape) for r in m.results],
        }

    def __call__(self, given: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        args = [given[a.name] if a.name in self.inputs else self.stored[a.name]
                for a in self.bundle.arguments]  # fmt: skip
        results = self.function.call_flat(*args)
        return {r.name: np.asarray(x) for r, x in zip(self.bundle.results, results, strict=True)}

    @cached_property
    def max_request_bytes(self) -> int:
        """The most bytes a request for this model may send: 64 KiB for the request's JSON
        around the data, and 64 bytes per input value (a float64 printed by JSON takes 24, a
        binary value at most 8; the rest is room for separators and indentation)."""
        values = sum(math.prod(shape) for _, shape in self.inputs.values())
        return (64 << 10) + 64 * values

    @cached_property
    def column_major(self) -> frozenset[str]:
        """The inputs and results whose producer (Julia) orientation is their axis-reversed shape."""
        m = self.bundle.manifest
        return frozenset(v.name for v in [*m.arguments, *m.results] if v.layout == "column_major")

    def wire_inputs(self, producer: bool) -> dict[str, tuple[str, tuple[int, ...]]]:
        """Input shapes as a request gives them: stored, or (`producer`) the producer's."""
        if not producer:
            return self.inputs
        return {
            n: (d, s[::-1] if n in self.column_major else s) for n, (d, s) in self.inputs.items()
        }

    @property
    def batchable(self) -> bool:
        """Whether requests can be combined: the bundle has a batched module (SPEC.md 2.6) over
        exactly its inputs, which `jax.vmap` of its function runs in one call, and the user
        trusts it (a key verified the bundle, or `trust_batched`). Nothing shows that a batched
        module is the batch of the module: an untrusted one could answer a client with another
        client's input, so then every request runs the verified module alone."""
        batched = self.bundle.manifest.batched
        if getattr(self.function, "backend", None) == "iree":  # jax.vmap runs the batched module
            return False
        trusted = self.bundle.trusted or self.trust_batched
        return trusted and batched is not None and set(batched.arguments) == set(self.inputs)

    def call_many(self, many: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        """Several requests' inputs in one call of the batched module, stacked along a new
        leading axis whose size is rounded up to a power of two (padded with the first request,
        whose results are dropped), so that few batch sizes are ever compiled."""
        if len(many) == 1:
            return [self(many[0])]
        size = 1 << (len(many) - 1).bit_length()
        padded = many + [many[0]] * (size - len(many))
        stacked = [np.stack([g[name] for g in padded]) for name in self.inputs]
        # One transfer per result, then views: indexing device arrays would dispatch per request.
        results = [np.asarray(x) for x in self._vmapped(*stacked)]
        names = [r.name for r in self.bundle.results]
        return [{n: x[k] for n, x in zip(names, results, strict=True)} for k in range(len(many))]

    @cached_property
    def _vmapped(self) -> Any:
        import jax

        positions = {a.name: i for i, a in enumerate(self.bundle.arguments)}
        order = [positions[n] for n in self.inputs]

        def call(*inputs: Any) -> Any:
            args = [self.stored.get(a.name) for a in self.bundle.arguments]
            for i, x in zip(order, inputs, strict=True):
                args[i] = x
            return self.function.call_flat(*args)

        return jax.jit(jax.vmap(call))


def load_models(
    paths: Sequence[str | os.PathLike[str]],
    *,
    backend: str = "auto",
    max_batch: int = 1,
    trust_executables: bool = False,
    trust_batched: bool = False,
    **trust: Any,
) -> dict[str, Served]:
    """Every bundle, loaded (and, with a key, its signature verified), compiled and warmed up;
    by each of its names. On `backend="iree"` no jax is imported, and stored executables run
    when the key verified the bundle or `trust_executables` says so. Requests are batched
    through a bundle's batched module when the key verified the bundle or `trust_batched`
    says so (`Served.batchable`)."""
    iree = backend == "iree"
    models: dict[str, Served] = {}
    for path in paths:
        bundle = load(path, **trust)
        m = bundle.manifest
        if needs_x64(m) and not iree:
            import jax

            jax.config.update("jax_enable_x64", True)
        wire = [a for a in m.arguments if a.role == "input"] + list(m.results)
        strange = [f"{v.name} ({v.dtype})" for v in wire if v.dtype not in BY_DTYPE]
        if strange:
            raise InputError(
                f"{path}: the Open Inference Protocol has no datatype for {', '.join(strange[:5])}",
                path=Path(path),
            )
        unstored = [a.name for a in m.arguments if a.role != "input" and a.value is None]
        if unstored:
            raise InputError(
                f"{path}: arguments {unstored[:5]} are not inputs and have no stored value to "
                "serve them with (give them role 'input' when packing)",
                path=Path(path),
            )
        served = Served(
            bundle,
            tuple(dict.fromkeys([m.function, Path(path).name.removesuffix(".hlobundle")])),
            bundle.manifest_sha256[:12],
            bundle.function(backend, trust_executables=trust_executables)
            if iree
            else bundle.function(backend),
            inputs={a.name: (a.dtype, tuple(a.shape)) for a in m.arguments if a.role == "input"},
            outputs={r.name: r.dtype for r in m.results},
            stored={
                a.name: _kept(bundle.tensor(a.name), iree) for a in m.arguments if a.role != "input"
            },  # fmt: skip
            trust_batched=trust_batched,
        )
        zeros = {n: np.zeros(s, _dtypes.BY_NAME[d].numpy) for n, (d, s) in served.inputs.items()}
        served(zeros)  # compile now: `ready` means ready
        size = 2
        while served.batchable and size <= max_batch:  # and every batch size batching may use
            served.call_many([zeros] * size)
            size *= 2
        for name in served.names:
            if name in models:
                raise InputError(f"two bundles are both called {name!r}", path=Path(path))
            models[name] = served
    return models


def _kept(value: np.ndarray, iree: bool) -> Any:
    """A stored value as a server keeps it: on the device (jax), or in host memory (iree, whose
    function takes NumPy arrays)."""
    if iree:
        return np.asarray(value)
    import jax

    return jax.device_put(value)

"""The served models: each bundle loaded and checked once, its stored parameters kept, each of
its functions compiled before the server says it is ready.

Names (format 2.0, SPEC.md 2.8): a bundle is served under its name (the one given with
`NAME=BUNDLE`, else its directory's stem; a 1.x bundle also under its function's name, as
before), which answers with its default function; and each function of a 2.0 bundle under
`NAME.FUNCTION` (OIP model names cannot hold `/`). A symbolic dimension is -1 in the metadata
(the OIP's variable dimension), and each request's shapes bind the symbols."""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from .._format import _dtypes
from .._format._errors import InputError
from .._format._manifest import Manifest, needs_x64
from .._read._inspect import shown
from .._read._reader import Bundle, load
from .._run import _binding
from ._protocol import BY_DTYPE, RequestError


@dataclass
class Served:
    """One bundle behind the protocol. Arguments with role `input` come from requests; the
    others (parameters, state) are the bundle's stored values."""

    bundle: Bundle
    names: tuple[str, ...]  # the name given, or the function's name, then the directory's stem
    version: str  # the first 12 hex digits of the manifest's sha256: it changes with the content
    function: Any
    inputs: dict[str, tuple[str, tuple[int | str, ...]]] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)
    stored: dict[str, Any] = field(default_factory=dict)
    trust_batched: bool = False  # run the batched module for requests though no key verified it

    @property
    def name(self) -> str:
        return self.names[0]

    def metadata(self) -> dict[str, Any]:
        def tensor(name: str, dtype: str, shape: Sequence[int | str]) -> dict[str, Any]:
            dims = [d if isinstance(d, int) else -1 for d in shape]  # -1: the OIP's variable dim
            return {"name": name, "datatype": BY_DTYPE[dtype], "shape": dims}

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

    def check_shapes(self, given: dict[str, np.ndarray]) -> None:
        """A request's shapes bind the function's symbols (SPEC.md 2.8), or a 400 says why."""
        args = [given[a.name] if a.name in self.inputs else self.stored[a.name]
                for a in self.bundle.arguments]  # fmt: skip
        try:
            _binding.check_symbols(self.bundle.manifest, args)
        except InputError as e:
            raise RequestError(400, e.message) from None

    @cached_property
    def max_request_bytes(self) -> int:
        """The most bytes a request for this model may send: 64 KiB for the request's JSON
        around the data, and 64 bytes per input value (a float64 printed by JSON takes 24, a
        binary value at most 8; the rest is room for separators and indentation). With a
        symbolic dimension there is no such bound: the server's `max_body` alone applies."""
        shapes = [shape for _, shape in self.inputs.values()]
        if any(isinstance(d, str) for s in shapes for d in s):
            return sys.maxsize
        values = sum(math.prod(s) for s in shapes)  # type: ignore[misc]
        return (64 << 10) + 64 * values

    @cached_property
    def column_major(self) -> frozenset[str]:
        """The inputs and results whose producer (Julia) orientation is their axis-reversed shape."""
        m = self.bundle.manifest
        return frozenset(v.name for v in [*m.arguments, *m.results] if v.layout == "column_major")

    def wire_inputs(self, producer: bool) -> dict[str, tuple[str, tuple[int | str, ...]]]:
        """Input shapes as a request gives them: stored, or (`producer`) the producer's."""
        if not producer:
            return self.inputs
        return {
            n: (d, s[::-1] if n in self.column_major else s) for n, (d, s) in self.inputs.items()
        }

    @property
    def batchable(self) -> bool:
        """Whether requests can be combined, which only the user's trust allows (a key verified
        the bundle, or `trust_batched`): through the bundle's batched module (SPEC.md 2.6) over
        exactly its inputs, which `jax.vmap` of its function runs in one call; or, for a
        function whose inputs and results all lead with one bare symbol (`concatenated`), by
        concatenating requests along it. Neither the batched module nor the function shows
        that rows are independent: an untrusted one could answer a client with another
        client's input, so then every request runs the verified function alone."""
        if not (self.bundle.trusted or self.trust_batched):
            return False
        return self.concatenated is not None or self.stackable

    @property
    def stackable(self) -> bool:
        """A batched module over exactly the inputs, run through `jax.vmap` (not on iree)."""
        batched = self.bundle.manifest.batched
        if not self.function.jax_function:  # jax.vmap runs the batched module
            return False
        return batched is not None and set(batched.arguments) == set(self.inputs)

    @cached_property
    def concatenated(self) -> str | None:
        """The symbol along which requests concatenate: every input's and result's leading
        dimension is that bare symbol (`b`), which appears nowhere else (no other dimension, no
        stored argument, no constraint); None when there is none."""
        m = self.bundle.manifest
        inputs = [a for a in m.arguments if a.name in self.inputs]
        leading = {v.shape[0] if v.shape else None for v in [*inputs, *m.results]}
        if len(leading) != 1 or not inputs:
            return None
        (symbol,) = leading
        if not isinstance(symbol, str) or not re.fullmatch(r"[a-z_][a-z0-9_]*", symbol):
            return None
        rest = [d for v in [*inputs, *m.results] for d in v.shape[1:]]
        rest += [d for a in m.arguments if a.name not in self.inputs for d in a.shape]
        mentions = [d for d in rest if isinstance(d, str)] + list(m.constraints or ())
        if any(symbol in re.findall(r"[a-z_][a-z0-9_]*", text) for text in mentions):
            return None
        return symbol

    def call_many(self, many: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        """Several requests' inputs in one call: concatenated along the batch symbol
        (`concatenated`), or stacked for the batched module (`stacked`)."""
        if len(many) == 1:
            return [self(many[0])]
        if self.concatenated is not None:
            return self._concatenated(many)
        return self._stacked(many)

    def _concatenated(self, many: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        """One call over every request's rows, its results split back by each request's
        number of rows: exact, with no padding. Requests whose other dimensions differ (other
        symbols) run in one call per shape."""
        groups: dict[tuple[Any, ...], list[int]] = {}
        for k, given in enumerate(many):
            groups.setdefault(tuple(given[n].shape[1:] for n in self.inputs), []).append(k)
        answers: list[dict[str, np.ndarray]] = [{} for _ in many]
        for members in groups.values():
            first = next(iter(self.inputs))
            sizes = [many[k][first].shape[0] for k in members]
            joined = {n: np.concatenate([many[k][n] for k in members]) for n in self.inputs}
            results = self(joined)
            edges = np.cumsum(sizes)[:-1]
            for n, x in results.items():
                if x.shape[0] != sum(sizes):
                    raise RuntimeError(f"result {n!r} has {x.shape[0]} rows for {sum(sizes)}")
                for k, part in zip(members, np.split(x, edges), strict=True):
                    answers[k][n] = part
        return answers

    def _stacked(self, many: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        """Several requests' inputs in one call of the batched module, stacked along a new
        leading axis whose size is rounded up to a power of two (padded with the first request,
        whose results are dropped), so that few batch sizes are ever compiled."""
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


Named = tuple[str, "str | os.PathLike[str]"]  # a bundle served under the name given
_MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def model_name(name: str) -> str:
    """`name`, when it can be an Open Inference Protocol model name: one segment of the path
    `/v2/models/{name}` (no `/`), of letters, digits, `_`, `.` and `-`, starting with one of the
    first two."""
    if not _MODEL_NAME.match(name):
        raise InputError(
            f"model name {shown(name)!r}: expected 1 to 128 letters, digits, '_', '.' or '-', "
            "starting with a letter or digit (it is a segment of /v2/models/NAME)",
            argument="bundles",
        )
    return name


def load_models(
    paths: Sequence[str | os.PathLike[str] | Named],
    *,
    backend: str = "auto",
    max_batch: int = 1,
    trust_executables: bool = False,
    trust_batched: bool = False,
    **trust: Any,
) -> dict[str, Served]:
    """Every bundle, loaded (and, with a key, its signature verified), each of its functions
    compiled and warmed up; by each of its names (see the module's docstring): a
    `(name, path)` pair is served under that name, a path under its directory's stem (and a
    1.x bundle's function name). Every bundle is loaded and every name checked before anything
    compiles. On `backend="iree"` no jax is imported, and stored executables run when the key
    verified the bundle or `trust_executables` says so. Requests are batched when the key
    verified the bundle or `trust_batched` says so (`Served.batchable`)."""
    loaded = _load_named(paths, trust)
    models: dict[str, Served] = {}
    for path, bundle, names in loaded:
        served = _served(path, bundle, names, backend, trust_executables, trust_batched)
        warm = _warm_up_inputs(served)
        if warm is not None:
            served(warm)  # compile now: `ready` means ready
        size = 2
        while warm is not None and served.batchable and served.stackable and size <= max_batch:
            served.call_many([warm] * size)  # and every batch size batching may use
            size *= 2
        models.update(dict.fromkeys(names, served))
    return models


def _warm_up_inputs(served: Served) -> dict[str, np.ndarray] | None:
    """Inputs to compile the function with: zeros of its shapes; for a symbolic function, its
    stored example inputs (None without them: each new shape compiles on its first request)."""
    inputs = served.inputs.items()
    if not any(isinstance(d, str) for _, shape in served.inputs.values() for d in shape):
        return {n: np.zeros(s, _dtypes.BY_NAME[d].numpy) for n, (d, s) in inputs}  # type: ignore[arg-type]
    args = {a.name: a for a in served.bundle.arguments}
    if not all(args[n].value is not None for n in served.inputs):
        return None
    return {n: np.asarray(served.bundle.tensor(n)) for n in served.inputs}


def _load_named(
    paths: Sequence[str | os.PathLike[str] | Named], trust: dict[str, Any]
) -> list[tuple[Path, Bundle, tuple[str, ...]]]:
    """Each function of each bundle loaded (checked, nothing compiled) with the names it is
    served under; two functions that would share a name are refused here, before the first
    one compiles."""
    loaded, owner = [], {}
    for entry in paths:
        given, path = entry if isinstance(entry, tuple) else (None, entry)
        bundle = load(path, **trust)
        path = Path(path)
        for function, names in _function_names(bundle, path, given).items():
            view = bundle.select(function)
            _check_servable(path, view.manifest)
            for name in names:
                if name in owner:
                    raise InputError(
                        f"two bundles are both called {shown(name)!r} ({owner[name]} and {path}): "
                        "name them with NAME=BUNDLE (hlobundle serve a=BUNDLE1 b=BUNDLE2)",
                        path=path,
                    )
                owner[name] = path
            loaded.append((path, view, names))
    return loaded


def _function_names(bundle: Bundle, path: Path, given: str | None) -> dict[str, tuple[str, ...]]:
    """The names each function is served under. A 1.x bundle: the name given, or its
    function's name and its directory's stem. A 2.0 bundle (SPEC.md 2.8): `NAME.FUNCTION` for
    each function, and `NAME` for its default function, NAME being the name given or the stem."""
    stem = path.name.removesuffix(".hlobundle")
    if isinstance(bundle.bundle_manifest, Manifest):
        names = (model_name(given),) if given is not None else tuple(
            dict.fromkeys([bundle.manifest.function, stem]))  # fmt: skip
        return {bundle.manifest.function: names}
    base = model_name(given if given is not None else stem)
    return {
        f: tuple(
            model_name(n)
            for n in ([base] if f == bundle.default_function else []) + [f"{base}.{f}"]
        )  # fmt: skip
        for f in bundle.functions
    }


def _check_servable(path: Path, m: Manifest) -> None:
    where = f"{path} (function {m.function})"
    wire = [a for a in m.arguments if a.role == "input"] + list(m.results)
    strange = [f"{v.name} ({v.dtype})" for v in wire if v.dtype not in BY_DTYPE]
    if strange:
        raise InputError(
            f"{where}: the Open Inference Protocol has no datatype for {', '.join(strange[:5])}",
            path=path,
        )
    unstored = [a.name for a in m.arguments if a.role != "input" and a.value is None]
    if unstored:
        raise InputError(
            f"{where}: arguments {unstored[:5]} are not inputs and have no stored value to "
            "serve them with (give them role 'input' when packing)",
            path=path,
        )


def _served(
    path: Path,
    bundle: Bundle,
    names: tuple[str, ...],
    backend: str,
    trust_executables: bool,
    trust_batched: bool,
) -> Served:
    """The bundle behind the protocol, its function made (not yet compiled)."""
    from .._run import _backends
    from .._run._process import enable_x64

    m = bundle.manifest
    jax_backend = _backends.kind(backend).JAX
    if needs_x64(m) and jax_backend:
        enable_x64()
    return Served(
        bundle,
        names,
        bundle.manifest_sha256[:12],
        bundle.function(backend, trust_executables=trust_executables),
        inputs={a.name: (a.dtype, tuple(a.shape)) for a in m.arguments if a.role == "input"},
        outputs={r.name: r.dtype for r in m.results},
        stored={
            a.name: _kept(bundle.tensor(a.name), jax_backend)
            for a in m.arguments
            if a.role != "input"
        },
        trust_batched=trust_batched,
    )


def _kept(value: np.ndarray, jax_backend: bool) -> Any:
    """A stored value as a server keeps it: on the device (a jax backend), or in host memory
    (iree, whose function takes NumPy arrays)."""
    if not jax_backend:
        return np.asarray(value)
    import jax

    return jax.device_put(value)

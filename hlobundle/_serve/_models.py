"""The served models: each bundle loaded and checked once, its stored parameters kept, each of
its functions compiled before the server says it is ready.

Names (format 2.0, SPEC.md 2.8): a bundle is served under its name (the one given with
`NAME=BUNDLE`, else its directory's stem; a 1.x bundle also under its function's name, as
before), which answers with its default function; and each function of a 2.0 bundle under
`NAME.FUNCTION` (OIP model names cannot hold `/`). A symbolic dimension is -1 in the metadata
(the OIP's variable dimension), and each request's shapes bind the symbols."""

from __future__ import annotations

import itertools
import os
import re
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .._format import _dtypes, _symbolic
from .._format._errors import InputError
from .._format._manifest import Manifest, needs_x64, static_shape
from .._format._paths import is_remote
from .._read._reader import Bundle
from .._read._trust import Trust
from .._remote._load import load
from .._remote._sources import stem
from .._run._shapes import DEFAULT_MAX_SHAPES
from .._terminal._display import shown
from ._protocol import BY_DTYPE
from ._served import DEFAULT_MAX_RESPONSE_BYTES, Served, batch_sizes

if TYPE_CHECKING:
    from .._run._backends import BackendName

__all__ = ["Named", "Served", "load_models", "model_name"]

Named = tuple[str, "str | os.PathLike[str]"]  # a bundle served under the name given
TIMED_CALLS, TIMING_S = 20, 0.05  # how many warm calls `_warm_up` times, at most, and how long
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
    backend: BackendName = "auto",
    max_batch: int = 1,
    trust: Trust = Trust.NOTHING,
    max_shapes: int = DEFAULT_MAX_SHAPES,
    sizes: dict[str, Sequence[int]] | None = None,
    compiles: int = 1,
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    **keys: Any,
) -> dict[str, Served]:
    """Every bundle, loaded (and, with a key, its signature verified), each of its functions
    compiled and warmed up; by each of its names (see the module's docstring): a
    `(name, path)` pair is served under that name, a path under its directory's stem (and a
    1.x bundle's function name). Every bundle is loaded and every name checked before anything
    compiles. `keys` (`public_key`, `certificate_chain`) are `load`'s. On `backend="iree"` no
    jax is imported, and stored executables run when the key verified the bundle or `trust`
    has `Trust.EXECUTABLES`. Requests are batched where the producer declared rows independent
    (a batched module, or `independent_rows`), when the key verified the bundle or `trust` has
    `Trust.BATCHED` (`Served.batchable`).

    A function with symbolic dimensions (SPEC.md 2.8) keeps at most `max_shapes` shapes
    compiled; a request of a new one proves and compiles it in a worker thread, at most
    `compiles` at a time in the server. `sizes` pins the values a symbol may take (`{"b": [1,
    8]}`): other values are refused with a 400, and every pinned shape compiles at start-up.
    What a request may make a function do is bounded by what it sends (`Served.check_shapes`):
    a symbol beyond the values a request holds is at most `SIZE_WITHOUT_VALUES` (unless
    `sizes` pins it), and a symbolic function's answer at most `max_response_bytes`."""
    if type(max_response_bytes) is not int or max_response_bytes < 1:
        raise InputError(
            f"max_response_bytes must be a positive integer, not {shown(repr(max_response_bytes))}",
            argument="max_response_bytes",
        )
    loaded = _load_named(paths, keys)
    pinned = {k: frozenset(v) for k, v in (sizes or {}).items()}
    known = set().union(*(_symbols(bundle) for _, bundle, _ in loaded))
    unknown = sorted(set(pinned) - known)
    if unknown:  # a typo would leave the sizes unpinned, silently
        raise InputError(
            f"--sizes names symbol(s) {unknown} that no model served has; their symbols are "
            f"{sorted(known) or 'none (every shape is static)'}",
            argument="sizes",
        )
    semaphore = threading.BoundedSemaphore(compiles)
    models: dict[str, Served] = {}
    for path, bundle, names in loaded:
        served = _served(path, bundle, names, backend, trust, max_shapes)
        served.sizes = {k: v for k, v in pinned.items() if k in _symbols(bundle)}
        served.compiles = semaphore
        served.max_response_bytes = max_response_bytes
        _warm_up(served, max_batch)
        models.update(dict.fromkeys(names, served))
    return models


def _symbols(bundle: Bundle) -> set[str]:
    return {
        s
        for a in bundle.manifest.arguments
        for d in a.shape
        if isinstance(d, str)
        for s in _symbolic.parse(d).symbols
    }


def _warm_up(served: Served, max_batch: int) -> None:
    """Compile the function now (`ready` means ready), and the batched module at every batch
    size batching may run (`batch_sizes`), so that no request pays a compile; and time a warm
    call (`Served.call_s`: the server runs short calls on its event loop)."""
    for pinned in _pinned_inputs(served):  # every shape `sizes` allows, compiled now
        served(pinned)
    warm = _warm_up_inputs(served)
    if warm is None:
        return
    served(warm)
    times: list[float] = []
    # The fastest warm call: other processes' work slows some (the server would then hand
    # every request of a short model to a thread), so a short call is timed up to
    # `TIMED_CALLS` times, within `TIMING_S`; a long one three times.
    while len(times) < 3 or (len(times) < TIMED_CALLS and sum(times) < TIMING_S):
        start = time.perf_counter()
        served(warm)
        times.append(time.perf_counter() - start)
    served.call_s = min(times)
    if served.batchable and served.stackable:
        served.compiled_sizes = batch_sizes(max_batch)
        for size in served.compiled_sizes:
            served.call_many([warm] * size)


def _pinned_inputs(served: Served) -> list[dict[str, np.ndarray]]:
    """Zeros of every input shape the pinned sizes allow, when they pin every symbol of the
    inputs that stored arguments do not bind (none otherwise: those compile on request)."""
    if not served.sizes:
        return []
    m = served.bundle.manifest
    stored = [a for a in m.arguments if a.name not in served.inputs]
    env = _symbolic.bind_shapes(
        [(a.name, a.shape) for a in stored], [np.shape(served.stored[a.name]) for a in stored]
    )
    free = sorted(_symbols(served.bundle) - set(env))
    if any(s not in served.sizes for s in free):
        return []
    combos = list(itertools.product(*[sorted(served.sizes[s]) for s in free]))
    if len(combos) > served.max_shapes:
        raise InputError(
            f"model {served.name!r}: the sizes pinned give {len(combos)} shapes, more than the "
            f"{served.max_shapes} it keeps compiled (--max-shapes)",
            argument="sizes",
        )
    inputs = []
    for values in combos:
        full = {**env, **dict(zip(free, values, strict=True))}
        inputs.append(
            {
                a.name: np.zeros(_symbolic.evaluate(a.shape, full), _dtypes.BY_NAME[a.dtype].numpy)
                for a in m.arguments
                if a.name in served.inputs
            }
        )
    return inputs


def _warm_up_inputs(served: Served) -> dict[str, np.ndarray] | None:
    """Inputs to compile the function with: zeros of its shapes; for a symbolic function, its
    stored example inputs (None without them: each new shape compiles on its first request)."""
    inputs = served.inputs.items()
    if not any(isinstance(d, str) for _, shape in served.inputs.values() for d in shape):
        return {n: np.zeros(static_shape(s), _dtypes.BY_NAME[d].numpy) for n, (d, s) in inputs}
    args = {a.name: a for a in served.bundle.arguments}
    if not all(args[n].value is not None for n in served.inputs):
        return None
    return {n: np.asarray(served.bundle.tensor(n)) for n in served.inputs}


def _load_named(
    paths: Sequence[str | os.PathLike[str] | Named], keys: dict[str, Any]
) -> list[tuple[Path, Bundle, tuple[str, ...]]]:
    """Each function of each bundle loaded (checked, nothing compiled) with the names it is
    served under; two functions that would share a name are refused here, before the first
    one compiles."""
    loaded: list[tuple[Path, Bundle, tuple[str, ...]]] = []
    owner: dict[str, Path] = {}
    for entry in paths:
        given, path = entry if isinstance(entry, tuple) else (None, entry)
        bundle = load(path, **keys)  # a remote one: its default function (docs/distribution.md)
        path = Path(stem(str(path))) if is_remote(path) else Path(path)
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
    each function, and `NAME` for its default function (or its only one, in a bundle written
    without a default), NAME being the name given or the stem."""
    stem = path.name.removesuffix(".hlobundle")
    if isinstance(bundle.bundle_manifest, Manifest):
        names = (
            (model_name(given),)
            if given is not None
            else tuple(dict.fromkeys([bundle.manifest.function, stem]))
        )
        return {bundle.manifest.function: names}
    base = model_name(given if given is not None else stem)
    only = bundle.functions[0] if len(bundle.functions) == 1 else None  # its default (2.8)
    default = bundle.default_function or only
    return {
        f: tuple(model_name(n) for n in ([base] if f == default else []) + [f"{base}.{f}"])
        for f in bundle.loaded
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
    backend: BackendName,
    trust: Trust,
    max_shapes: int = DEFAULT_MAX_SHAPES,
) -> Served:
    """The bundle behind the protocol, its function made (not yet compiled)."""
    from .._run import _backends
    from .._run._process import enable_x64, inline_cpu_calls

    m = bundle.manifest
    jax_backend = _backends.kind(backend).jax is not None
    if jax_backend:  # a server waits for each call's result at once
        inline_cpu_calls()
    if needs_x64(m) and jax_backend:
        enable_x64()
    return Served(
        bundle,
        names,
        bundle.manifest_sha256[:12],
        bundle.function(backend, trust=trust, max_shapes=max_shapes),
        inputs={a.name: (a.dtype, tuple(a.shape)) for a in m.arguments if a.role == "input"},
        outputs={r.name: r.dtype for r in m.results},
        stored={
            a.name: _kept(bundle.tensor(a.name), jax_backend)
            for a in m.arguments
            if a.role != "input"
        },
        trust=trust,
        max_shapes=max_shapes,
    )


def _kept(value: np.ndarray, jax_backend: bool) -> Any:
    """A stored value as a server keeps it: on the device (a jax backend), or in host memory
    (iree, whose function takes NumPy arrays)."""
    if not jax_backend:
        return np.asarray(value)
    import jax

    return jax.device_put(value)

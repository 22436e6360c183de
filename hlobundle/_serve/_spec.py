"""What a served function is to a request, from its manifest alone: its metadata, the shapes a
request may send (in the stored or the producer's orientation) and the bound on its body, and
the check that binds a request's symbols within what it sends (SPEC.md 8). `Served` (the model,
called) and `Described` (a front door's copy, `serve --frontends`: no function, nothing of
jax) both check requests through it: one check, whichever process runs it."""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Sequence
from functools import cached_property
from typing import Any

import numpy as np

from .._format import _dtypes, _symbolic
from .._format._errors import HloBundleError
from .._format._manifest import Manifest, static_shape
from .._run._binding import bind_symbols
from ._protocol import BY_DTYPE, RequestError

# What a request may make the server do is bounded by what it sends (SPEC.md 8, "Serving"). A
# symbol's value beyond the number of values a request's inputs hold (x: f32[b, 0] holds none,
# whatever b is) is at most this, unless `serve --sizes` pins the symbol or stored arguments
# bind it; and an answer whose size the request chooses (a symbolic function's results) is at
# most `Served.max_response_bytes` (`serve --max-response-bytes`, by default as large as the
# largest request body). Both are refused (413) before the model is called.
SIZE_WITHOUT_VALUES = 4096
DEFAULT_MAX_RESPONSE_BYTES = 64 << 20


def request_bound(shapes: Iterable[Sequence[int | str]]) -> int:
    """`Spec.max_request_bytes` of a function whose inputs have `shapes`."""
    shapes = list(shapes)
    if any(isinstance(d, str) for s in shapes for d in s):
        return sys.maxsize
    values = sum(math.prod(static_shape(s)) for s in shapes)
    return (64 << 10) + 64 * values


# The inputs' shapes whose checked results a function keeps (`Spec.check_shapes` depends on
# nothing else): a request of a kept shape is not bound again (the symbolic bind was a third of
# decoding the LeNet's JSON request). Beyond these, shapes are checked every time.
CHECKED_SHAPES = 256


class Spec:
    """A served function's checks of a request, from what its manifest and the server's
    options say; a subclass gives the manifest and the stored arguments' shapes."""

    names: tuple[str, ...]  # the name given, or the function's name, then the directory's stem
    version: str  # the first 12 hex digits of the manifest's sha256
    inputs: dict[str, tuple[str, tuple[int | str, ...]]]  # role `input`: (dtype, shape)
    outputs: dict[str, str]  # each result's dtype
    sizes: dict[str, frozenset[int]]  # `serve --sizes` (empty: any)
    max_response_bytes: int  # a symbolic function's answer

    @property
    def manifest(self) -> Manifest:
        raise NotImplementedError

    @property
    def stored_shapes(self) -> dict[str, tuple[int, ...]]:
        """The shapes of the arguments a request does not give (parameters, state)."""
        raise NotImplementedError

    @property
    def name(self) -> str:
        return self.names[0]

    def metadata(self) -> dict[str, Any]:
        def tensor(name: str, dtype: str, shape: Sequence[int | str]) -> dict[str, Any]:
            dims = [d if isinstance(d, int) else -1 for d in shape]  # -1: the OIP's variable dim
            return {"name": name, "datatype": BY_DTYPE[dtype], "shape": dims}

        m = self.manifest
        return {
            "name": self.name,
            "versions": [self.version],
            "platform": "hlobundle",
            "inputs": [tensor(n, d, s) for n, (d, s) in self.inputs.items()],
            "outputs": [tensor(r.name, r.dtype, r.shape) for r in m.results],
        }

    def _shapes_of(self, given: dict[str, np.ndarray]) -> list[tuple[int, ...]]:
        """The shapes of every argument of a call on `given`, in the function's order."""
        stored = self.stored_shapes
        return [
            tuple(np.shape(given[a.name])) if a.name in self.inputs else stored[a.name]
            for a in self.manifest.arguments
        ]

    def check_shapes(self, given: dict[str, np.ndarray]) -> dict[str, tuple[int, ...]]:
        """A request's shapes bind the function's symbols (SPEC.md 2.8), or a 400 says why,
        to sizes that what it sends bounds (`SIZE_WITHOUT_VALUES`, `max_response_bytes`), or
        a 413 says why; the results' shapes at those sizes. Nothing runs before it."""
        m = self.manifest
        if not self._symbolic:  # every dimension is an integer, which the parsing checked
            return self._static_results
        key = self._shape_key(given)
        known = self._checked.get(key)
        if known is not None:  # these shapes passed: the same symbols, the same results
            return known
        try:
            env = bind_symbols(m, self._shapes_of(given))
        except HloBundleError as e:
            raise RequestError(400, e.message) from None
        for symbol, allowed in self.sizes.items():
            if env.get(symbol, min(allowed)) not in allowed:
                raise RequestError(
                    400,
                    f"the inputs make {symbol!r} {env[symbol]}; model {self.name!r} serves "
                    f"{symbol} in {sorted(allowed)} (serve --sizes)",
                )
        self._check_backed(env, sum(int(np.size(x)) for x in given.values()))
        results = {r.name: _symbolic.evaluate(r.shape, env) for r in m.results}
        self._check_answer(results)
        if len(self._checked) < CHECKED_SHAPES:  # kept only once every check passed
            self._checked[key] = results
        return results

    @cached_property
    def _checked(self) -> dict[tuple[Any, ...], dict[str, tuple[int, ...]]]:
        """`check_shapes`' results by the inputs' shapes that passed it (at most
        `CHECKED_SHAPES`)."""
        return {}

    def _shape_key(self, given: dict[str, np.ndarray]) -> tuple[Any, ...]:
        return tuple(given[n].shape for n in self.inputs)

    def _check_backed(self, env: dict[str, int], values: int) -> None:
        """Each symbol the request chooses is at most the number of `values` its inputs hold,
        or `SIZE_WITHOUT_VALUES`: else x: f32[b, 0] would let a few bytes ask for any b."""
        free = set(env) - set(self.sizes) - self._stored_symbols  # the operator's are bounded
        for symbol in sorted(free):
            if env[symbol] > max(values, SIZE_WITHOUT_VALUES):
                raise RequestError(
                    413,
                    f"the inputs make {symbol!r} {env[symbol]} and hold {values} values: model "
                    f"{self.name!r} takes a symbol beyond the values a request sends only up "
                    f"to {SIZE_WITHOUT_VALUES} (SPEC.md 8; serve --sizes serves sizes chosen "
                    "in advance)",
                )

    def _check_answer(self, results: dict[str, tuple[int, ...]]) -> None:
        """The results' bytes at the request's sizes are at most `max_response_bytes`."""
        dtypes = {r.name: _dtypes.BY_NAME[r.dtype] for r in self.manifest.results}
        size = sum(math.prod(shape) * dtypes[n].itemsize for n, shape in results.items())
        if size > self.max_response_bytes:
            shown = ", ".join(
                f"{n} {BY_DTYPE[dtypes[n].name]}{list(s)}" for n, s in list(results.items())[:5]
            )
            raise RequestError(
                413,
                f"model {self.name!r} would answer these inputs with {size} bytes ({shown}), "
                f"over the limit of {self.max_response_bytes} (serve --max-response-bytes)",
            )

    @cached_property
    def _static_results(self) -> dict[str, tuple[int, ...]]:
        return {r.name: static_shape(r.shape) for r in self.manifest.results}

    @cached_property
    def _stored_symbols(self) -> frozenset[str]:
        """The symbols the stored arguments bind: the bundle's sizes, not a request's."""
        stored = [a for a in self.manifest.arguments if a.name not in self.inputs]
        shapes = [self.stored_shapes[a.name] for a in stored]
        return frozenset(_symbolic.solved([(a.name, a.shape) for a in stored], shapes))

    @cached_property
    def _symbolic(self) -> bool:
        return self.manifest.symbolic

    @cached_property
    def max_request_bytes(self) -> int:
        """The most bytes a request for this model may send: 64 KiB for the request's JSON
        around the data, and 64 bytes per input value (a float64 printed by JSON takes 24, a
        binary value at most 8; the rest is room for separators and indentation). With a
        symbolic dimension there is no such bound: the server's `max_body` alone applies."""
        return request_bound(shape for _, shape in self.inputs.values())

    @cached_property
    def column_major(self) -> frozenset[str]:
        """The inputs and results whose producer (Julia) orientation is their axis-reversed shape."""
        m = self.manifest
        return frozenset(v.name for v in m.tensors() if v.layout == "column_major")

    def wire_inputs(self, producer: bool) -> dict[str, tuple[str, tuple[int | str, ...]]]:
        """Input shapes as a request gives them: stored, or (`producer`) the producer's."""
        if not producer:
            return self.inputs
        return {
            n: (d, s[::-1] if n in self.column_major else s) for n, (d, s) in self.inputs.items()
        }


class Described(Spec):
    """A served function as a front door knows it (`serve --frontends`): what `Spec` checks,
    copied from the `Served` of the process that holds the device, and sent to the front door
    as JSON (`as_json`, `from_json`: no pickle crosses between the processes); nothing in it
    calls a model."""

    def __init__(self, served: Spec) -> None:
        self.names, self.version = served.names, served.version
        self.inputs, self.outputs = served.inputs, served.outputs
        self.sizes, self.max_response_bytes = served.sizes, served.max_response_bytes
        self._manifest, self._stored_shapes = served.manifest, dict(served.stored_shapes)

    @property
    def manifest(self) -> Manifest:
        return self._manifest

    @property
    def stored_shapes(self) -> dict[str, tuple[int, ...]]:
        return self._stored_shapes

    def as_json(self) -> dict[str, Any]:
        return {
            "manifest": _one_function(self.manifest).decode(),
            "names": list(self.names),
            "version": self.version,
            "inputs": self.inputs,
            "outputs": self.outputs,
            "sizes": {k: sorted(v) for k, v in self.sizes.items()},
            "max_response_bytes": self.max_response_bytes,
            "stored_shapes": self.stored_shapes,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Described:
        """What `as_json` wrote (by the process that started this one), its manifest parsed
        and checked as a bundle's is."""
        from .._format._manifest_json import parse_manifest

        manifest = parse_manifest(data["manifest"].encode())
        if not isinstance(manifest, Manifest):  # 2.x: a bundle of this function alone
            if len(manifest.functions) != 1:
                raise TypeError("a served function's manifest describes one function")
            manifest = manifest.view(manifest.functions[0].name)
        described = cls.__new__(cls)
        described.names, described.version = tuple(data["names"]), data["version"]
        described.inputs = {n: (d, tuple(s)) for n, (d, s) in data["inputs"].items()}
        described.outputs = data["outputs"]
        described.sizes = {k: frozenset(v) for k, v in data["sizes"].items()}
        described.max_response_bytes = data["max_response_bytes"]
        described._manifest = manifest
        described._stored_shapes = {n: tuple(s) for n, s in data["stored_shapes"].items()}
        return described


def _one_function(manifest: Manifest) -> bytes:
    """A served function's manifest as a bundle's: a 1.x one as it is; a 2.x function's (a view,
    which no reader takes alone) as the manifest of a bundle of that function only."""
    if manifest.format_version.startswith("1."):
        return manifest.to_json()
    from .._format._bundle_manifest import combine

    return combine([manifest], manifest.function, manifest.files).to_json()

"""One served function: a bundle's function behind the protocol, its stored arguments kept, and
its calls: one request's inputs (`Served.__call__`), or several requests' in one call
(`Served.call_many`, which dynamic batching uses)."""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from .._format._errors import HloBundleError
from .._format._manifest import Manifest
from .._read._reader import Bundle
from .._read._trust import Trust
from .._run._function import backend_failure
from .._run._shapes import DEFAULT_MAX_SHAPES, check_results
from ._protocol import RequestError
from ._spec import DEFAULT_MAX_RESPONSE_BYTES, SIZE_WITHOUT_VALUES, Spec

# what the served models' module and the tests read from here, defined with the checks
__all__ = ["DEFAULT_MAX_RESPONSE_BYTES", "SIZE_WITHOUT_VALUES", "Served", "batch_sizes"]

# Batch sizes compiled for a batched module: each size up to EXACT_UP_TO (no padding at all),
# then sizes with 3 significant bits (18, 20, ..., 32, 36, 40, ...), which pad a batch by under
# an eighth while a batching limit of N compiles about 8 log2(N) sizes, not N.
EXACT_UP_TO = 16
# How long a request of a new shape waits for another shape's compile to finish before it is
# answered 503 (`Served.compiles`): a client that sends new shapes cannot queue up compiles.
COMPILE_WAIT_S = 5.0


def batch_sizes(max_batch: int) -> tuple[int, ...]:
    """The sizes (above 1) that the batched module is compiled for under `max_batch`."""
    sizes = [n for n in range(2, min(max_batch, EXACT_UP_TO) + 1)]
    n = EXACT_UP_TO
    while n < max_batch:
        n += 1 << max(n.bit_length() - 4, 0)
        sizes.append(min(n, max_batch))
    return tuple(sizes)


@dataclass
class Served(Spec):
    """One bundle behind the protocol. Arguments with role `input` come from requests; the
    others (parameters, state) are the bundle's stored values."""

    bundle: Bundle
    names: tuple[str, ...]  # the name given, or the function's name, then the directory's stem
    version: str  # the first 12 hex digits of the manifest's sha256: it changes with the content
    function: Any
    inputs: dict[str, tuple[str, tuple[int | str, ...]]] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)
    stored: dict[str, Any] = field(default_factory=dict)
    trust: Trust = Trust.NOTHING  # BATCHED: combine requests though no key verified the bundle
    call_s: float | None = None  # a warm call's seconds, measured at start-up (None: unknown)
    compiled_sizes: tuple[int, ...] = ()  # the batch sizes the batched module was compiled for
    # A symbolic function (SPEC.md 2.8): the shapes kept compiled (its function keeps as many),
    # the symbol values a server accepts (`serve --sizes`; empty: any), and the server's
    # semaphore of compiles that may run at once (None: no bound).
    max_shapes: int = DEFAULT_MAX_SHAPES
    sizes: dict[str, frozenset[int]] = field(default_factory=dict)
    compiles: threading.Semaphore | None = None
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES  # a symbolic function's answer
    _warm: OrderedDict[tuple[Any, ...], None] = field(default_factory=OrderedDict, repr=False)
    _warm_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def manifest(self) -> Manifest:
        return self.bundle.manifest

    @property
    def stored_shapes(self) -> dict[str, tuple[int, ...]]:
        return {n: tuple(np.shape(x)) for n, x in self.stored.items()}

    def __call__(self, given: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._symbolic:
            with self._warm_lock:
                warm = self._shape_key(given) in self._warm
                if warm:  # kept in the order the function keeps its shapes (least recent out)
                    self._warm.move_to_end(self._shape_key(given))
            if not warm:
                return self._first_call(given)
        if self._one_jit:  # one jitted call: the checks ran when it was traced
            try:
                results = self._jitted(self._stored_args, *[given[n] for n in self.inputs])
            except (RuntimeError, ValueError, NotImplementedError, MemoryError) as e:
                raise backend_failure(self.function.backend, e) from None  # XLA's compile
            check_results(self.bundle.manifest, None, results)  # what call_flat checks
        else:
            results = self.function.call_flat(*self._arguments(given))
        return {r.name: np.asarray(x) for r, x in zip(self.bundle.results, results, strict=True)}

    def new_shape(self, given: dict[str, np.ndarray]) -> bool:
        """Whether a call on `given` is of a shape not kept compiled (it proves and compiles
        first: the server never runs it on its event loop)."""
        return self._symbolic and self._shape_key(given) not in self._warm

    def _first_call(self, given: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """A call of a new shape: it waits for a compile slot (`compiles`), at most
        COMPILE_WAIT_S, then proves and compiles; the shape is then kept, up to `max_shapes`
        (least recently used out, as the function drops them)."""
        if self.compiles is not None and not self.compiles.acquire(timeout=COMPILE_WAIT_S):
            raise RequestError(
                503,
                f"model {self.name!r} is compiling other shapes; a new shape waits at most "
                f"{COMPILE_WAIT_S:g} s for a compile slot. Retry, or send a shape the server "
                "keeps compiled (hlobundle serve --sizes, docs/serving.md)",
            )
        try:
            results = self.function.call_flat(*self._arguments(given))
            out = {r.name: np.asarray(x) for r, x in zip(self.bundle.results, results, strict=True)}
        finally:
            if self.compiles is not None:
                self.compiles.release()
        with self._warm_lock:
            self._warm[self._shape_key(given)] = None
            while len(self._warm) > self.max_shapes:
                self._warm.popitem(last=False)
        return out

    def _arguments(self, given: dict[str, Any]) -> list[Any]:
        return [
            given[a.name] if a.name in self.inputs else self.stored[a.name]
            for a in self.bundle.arguments
        ]

    @cached_property
    def _one_jit(self) -> bool:
        """Whether a call is one jitted call over the stored and given arguments: a JAX
        function without a mesh (whose arguments `call_flat` places on it, call by call)."""
        # Not for a symbolic function: its jit would keep every shape it saw compiled, and the
        # function keeps at most `max_shapes`.
        m = self.bundle.manifest
        return bool(self.function.jax_function) and m.mesh is None and not m.symbolic

    @property
    def batchable(self) -> bool:
        """Whether requests can be combined: only where the producer said that rows are
        independent, through the bundle's batched module (SPEC.md 2.6) over exactly its inputs,
        which `jax.vmap` of its function runs in one call (`stackable`), or a declaration of
        independent rows (SPEC.md 2.13) along axis 0 (`concatenated`); and only where the user
        trusts that word (a key verified the bundle, or `trust` has `Trust.BATCHED`). A
        signature says who made a bundle, not that its rows are independent: a function whose
        inputs merely lead with one symbol may mix them (a mean over the batch), and would
        answer one client with, and tell it, another client's data."""
        if not (self.bundle.trusted or Trust.BATCHED in self.trust):
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
        """The symbol along which requests concatenate: the one a declaration of independent
        rows names (SPEC.md 2.13) when it names exactly the inputs and every input and result
        has its rows on axis 0; None otherwise (no declaration: nothing says rows are
        independent, whatever the shapes look like)."""
        m = self.bundle.manifest
        rows = m.independent_rows
        if rows is None:
            return None
        on_axis_0 = set(rows.arguments.values()) | set(rows.results.values()) == {0}
        if not on_axis_0 or set(rows.arguments) != set(self.inputs):
            return None
        return m.row_symbol

    def call_many(
        self, many: list[dict[str, np.ndarray]]
    ) -> Sequence[dict[str, np.ndarray] | HloBundleError]:
        """Several requests' inputs in one call: concatenated along the batch symbol
        (`concatenated`), or stacked for the batched module (`stacked`). When the function
        refuses the call, each request runs alone, and a refused one gets its error."""
        if len(many) == 1:
            return [self(many[0])]
        try:
            if self.concatenated is not None:
                return self._concatenated(many)
            return self._stacked(many)
        except HloBundleError:  # one request's inputs refused (a shape the module refuses):
            return [self._alone(given) for given in many]  # each gets its own answer

    def _alone(self, given: dict[str, np.ndarray]) -> dict[str, np.ndarray] | HloBundleError:
        try:
            return self(given)
        except HloBundleError as e:
            return e

    def prove_alone(self, given: dict[str, np.ndarray]) -> None:
        """A request's own shapes, proven against the module (SPEC.md 2.8) before it joins
        others: the joined shape may fit where this one alone does not."""
        self.function.prove_shapes(self._shapes_of(given))

    def _concatenated(self, many: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        """One call over every request's rows, its results split back by each request's
        number of rows: exact, with no padding. Requests whose other dimensions differ (other
        symbols) run in one call per shape."""
        groups: dict[tuple[Any, ...], list[int]] = {}
        for k, given in enumerate(many):
            groups.setdefault(tuple(given[n].shape[1:] for n in self.inputs), []).append(k)
        answers: list[dict[str, np.ndarray]] = [{} for _ in many]
        first = next(iter(self.inputs))
        for group in groups.values():
            for k in group:
                self.prove_alone(many[k])
            for members in self._pinned_runs(group, [many[k][first].shape[0] for k in group]):
                self._join(many, members, answers)
        return answers

    def _pinned_runs(self, members: list[int], rows: list[int]) -> list[list[int]]:
        """`members` in runs of consecutive requests each joined in one call: all of them, or,
        where `serve --sizes` pins the row symbol, runs whose rows add up to a pinned size (the
        longest such run first), so that a joined call never compiles a size not pinned."""
        allowed = self.sizes.get(self.concatenated or "")
        if allowed is None:
            return [members]
        runs = []
        while members:
            totals = itertools.accumulate(rows)
            n = max((i + 1 for i, t in enumerate(totals) if t in allowed), default=1)
            runs.append(members[:n])
            members, rows = members[n:], rows[n:]
        return runs

    def _join(
        self, many: list[dict[str, np.ndarray]], members: list[int], answers: list[Any]
    ) -> None:
        """The requests `members` of `many`, joined in one call; their `answers` filled in."""
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

    def padded_size(self, n: int) -> int:
        """The batch size `n` requests run at: the smallest compiled size that holds them."""
        return min((s for s in self.compiled_sizes if s >= n), default=n)

    def _stacked(self, many: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        """Several requests' inputs in one call of the batched module, stacked along a new
        leading axis whose size is one the module was compiled for (`padded_size`; padded with
        the first request, whose extra results are dropped), so that no request compiles."""
        size = self.padded_size(len(many))
        padded = many + [many[0]] * (size - len(many))
        stacked = [np.stack([g[name] for g in padded]) for name in self.inputs]
        # One transfer per result, then views: indexing device arrays would dispatch per request.
        results = [np.asarray(x) for x in self._vmapped(self._stored_args, *stacked)]
        names = [r.name for r in self.bundle.results]
        return [{n: x[k] for n, x in zip(names, results, strict=True)} for k in range(len(many))]

    @cached_property
    def loops(self) -> bool:
        """Whether the module holds a loop (`stablehlo.while`), whose trip count a request's
        values may set: its warm call's time (`call_s`) then bounds no request's."""
        return "stablehlo.while" in self.bundle.module_text

    @cached_property
    def _stored_args(self) -> tuple[Any, ...]:
        """The stored arguments, passed to the jitted calls (as arguments, not constants)."""
        return tuple(
            self.stored[a.name] for a in self.bundle.arguments if a.name not in self.inputs
        )

    def _call_flat(self, stored: tuple[Any, ...], *inputs: Any) -> tuple[Any, ...]:
        given, kept = dict(zip(self.inputs, inputs, strict=True)), iter(stored)
        args = [given[a.name] if a.name in given else next(kept) for a in self.bundle.arguments]
        return tuple(self.function.call_flat(*args))

    @cached_property
    def _jitted(self) -> Any:
        import jax

        return jax.jit(lambda stored, *inputs: self._call_flat(stored, *inputs))

    @cached_property
    def _vmapped(self) -> Any:
        import jax

        axes = (None, *[0] * len(self.inputs))  # the stored arguments are shared by the batch
        return jax.jit(jax.vmap(lambda stored, *inputs: self._call_flat(stored, *inputs), axes))

"""Batched modules at run time (SPEC.md, "Batched module").

A bundle function registers, for the primitive call it binds, the batched computation that can
replace a loop over that call; the batching rule in `_transforms` looks it up. Derivatives stay
those of the loop (`Fast.run`), so every transformation composes exactly as it does without a
batched module.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from .._format import _dtypes
from .._parse._stored import BATCH_DIMENSION, expected_types
from ._by_text import ByText

if TYPE_CHECKING:
    from .._format._manifest import Manifest
    from .._read._reader import Bundle
    from ._shapes import Prover


def symbolic_avals(
    manifest: Manifest, batched_arguments: Sequence[str]
) -> tuple[list[Any], list[Any]]:
    """The batched module's argument and result avals, with a symbolic batch size."""
    import jax
    from jax import export

    (b,) = export.symbolic_shape(BATCH_DIMENSION)
    aval = lambda shape, dtype: jax.core.ShapedArray(  # noqa: E731
        tuple(b if d is None else d for d in shape), _dtypes.BY_NAME[dtype].numpy
    )
    args, results = expected_types(manifest, batched_arguments)
    return [aval(s, d) for d, s in args], [aval(s, d) for d, s in results]


@dataclass(frozen=True)
class Fast:
    """A batched computation that can replace a loop over one primitive call.

    `mapped[i]` says whether the batched computation takes argument i with a leading batch
    dimension; `unused` arguments (never read) may be passed unbatched anyway. `call` takes
    the primitive's arguments (batch dimension first) and returns its results, batched.
    """

    mapped: tuple[bool, ...]
    unused: frozenset[int]
    call: Callable[..., Sequence[Any]]
    derivative: Literal["jvp", "vjp"]  # the loop's derivative the call is given
    folds: bool = False  # declared rows (`folded`): an argument it maps may come unmapped

    def accepts(self, mapped: Sequence[bool]) -> bool:
        pairs = list(zip(mapped, self.mapped, strict=True))
        if self.folds:  # broadcast to the batch, its rows are rows like the others
            return any(mapped) and all(f or not m for m, f in pairs)
        return all(m == f or (i in self.unused and not m) for i, (m, f) in enumerate(pairs))

    def run(self, args: Sequence[Any], mapped: Sequence[bool], loop: Callable[..., Any]) -> Any:
        """The batched call's results, with the derivatives of `loop` (same arguments)."""
        import jax
        import jax.numpy as jnp

        size = next(x.shape[0] for x, m in zip(args, mapped, strict=True) if m)

        def fast(*xs: Any) -> tuple[Any, ...]:
            xs = tuple(
                jnp.broadcast_to(x, (size, *x.shape)) if f and not m else x
                for x, m, f in zip(xs, mapped, self.mapped, strict=True)
            )
            return tuple(self.call(*xs))

        if self.derivative == "vjp":  # forward mode is not available: give the loop's VJP
            reverse = jax.custom_vjp(fast)
            reverse.defvjp(lambda *xs: jax.vjp(loop, *xs), lambda pullback, ct: pullback(ct))
            return reverse(*args)
        forward = jax.custom_jvp(fast)
        forward.defjvp(lambda xs, ts: jax.jvp(loop, xs, ts))
        return forward(*args)


# enzyme: by the prepared module text (named after both modules), while its callable lives
_BY_TEXT: ByText[Fast] = ByText()
_BY_ID: dict[int, tuple[weakref.ref[Any], Fast]] = {}  # xla: by the Exported, while it lives


def register(key: Any, fast: Fast, owner: object = None) -> None:
    """`key`: the `jax.export.Exported` a call binds (xla; kept while it lives), or the module
    text (enzyme; kept while `owner`, the callable that runs it, lives)."""
    if isinstance(key, str):
        _BY_TEXT.add(key, fast, owner)
        return
    _BY_ID[id(key)] = (weakref.ref(key), fast)
    weakref.finalize(key, _BY_ID.pop, id(key), None)


def lookup(params: dict[str, Any]) -> Fast | None:
    """The `Fast` registered for a primitive call with these parameters, if any."""
    exported = params.get("exported")
    if exported is not None:
        entry = _BY_ID.get(id(exported))
        return entry[1] if entry is not None and entry[0]() is exported else None
    source, pipeline = params.get("source"), params.get("pipeline_options")
    if source is None or pipeline is None or pipeline.pass_pipeline():
        return None  # not a plain enzyme-ad call (a derivative, or something else)
    return _BY_TEXT.get(source[3])


def fast_path(
    bundle: Bundle,
    derivative: Literal["jvp", "vjp"],
    carriers: tuple[str | None, ...] | None = None,
) -> Fast | None:
    """The bundle's batched module, run by jax.export in place of a loop over its call; None
    when it has none, or is sharded (a batched module is lowered for one device).

    On the enzyme backend the call's results may be carried in other dtypes (`carriers`): the
    batched module's are converted to them, exactly.
    """
    from .._interop._jax_export import exported_for

    m = bundle.manifest
    batched_module = m.batched if m.mesh is None else None
    if batched_module is None:
        return None
    inputs, outputs = symbolic_avals(m, batched_module.arguments)
    artifact = bundle.batched_artifact
    assert artifact is not None, "the manifest has a batched module: the reader checked its file"
    batched = exported_for(
        m, artifact, inputs=inputs, outputs=outputs, name=f"{m.function}_batched", polymorphic=True
    )
    call = batched.call
    if carriers is not None:
        args = [_dtypes.BY_NAME[a.dtype].numpy for a in m.arguments]

        def call(*xs: Any) -> list[Any]:
            outs = batched.call(*[x.astype(d) for x, d in zip(xs, args, strict=True)])
            return [o if c is None else o.astype(c) for o, c in zip(outs, carriers, strict=True)]

    names = set(batched_module.arguments)
    mapped = tuple(a.name in names for a in m.arguments)
    return Fast(mapped, bundle.signature.unused, call, derivative)


def folded(
    bundle: Bundle,
    prover: Prover,
    impl: Callable[..., Sequence[Any]],
    derivative: Literal["jvp", "vjp"],
    carriers: tuple[str | None, ...] | None = None,
) -> Fast | None:
    """A `jax.vmap` of a function with declared independent rows (SPEC.md 2.13) as one call:
    the mapped axis of each declared argument folded into its rows' axis (`V` blocks of `n`
    rows become `V * n` rows), the call's shapes proven as any call's are, and each result
    unfolded. None without a declaration. The caller registers it only for a bundle the user
    trusts: the declaration is the producer's word.

    `impl` takes and returns the arguments' and results' own dtypes; on the enzyme backend the
    primitive's are carried in others (`carriers`), converted here exactly."""
    import jax.numpy as jnp

    m = bundle.manifest
    rows = m.independent_rows
    if rows is None:
        return None
    arg_axes = [rows.arguments.get(a.name) for a in m.arguments]
    out_axes = [rows.results[r.name] for r in m.results]
    own = [_dtypes.BY_NAME[a.dtype].numpy for a in m.arguments]

    def call(*xs: Any) -> list[Any]:
        blocks = next(x.shape[0] for x, k in zip(xs, arg_axes, strict=True) if k is not None)
        flat = [x if k is None else _fold(x, k) for x, k in zip(xs, arg_axes, strict=True)]
        if carriers is not None:
            flat = [x.astype(d) for x, d in zip(flat, own, strict=True)]
        prover.prove([tuple(x.shape) for x in flat])
        outs = [_unfold(o, k, blocks) for o, k in zip(impl(*flat), out_axes, strict=True)]
        if carriers is not None:
            outs = [o if c is None else o.astype(c) for o, c in zip(outs, carriers, strict=True)]
        return outs

    def _fold(x: Any, axis: int) -> Any:  # (V, ..., n at axis, ...) -> (..., V * n, ...)
        moved = jnp.moveaxis(x, 0, axis)
        shape = moved.shape
        return moved.reshape(*shape[:axis], shape[axis] * shape[axis + 1], *shape[axis + 2 :])

    def _unfold(y: Any, axis: int, blocks: int) -> Any:  # the inverse of _fold
        shape = y.shape
        split = y.reshape(*shape[:axis], blocks, shape[axis] // blocks, *shape[axis + 1 :])
        return jnp.moveaxis(split, axis, 0)

    mapped = tuple(k is not None for k in arg_axes)
    return Fast(mapped, frozenset(), call, derivative, folds=True)

"""Independent rows as the writers take them (SPEC.md 2.13): `independent_rows="b"` declares,
for every argument and result whose shape has the bare symbol `b`, the axis it is at; a mapping
`{"arguments": {NAME: AXIS}, "results": {NAME: AXIS}}` gives the axes. `export` checks the
claim on its JAX function (`check`) and records that it did (`checked`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from pydantic import ValidationError

from .._format._errors import InputError
from .._format._manifest import Manifest
from .._format._model import first_error
from .._run._tolerance import agree

BLOCKS = 3  # blocks of rows `check` joins
ARGUMENT = "independent_rows"


def axes(
    value: str | Mapping[str, Any],
    names: Sequence[str],
    shapes: Sequence[Sequence[int | str]],
    result_names: Sequence[str],
    result_shapes: Sequence[Sequence[int | str]],
) -> dict[str, dict[str, int]]:
    """The declaration's axes: from the symbol's place in each shape, or as given."""
    if isinstance(value, str):
        return {
            "arguments": _where(value, names, shapes),
            "results": _where(value, result_names, result_shapes),
        }
    if not isinstance(value, Mapping) or set(value) - {"arguments", "results"}:
        raise InputError(
            "independent_rows is a symbol (`b`) or {'arguments': {NAME: AXIS}, 'results': "
            f"{{NAME: AXIS}}}}, not {value!r:.80}",
            argument=ARGUMENT,
        )
    return {side: dict(value.get(side) or {}) for side in ("arguments", "results")}


def _where(
    symbol: str, names: Sequence[str], shapes: Sequence[Sequence[int | str]]
) -> dict[str, int]:
    return {n: list(s).index(symbol) for n, s in zip(names, shapes, strict=True) if symbol in s}


def declare(manifest: Manifest, declared: Mapping[str, Any] | None, checked: bool) -> Manifest:
    """`manifest` with the declaration, validated (an `InputError` for what SPEC.md 2.13
    refuses: an unknown name, an axis that is no bare symbol, a result left out...)."""
    if declared is None:
        return manifest
    data = {**manifest.model_dump(), ARGUMENT: {**declared, "checked": checked}}
    try:
        return Manifest.model_validate(data, strict=False)
    except ValidationError as e:
        raise InputError(f"independent_rows: {first_error(e)[1]}", argument=ARGUMENT) from None


def check(
    fn: Callable[..., Any],
    example: Sequence[np.ndarray],
    names: Sequence[str],
    declared: Mapping[str, Mapping[str, int]],
    result_names: Sequence[str],
    seed: int = 0,
) -> None:
    """Refuse the declaration unless `fn` on blocks of random rows joined along the declared
    axes gives its results on each block, joined (an `InputError` naming the first result that
    differs). Arguments not declared keep their example values."""
    rng = np.random.default_rng(seed)
    arg_axes = [declared["arguments"].get(n) for n in names]
    blocks = [
        [x if k is None else _random_like(x, rng) for x, k in zip(example, arg_axes, strict=True)]
        for _ in range(BLOCKS)
    ]
    joined = [
        x if k is None else np.concatenate([b[i] for b in blocks], axis=k)
        for i, (x, k) in enumerate(zip(example, arg_axes, strict=True))
    ]
    whole = [np.asarray(y) for y in _leaves(fn(*joined))]
    parts = [[np.asarray(y) for y in _leaves(fn(*b))] for b in blocks]
    for j, name in enumerate(result_names):
        axis = declared["results"][name]
        want = np.concatenate([p[j] for p in parts], axis=axis)
        if want.shape != whole[j].shape or not _close(whole[j], want):
            raise InputError(
                f"independent_rows: the rows of {name!r} are not independent along axis {axis}: "
                f"the function on {BLOCKS} blocks of random rows joined differs from its "
                "results on each block, joined (a batch statistic, say); declare no "
                "independent rows for it",
                argument=ARGUMENT,
            )


def _leaves(tree: Any) -> list[Any]:
    import jax

    return jax.tree_util.tree_leaves(tree)


def _random_like(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    if x.dtype == np.bool_:
        return rng.random(x.shape) < 0.5
    if np.issubdtype(x.dtype, np.integer):
        return rng.integers(0, 2, x.shape).astype(x.dtype)
    if np.issubdtype(x.dtype, np.complexfloating):
        return (rng.standard_normal(x.shape) + 1j * rng.standard_normal(x.shape)).astype(x.dtype)
    return rng.standard_normal(x.shape).astype(x.dtype)


def _close(got: np.ndarray, want: np.ndarray) -> bool:
    if np.issubdtype(want.dtype, np.inexact):
        # SPEC.md 2.15's rule: NaN where both have it (sqrt of a random negative row) is the
        # same row, an infinity only the same infinity
        return agree(got, want, 1e-4, 1e-5)
    return bool(np.array_equal(got, want))

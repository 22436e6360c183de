"""The converter's one rewrite (hlobundle/_interop/_torch_slices.py): a slice of a cat's result
along its dim is the cat of its pieces' slices, exactly torch's values, and leaves no
`stablehlo.slice` of a `stablehlo.concatenate` (which XLA on a TPU miscompiled, issue 65)."""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

import jax
import numpy as np
import pytest
from helpers import slices_of_concatenates

from hlobundle._interop._torch import interpret, to_numpy

if importlib.util.find_spec("torch") is None:
    pytest.skip(
        "torch is in the torch extra (its CPU wheel: Python 3.11 here)", allow_module_level=True
    )

_END = 2**63 - 1  # torch's "to the end" (INT64_MAX), as torch.export writes `x[:, 1:]`
_THREE = [(3,), (4,), (5,)]

# name: (pieces' shapes, cat's dim, slice's dim, start, end, step, rewritten); the pieces' values
# count on from one piece to the next, so that a piece or an offset taken wrong shows
CASES: dict[str, tuple[list[tuple[int, ...]], int, int, Any, Any, int, bool]] = {
    "gpt2_head": ([(2, 1), (2, 6)], -1, -1, 0, 6, 1, True),
    "gpt2_tail_one_piece_whole": ([(2, 1), (2, 6)], -1, -1, 1, 7, 1, True),
    "to_the_end": ([(2, 1), (2, 6)], 1, -1, 1, _END, 1, True),
    "across_three": (_THREE, 0, 0, 2, 10, 1, True),
    "negative": (_THREE, 0, 0, -9, -2, 1, True),
    "clamped_both": (_THREE, 0, 0, -100, 100, 1, True),
    "none_none": (_THREE, 0, 0, None, None, 1, True),
    "exactly_the_middle": (_THREE, 0, 0, 3, 7, 1, True),
    "inside_the_last": (_THREE, 0, 0, 8, 11, 1, True),
    "empty_at": (_THREE, 0, 0, 5, 5, 1, True),
    "empty_end_before_start": (_THREE, 0, 0, 8, 2, 1, True),
    "empty_past_the_end": (_THREE, 0, 0, 20, 30, 1, True),
    "empty_piece_between": ([(2, 3), (2, 0), (2, 4)], 1, 1, 2, 5, 1, True),
    "empty_piece_first": ([(0, 3), (2, 3)], 0, 0, 0, 1, 1, True),
    "3d_dims_told_apart": ([(2, 3, 4), (2, 5, 4)], 1, -2, 1, -1, 1, True),
    "other_dim_as_written": ([(2, 3), (4, 3)], 0, 1, 0, 2, 1, False),
    "step_as_written": (_THREE, 0, 0, 1, 11, 2, False),
}


def _pieces(shapes: list[tuple[int, ...]], dtypes: list[str] | None = None) -> list[Any]:
    torch = importlib.import_module("torch")
    counts = np.cumsum([0] + [int(np.prod(s)) for s in shapes])
    dtypes = dtypes or ["float32"] * len(shapes)
    return [
        torch.arange(a, b).reshape(s).to(getattr(torch, d))
        for a, b, s, d in zip(counts, counts[1:], shapes, dtypes, strict=False)
    ]


def _cat_then_slice(count: int, cat_dim: int, *slice_args: Any) -> Any:
    """A graph of `count` placeholders, their cat along `cat_dim`, its slice, as torch.export
    writes one (`aten.cat.default`, then `aten.slice.Tensor`)."""
    torch = importlib.import_module("torch")
    graph = torch.fx.Graph()
    xs = [graph.placeholder(f"x{i}") for i in range(count)]
    cat = graph.call_function(torch.ops.aten.cat.default, (xs, cat_dim))
    graph.output((graph.call_function(torch.ops.aten.slice.Tensor, (cat, *slice_args)),))
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def _converted(pieces: list[Any], cat_dim: int, *slice_args: Any) -> tuple[np.ndarray, str]:
    """The slice as the converter computes it, and the module text it lowers to."""
    module = _cat_then_slice(len(pieces), cat_dim, *slice_args)
    lowered = jax.jit(lambda *xs: interpret(module, xs)[0]).lower(*map(to_numpy, pieces))
    return np.asarray(lowered.compile()(*map(to_numpy, pieces))), lowered.as_text()


@pytest.mark.parametrize("case", list(CASES))
def test_a_slice_of_a_cat_is_torch_s_and_no_slice_of_a_concatenate_is_left(case):
    torch = importlib.import_module("torch")
    shapes, cat_dim, dim, start, end, step, rewritten = CASES[case]
    pieces = _pieces(shapes)
    want = torch.ops.aten.slice.Tensor(torch.cat(pieces, cat_dim), dim, start, end, step)
    got, text = _converted(pieces, cat_dim, dim, start, end, step)
    assert got.shape == tuple(want.shape)
    np.testing.assert_array_equal(got, to_numpy(want))
    # as written, the slice takes the concatenation: what the check below looks for
    assert (slices_of_concatenates(text) == []) == rewritten, text


def test_a_slice_of_one_piece_of_a_cat_of_mixed_dtypes_has_the_cat_s_dtype():
    torch = importlib.import_module("torch")
    pieces = _pieces([(2, 3), (2, 2)], ["int32", "float32"])
    want = torch.cat(pieces, 1)[:, :2]
    got, text = _converted(pieces, 1, 1, 0, 2)
    assert want.dtype == torch.float32 and got.dtype == np.float32
    np.testing.assert_array_equal(got, to_numpy(want))
    assert slices_of_concatenates(text) == [], text


@pytest.mark.parametrize(("spec", "rewritten"), [("b, 1", True), ("2, n", False)])
def test_a_symbolic_dimension_is_sliced_through_and_a_symbolic_cat_dim_is_left_as_written(
    spec, rewritten
):
    torch = importlib.import_module("torch")
    module = _cat_then_slice(2, 1, 1, 0, -1)
    shapes = jax.export.symbolic_shape(spec)
    args = [
        jax.ShapeDtypeStruct(shapes, np.float32),
        jax.ShapeDtypeStruct((shapes[0], 4), np.float32),
    ]
    exported = jax.export.export(jax.jit(lambda *xs: interpret(module, xs)[0]))(*args)
    assert (slices_of_concatenates(exported.mlir_module()) == []) == rewritten
    pieces = _pieces([(2, 1), (2, 4)] if rewritten else [(2, 3), (2, 4)])
    got = exported.call(*map(to_numpy, pieces))
    np.testing.assert_array_equal(got, to_numpy(torch.cat(pieces, 1)[:, :-1]))

"""PyTorch's core ATen operators as JAX functions: the table `interpret` runs a `torch.export`
graph through, once decomposed to core ATen (`ExportedProgram.run_decompositions()`, the closed
set of about 180 operators every backend of torch.export takes).

Each entry follows the operator's schema (positional arguments, then its keywords) and returns
what it returns: an array, or a tuple for operators of several results. Torch's promotion
rules are not re-derived here: every result is cast to the dtype torch's own trace recorded for
it (`node.meta["val"]`), 64-bit types as JAX holds them (32-bit while `jax_enable_x64` is off).
An operator outside the table is refused by name, never approximated.

jax is imported on first use (`_Lazy`), like everything heavy the reading floors name: a
table of a hundred functions names `jnp` and `lax` as a module would.
"""

from __future__ import annotations

import importlib
import math
import operator
from collections.abc import Callable, Sequence
from typing import Any


class _Lazy:
    """A module imported when an attribute of it is first read."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        return getattr(importlib.import_module(self._name), attr)


jax: Any = _Lazy("jax")
jnp: Any = _Lazy("jax.numpy")
lax: Any = _Lazy("jax.lax")

Op = Callable[..., Any]
OPS: dict[str, Op] = {}

# torch's "to the end" in a slice: INT64_MAX, which no dimension reaches
_END = 2**62


def op(*names: str) -> Callable[[Op], Op]:
    """Register `fn` under each ATen overload name (`aten.add.Tensor`)."""

    def register(fn: Op) -> Op:
        for name in names:
            OPS[name] = fn
        return fn

    return register


class NotComputed:
    """A result of an operator that the conversion does not compute (max pooling's indices):
    an operator that takes it is refused, naming it."""

    def __init__(self, what: str) -> None:
        self.what = what


def _dims(x: Any, dims: Any) -> tuple[int, ...]:
    """torch's reduction dims (None or [] for all) as non-negative axes."""
    if dims is None or (isinstance(dims, (list, tuple)) and not dims):
        return tuple(range(jnp.ndim(x)))
    dims = [dims] if isinstance(dims, int) else dims
    return tuple(d % max(jnp.ndim(x), 1) for d in dims)


# Elementwise, one operand.
_UNARY: dict[str, str | Callable[..., Any]] = {
    "abs": "jnp.abs",
    "neg": "jnp.negative",
    "exp": "jnp.exp",
    "exp2": "jnp.exp2",
    "expm1": "jnp.expm1",
    "log": "jnp.log",
    "log1p": "jnp.log1p",
    "log2": "jnp.log2",
    "log10": "jnp.log10",
    "sqrt": "jnp.sqrt",
    "rsqrt": "lax.rsqrt",
    "sin": "jnp.sin",
    "cos": "jnp.cos",
    "tan": "jnp.tan",
    "asin": "jnp.arcsin",
    "acos": "jnp.arccos",
    "atan": "jnp.arctan",
    "sinh": "jnp.sinh",
    "cosh": "jnp.cosh",
    "tanh": "jnp.tanh",
    "asinh": "jnp.arcsinh",
    "acosh": "jnp.arccosh",
    "atanh": "jnp.arctanh",
    "sigmoid": "jax.nn.sigmoid",
    "relu": "jax.nn.relu",
    "erf": "lax.erf",
    "erfinv": "lax.erf_inv",
    "floor": "jnp.floor",
    "ceil": "jnp.ceil",
    "round": "jnp.round",
    "trunc": "jnp.trunc",
    "sign": "jnp.sign",
    "reciprocal": "jnp.reciprocal",
    "logical_not": "jnp.logical_not",
    "bitwise_not": "jnp.invert",
    "isnan": "jnp.isnan",
    "isinf": "jnp.isinf",
    "clone": lambda x: x,
    "alias": lambda x: x,
    "detach": lambda x: x,
    "lift_fresh_copy": lambda x: x,
}
_MODULES = {"jnp": jnp, "lax": lax, "jax.nn": _Lazy("jax.nn")}


def _resolved(path: str | Callable[..., Any]) -> Callable[..., Any]:
    """`jnp.abs` for `"jnp.abs"` (looked up when called: jax is imported then)."""
    if callable(path):
        return path
    module, _, attr = path.rpartition(".")
    return getattr(_MODULES[module], attr)


for _name, _fn in _UNARY.items():
    OPS[f"aten.{_name}.default"] = lambda x, *_, _fn=_fn, **__: _resolved(_fn)(x)

# Elementwise, two operands: each overload of a tensor and another tensor or a scalar.
_BINARY: dict[str, str] = {
    "mul": "jnp.multiply",
    "maximum": "jnp.maximum",
    "minimum": "jnp.minimum",
    "atan2": "jnp.arctan2",
    "remainder": "jnp.remainder",
    "fmod": "jnp.fmod",
    "eq": "jnp.equal",
    "ne": "jnp.not_equal",
    "lt": "jnp.less",
    "le": "jnp.less_equal",
    "gt": "jnp.greater",
    "ge": "jnp.greater_equal",
    "logical_and": "jnp.logical_and",
    "logical_or": "jnp.logical_or",
    "logical_xor": "jnp.logical_xor",
    "bitwise_and": "jnp.bitwise_and",
    "bitwise_or": "jnp.bitwise_or",
    "bitwise_xor": "jnp.bitwise_xor",
    "pow": "jnp.power",
}
for _name, _fn in _BINARY.items():
    for _overload in ("Tensor", "Scalar", "default", "Tensor_Tensor", "Tensor_Scalar"):
        OPS[f"aten.{_name}.{_overload}"] = lambda a, b, _fn=_fn: _resolved(_fn)(a, b)
OPS["aten.pow.Scalar"] = lambda a, b: jnp.power(a, b)


@op("aten.add.Tensor", "aten.add.Scalar")
def _add(a: Any, b: Any, alpha: Any = 1) -> Any:
    return a + (b if alpha == 1 else b * alpha)


@op("aten.sub.Tensor", "aten.sub.Scalar")
def _sub(a: Any, b: Any, alpha: Any = 1) -> Any:
    return a - (b if alpha == 1 else b * alpha)


@op("aten.rsub.Scalar", "aten.rsub.Tensor")
def _rsub(a: Any, b: Any, alpha: Any = 1) -> Any:
    return b - (a if alpha == 1 else a * alpha)


@op("aten.div.Tensor", "aten.div.Scalar")
def _div(a: Any, b: Any) -> Any:
    return jnp.true_divide(a, b)


@op("aten.div.Tensor_mode", "aten.div.Scalar_mode")
def _div_mode(a: Any, b: Any, *, rounding_mode: str | None = None) -> Any:
    if rounding_mode is None:
        return jnp.true_divide(a, b)
    integers = jnp.issubdtype(jnp.result_type(a, b), jnp.integer)
    if rounding_mode == "floor":
        return jnp.floor_divide(a, b) if integers else jnp.floor(jnp.true_divide(a, b))
    a, b = jnp.asarray(a), jnp.asarray(b)
    if integers:
        return lax.div(*jnp.broadcast_arrays(a, b.astype(a.dtype)))
    return jnp.trunc(jnp.true_divide(a, b))


@op("aten.where.self")
def _where(c: Any, a: Any, b: Any) -> Any:
    return jnp.where(c, a, b)


@op("aten.clamp.default", "aten.clamp.Tensor")
def _clamp(x: Any, lo: Any = None, hi: Any = None) -> Any:
    if lo is not None:
        x = jnp.maximum(x, lo)
    return x if hi is None else jnp.minimum(x, hi)


@op("aten.clamp_min.default")
def _clamp_min(x: Any, lo: Any) -> Any:
    return jnp.maximum(x, lo)


@op("aten.clamp_max.default")
def _clamp_max(x: Any, hi: Any) -> Any:
    return jnp.minimum(x, hi)


@op("aten.gelu.default")
def _gelu(x: Any, approximate: str = "none") -> Any:
    return jax.nn.gelu(x, approximate=approximate == "tanh")


@op("aten.hardtanh.default")
def _hardtanh(x: Any, lo: float = -1.0, hi: float = 1.0) -> Any:
    return jnp.clip(x, lo, hi)


@op("aten.leaky_relu.default")
def _leaky_relu(x: Any, slope: float = 0.01) -> Any:
    return jnp.where(x > 0, x, x * slope)


@op("aten.elu.default")
def _elu(x: Any, alpha: float = 1.0, scale: float = 1.0, input_scale: float = 1.0) -> Any:
    return scale * jnp.where(x > 0, x, alpha * jnp.expm1(x * input_scale))


@op("aten.silu.default")
def _silu(x: Any) -> Any:
    return x * jax.nn.sigmoid(x)


@op("aten.softplus.default")
def _softplus(x: Any, beta: float = 1.0, threshold: float = 20.0) -> Any:
    return jnp.where(x * beta > threshold, x, jnp.log1p(jnp.exp(x * beta)) / beta)


# Reductions.
@op("aten.sum.dim_IntList", "aten.sum.default")
def _sum(x: Any, dims: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Any:
    return jnp.sum(x, axis=_dims(x, dims), keepdims=keepdim)


@op("aten.mean.dim", "aten.mean.default")
def _mean(x: Any, dims: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Any:
    return jnp.mean(x, axis=_dims(x, dims), keepdims=keepdim)


@op("aten.prod.dim_int", "aten.prod.default")
def _prod(x: Any, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Any:
    return jnp.prod(x, axis=_dims(x, dim), keepdims=keepdim)


@op("aten.amax.default")
def _amax(x: Any, dims: Any = (), keepdim: bool = False) -> Any:
    return jnp.max(x, axis=_dims(x, dims), keepdims=keepdim)


@op("aten.amin.default")
def _amin(x: Any, dims: Any = (), keepdim: bool = False) -> Any:
    return jnp.min(x, axis=_dims(x, dims), keepdims=keepdim)


@op("aten.max.dim")
def _max_dim(x: Any, dim: int, keepdim: bool = False) -> Any:
    return jnp.max(x, dim, keepdims=keepdim), jnp.argmax(x, dim, keepdims=keepdim)


@op("aten.min.dim")
def _min_dim(x: Any, dim: int, keepdim: bool = False) -> Any:
    return jnp.min(x, dim, keepdims=keepdim), jnp.argmin(x, dim, keepdims=keepdim)


@op("aten.max.default")
def _max_all(x: Any) -> Any:
    return jnp.max(x)


@op("aten.min.default")
def _min_all(x: Any) -> Any:
    return jnp.min(x)


@op("aten.argmax.default")
def _argmax(x: Any, dim: int | None = None, keepdim: bool = False) -> Any:
    return jnp.argmax(x, dim, keepdims=keepdim)


@op("aten.argmin.default")
def _argmin(x: Any, dim: int | None = None, keepdim: bool = False) -> Any:
    return jnp.argmin(x, dim, keepdims=keepdim)


@op("aten.any.dim", "aten.any.dims", "aten.any.default")
def _any(x: Any, dims: Any = None, keepdim: bool = False) -> Any:
    return jnp.any(x, axis=_dims(x, dims), keepdims=keepdim)


@op("aten.all.dim", "aten.all.dims", "aten.all.default")
def _all(x: Any, dims: Any = None, keepdim: bool = False) -> Any:
    return jnp.all(x, axis=_dims(x, dims), keepdims=keepdim)


@op("aten.var.correction")
def _var(x: Any, dims: Any = None, *, correction: float = 1, keepdim: bool = False) -> Any:
    return jnp.var(x, axis=_dims(x, dims), ddof=correction, keepdims=keepdim)


@op("aten.cumsum.default")
def _cumsum(x: Any, dim: int, *, dtype: Any = None) -> Any:
    return jnp.cumsum(x, axis=dim)


@op("aten.logsumexp.default")
def _logsumexp(x: Any, dims: Any, keepdim: bool = False) -> Any:
    return jax.nn.logsumexp(x, axis=_dims(x, dims), keepdims=keepdim)


@op("aten._softmax.default")
def _softmax(x: Any, dim: int, half_to_float: bool = False) -> Any:
    return jax.nn.softmax(x, axis=dim)


@op("aten._log_softmax.default")
def _log_softmax(x: Any, dim: int, half_to_float: bool = False) -> Any:
    return jax.nn.log_softmax(x, axis=dim)


@op("aten._safe_softmax.default")
def _safe_softmax(x: Any, dim: int, dtype: Any = None) -> Any:
    """Softmax, but 0 along a row that is all -inf (a fully masked attention row)."""
    masked = jnp.all(x == -jnp.inf, axis=dim, keepdims=True)
    return jnp.where(masked, 0.0, jax.nn.softmax(x, axis=dim))


# Shapes and indexing.
@op("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default")
def _view(x: Any, shape: Sequence[Any]) -> Any:
    return jnp.reshape(x, tuple(shape))


@op("aten.permute.default")
def _permute(x: Any, dims: Sequence[int]) -> Any:
    return jnp.transpose(x, tuple(dims))


@op("aten.t.default")
def _t(x: Any) -> Any:
    return jnp.transpose(x)


@op("aten.transpose.int")
def _transpose(x: Any, a: int, b: int) -> Any:
    return jnp.swapaxes(x, a, b)


@op("aten.expand.default")
def _expand(x: Any, shape: Sequence[Any], *, implicit: bool = False) -> Any:
    lead = len(shape) - jnp.ndim(x)
    full = [
        jnp.shape(x)[i - lead] if isinstance(s, int) and s == -1 else s for i, s in enumerate(shape)
    ]
    return jnp.broadcast_to(x, tuple(full))


@op("aten.unsqueeze.default")
def _unsqueeze(x: Any, dim: int) -> Any:
    return jnp.expand_dims(x, dim % (jnp.ndim(x) + 1))


@op("aten.squeeze.dims", "aten.squeeze.dim", "aten.squeeze.default")
def _squeeze(x: Any, dims: Any = None) -> Any:
    axes = _dims(x, dims)
    return jnp.squeeze(x, tuple(a for a in axes if _is(jnp.shape(x)[a], 1)))


def _is(size: Any, value: int) -> bool:
    """A dimension is `value` for sure (a symbolic one is not known to be)."""
    return isinstance(size, int) and size == value


@op("aten.cat.default")
def _cat(xs: Sequence[Any], dim: int = 0) -> Any:
    return jnp.concatenate(list(xs), axis=dim)


@op("aten.stack.default")
def _stack(xs: Sequence[Any], dim: int = 0) -> Any:
    return jnp.stack(list(xs), axis=dim)


@op("aten.slice.Tensor")
def _slice(x: Any, dim: int = 0, start: Any = None, end: Any = None, step: int = 1) -> Any:
    if isinstance(end, int) and end >= _END:
        end = None
    if isinstance(start, int) and start <= -_END:
        start = None
    index = [slice(None)] * jnp.ndim(x)
    index[dim] = slice(start, end, step)
    return x[tuple(index)]


@op("aten.select.int")
def _select(x: Any, dim: int, index: int) -> Any:
    return jnp.take(x, index, axis=dim)


@op("aten.split_with_sizes.default")
def _split_with_sizes(x: Any, sizes: Sequence[int], dim: int = 0) -> Any:
    bounds = [sum(sizes[:i]) for i in range(1, len(sizes))]
    return tuple(jnp.split(x, bounds, axis=dim))


@op("aten.split.Tensor")
def _split(x: Any, size: int, dim: int = 0) -> Any:
    n = jnp.shape(x)[dim]
    return tuple(jnp.split(x, list(range(size, n, size)), axis=dim))


@op("aten.unbind.int")
def _unbind(x: Any, dim: int = 0) -> Any:
    return tuple(jnp.take(x, i, axis=dim) for i in range(jnp.shape(x)[dim]))


@op("aten.flip.default")
def _flip(x: Any, dims: Sequence[int]) -> Any:
    return jnp.flip(x, tuple(dims))


@op("aten.roll.default")
def _roll(x: Any, shifts: Sequence[int], dims: Sequence[int] = ()) -> Any:
    return jnp.roll(x, tuple(shifts), tuple(dims) or None)


@op("aten.repeat.default")
def _repeat(x: Any, repeats: Sequence[int]) -> Any:
    lead = len(repeats) - jnp.ndim(x)
    return jnp.tile(jnp.reshape(x, (1,) * lead + jnp.shape(x)), tuple(repeats))


@op("aten.index.Tensor")
def _index(x: Any, indices: Sequence[Any]) -> Any:
    return x[tuple(slice(None) if i is None else i for i in indices)]


@op("aten.index_select.default")
def _index_select(x: Any, dim: int, index: Any) -> Any:
    return jnp.take(x, index, axis=dim)


@op("aten.gather.default")
def _gather(x: Any, dim: int, index: Any, *, sparse_grad: bool = False) -> Any:
    # torch's index may be smaller than `x` along the other axes: `x` is cut to it
    cut = tuple(
        slice(None) if d == dim % jnp.ndim(x) else slice(0, s) for d, s in enumerate(index.shape)
    )
    return jnp.take_along_axis(x[cut], index, axis=dim)


@op("aten.embedding.default")
def _embedding(
    weight: Any, indices: Any, padding_idx: int = -1, scale: bool = False, sparse: bool = False
) -> Any:
    return jnp.take(weight, indices, axis=0)


@op("aten.constant_pad_nd.default")
def _constant_pad_nd(x: Any, pad: Sequence[int], value: float = 0.0) -> Any:
    config = [(0, 0, 0)] * jnp.ndim(x)
    for i in range(len(pad) // 2):  # pairs from the last dimension backwards
        config[jnp.ndim(x) - 1 - i] = (pad[2 * i], pad[2 * i + 1], 0)
    return lax.pad(x, jnp.asarray(value, x.dtype), config)


@op("aten.tril.default")
def _tril(x: Any, diagonal: int = 0) -> Any:
    return jnp.tril(x, diagonal)


@op("aten.triu.default")
def _triu(x: Any, diagonal: int = 0) -> Any:
    return jnp.triu(x, diagonal)


# Creation: dtypes come from the trace (the result is cast to it).
@op("aten.full.default")
def _full(size: Sequence[Any], value: Any, **_: Any) -> Any:
    return jnp.full(tuple(size), value)


@op("aten.full_like.default")
def _full_like(x: Any, value: Any, **_: Any) -> Any:
    return jnp.full(jnp.shape(x), value)


@op("aten.zeros.default", "aten.empty.memory_format")
def _zeros(size: Sequence[Any], **_: Any) -> Any:
    return jnp.zeros(tuple(size))


@op("aten.zeros_like.default", "aten.empty_like.default")
def _zeros_like(x: Any, **_: Any) -> Any:
    return jnp.zeros(jnp.shape(x))


@op("aten.ones.default")
def _ones(size: Sequence[Any], **_: Any) -> Any:
    return jnp.ones(tuple(size))


@op("aten.ones_like.default")
def _ones_like(x: Any, **_: Any) -> Any:
    return jnp.ones(jnp.shape(x))


@op("aten.scalar_tensor.default")
def _scalar_tensor(value: Any, **_: Any) -> Any:
    return jnp.asarray(value)


@op("aten.arange.start_step", "aten.arange.start", "aten.arange.default")
def _arange(*bounds: Any, **_: Any) -> Any:
    start, end, step = (0, bounds[0], 1) if len(bounds) == 1 else (*bounds, 1)[:3]
    if isinstance(end, int) or (start, step) != (0, 1):
        return jnp.arange(start, end, step)
    return lax.iota(jnp.int32, end)  # a symbolic length


@op("aten._to_copy.default")
def _to_copy(x: Any, **_: Any) -> Any:
    return x  # the trace's dtype is applied to every result


@op("aten.copy.default")
def _copy(x: Any, src: Any, non_blocking: bool = False) -> Any:
    return jnp.broadcast_to(src, jnp.shape(x))


@op("aten.dropout.default", "aten.native_dropout.default")
def _dropout(x: Any, p: float, train: bool | None) -> Any:
    if train:
        raise ValueError("dropout in training mode draws random numbers: call model.eval()")
    return x


@op("aten.scaled_dot_product_attention.default")
def _attention(
    q: Any,
    k: Any,
    v: Any,
    attn_mask: Any = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    *,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Any:
    """torch's math: softmax(q k^T scale + mask) v, a boolean mask keeping where it is true,
    and a row that keeps nothing all zeros (its `_safe_softmax`)."""
    if dropout_p:
        raise ValueError("attention dropout draws random numbers: call model.eval()")
    if enable_gqa:
        k = jnp.repeat(k, q.shape[-3] // k.shape[-3], axis=-3)
        v = jnp.repeat(v, q.shape[-3] // v.shape[-3], axis=-3)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = jnp.matmul(q, jnp.swapaxes(k, -1, -2)) * scale
    if is_causal:
        s = jnp.where(jnp.tril(jnp.ones((q.shape[-2], k.shape[-2]), bool)), s, -jnp.inf)
    if attn_mask is not None:
        s = jnp.where(attn_mask, s, -jnp.inf) if attn_mask.dtype == bool else s + attn_mask
    return jnp.matmul(_safe_softmax(s, -1), v)


# Linear algebra and networks.
@op("aten.mm.default", "aten.bmm.default", "aten.matmul.default")
def _mm(a: Any, b: Any) -> Any:
    return jnp.matmul(a, b)


@op("aten.addmm.default")
def _addmm(bias: Any, a: Any, b: Any, *, beta: Any = 1, alpha: Any = 1) -> Any:
    product = jnp.matmul(a, b)
    product = product if alpha == 1 else product * alpha
    return product + (bias if beta == 1 else bias * beta)


@op("aten.convolution.default")
def _convolution(
    x: Any,
    w: Any,
    bias: Any,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    transposed: bool,
    output_padding: Sequence[int],
    groups: int,
) -> Any:
    n = jnp.ndim(x) - 2
    spatial = "DHW"[3 - n :]
    numbers = (f"NC{spatial}", f"OI{spatial}", f"NC{spatial}")
    if not transposed:
        y = lax.conv_general_dilated(
            x,
            w,
            window_strides=tuple(stride),
            padding=[(p, p) for p in padding],
            rhs_dilation=tuple(dilation),
            dimension_numbers=numbers,
            feature_group_count=groups,
        )
    else:
        y = _conv_transpose(x, w, stride, padding, dilation, output_padding, groups, numbers)
    return y if bias is None else y + jnp.reshape(bias, (-1,) + (1,) * n)


def _conv_transpose(
    x: Any,
    w: Any,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    output_padding: Sequence[int],
    groups: int,
    numbers: tuple[str, str, str],
) -> Any:
    """torch's transposed convolution (weight `(in, out / groups, k...)`) as the gradient of a
    convolution: the input dilated by the stride, the kernel flipped with its in and out swapped
    per group, padded `d (k - 1) - p` each side and `output_padding` more at the end."""
    n = jnp.ndim(x) - 2
    i, o = w.shape[0], w.shape[1]
    k = w.shape[2:]
    w = jnp.reshape(w, (groups, i // groups, o) + tuple(k))
    w = jnp.swapaxes(w, 1, 2).reshape((groups * o, i // groups) + tuple(k))
    w = jnp.flip(w, tuple(range(2, 2 + n)))
    pads = [
        (d * (kk - 1) - p, d * (kk - 1) - p + op_)
        for d, kk, p, op_ in zip(dilation, k, padding, output_padding, strict=True)
    ]
    return lax.conv_general_dilated(
        x,
        w,
        window_strides=(1,) * n,
        padding=pads,
        lhs_dilation=tuple(stride),
        rhs_dilation=tuple(dilation),
        dimension_numbers=numbers,
        feature_group_count=groups,
    )


def _channel(v: Any, ndim: int) -> Any:
    """A per-channel vector shaped to broadcast along axis 1 of an `ndim` array."""
    return jnp.reshape(v, (-1,) + (1,) * (ndim - 2))


@op("aten._native_batch_norm_legit_no_training.default")
def _batch_norm(
    x: Any, weight: Any, bias: Any, mean: Any, var: Any, momentum: float, eps: float
) -> Any:
    nd = jnp.ndim(x)
    y = (x - _channel(mean, nd)) * _channel(lax.rsqrt(var + eps), nd)
    if weight is not None:
        y = y * _channel(weight, nd)
    if bias is not None:
        y = y + _channel(bias, nd)
    empty = jnp.zeros((0,), x.dtype)
    return y, empty, empty


@op("aten.native_layer_norm.default")
def _layer_norm(x: Any, shape: Sequence[int], weight: Any, bias: Any, eps: float) -> Any:
    axes = tuple(range(jnp.ndim(x) - len(shape), jnp.ndim(x)))
    mean = jnp.mean(x, axes, keepdims=True)
    rstd = lax.rsqrt(jnp.mean(jnp.square(x - mean), axes, keepdims=True) + eps)
    y = (x - mean) * rstd
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y, mean, rstd


@op("aten.native_group_norm.default")
def _group_norm(
    x: Any, weight: Any, bias: Any, n: Any, c: int, hw: Any, groups: int, eps: float
) -> Any:
    grouped = jnp.reshape(x, (n, groups, -1))
    mean = jnp.mean(grouped, -1, keepdims=True)
    rstd = lax.rsqrt(jnp.mean(jnp.square(grouped - mean), -1, keepdims=True) + eps)
    y = jnp.reshape((grouped - mean) * rstd, jnp.shape(x))
    nd = jnp.ndim(x)
    if weight is not None:
        y = y * _channel(weight, nd)
    if bias is not None:
        y = y + _channel(bias, nd)
    return y, mean[..., 0], rstd[..., 0]


def _windows(
    x: Any,
    kernel: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    ceil_mode: bool,
) -> tuple[list[tuple[int, int]], tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """The pooling window's padding (the extra of `ceil_mode` on the high side, where the last
    window starts inside the input or its left padding), dims, strides and dilations, for
    `lax.reduce_window` over an `(N, C, spatial...)` array."""
    n = len(kernel)
    stride = tuple(stride) or tuple(kernel)
    pads = [(0, 0), (0, 0)]
    for size, k, s, p, d in zip(jnp.shape(x)[-n:], kernel, stride, padding, dilation, strict=True):
        span = d * (k - 1) + 1
        out = (size + 2 * p - span) // s + 1
        if ceil_mode:
            out = -(-(size + 2 * p - span) // s) + 1
            if (out - 1) * s >= size + p:
                out -= 1
        pads.append((p, (out - 1) * s + span - size - p))
    return pads, (1, 1, *kernel), (1, 1, *stride), (1, 1, *dilation)


@op("aten.max_pool2d_with_indices.default", "aten.max_pool3d_with_indices.default")
def _max_pool(
    x: Any,
    kernel: Sequence[int],
    stride: Sequence[int] = (),
    padding: Sequence[int] = (0, 0),
    dilation: Sequence[int] = (1, 1),
    ceil_mode: bool = False,
) -> Any:
    n = len(kernel)
    padding = tuple(padding) * (n // len(padding))
    dilation = tuple(dilation) * (n // len(dilation))
    pads, dims, strides, dil = _windows(x, kernel, stride, padding, dilation, ceil_mode)
    y = lax.reduce_window(x, -jnp.inf, lax.max, dims, strides, pads, window_dilation=dil)
    return y, NotComputed("max pooling's indices")


@op("aten.avg_pool2d.default", "aten.avg_pool3d.default")
def _avg_pool(
    x: Any,
    kernel: Sequence[int],
    stride: Sequence[int] = (),
    padding: Sequence[int] = (0, 0),
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> Any:
    n = len(kernel)
    padding = tuple(padding) * (n // len(padding))
    pads, dims, strides, _ = _windows(x, kernel, stride, padding, (1,) * n, ceil_mode)
    total = lax.reduce_window(x, 0.0, lax.add, dims, strides, pads)
    if divisor_override:
        return total / divisor_override
    # what each window counts: the input, and its explicit padding where that is counted
    ones = jnp.ones((1, 1) + jnp.shape(x)[2:], x.dtype)
    if count_include_pad:
        ones = lax.pad(
            ones, jnp.asarray(1, x.dtype), [(0, 0, 0)] * 2 + [(p, p, 0) for p in padding]
        )
        pads = pads[:2] + [(0, hi - p) for (_, hi), p in zip(pads[2:], padding, strict=True)]
    count = lax.reduce_window(ones, 0.0, lax.add, dims, strides, pads)
    return total / count


# What the trace keeps of Python's and torch's symbolic integers, and its assertions.
@op("aten.sym_size.int")
def _sym_size(x: Any, dim: int) -> Any:
    return jnp.shape(x)[dim]


@op("aten.sym_numel.default")
def _sym_numel(x: Any) -> Any:
    return math.prod(jnp.shape(x))


@op(
    "aten._assert_tensor_metadata.default",
    "aten._assert_scalar.default",
    "aten.sym_constrain_range_for_size.default",
    "aten.sym_constrain_range.default",
)
def _assertion(*_: Any, **__: Any) -> None:
    return None


# Python's own functions on the trace's values (`getitem` of a tuple result, a symbolic size's
# arithmetic), which the graph calls directly.
PYTHON_FUNCTIONS = {
    operator.getitem,
    operator.add,
    operator.sub,
    operator.mul,
    operator.floordiv,
    operator.truediv,
    operator.mod,
    operator.neg,
    operator.eq,
    operator.ne,
    operator.lt,
    operator.le,
    operator.gt,
    operator.ge,
}

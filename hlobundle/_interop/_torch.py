"""PyTorch's `torch.export`, in: the one place that knows what an `ExportedProgram` is made of.

`read_program` reads a program (decomposed to core ATen) into what a bundle records: one `Slot`
per placeholder of its graph, each bound **by name**, never by position: a parameter or a
buffer to its `state_dict` key, a constant to its name in `ExportedProgram.constants`, a user
input to its path in the example arguments. The bundle's arguments put the user inputs first
(so that `f(x)` binds `x`, the weights taking their stored values) and then the others in the
graph's order; `Program.call` hands each placeholder its slot's value, whatever either order.
Dynamic dimensions (`torch.export.Dim`) become jax.export symbolic shapes, named as the `Dim`
was where the program still knows it, with their ranges as constraints; `call` runs the graph
on JAX values through `_torch_aten.py`'s table of operators.

torch and jax are imported inside the functions (and `_torch_aten` with them): nothing here
costs an import of either until a program is read.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .._format._errors import InputError
from .._format._fields import PRODUCER_TORCH, identifier

if TYPE_CHECKING:
    from .._format._manifest import Role

PRODUCER = PRODUCER_TORCH  # the provenance's producer of a bundle from a torch program

# `InputKind` of torch.export's graph signature -> (what the slot is, the argument's role)
_KINDS: dict[str, tuple[str, Role]] = {
    "USER_INPUT": ("input", "input"),
    "PARAMETER": ("parameter", "parameter"),
    "BUFFER": ("buffer", "state"),
    "CONSTANT_TENSOR": ("constant", "parameter"),
}


@dataclass(frozen=True)
class Slot:
    """One placeholder of the graph as a bundle argument: what it is (`input`, `parameter`,
    `buffer`, `constant`), its key (a `state_dict` key, a constant's name, or an input's path
    `args[0]`), its argument name and role, its example value (a torch tensor) and, for a user
    input with dynamic dimensions, its jax.export shape spec (`"batch, 6"`)."""

    kind: str
    key: str
    placeholder: str
    name: str
    role: Role
    value: Any
    shape: str | None = None


@dataclass(frozen=True)
class Program:
    """A decomposed program read for a bundle: its slots in the bundle's order, each graph
    placeholder's slot index (`order`), its outputs' key paths and structure, and the
    constraints of its symbolic dimensions."""

    graph_module: Any
    slots: list[Slot]
    order: list[int]
    out_paths: list[tuple[str, ...]]
    out_spec: Any
    constraints: list[str]

    def call(self, flat: Sequence[Any]) -> list[Any]:
        """The graph's outputs on the bundle's flat arguments (JAX values, traced or not)."""
        return interpret(self.graph_module, [flat[i] for i in self.order])

    def output_tree(self, names: Sequence[str]) -> Any:
        """The outputs' structure as SPEC.md 2.3 writes it, its leaves `names`."""
        return _json_tree(self.out_spec, iter(names))


def read_program(ep: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> Program:
    """`ep` (an `ExportedProgram`, decomposed to core ATen) with its example `args` and
    `kwargs` as a bundle's slots. Refuses what a bundle cannot hold: a program that writes its
    buffers (a module exported in training mode), inputs other than tensors."""
    from torch.utils import _pytree

    _refuse_mutations(ep)
    leaves, _ = _pytree.tree_flatten_with_path((tuple(args), dict(kwargs)))
    user = iter(leaves)
    nodes = _placeholders(ep)
    slots: list[Slot] = []
    for spec in ep.graph_signature.input_specs:
        if spec.kind.name not in _KINDS:
            raise InputError(
                f"the program's input {spec.arg.name!r} is a {spec.kind.name}, which a bundle "
                "cannot hold (its arguments are tensors)",
                argument="model",
            )
        kind, role = _KINDS[spec.kind.name]
        node = nodes.get(spec.arg.name)
        if node is None:
            raise InputError(
                f"the program's graph has no placeholder {spec.arg.name!r}", argument="model"
            )
        if kind == "input":
            path, value = next(user, (None, None))
            _check_input(path, value, spec.arg.name)
            key = _input_path(path)
            slots.append(Slot(kind, key, node.name, node.name, role, value, _shape_spec(node)))
        else:
            value = _state_value(ep, kind, spec)
            slots.append(Slot(kind, spec.target, node.name, identifier(spec.target), role, value))
    ties = _ties(slots)
    kept = [s for s in slots if ties[s.placeholder] is s]
    ordered = [s for s in kept if s.kind == "input"] + [s for s in kept if s.kind != "input"]
    out_spec = ep.call_spec.out_spec
    return Program(
        graph_module=ep.graph_module,
        slots=ordered,
        order=[ordered.index(ties[s.placeholder]) for s in slots],
        out_paths=_leaf_paths(out_spec, ()),
        out_spec=out_spec,
        constraints=_constraints(ep, slots, nodes),
    )


def _ties(slots: Sequence[Slot]) -> dict[str, Slot]:
    """Each placeholder's slot, where the program holds one tensor under several names (a
    module that ties its LM head to its embedding: torch.export lifts both `state_dict` keys)
    the first of them: a tied weight is one argument, stored once, its gradient whole."""
    first: dict[tuple[Any, ...], Slot] = {}
    ties = {}
    for slot in slots:
        v = slot.value
        same = (v.data_ptr(), tuple(v.shape), v.stride(), v.dtype) if slot.kind != "input" else None
        ties[slot.placeholder] = first.setdefault(same, slot) if same else slot
    return ties


def _refuse_mutations(ep: Any) -> None:
    for spec in ep.graph_signature.output_specs:
        if spec.kind.name != "USER_OUTPUT":
            what = spec.target or spec.arg.name
            raise InputError(
                f"the program writes {what!r} ({spec.kind.name}): a bundle's function is "
                "pure. A module in training mode updates its buffers (BatchNorm's running "
                "statistics): call model.eval() before exporting it",
                argument="model",
            )


def _placeholders(ep: Any) -> dict[str, Any]:
    """The graph's placeholders by name (looked up once each: a model has thousands)."""
    return {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}


def _check_input(path: Any, value: Any, name: str) -> None:
    import torch

    if not isinstance(value, torch.Tensor):
        what = "missing" if path is None else f"a {type(value).__name__}"
        raise InputError(
            f"the example input for {name!r} is {what}: a bundle's inputs are tensors (give "
            "the example arguments the program was exported with, tensors only; torch.export "
            "bakes Python numbers into the program)",
            argument="example_args",
        )


def _input_path(path: Any) -> str:
    """`args[0]['ids']` for torch's key path `((0), (0), ('ids'))`: as JAX's producers write
    paths (SPEC.md 2.1)."""
    from torch.utils import _pytree

    head, *rest = path
    return ("args" if head.idx == 0 else "kwargs") + _pytree.keystr(tuple(rest))


def _state_value(ep: Any, kind: str, spec: Any) -> Any:
    """A parameter's, buffer's or constant's tensor, by its name in the program."""
    target = spec.target
    if kind != "constant" and target in ep.state_dict:
        return ep.state_dict[target]
    if target in ep.constants:  # a buffer that is not persistent, or a lifted constant
        return ep.constants[target]
    raise InputError(f"the program holds no value for {kind} {target!r}", argument="model")


# -- symbolic dimensions ----------------------------------------------------------------------


def _symbol_names(node: Any) -> dict[Any, str]:
    """Each symbol of the placeholder's shape, by the name of the `Dim` it came from (where the
    program's shape environment still records it: a program exported in this process), else
    torch's own name for it (`s17`)."""
    names = {}
    for size in node.meta["val"].shape:
        if isinstance(size, int):
            continue
        shape_env = size.node.shape_env
        debug = getattr(shape_env, "source_name_to_debug_name", {})
        for symbol in size.node.expr.free_symbols:
            sources = getattr(shape_env, "var_to_sources", {}).get(symbol, [])
            found = [debug[s.name] for s in sources if s.name in debug]
            names[symbol] = identifier(found[0]) if found else str(symbol)
    return names


def _shape_spec(node: Any) -> str | None:
    """The jax.export shape spec of a user input (`"batch, 6"`), or None for a static shape."""
    shape = node.meta["val"].shape
    if all(isinstance(s, int) for s in shape):
        return None
    names = _symbol_names(node)
    return ", ".join(str(s) if isinstance(s, int) else str(s.node.expr.subs(names)) for s in shape)


def _constraints(ep: Any, slots: Sequence[Slot], nodes: dict[str, Any]) -> list[str]:
    """`batch >= 2`, `batch <= 64` for each symbol's range in the program (jax.export assumes
    a dimension is at least 1; torch's unbounded top is left out)."""
    names: dict[Any, str] = {}
    for slot in slots:
        if slot.shape is not None:
            names.update(_symbol_names(nodes[slot.placeholder]))
    out = []
    for symbol, name in sorted(names.items(), key=lambda kv: kv[1]):
        bounds = ep.range_constraints.get(symbol)
        if bounds is None:
            continue
        lower, upper = _finite(bounds.lower), _finite(bounds.upper)
        if lower is not None and lower > 1:
            out.append(f"{name} >= {lower}")
        if upper is not None:
            out.append(f"{name} <= {upper}")
    return out


def _finite(bound: Any) -> int | None:
    """A range's bound as an int, or None for torch's infinities (`int_oo`, which says it is
    finite, but is no number)."""
    try:
        return int(bound)
    except (OverflowError, TypeError, ValueError, AttributeError):
        return None


# -- outputs ----------------------------------------------------------------------------------


def _children(spec: Any) -> list[tuple[str, Any]]:
    """A tree spec's children with their keys: a mapping's (a dict, a `ModelOutput`) keys,
    else positions."""
    children = list(spec.children())
    context = spec.context
    if isinstance(context, (list, tuple)) and all(isinstance(k, str) for k in context):
        if len(context) == len(children):
            return list(zip(context, children, strict=True))
    return [(str(i), c) for i, c in enumerate(children)]


def _leaf_paths(spec: Any, path: tuple[str, ...]) -> list[tuple[str, ...]]:
    if spec.is_leaf():
        return [path]
    return [p for key, child in _children(spec) for p in _leaf_paths(child, (*path, key))]


def _json_tree(spec: Any, names: Any) -> Any:
    """Mappings as objects, every other node (tuples, lists, named tuples) as arrays."""
    if spec.is_leaf():
        return next(names)
    children = _children(spec)
    if children and all(not k.isdigit() for k, _ in children):
        return {k: _json_tree(c, names) for k, c in children}
    return [_json_tree(c, names) for _, c in children]


# -- values and the interpreter ---------------------------------------------------------------


def to_numpy(tensor: Any) -> np.ndarray:
    """A torch tensor's values as NumPy holds them (bfloat16 through its bits)."""
    import torch

    t = tensor.detach().cpu()
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return np.asarray(t.view(torch.int16).numpy().view(ml_dtypes.bfloat16))
    return np.asarray(t.numpy())


def jax_dtype(torch_dtype: Any) -> Any:
    """The dtype JAX holds a torch dtype's values in (int64 as int32 while x64 is off)."""
    import jax
    import torch

    empty = torch.empty((0,), dtype=torch_dtype)
    return jax.dtypes.canonicalize_dtype(to_numpy(empty).dtype)


def interpret(graph_module: Any, values: Sequence[Any]) -> list[Any]:
    """Run the graph on `values` (one per placeholder, in the graph's order) with JAX."""
    import jax.numpy as jnp

    from . import _torch_aten
    from ._torch_slices import slice_of_cat

    env: dict[Any, Any] = {}
    given = iter(values)
    for node in graph_module.graph.nodes:
        if node.op == "placeholder":
            env[node] = next(given)
        elif node.op == "call_function":
            joined = slice_of_cat(node, env)  # XLA on a TPU miscompiles it as written
            out = _call(node, env) if joined is None else joined
            env[node] = _as_traced(out, node.meta.get("val"))
        elif node.op == "output":
            outputs = _flat(_load(node.args[0], env))
            if any(isinstance(x, _torch_aten.NotComputed) for x in outputs):
                raise InputError(
                    "the program returns max pooling's indices, which this conversion does "
                    "not compute",
                    argument="model",
                )
            return [jnp.asarray(x) for x in outputs]
        else:
            raise InputError(
                f"the program's node {node.name!r} is a {node.op}, which this conversion does "
                "not take (control flow, submodules)",
                argument="model",
            )
    raise InputError("the program's graph has no output", argument="model")


def _flat(x: Any) -> list[Any]:
    return [y for item in x for y in _flat(item)] if isinstance(x, (list, tuple)) else [x]


def _load(arg: Any, env: dict[Any, Any]) -> Any:
    from torch import fx

    return fx.node.map_arg(arg, lambda n: env[n])


def _call(node: Any, env: dict[Any, Any]) -> Any:
    from . import _torch_aten

    args, kwargs = _load(node.args, env), _load(node.kwargs, env)
    taken = [] if node.target is operator.getitem else _flat(list(args) + list(kwargs.values()))
    for x in taken:  # what an operator takes, not a tuple that `getitem` picks from
        if isinstance(x, _torch_aten.NotComputed):
            raise InputError(
                f"{node.name} ({node.target}) takes {x.what}, which this conversion does not "
                "compute",
                argument="model",
            )
    fn = _function(node)
    try:
        return fn(*args, **kwargs)
    except (TypeError, ValueError) as e:
        raise InputError(
            f"{node.name} ({node.target}) could not be converted: {e}", argument="model"
        ) from None


def _function(node: Any) -> Callable[..., Any]:
    from . import _torch_aten

    target = node.target
    if target in _torch_aten.PYTHON_FUNCTIONS:
        return target
    fn = _torch_aten.OPS.get(str(target))
    if fn is None:
        raise InputError(
            f"the program calls {target} (node {node.name!r}), an operator this conversion "
            f"does not take yet; it takes {len(_torch_aten.OPS)} of core ATen's "
            "(docs/torch.md, 'Operators')",
            argument="model",
        )
    return fn


def _as_traced(out: Any, val: Any) -> Any:
    """`out` cast to the dtype torch's trace recorded (`val`, a fake tensor or a tuple of
    them): torch's type promotion, kept without re-deriving it."""
    import jax.numpy as jnp
    import torch

    if isinstance(val, torch.Tensor) and hasattr(out, "dtype"):
        dtype = jax_dtype(val.dtype)
        return out if out.dtype == dtype else jnp.asarray(out).astype(dtype)
    if isinstance(val, (list, tuple)) and isinstance(out, (list, tuple)):
        return type(out)(_as_traced(o, v) for o, v in zip(out, val, strict=False))
    return out

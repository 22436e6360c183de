"""Names for a JAX function's leaves and results, from their pytree paths (`args[0]['w']` is
`params_w`), and pytrees of names as the manifest stores them (SPEC.md 2.3): what both JAX
producers (`export()` and `from_exported()`) write.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._format._manifest import Role, identifier


def key_part(key: Any) -> str:
    for attr in ("key", "idx", "name"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def leaf_name(path: Any, params: list[str]) -> str:
    first, *rest = path
    index = int(key_part(first))
    head = params[index] if index < len(params) else f"arg{index}"
    return identifier("_".join([head, *map(key_part, rest)]))


def result_name(path: Any) -> str:
    """A result's name from its path's keys (SPEC.md 2.1, the one rule): `()` -> `result`,
    `(0,)` -> `result_0`, `('y',)` -> `y`, `(1, 'k')` -> `result_1_k`."""
    parts = [key_part(k) for k in path]
    if not parts:
        return "result"
    name = "_".join(parts)
    return identifier(name if not name[0].isdigit() else f"result_{name}")


def positional_result_names(n: int) -> list[str]:
    """`result_name` for a producer that records no output structure (module text, Reactant):
    one result is a function's one bare array (`result`), several its flat tuple (`result_0`...)."""
    return [result_name(()) if n == 1 else result_name((k,)) for k in range(n)]


def unique(names: list[str]) -> list[str]:
    """The names, a repeated one numbered `_2`, `_3`... past every name already taken (`a`,
    `a`, `a_2` -> `a`, `a_3`, `a_2`)."""
    taken = set(names)
    seen: set[str] = set()
    out = []
    for name in names:
        new, n = name, 1
        while new in seen or (new != name and new in taken):
            n += 1
            new = f"{name}_{n}"
        seen.add(new)
        out.append(new)
    return out


def json_tree(tree: Any, flattened: list[str] | None = None, where: str = "args") -> Any:
    """A pytree of names as the manifest stores it (SPEC.md 2.3): tuples (NamedTuples too) and
    lists as arrays, mappings with string keys (Flax's FrozenDict too) as objects. Any other
    node (an Equinox module, a dataclass, a dict with other keys) is code a bundle cannot
    store: it becomes the array of its leaves, in JAX's order, and `flattened` gets a line
    saying where and what it was (`args[0] (type MLP): the list of its 6 leaves`)."""
    if isinstance(tree, str) or tree is None:
        return tree
    if isinstance(tree, (list, tuple)):
        return [json_tree(x, flattened, f"{where}[{i}]") for i, x in enumerate(tree)]
    if isinstance(tree, Mapping) and all(isinstance(k, str) for k in tree):
        return {k: json_tree(v, flattened, f"{where}[{k!r}]") for k, v in tree.items()}
    import jax

    leaves = jax.tree_util.tree_leaves(tree)
    if flattened is not None:
        flattened.append(
            f"{where} (type {type(tree).__name__}): the list of its {len(leaves)} leaves"
        )
    return list(leaves)


def leaf_roles(
    roles: Mapping[str, Role] | None, names: Sequence[str], heads: Sequence[str]
) -> dict[str, Role]:
    """Roles by argument name, where a key that is the head of leaves (the parameter, or the
    positional argument, they are under) covers them all; an argument's own name wins. Other
    keys (globs, or names of nothing) go to `pack()`, which matches or refuses them."""
    roles = roles or {}
    known, under = set(names), set(heads)  # lookups, not scans: a pytree has thousands of leaves
    resolved: dict[str, Role] = {}
    for name, head in zip(names, heads, strict=True):
        if head in roles and head not in known:
            resolved[name] = roles[head]
    resolved.update({k: r for k, r in roles.items() if k not in under or k in known})
    return resolved

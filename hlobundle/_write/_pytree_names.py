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
    parts = [key_part(k) for k in path]
    if not parts:
        return "result"
    name = "_".join(parts)
    return identifier(name if not name[0].isdigit() else f"result_{name}")


def unique(names: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for name in names:
        n = seen.get(name, 0)
        seen[name] = n + 1
        out.append(name if n == 0 else f"{name}_{n + 1}")
    return out


class _NotJson(Exception):
    pass


def json_tree(tree: Any) -> Any:
    """Nested lists/dicts of names, or None when the pytree uses other node types."""
    try:
        return _to_json(tree)
    except _NotJson:
        return None


def _to_json(node: Any) -> Any:
    if isinstance(node, str) or node is None:
        return node
    if isinstance(node, (list, tuple)) and type(node) in (list, tuple):
        return [_to_json(x) for x in node]
    if isinstance(node, dict) and all(isinstance(k, str) for k in node):
        return {k: _to_json(v) for k, v in node.items()}
    raise _NotJson


def leaf_roles(
    roles: Mapping[str, Role] | None, names: Sequence[str], heads: Sequence[str]
) -> dict[str, Role]:
    """Roles by argument name, where a key that is the head of leaves (the parameter, or the
    positional argument, they are under) covers them all; an argument's own name wins. Other
    keys (globs, or names of nothing) go to `pack()`, which matches or refuses them."""
    roles = roles or {}
    resolved: dict[str, Role] = {}
    for name, head in zip(names, heads, strict=True):
        if head in roles and head not in names:
            resolved[name] = roles[head]
    resolved.update({k: r for k, r in roles.items() if k not in heads or k in names})
    return resolved

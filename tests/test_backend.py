"""The backend door stays narrow (issue 69, 4): a `Backend` (`_run/_backends/_backend.py`) holds
what every backend answers, and a small, named set of capabilities, each None where a backend
has none; a capability is whole or absent.

The rule, as `_breaches` checks it:

- a field without a default is one every backend answers: the core, `CORE`, and no other;
- every other field is a capability: None by default, at most `MOST_CAPABILITIES` of them (a new
  one joins the capability it belongs to, or the core if every backend answers it);
- inside a capability nothing is optional: no field is None by default;
- no field anywhere defaults to a function (`lambda: ()`): a backend that cannot do a thing says
  so with None, not with a function that does nothing.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Sequence
from typing import Any

door = importlib.import_module("hlobundle._run._backends._backend")

CORE = ("name", "unavailable", "available", "make", "script")
MOST_CAPABILITIES = 3


def _optional(f: dataclasses.Field) -> bool:
    return f.default is None and str(f.type).endswith("| None")


def _defaults_to_a_function(f: dataclasses.Field) -> bool:
    return callable(f.default) or f.default_factory is not dataclasses.MISSING


def _breaches(backend: type, namespace: dict[str, Any]) -> list[str]:
    """What of the rule above `backend` (a dataclass) breaks; its capabilities' classes are
    found by name in `namespace`."""
    fields = dataclasses.fields(backend)
    found = [f"{f.name}: a function by default" for f in fields if _defaults_to_a_function(f)]
    required = [f.name for f in fields if f.default is dataclasses.MISSING]
    if tuple(required) != CORE:
        found.append(f"the core is {required}, not {list(CORE)}")
    capabilities = [f for f in fields if f.default is not dataclasses.MISSING]
    found += [
        f"{f.name}: a capability is None by default" for f in capabilities if not _optional(f)
    ]
    if len(capabilities) > MOST_CAPABILITIES:
        found.append(f"{len(capabilities)} capabilities, more than {MOST_CAPABILITIES}")
    for f in capabilities:
        kind = namespace.get(str(f.type).removesuffix("| None").strip())
        if not dataclasses.is_dataclass(kind):
            if not str(f.type).startswith("Callable["):
                found.append(f"{f.name}: a capability is one function or a class of the door")
            continue
        for g in dataclasses.fields(kind):
            if _optional(g):
                found.append(f"{f.name}.{g.name}: optional inside a capability")
            if _defaults_to_a_function(g):
                found.append(f"{f.name}.{g.name}: a function by default")
    return found


def test_the_door_holds_its_core_and_a_few_whole_capabilities():
    assert _breaches(door.Backend, vars(door)) == []
    capabilities = [f.name for f in dataclasses.fields(door.Backend) if f.name not in CORE]
    assert capabilities == ["jax", "executables", "limit_memory"]


def _field(default: Any) -> Any:
    return dataclasses.field(default=default)


def _own() -> list[tuple[str, Any, Any]]:
    """The door's `Backend`'s fields, anew, for a mutant of it."""
    return [
        (
            f.name,
            f.type,
            dataclasses.field() if f.default is dataclasses.MISSING else _field(f.default),
        )
        for f in dataclasses.fields(door.Backend)
    ]


def _wide(*extra: tuple[str, str, Any], core: bool = False) -> type:
    """The door's `Backend` with `extra` fields after its capabilities (`core`: after its core)."""
    own = _own()
    at = len(CORE) if core else len(own)
    return dataclasses.make_dataclass("Backend", [*own[:at], *extra, *own[at:]], frozen=True)


def test_the_door_guard_fails_on_each_way_to_widen_it():
    """The door as it was (a flag, a callable that does nothing, an optional callable beside the
    capabilities), each a breach the guard names."""
    callable_ = "Callable[..., Any] | None"
    assert _breaches(_wide(("platforms", "bool", _field(False))), vars(door)) == [
        "platforms: a capability is None by default",
        "4 capabilities, more than 3",
        "platforms: a capability is one function or a class of the door",
    ]
    nothing = _wide(("targets_here", "Callable[[], tuple[str, ...]]", _field(lambda: ())))
    assert _breaches(nothing, vars(door))[0] == "targets_here: a function by default"
    more = _wide(("to_exported", callable_, _field(None)))
    assert _breaches(more, vars(door)) == ["4 capabilities, more than 3"]
    required = _wide(("jax_flag", "bool", dataclasses.field()), core=True)
    assert _breaches(required, vars(door)) == [
        f"the core is {[*CORE, 'jax_flag']}, not {list(CORE)}"
    ]


def test_the_door_guard_fails_on_a_capability_with_a_part_left_out():
    @dataclasses.dataclass(frozen=True)
    class Partial:
        implementation: Callable[..., Any]
        to_exported: Callable[..., Any] | None = None
        check_derivatives: Callable[[Any, Sequence[Any]], None] = lambda bundle, args: None

    fields = [("jax", "Partial | None", _field(None)) if f[0] == "jax" else f for f in _own()]
    backend = dataclasses.make_dataclass("Backend", fields, frozen=True)
    assert _breaches(backend, {**vars(door), "Partial": Partial}) == [
        "jax.to_exported: optional inside a capability",
        "jax.check_derivatives: a function by default",
    ]

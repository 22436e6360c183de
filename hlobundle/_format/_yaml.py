"""YAML, read safely (a safe loader that refuses aliases) and written as data: the model
card's header (SPEC.md 2.12) and ReactantServer.jl's `manifest.yaml`."""

from __future__ import annotations

from typing import Any

from ._errors import InputError


def load(text: str, what: str) -> Any:
    """The data of a YAML document; an `InputError` naming `what` when it is not valid YAML,
    or uses an alias (which can make a small file a huge graph)."""
    try:
        import yaml
    except ImportError:
        raise InputError(f"reading {what} needs PyYAML: pip install pyyaml") from None

    class NoAliases(yaml.SafeLoader):
        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                raise yaml.YAMLError("aliases (*name) are not accepted")
            return super().compose_node(parent, index)

    try:
        return yaml.load(text, Loader=NoAliases)  # noqa: S506 (a SafeLoader)
    # Constructors raise plain ValueError, TypeError, OverflowError on values they cannot make
    # (an integer of 5,000 digits, 2023-02-30, a +99:00 offset): each is bad YAML here.
    except (yaml.YAMLError, ValueError, TypeError, ArithmeticError, RecursionError) as e:
        raise InputError(f"{what} is not valid YAML: {str(e)[:300]}") from None


def dump(data: Any) -> str:
    """`data` (strings, numbers, lists, mappings) as a YAML document: strings are quoted data."""
    import yaml

    return yaml.safe_dump(data, sort_keys=True, allow_unicode=True, width=100)

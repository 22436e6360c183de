"""A script from its template: the template (`run_template.py` or `run_iree_template.py`, with
`run_shared.py` written in place of its `# shared:` line), its data slots filled with `repr()`
literals, and the bundle's function written in place of its `# named:` line, named after the
bundle's and with one documented parameter per argument, each a checked ASCII identifier.
"""

from __future__ import annotations

import builtins
import keyword
import pprint
import re
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

from .._format import _agreement
from .._format._manifest import Argument, Manifest, Result, identifier


def written(name: str, slots: dict[str, Any], manifest: Manifest, kinds: str) -> str:
    """The script of template `name` for a bundle: `slots` filled in, its function written
    (taking `kinds` of arrays)."""
    return fill(template(name), slots).replace(_NAMED, _named_function(manifest, kinds), 1)


@cache
def template(name: str = "run_template.py") -> str:
    """A script template, with the functions every script shares (`run_shared.py`, then how
    each element is compared, `_format/_agreement.py`) written in place of its `# shared:` line."""
    here = Path(__file__).parent
    agreement = Path(_agreement.__file__)  # the library's own definition, written in as it is
    shared = _written_part(here / "run_shared.py") + "\n\n" + _written_part(agreement)
    text = (here / name).read_text(encoding="utf-8")
    if text.count(_SHARED) != 1:
        raise RuntimeError(f"{name} must have one {_SHARED!r} line")
    return text.replace(_SHARED, shared)


def _written_part(path: Path) -> str:
    """What a module gives every script: its text after the `# --- shared:` marker."""
    text = path.read_text(encoding="utf-8")
    return text[text.index("\n", text.index(_SHARED_FROM)) + 1 :].strip("\n") + "\n"


_SHARED = "# shared: run_shared.py's functions (safetensors, --inputs, the command line), written here by `hlobundle emit`\n"
_SHARED_FROM = "# --- shared: from here on, written into each script"


_SLOT = re.compile(r"^(?P<name>[A-Z_0-9]+) = .*?  # slot: (?P<about>.*)$", re.M)
_NAMED = "# named: the bundle's function, one parameter per argument (written here by `hlobundle emit`)\n"


def fill(source: str, slots: dict[str, Any]) -> str:
    """`source` with each `NAME = ...  # slot: ...` line's value replaced by `repr(slots[NAME])`."""
    found = set()

    def value(match: re.Match[str]) -> str:
        name = match["name"]
        found.add(name)
        literal = pprint.pformat(slots[name], width=100, sort_dicts=False)
        return f"# {match['about']}\n{name} = {literal}"

    filled = _SLOT.sub(value, source)
    if found != set(slots):
        raise RuntimeError(f"template slots {sorted(found)} != {sorted(slots)}")
    return filled


# Names the template defines or imports; the bundle's function and parameters must not shadow them.
_TAKEN = frozenset(
    {"dataclasses", "json", "os", "sys", "jax", "jnp", "np", "BUNDLE", "call", "close", "main"}
    | {"hashlib", "rt", "ml_dtypes", "structured"}
    | {name for name in dir(builtins) if not name.startswith("_")}
)
_TEMPLATE_NAMES = re.compile(r"^(?:def |)([A-Za-z_][A-Za-z0-9_]*)(?: = |\()", re.M)


# Manifest strings reach the script only as `repr()` literals in data slots. Names that become
# Python identifiers (the function, its parameters) are plain ASCII, checked here; anything
# else is replaced, since Python folds identifiers with NFKC and a name could shadow a global.
_ASCII_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _usable(name: str) -> bool:
    return (
        _ASCII_IDENTIFIER.fullmatch(name) is not None
        and not keyword.iskeyword(name)
        and not keyword.issoftkeyword(name)
        and not name.startswith("_")
        and name not in _TAKEN
        and name not in _template_names()
    )


@cache
def _template_names() -> frozenset[str]:
    """Every name either template defines (a script is written from one of them)."""
    return frozenset(_TEMPLATE_NAMES.findall(template() + template("run_iree_template.py")))


def _identifier(name: str) -> str:
    cleaned = identifier(name, prefix="f_").strip("_") or "function"
    if not _usable(cleaned):
        cleaned = f"f_{cleaned}"
    return cleaned if _usable(cleaned) else "bundle_function"


def parameter_names(names: list[str]) -> list[str]:
    """One distinct, safe Python parameter per argument: its own name when usable, else `arg<i>`
    (never a name a later argument has). Sets, not scans: a bundle has thousands."""
    chosen: list[str] = []
    taken: set[str] = set()
    later = Counter(names)  # the names of the arguments after the current one
    for i, name in enumerate(names):
        later[name] -= 1
        candidate = name if _usable(name) and name not in taken else f"arg{i}"
        while candidate in taken or later[candidate] > 0 or not _usable(candidate):
            candidate = f"{candidate}_"
        chosen.append(candidate)
        taken.add(candidate)
    return chosen


def _named_function(m: Manifest, kinds: str) -> str:
    fn = _identifier(m.function)
    names = parameter_names([a.name for a in m.arguments])
    if fn in names:
        fn = f"{fn}_function"
    params, call_args = _wrapped_list(names, indent=""), _wrapped_list(names, indent="    ")
    args_doc = (
        "".join(f"        {n}: {_doc_line(a)}\n" for n, a in zip(names, m.arguments, strict=True))
        or "        none\n"
    )
    results_doc = (
        "".join(f"        result {k}: {_doc_line(r)}\n" for k, r in enumerate(m.results))
        or "        none\n"
    )
    returns = _RETURNS_FLAT if m.output_tree is None else _RETURNS_NESTED
    return f'''def {fn}({params}):
    """Call the bundle's function (ABOUT["function"]). Every argument is a {kinds} array.

    Args:
{args_doc}
    Returns:
        {returns}
{results_doc}    """
    return structured(call({call_args}))
'''


# What the bundle's function returns, as `bundle.function()` returns it (`run_shared.structured`).
_RETURNS_FLAT = "A tuple with one array per result (RESULTS has their names):"
_RETURNS_NESTED = (
    "The results nested as OUTPUT_TREE says (as the producer's function returned them):"
)


def _wrapped_list(names: list[str], indent: str) -> str:
    """`a, b, c` on one line when short, else one name per line (as a formatter would)."""
    one_line = ", ".join(names)
    if len(one_line) <= 60:
        return one_line
    return "\n" + "".join(f"{indent}    {n},\n" for n in names) + indent


def _doc_line(v: Argument | Result) -> str:
    text = f"{v.dtype}{list(v.shape)}"
    if isinstance(v, Argument):
        text += f", {v.role} (PATHS has where it came from)"
    if v.layout == "column_major":
        text += ". Column-major: the axis-reversed view of the producer's (Julia's) array"
    return text

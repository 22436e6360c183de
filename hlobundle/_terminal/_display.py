"""How the package shows text it did not write (names, paths, messages from a bundle) on a
terminal, in tables, and sizes in binary units."""

from __future__ import annotations

import difflib
import unicodedata
from collections.abc import Collection, Sequence

# Control, format (bidi overrides), and line/paragraph separator characters: printed as escapes,
# so that a manifest cannot move the cursor, recolour the terminal or hide text.
_HIDDEN = frozenset({"Cc", "Cf", "Zl", "Zp"})


def shown(text: object) -> str:
    """`text` as a terminal may print it: every control or format character escaped."""
    return "".join(
        c.encode("unicode_escape").decode("ascii") if unicodedata.category(c) in _HIDDEN else c
        for c in str(text)
    )


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[shown(x) for x in row] for row in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *cells, strict=True)]
    lines = [
        "  ".join(str(x).ljust(w) for x, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *cells]
    ]
    return "\n".join("  " + line for line in lines)


def human_bytes(n: int) -> str:
    """`1.5 GiB`, `232 KiB`, `12 bytes`: binary units, three significant digits."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} bytes"


def some_names(names: Sequence[str], first: Collection[str] = (), limit: int = 8) -> str:
    """Up to `limit` of `names`, those in `first` ahead (a model's few inputs, which its many
    parameters would otherwise hide), and how many are left out: a cut list says it is cut."""
    ordered = [n for n in names if n in first] + [n for n in names if n not in first]
    left_out = len(ordered) - limit
    return f"{ordered[:limit]}" + (f" and {left_out} more" if left_out > 0 else "")


def did_you_mean(names: Sequence[str], known: Sequence[str]) -> str:
    """`; did you mean 'x'?` for the first of the mistyped `names` close to one of `known`."""
    for name in names:
        close = difflib.get_close_matches(name, known, n=1)
        if close:
            return f"; did you mean {close[0]!r}?"
    return ""

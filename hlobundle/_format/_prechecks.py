"""Cheap checks on untrusted bytes before a parser that is not hardened sees them.

MLIR's text parser recurses once per open bracket and segfaults on deep nesting; Python's
`json` raises RecursionError on deep nesting and ValueError on huge integers. These checks
bound what reaches them (limits in `_limits`, SPEC.md section 8) and raise coded errors.
"""

from __future__ import annotations

import re
from itertools import accumulate

from . import _limits
from ._errors import LimitError

# Strings (MLIR and JSON share the syntax; neither allows a raw newline inside) and MLIR comments.
_STRINGS_AND_COMMENTS = re.compile(rb'"(?:[^"\\\n]|\\.)*"|//[^\n]*')
_RANK_OVER_LIMIT = re.compile(rb"tensor<(?:[0-9?]+x){%d}" % (_limits.MAX_RANK + 1))


# Above this size, numpy counts faster than Python; below, Python saves importing numpy (which
# `inspect` does not otherwise need).
NUMPY_ABOVE = 1 << 20


def max_depth(data: bytes, openers: bytes, closers: bytes) -> int:
    """The most brackets open at once in `data`, strings and comments left out."""
    if len(data) <= NUMPY_ABOVE:
        brackets = data.translate(None, bytes(set(range(256)) - set(openers + closers)))
        return max(accumulate((1 if b in openers else -1 for b in brackets), initial=0))
    import numpy as np

    delta = np.zeros(256, np.int32)
    delta[list(openers)] = 1
    delta[list(closers)] = -1
    steps = delta[np.frombuffer(data, np.uint8)]
    return int(np.cumsum(steps, dtype=np.int32).max(initial=0))


def check_json(raw: bytes, *, path: str) -> None:
    depth = max_depth(_STRINGS_AND_COMMENTS.sub(b"", raw), b"[{", b"]}")
    if depth > _limits.MAX_JSON_DEPTH:
        raise LimitError(
            f"JSON nested {depth} deep; the limit is {_limits.MAX_JSON_DEPTH} "
            "(SPEC.md, 'Reader safety and security')",
            path=path,
        )


def parse_json_int(text: str) -> int:
    """`json.loads(parse_int=...)`: refuse integers too long for any size or dimension."""
    if len(text.lstrip("-")) > _limits.MAX_INT_DIGITS:
        raise LimitError(
            f"an integer of {len(text)} digits; the limit is {_limits.MAX_INT_DIGITS} "
            "(SPEC.md, 'Reader safety and security')"
        )
    return int(text)


def check_mlir_text(data: bytes, *, path: str) -> None:
    """Size, bracket nesting and tensor rank of a text module, before MLIR parses it."""
    check_module_size(len(data), path=path)
    code = _STRINGS_AND_COMMENTS.sub(b"", data).replace(b"->", b"")
    for what, openers, closers in (("brackets", b"([{", b")]}"), ("angle brackets", b"<", b">")):
        depth = max_depth(code, openers, closers)
        if depth > _limits.MAX_MLIR_NESTING:
            raise LimitError(
                f"{what} nested {depth} deep; the limit is {_limits.MAX_MLIR_NESTING} "
                "(SPEC.md, 'Reader safety and security')",
                path=path,
            )
    if _RANK_OVER_LIMIT.search(code):
        raise LimitError(
            f"a tensor type has more than {_limits.MAX_RANK} dimensions "
            "(SPEC.md, 'Reader safety and security')",
            path=path,
        )


def check_module_size(size: int, *, path: str) -> None:
    if size > _limits.MAX_MODULE_BYTES:
        raise LimitError(
            f"{path} is {size} bytes; a module file may have at most {_limits.MAX_MODULE_BYTES} "
            "(SPEC.md, 'Reader safety and security')",
            path=path,
        )


def short(message: str, limit: int = 600) -> str:
    """A message cut to `limit` characters (parsers' errors can quote whole inputs)."""
    return message if len(message) <= limit else message[:limit] + " ..."

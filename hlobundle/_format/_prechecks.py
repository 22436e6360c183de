"""Cheap checks on untrusted bytes before a parser that is not hardened sees them.

MLIR's text parser recurses once per open bracket and segfaults on deep nesting; Python's
`json` raises RecursionError on deep nesting and ValueError on huge integers. These checks
bound what reaches them (limits in `_limits`, SPEC.md section 8) and raise coded errors.
"""

from __future__ import annotations

import re
from itertools import accumulate

from . import _limits
from ._errors import LimitError, ModuleError

# Strings (MLIR and JSON share the syntax; neither allows a raw newline inside) and MLIR comments.
# The string is written as runs between escapes, which Python's engine matches several times
# faster than one alternative per character; it matches the same text.
_STRINGS_AND_COMMENTS = re.compile(rb'"[^"\\\n]*(?:\\.[^"\\\n]*)*"|//[^\n]*')
# An MLIR string escape that yields a byte >= 0x80; without one, UTF-8 text has UTF-8 strings.
_HIGH_ESCAPE = re.compile(rb"\\[89a-fA-F][0-9a-fA-F]")
_ESCAPE = re.compile(rb"\\([0-9a-fA-F]{2}|.)", re.DOTALL)
_UNESCAPED = {b'"': b'"', b"\\": b"\\", b"n": b"\n", b"t": b"\t"}
_RANK_OVER_LIMIT = re.compile(rb"tensor<(?:[0-9?]+x){%d}" % (_limits.MAX_RANK + 1))


# Above this many brackets, numpy counts faster than Python; below, Python saves importing numpy
# (which `inspect` does not otherwise need).
NUMPY_ABOVE = 1 << 16


def max_depth(data: bytes, openers: bytes, closers: bytes) -> int:
    """The most brackets open at once in `data`, strings and comments left out."""
    brackets = data.translate(None, bytes(set(range(256)) - set(openers + closers)))
    return _levels(brackets, openers, closers)[0]


# Every byte but a quote or a bracket, deleted by `bytes.translate` before JSON's depth is counted.
_NOT_QUOTE_OR_BRACKET = bytes(set(range(256)) - set(b'"[]{}'))
# Quotes and brackets are split into strings and the rest this many at a time: the pieces of one
# step (Python objects of some 35 bytes each) are what the count holds in memory at once.
_JSON_STEP = 1 << 18


def json_depth(raw: bytes) -> int:
    """The most brackets open at once in UTF-8 JSON text, outside its strings.

    Of valid JSON, the same count as leaving out `_STRINGS_AND_COMMENTS` matches (a test holds
    the two together), in a few passes of C: escaped backslashes go, then escaped quotes, so
    that every quote left opens or closes a string; then all but quotes and brackets go, and
    the pieces between quotes alternate outside and inside a string. Of text that is not JSON
    the count may differ; `json` refuses such text either way. The text must be UTF-8 (where a
    quote's or a backslash's byte is that character alone): a caller decodes it as UTF-8."""
    if b"\\" in raw:
        raw = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    marks = raw.translate(None, _NOT_QUOTE_OR_BRACKET)
    depth = deepest = 0
    inside = False  # whether the step starts inside a string
    for begin in range(0, len(marks), _JSON_STEP):
        pieces = marks[begin : begin + _JSON_STEP].split(b'"')
        outside = b"".join(pieces[1::2] if inside else pieces[::2])
        inside ^= len(pieces) % 2 == 0  # an odd number of quotes in the step
        if outside:
            most, depth = _levels(outside, b"[{", b"]}", depth)
            deepest = max(deepest, most)
    return deepest


def _levels(brackets: bytes, openers: bytes, closers: bytes, start: int = 0) -> tuple[int, int]:
    """The deepest level, and the last, of `brackets` (openers and closers alone) opened and
    closed from level `start`."""
    if len(brackets) <= NUMPY_ABOVE or not brackets:  # numpy has no last level of none
        levels = list(accumulate((1 if b in openers else -1 for b in brackets), initial=start))
        return max(levels), levels[-1]
    import numpy as np

    delta = np.zeros(256, np.int64)
    delta[list(openers)] = 1
    delta[list(closers)] = -1
    steps = np.cumsum(delta[np.frombuffer(brackets, np.uint8)]) + start
    return max(start, int(steps.max())), int(steps[-1])


def check_json(raw: bytes, *, path: str) -> None:
    depth = json_depth(raw)
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
    """Size, UTF-8, bracket nesting and tensor rank of a text module, before MLIR parses it."""
    check_module_size(len(data), path=path)
    check_utf8_strings(data, path=path)
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


def check_utf8_strings(data: bytes, *, path: str) -> None:
    """The text is UTF-8, and so is every string literal in it, escapes decoded, except an
    attribute's value (`backend_config = "\\00\\90"`: opaque bytes exist in real modules).

    jaxlib's bindings parse a name whose escapes (`@"\\FF"`) decode to invalid UTF-8, then
    throw, or terminate the process, when it reaches Python (a symbol name, an attribute name,
    a location): no such text may reach the parser. Values are read through
    `_parse/_mlir.string_value`, which decodes them with a coded error.
    """
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ModuleError(
            f"the text is not UTF-8 (byte {e.start}) (SPEC.md, 'Reader safety and security')",
            path=path,
        ) from None
    if not _HIGH_ESCAPE.search(data):
        return
    for match in _STRINGS_AND_COMMENTS.finditer(data):
        literal = match.group()
        if not literal.startswith(b'"') or not _HIGH_ESCAPE.search(literal):
            continue
        if data[: match.start()].rstrip().endswith(b"="):
            continue  # an attribute's value (binary backend_config exists): read as bytes
        try:
            _ESCAPE.sub(_unescape, literal[1:-1]).decode("utf-8")
        except UnicodeDecodeError:
            line = data.count(b"\n", 0, match.start()) + 1
            raise ModuleError(
                f"line {line}: a string's escapes decode to bytes that are not UTF-8: "
                f"{short(literal.decode('ascii', 'backslashreplace'), 80)} "
                "(SPEC.md, 'Reader safety and security')",
                path=path,
            ) from None


def _unescape(m: re.Match[bytes]) -> bytes:
    code = m.group(1)
    return bytes.fromhex(code.decode()) if len(code) == 2 else _UNESCAPED.get(code, code)


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

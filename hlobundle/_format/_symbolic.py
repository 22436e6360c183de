"""Symbolic dimensions (SPEC.md 2.8; format 2.0): a dimension that is an expression over named
symbols, as `jax.export` writes them (`b`, `2*b`, `b + 1`), and constraints on them (`b >= 1`).

Grammar (bounded in length and depth, so that a manifest cannot make a parser recurse or
allocate without bound):

    expression := term (("+" | "-") term)*
    term       := factor ("*" factor)*
    factor     := INTEGER | SYMBOL | "(" expression ")"
    constraint := expression (">=" | "<=" | "==") expression

An expression is held as a polynomial: `{monomial: coefficient}`, a monomial being the sorted
tuple of its symbols (`()` for the constant). Reading actual shapes solves each symbol from a
dimension that is linear in it, then checks every dimension and constraint (`bind`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

MAX_EXPRESSION_CHARS = 128
MAX_EXPRESSION_DEPTH = 8  # parentheses open at once
MAX_SYMBOLS = 32  # distinct symbols in one function
MAX_CONSTRAINTS = 32
MAX_DEGREE = 4  # symbols multiplied in one monomial

_TOKEN = re.compile(r"\s*(?:(\d{1,9})|([a-z_][a-z0-9_]{0,31})|(>=|<=|==|[-+*()]))")
Monomial = tuple[str, ...]
Poly = dict[Monomial, int]


class SymbolicError(ValueError):
    """A malformed expression or constraint (the caller turns it into a coded error)."""


@dataclass(frozen=True)
class Dimension:
    """One dimension: its text as written and its polynomial."""

    text: str
    poly: tuple[tuple[Monomial, int], ...]

    @property
    def symbols(self) -> frozenset[str]:
        return frozenset(s for m, _ in self.poly for s in m)

    def value(self, env: Mapping[str, int]) -> int:
        return _evaluate(dict(self.poly), env)


def parse(text: str) -> Dimension:
    """A dimension expression (`2*b + 1`); SymbolicError when it is not one."""
    tokens = _tokens(text)
    poly, rest = _expression(tokens, 0, 0)
    if rest != len(tokens):
        raise SymbolicError(f"unexpected {tokens[rest]!r} in dimension {text!r}")
    return Dimension(text, tuple(sorted(poly.items())))


def parse_constraint(text: str) -> tuple[Dimension, str, Dimension]:
    """`left op right` of a constraint such as `b >= 1`."""
    tokens = _tokens(text)
    for op in (">=", "<=", "=="):
        if tokens.count(op) == 1:
            at = tokens.index(op)
            left, right = tokens[:at], tokens[at + 1 :]
            return _whole(left, text), op, _whole(right, text)
    raise SymbolicError(f"constraint {text!r} must compare two expressions with >=, <= or ==")


def _whole(tokens: list[str], text: str) -> Dimension:
    poly, rest = _expression(tokens, 0, 0)
    if rest != len(tokens) or not tokens:
        raise SymbolicError(f"malformed constraint {text!r}")
    return Dimension(" ".join(tokens), tuple(sorted(poly.items())))


def _tokens(text: str) -> list[str]:
    if not isinstance(text, str) or len(text) > MAX_EXPRESSION_CHARS:
        raise SymbolicError(f"an expression has at most {MAX_EXPRESSION_CHARS} characters")
    tokens, at = [], 0
    while at < len(text.rstrip()):
        m = _TOKEN.match(text, at)
        if m is None:
            raise SymbolicError(f"unexpected character {text[at : at + 1]!r} in {text!r}")
        tokens.append(m.group(m.lastindex or 0))
        at = m.end()
    if not tokens:
        raise SymbolicError("an empty expression")
    return tokens


def _expression(tokens: list[str], at: int, depth: int) -> tuple[Poly, int]:
    poly, at = _term(tokens, at, depth)
    while at < len(tokens) and tokens[at] in "+-":
        sign = 1 if tokens[at] == "+" else -1
        right, at = _term(tokens, at + 1, depth)
        poly = _add(poly, {m: sign * c for m, c in right.items()})
    return poly, at


def _term(tokens: list[str], at: int, depth: int) -> tuple[Poly, int]:
    poly, at = _factor(tokens, at, depth)
    while at < len(tokens) and tokens[at] == "*":
        right, at = _factor(tokens, at + 1, depth)
        poly = _multiply(poly, right)
    return poly, at


def _factor(tokens: list[str], at: int, depth: int) -> tuple[Poly, int]:
    if at >= len(tokens):
        raise SymbolicError("an expression ends early")
    token = tokens[at]
    if token == "(":
        if depth >= MAX_EXPRESSION_DEPTH:
            raise SymbolicError(f"parentheses nested over {MAX_EXPRESSION_DEPTH} deep")
        poly, at = _expression(tokens, at + 1, depth + 1)
        if at >= len(tokens) or tokens[at] != ")":
            raise SymbolicError("an unclosed parenthesis")
        return poly, at + 1
    if token.isdigit():
        return {(): int(token)}, at + 1
    if token[0].isalpha() or token[0] == "_":
        return {(token,): 1}, at + 1
    raise SymbolicError(f"unexpected {token!r}")


def _add(a: Poly, b: Poly) -> Poly:
    out = dict(a)
    for m, c in b.items():
        out[m] = out.get(m, 0) + c
    return {m: c for m, c in out.items() if c}


def _multiply(a: Poly, b: Poly) -> Poly:
    out: Poly = {}
    for ma, ca in a.items():
        for mb, cb in b.items():
            m = tuple(sorted(ma + mb))
            if len(m) > MAX_DEGREE:
                raise SymbolicError(f"a product of more than {MAX_DEGREE} symbols")
            out[m] = out.get(m, 0) + ca * cb
    return {m: c for m, c in out.items() if c}


def _evaluate(poly: Poly, env: Mapping[str, int]) -> int:
    total = 0
    for m, c in poly.items():
        term = c
        for s in m:
            term *= env[s]
        total += term
    return total


class ShapeError(ValueError):
    """Actual shapes that do not fit the symbolic ones: `where` names the value and dimension,
    `symbol` the symbol involved (when one is)."""

    def __init__(self, message: str, where: str, symbol: str | None = None) -> None:
        super().__init__(message)
        self.where, self.symbol = where, symbol


def bind(
    declared: Sequence[tuple[str, Sequence[int | Dimension]]],
    actual: Sequence[Sequence[int]],
    constraints: Iterable[tuple[Dimension, str, Dimension]] = (),
) -> dict[str, int]:
    """The symbols' values that make `actual` shapes fit the `declared` ones (name, dims).

    Each symbol is solved from a dimension linear in it once the others are known; every
    dimension is then checked, each symbol must be at least 1, and every constraint over the
    symbols bound must hold.
    """
    env: dict[str, int] = {}
    pending: list[tuple[str, Dimension, int]] = []
    for (name, dims), shape in zip(declared, actual, strict=True):
        if len(dims) != len(shape):
            raise ShapeError(f"{name} has rank {len(shape)}, expected {len(dims)}", name)
        for k, (d, n) in enumerate(zip(dims, shape, strict=True)):
            where = f"{name}.shape[{k}]"
            if isinstance(d, int):
                if d != n:
                    raise ShapeError(f"{where} is {n}, expected {d}", where)
            else:
                pending.append((where, d, n))
    _solve(pending, env)
    for where, d, n in pending:
        unknown = sorted(d.symbols - set(env))
        if unknown:
            raise ShapeError(
                f"{where} = {d.text}: symbol {unknown[0]!r} cannot be determined from the "
                "arguments' shapes",
                where,
                unknown[0],
            )
        if d.value(env) != n:
            shown = ", ".join(f"{s}={env[s]}" for s in sorted(d.symbols))
            raise ShapeError(
                f"{where} is {n}, but {d.text} = {d.value(env)} with {shown}",
                where,
                min(d.symbols),
            )
    for symbol, value in sorted(env.items()):
        if value < 1:
            raise ShapeError(
                f"symbol {symbol!r} would be {value}; it must be at least 1", symbol, symbol
            )
    for left, op, right in constraints:
        if not (left.symbols | right.symbols) <= set(env):
            continue  # over a symbol no given value binds (stored values bind only some)
        a, b = left.value(env), right.value(env)
        if not {">=": a >= b, "<=": a <= b, "==": a == b}[op]:
            culprit = min(left.symbols | right.symbols, default=None)
            raise ShapeError(
                f"constraint {left.text} {op} {right.text} does not hold: {a} {op} {b} is false",
                culprit or "constraints",
                culprit,
            )
    return env


def _solve(pending: list[tuple[str, Dimension, int]], env: dict[str, int]) -> None:
    progress = True
    while progress:
        progress = False
        for where, d, n in pending:
            unknown = d.symbols - set(env)
            if len(unknown) != 1:
                continue
            (s,) = unknown
            coefficient, rest = 0, 0
            linear = True
            for m, c in d.poly:
                known = [x for x in m if x != s]
                term = c
                for x in known:
                    term *= env[x]
                if m.count(s) == 0:
                    rest += term
                elif m.count(s) == 1:
                    coefficient += term
                else:
                    linear = False
            if not linear or coefficient == 0:
                continue
            if (n - rest) % coefficient:
                raise ShapeError(
                    f"{where} is {n}, which {d.text} takes for no whole value of {s!r}", where, s
                )
            env[s] = (n - rest) // coefficient
            progress = True


def solved(
    declared: Sequence[tuple[str, Sequence[int | str]]], actual: Sequence[Sequence[int]]
) -> dict[str, int]:
    """The symbols that `actual` shapes alone determine, solved as `bind` solves them, with
    nothing else checked: what a function's stored arguments bind, whatever a call gives."""
    pending = [
        (f"{name}.shape[{k}]", parse(d), n)
        for (name, dims), shape in zip(declared, actual, strict=True)
        for k, (d, n) in enumerate(zip(dims, shape, strict=False))
        if not isinstance(d, int)
    ]
    env: dict[str, int] = {}
    _solve(pending, env)
    return env


def bind_shapes(
    declared: Sequence[tuple[str, Sequence[int | str]]],
    actual: Sequence[Sequence[int]],
    constraints: Iterable[str] = (),
) -> dict[str, int]:
    """`bind` for shapes as a manifest writes them (an int, or an expression's text) and
    constraints as text."""
    parsed = [
        (name, [d if isinstance(d, int) else parse(d) for d in dims]) for name, dims in declared
    ]
    return bind(parsed, actual, [parse_constraint(c) for c in constraints])


def symbols_of(dims: Iterable[int | Dimension]) -> set[str]:
    return {s for d in dims if not isinstance(d, int) for s in d.symbols}


def evaluate(dims: Sequence[int | str], env: Mapping[str, int]) -> tuple[int, ...]:
    """A manifest shape (integers and expressions' texts) at the symbols' values `env`."""
    return tuple(d if isinstance(d, int) else parse(d).value(env) for d in dims)

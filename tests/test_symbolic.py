"""Symbolic dimensions (SPEC.md 2.8): the bounded grammar, and checking actual shapes."""

from __future__ import annotations

import re

import pytest

from hlobundle._format import _symbolic as sym
from hlobundle._format._symbolic import ShapeError, SymbolicError


@pytest.mark.parametrize(
    ("text", "env", "value"),
    [
        ("b", {"b": 3}, 3),
        ("2*b", {"b": 3}, 6),
        ("b + 1", {"b": 3}, 4),
        ("2*b+1 - b", {"b": 5}, 6),
        ("(b + 1) * 2", {"b": 2}, 6),
        ("b*s", {"b": 2, "s": 7}, 14),
        ("8", {}, 8),
    ],
)
def test_expressions_evaluate_with_precedence(text, env, value):
    assert sym.parse(text).value(env) == value


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("b +", "ends early"),
        ("(b", "unclosed"),
        ("b ** 2", "unexpected"),
        ("B", "unexpected character"),
        ("b; import os", "unexpected character"),
        ("x" * 200, "at most 128"),
        ("(" * 9 + "b" + ")" * 9, "nested over 8"),
        ("*".join("abcde"), "more than 4 symbols"),
        ("1234567890", "unexpected"),
        ("floordiv(b, 2)", "unexpected"),
    ],
)
def test_malformed_and_hostile_expressions_are_refused(text, message):
    with pytest.raises(SymbolicError, match=message):
        sym.parse(text)


def test_a_product_bomb_stays_small():
    # (b+c)*(b+c)*... would grow as 2**n terms; the degree bound stops it at once.
    with pytest.raises(SymbolicError, match="more than 4 symbols"):
        sym.parse("*".join(["(b+c)"] * 12))


def test_bind_solves_each_symbol_from_a_linear_dimension():
    b, two_b, s = sym.parse("b"), sym.parse("2*b"), sym.parse("s + 1")
    env = sym.bind([("x", [b, 8]), ("y", [two_b, s])], [(3, 8), (6, 5)])
    assert env == {"b": 3, "s": 4}


def test_bind_solves_from_a_non_bare_dimension():
    assert sym.bind([("x", [sym.parse("2*b + 1")])], [(7,)]) == {"b": 3}


@pytest.mark.parametrize(
    ("shapes", "where", "symbol", "message"),
    [
        ([(3, 8), (7,)], "y.shape[0]", "b", r"is 7, but 2\*b = 6 with b=3"),
        ([(3, 9), (6,)], "x.shape[1]", None, "is 9, expected 8"),
        ([(0, 8), (0,)], "b", "b", "at least 1"),
        ([(3, 8, 1), (6,)], "x", None, "rank 3, expected 2"),
    ],
)
def test_inconsistent_shapes_name_the_value_and_the_symbol(shapes, where, symbol, message):
    declared = [("x", [sym.parse("b"), 8]), ("y", [sym.parse("2*b")])]
    with pytest.raises(ShapeError, match=message) as e:
        sym.bind(declared, shapes)
    assert e.value.where == where and e.value.symbol == symbol


def test_an_odd_size_for_2b_is_refused():
    with pytest.raises(ShapeError, match="no whole value of 'b'") as e:
        sym.bind([("y", [sym.parse("2*b")])], [(7,)])
    assert e.value.symbol == "b"


def test_a_symbol_no_dimension_determines_is_refused():
    with pytest.raises(ShapeError, match="'b' cannot be determined"):
        sym.bind([("x", [sym.parse("b*s")])], [(6,)])


def test_constraints_are_checked():
    c = sym.parse_constraint("b >= 4")
    assert sym.bind([("x", [sym.parse("b")])], [(4,)], [c]) == {"b": 4}
    with pytest.raises(ShapeError, match="b >= 4 does not hold: 3 >= 4") as e:
        sym.bind([("x", [sym.parse("b")])], [(3,)], [c])
    assert e.value.symbol == "b"


@pytest.mark.parametrize("text", ["b", "b >= ", ">= 1", "b >= 1 >= 2", "b = 1"])
def test_malformed_constraints_are_refused(text):
    with pytest.raises(SymbolicError):
        sym.parse_constraint(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("b c >= 1", "malformed constraint 'b c >= 1'"),
        ("b >= 1 )", "malformed constraint"),
        ("b >= 1 >= 2", "must compare two expressions"),
        ("b = 1", "unexpected character"),
        ("b >= ", "ends early"),
    ],
)
def test_a_constraint_side_that_is_not_one_whole_expression_is_refused(text, message):
    with pytest.raises(SymbolicError, match=re.escape(message)):
        sym.parse_constraint(text)


def test_a_dimension_with_trailing_tokens_is_refused():
    with pytest.raises(SymbolicError, match=re.escape("unexpected 'c' in dimension 'b c'")):
        sym.parse("b c")

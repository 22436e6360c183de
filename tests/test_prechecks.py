"""The checks of `_format/_prechecks` on untrusted bytes before a parser that is not hardened sees
them (SPEC.md, "Reader safety and security"): JSON nesting and integer length, and a text
module's size, UTF-8, bracket nesting and tensor rank."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hlobundle._format import _limits, _prechecks
from hlobundle.errors import LimitError, ModuleError

MODULE = b"""module @m {
  func.func @main(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
    return %x : tensor<2x3xf32>
  }
}
"""


def test_json_at_the_nesting_limit_passes():
    depth = _limits.MAX_JSON_DEPTH
    _prechecks.check_json(b"[" * depth + b"]" * depth, path="manifest.json")


def test_json_nested_over_the_limit_is_refused():
    depth = _limits.MAX_JSON_DEPTH + 1
    with pytest.raises(LimitError, match=f"JSON nested {depth} deep; the limit is 64") as e:
        _prechecks.check_json(b'{"a":' * depth + b"1" + b"}" * depth, path="manifest.json")
    assert e.value.code == "LIMIT_EXCEEDED" and e.value.path == "manifest.json"


def test_brackets_inside_json_strings_do_not_count():
    _prechecks.check_json(b'["' + b"[" * 1000 + b'"]', path="manifest.json")


def test_escaped_quotes_and_backslashes_do_not_end_a_json_string():
    # `"\\"` ends its string after the escaped backslash; `"\""` goes on past the escaped quote.
    assert _prechecks.json_depth(b'["\\\\", ["x"]]') == 2
    assert _prechecks.json_depth(b'["\\"[[[[", ["x"]]') == 2
    with pytest.raises(LimitError):
        _prechecks.check_json(b'["\\\\", ' + b"[" * 65 + b"]" * 65 + b"]", path="m.json")


@pytest.mark.slow
@given(
    st.recursive(
        st.none() | st.integers() | st.text(alphabet='[]{}"\\\n ab\u00e9'),
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.dictionaries(st.text(alphabet='[]{}"\\ a'), inner, max_size=3)
        ),
        max_leaves=30,
    )
)
@settings(max_examples=300, deadline=None)
def test_json_depth_is_the_depth_outside_strings(value):
    """The fast count agrees with the strings left out by the module checks' pattern, and with
    the parsed value's depth, on any JSON (strings full of brackets, quotes and backslashes)."""
    raw = json.dumps(value, ensure_ascii=False).encode()
    reference = _prechecks.max_depth(_prechecks._STRINGS_AND_COMMENTS.sub(b"", raw), b"[{", b"]}")
    assert _prechecks.json_depth(raw) == reference == _depth(value)
    step = _prechecks._JSON_STEP
    try:  # steps of a few quotes and brackets: a string or a nesting across steps' ends
        for _prechecks._JSON_STEP in (1, 2, 3, 7):
            assert _prechecks.json_depth(raw) == reference
    finally:
        _prechecks._JSON_STEP = step


@pytest.mark.slow
@pytest.mark.parametrize("whole", [False, pytest.param(True, marks=pytest.mark.xfail(strict=True))])
def test_json_depth_holds_a_few_times_its_input_at_most(monkeypatch, whole):
    """The count holds one step's pieces at a time: a text of short strings (a piece for every
    two bytes) peaks at 17 to 29 times its size when split whole (the xfail case). The text and
    the step are an eighth of the 8 MiB and 256 Ki marks this was found with: the same 32 steps."""
    import tracemalloc

    monkeypatch.setattr(_prechecks, "_JSON_STEP", 1 << 40 if whole else 1 << 15)
    raw = b"[" + b",".join([b'"[["'] * (2 << 17)) + b"]"
    tracemalloc.start()
    try:
        assert _prechecks.json_depth(raw) == 1
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 * len(raw), peak / len(raw)


def _depth(value):
    if isinstance(value, dict | list):
        inner = value.values() if isinstance(value, dict) else value
        return 1 + max(map(_depth, inner), default=0)
    return 0


def test_an_integer_of_the_longest_length_is_read():
    assert _prechecks.parse_json_int("9" * 20) == int("9" * 20)
    assert _prechecks.parse_json_int("-" + "9" * 20) == -int("9" * 20)


def test_an_integer_too_long_for_any_size_is_refused():
    with pytest.raises(LimitError, match="an integer of 21 digits; the limit is 20"):
        _prechecks.parse_json_int("1" * 21)


def test_a_plain_module_passes():
    _prechecks.check_mlir_text(MODULE, path="module.mlir")


@pytest.mark.parametrize(
    ("what", "opener", "closer"),
    [("brackets", b"(", b")"), ("brackets", b"[", b"]"), ("angle brackets", b"<", b">")],
    ids=["parentheses", "square_brackets", "angle_brackets"],
)
def test_a_module_nested_over_the_limit_is_refused(what, opener, closer):
    depth = _limits.MAX_MLIR_NESTING + 1
    data = MODULE + b"%y = " + opener * depth + closer * depth + b"\n"
    with pytest.raises(LimitError, match=f"^\\[LIMIT_EXCEEDED\\] {what} nested {depth} deep") as e:
        _prechecks.check_mlir_text(data, path="module.mlir")
    assert e.value.path == "module.mlir"


def test_a_module_at_the_nesting_limit_passes():
    depth = _limits.MAX_MLIR_NESTING
    _prechecks.check_mlir_text(MODULE + b"(" * depth + b")" * depth, path="module.mlir")


def test_arrows_and_brackets_in_strings_and_comments_do_not_count():
    deep = b"<" * 300
    _prechecks.check_mlir_text(
        MODULE + b'"' + deep + b'" // ' + deep + b"\n" + b"->" * 300, path="module.mlir"
    )


def test_a_tensor_type_over_the_rank_limit_is_refused():
    rank = _limits.MAX_RANK + 1
    data = MODULE + b"%y : tensor<" + b"1x" * rank + b"f32>\n"
    with pytest.raises(LimitError, match="a tensor type has more than 64 dimensions"):
        _prechecks.check_mlir_text(data, path="module.mlir")


def test_a_tensor_type_at_the_rank_limit_passes():
    data = MODULE + b"%y : tensor<" + b"?x" * _limits.MAX_RANK + b"f32>\n"
    _prechecks.check_mlir_text(data, path="module.mlir")


def test_a_module_that_is_not_utf8_is_refused():
    with pytest.raises(ModuleError, match=r"the text is not UTF-8 \(byte 10\)") as e:
        _prechecks.check_mlir_text(b"module @m \xff{}", path="module.mlir")
    assert e.value.code == "MLIR_INVALID" and e.value.path == "module.mlir"


def test_a_name_whose_escapes_decode_to_invalid_utf8_is_refused():
    data = MODULE + b'func.func private @"\\FF\\FE"() -> ()\n'
    with pytest.raises(
        ModuleError,
        match=re.escape("line 6: a string's escapes decode to bytes that are not UTF-8"),
    ):
        _prechecks.check_mlir_text(data, path="module.mlir")


def test_escapes_of_valid_utf8_and_opaque_attribute_values_pass():
    # \C3\A9 is "é" in UTF-8; an attribute's value may hold any bytes (backend_config).
    data = MODULE + b'func.func private @"\\C3\\A9"() -> ()\n' + b'x = {c = "\\00\\90"}\n'
    _prechecks.check_mlir_text(data, path="module.mlir")


def test_a_module_over_the_size_limit_is_refused():
    size = _limits.MAX_MODULE_BYTES + 1
    with pytest.raises(
        LimitError, match=f"module.mlir is {size} bytes; a module file may have"
    ) as e:
        _prechecks.check_module_size(size, path="module.mlir")
    assert e.value.path == "module.mlir"
    _prechecks.check_module_size(_limits.MAX_MODULE_BYTES, path="module.mlir")


def test_the_text_check_refuses_a_module_over_the_size_limit(monkeypatch):
    """`check_mlir_text` guards every caller of MLIR's parser, not only the bundle's reader,
    which checks a module file's size before it reads it."""
    monkeypatch.setattr(_limits, "MAX_MODULE_BYTES", 64)
    data = MODULE + b" " * 64
    with pytest.raises(LimitError, match=f"m.mlir is {len(data)} bytes; a module file may have"):
        _prechecks.check_mlir_text(data, path="m.mlir")


def test_short_cuts_long_messages():
    assert _prechecks.short("abc", 3) == "abc"
    assert _prechecks.short("abcd", 3) == "abc ..."


@pytest.mark.parametrize("depth", [1, 2, _limits.MAX_JSON_DEPTH + 1, 100_000])
def test_json_depth_of_many_brackets_in_one_step(depth):
    """Over 64 Ki brackets in one step are counted by numpy, from the level the steps before
    ended at: the same count as Python's."""
    raw = b"[" * depth + b"[1]," * 70_000 + b"[1]" + b"]" * depth
    assert _prechecks.json_depth(raw) == depth + 1
    many, few = (_prechecks._levels(b"[]" * n, b"[{", b"]}", 5) for n in (40_000, 100))
    assert many == few == (6, 5)

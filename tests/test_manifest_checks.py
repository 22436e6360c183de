"""The manifest's cross-field rules (`_format/_manifest_checks`, SPEC.md 2.3 and 2.8): each rule
refuses an invalid manifest made from a small valid one, with a message that names what is
wrong, so that a test fails when its rule is removed even if another rule then fires.

The manifests are parsed as the reader parses them (`parse_manifest`): no bundle on disk."""

from __future__ import annotations

import copy
import json
import re

import pytest

from hlobundle._format._manifest import Argument
from hlobundle._format._manifest_json import parse_manifest
from hlobundle.errors import ManifestError

SHA = "0" * 64

VALID = {
    "format": "hlobundle",
    "format_version": "1.3",
    "function": "f",
    "arguments": [
        {"name": "x", "path": "args[0]", "shape": [4, 3], "dtype": "float32"},
        {"name": "w", "path": "args[1]", "shape": [3, 2], "dtype": "float32"},
    ],
    "results": [{"name": "y", "shape": [4, 2], "dtype": "float32"}],
    "input_tree": ["x", "w"],
    "output_tree": "y",
    "module": {
        "text": "module.mlir",
        "portable": {"file": "module.mlirbc", "target_version": "1.0.0"},
    },
    "provenance": {"producer": "test", "producer_version": "0"},
    "files": {
        "module.mlir": {"size": 1, "sha256": SHA},
        "module.mlirbc": {"size": 1, "sha256": SHA},
    },
}

# One function of a 2.0 manifest (symbolic dimensions need 2.0): y[b, 2] = f(x[b, 3], w[3, 2]).
FUNCTION = {
    "name": "f",
    **{
        k: copy.deepcopy(VALID[k])
        for k in ("arguments", "results", "input_tree", "output_tree", "module")
    },
}
FUNCTION["arguments"][0]["shape"] = ["b", 3]
FUNCTION["results"][0]["shape"] = ["b", 2]


def parse(data):
    return parse_manifest(json.dumps(data).encode())


def one_x(edit):
    """The valid 1.x manifest, edited."""
    data = copy.deepcopy(VALID)
    edit(data)
    return data


def two_o(edit):
    """A valid 2.0 manifest of the one symbolic function, the function edited."""
    function = copy.deepcopy(FUNCTION)
    edit(function)
    return {
        "format": "hlobundle",
        "format_version": "2.0",
        "functions": [function],
        **{k: copy.deepcopy(VALID[k]) for k in ("provenance", "files")},
    }


def refused(data, fragment):
    with pytest.raises(ManifestError, match=re.escape(fragment)) as e:
        parse(data)
    assert e.value.code == "MANIFEST_INVALID"
    return e.value


def test_the_valid_manifests_are_valid():
    assert parse(VALID).function == "f"
    m = parse(two_o(lambda f: None))
    assert m.views["f"].symbolic


def _set(path, value):
    """An edit that sets data[path[0]][path[1]]... = value."""

    def edit(data):
        node = data
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return edit


def _both(*edits):
    def edit(data):
        for e in edits:
            e(data)

    return edit


MESH = {"axes": [{"name": "data", "size": 2}]}


# (id, edit of the 1.x manifest, fragment of the message)
ONE_X = [
    (
        "duplicate_argument_name",
        _set(["arguments", 1, "name"], "x"),
        "duplicate arguments name 'x'",
    ),
    (
        "duplicate_result_name",
        lambda m: m["results"].append({**m["results"][0]}) or m.update(output_tree=None),
        "duplicate results name 'y'",
    ),
    (
        "duplicate_executable_target",
        lambda m: m.update(
            executables=[
                {
                    "target": "llvm-cpu",
                    "file": "module.mlir",
                    "compiler": "iree",
                    "compiler_version": "1",
                    "architecture": "x86_64",
                    "cpu": "generic",
                    "source_sha256": SHA,
                }
            ]
            * 2
        ),
        "duplicate executables target name 'llvm-cpu'",
    ),
    (
        "argument_name_not_an_identifier",
        _set(["arguments", 0, "name"], "not-an-id"),
        "'not-an-id' is not a Python identifier",
    ),
    (
        "argument_name_a_keyword",
        _set(["arguments", 0, "name"], "class"),
        "'class' is not a Python identifier",
    ),
    (
        "result_name_not_an_identifier",
        _set(["results", 0, "name"], "y.z"),
        "'y.z' is not a Python identifier",
    ),
    (
        "batched_argument_twice",
        _set(
            ["batched"],
            {
                "text": "module.mlir",
                "arguments": ["x", "x"],
                "portable": {"file": "module.mlirbc", "target_version": "1.0.0"},
            },
        ),
        "duplicate batched.arguments name 'x'",
    ),
    (
        "batched_argument_unknown",
        _set(
            ["batched"],
            {
                "text": "module.mlir",
                "arguments": ["x", "nope"],
                "portable": {"file": "module.mlirbc", "target_version": "1.0.0"},
            },
        ),
        "batched.arguments names ['nope'], which are not arguments",
    ),
    (
        "sharding_rank_differs_from_shape",
        _both(_set(["mesh"], MESH), _set(["arguments", 1, "sharding"], [["data"]])),
        "arguments[1].sharding has 1 entries for 2 dimensions",
    ),
    (
        "result_sharding_rank_differs_from_shape",
        _both(_set(["mesh"], MESH), _set(["results", 0, "sharding"], [[], [], []])),
        "results[0].sharding has 3 entries for 2 dimensions",
    ),
    (
        "sharding_over_an_axis_the_mesh_lacks",
        _both(_set(["mesh"], MESH), _set(["arguments", 0, "sharding"], [["data"], ["model"]])),
        "arguments[0].sharding uses mesh axes ['model'] that mesh does not define",
    ),
    (
        "sharding_without_a_mesh",
        _set(["results", 0, "sharding"], [["data"], []]),
        "results[0].sharding uses mesh axes ['data'] that mesh does not define",
    ),
    (
        "input_tree_holds_a_number",
        _set(["input_tree"], {"x": "x", "w": 1.5}),
        "input_tree holds float 1.5; only arrays, objects, null and names are allowed",
    ),
    ("output_tree_holds_a_bool", _set(["output_tree"], [True]), "output_tree holds bool True"),
    (
        "input_tree_names_an_unknown_value",
        _set(["input_tree"], ["x", "w", "nope"]),
        "input_tree names ['nope'], which are not its values' names",
    ),
    (
        "output_tree_names_an_argument",
        _set(["output_tree"], ["x"]),
        "output_tree names ['x'], which are not its values' names",
    ),
    (
        "input_tree_names_a_value_twice",
        _set(["input_tree"], ["x", {"again": "x"}, "w"]),
        "input_tree names a value twice",
    ),
    (
        "result_aliases_a_missing_argument",
        _set(["results", 0, "aliases"], 2),
        "results[0].aliases = 2 but there are 2 arguments",
    ),
    (
        "symbolic_dimension_in_format_1",
        _set(["arguments", 0, "shape"], ["b", 3]),
        "symbolic dimensions and constraints need format_version 2.0",
    ),
    (
        "constraints_in_format_1",
        _set(["constraints"], ["4 >= 1"]),
        "symbolic dimensions and constraints need format_version 2.0",
    ),
]


@pytest.mark.parametrize(("edit", "fragment"), [c[1:] for c in ONE_X], ids=[c[0] for c in ONE_X])
def test_a_1x_manifest_breaking_a_rule_is_refused(edit, fragment):
    refused(one_x(edit), fragment)


def test_an_identifier_error_names_its_field():
    e = refused(one_x(_set(["arguments", 0, "name"], "not-an-id")), "not a Python identifier")
    assert e.field == "arguments[0].name"


def _args(n):
    """n arguments, each of one symbolic dimension s0 ... s(n-1)."""
    return [
        {"name": f"a{i}", "path": f"args[{i}]", "shape": [f"s{i}"], "dtype": "float32"}
        for i in range(n)
    ]


def _many_symbols(f):
    f["arguments"] = _args(33)
    f["input_tree"] = None
    f["results"][0]["shape"] = ["s0", 2]


# (id, edit of the 2.0 function, fragment of the message)
TWO_O = [
    ("more_symbols_than_the_limit", _many_symbols, "33 symbols; the limit is 32"),
    (
        "result_symbol_no_argument_has",
        _set(["results", 0, "shape", 0], "c"),
        "result dimensions use symbols ['c'] that no argument's shape has",
    ),
    (
        "more_constraints_than_the_limit",
        _set(["constraints"], ["b >= 1"] * 33),
        "more than 32 constraints",
    ),
    (
        "malformed_constraint",
        _set(["constraints"], ["b >= 1 >= 2"]),
        "constraints: constraint 'b >= 1 >= 2' must compare two expressions",
    ),
    (
        "constraint_over_an_unknown_symbol",
        _set(["constraints"], ["b >= c"]),
        "constraint 'b >= c' uses symbols ['c'] no shape has",
    ),
    (
        "symbolic_with_a_batched_module",
        _set(
            ["batched"],
            {
                "text": "module.mlir",
                "arguments": ["x"],
                "portable": {"file": "module.mlirbc", "target_version": "1.0.0"},
            },
        ),
        "a function with symbolic dimensions has no batched module or mesh",
    ),
    (
        "symbolic_with_a_mesh",
        _set(["mesh"], MESH),
        "a function with symbolic dimensions has no batched module or mesh",
    ),
]


@pytest.mark.parametrize(("edit", "fragment"), [c[1:] for c in TWO_O], ids=[c[0] for c in TWO_O])
def test_a_symbolic_function_breaking_a_rule_is_refused(edit, fragment):
    refused(two_o(edit), fragment)


def test_the_limits_are_inclusive():
    """32 symbols and 32 constraints are allowed: the limits refuse only what is over them."""

    def edit(f):
        f["arguments"] = _args(32)
        f["input_tree"] = None
        f["results"][0]["shape"] = ["s0", 2]
        f["constraints"] = [f"s{i} >= 1" for i in range(32)]

    assert parse(two_o(edit)).views["f"].symbolic


def test_a_duplicate_function_name_is_refused():
    data = two_o(lambda f: None)
    data["functions"].append(copy.deepcopy(data["functions"][0]))
    refused(data, "duplicate functions name 'f'")


# A dimension is an int or an expression: the reader's message gives the expression check's
# reason, not the int branch's ("should be a valid integer"), and names the dimension.
BAD_DIMENSIONS = [
    (
        "dimension_not_an_expression",
        "b +",
        "not a dimension expression (SPEC.md 2.8): an expression ends early",
    ),
    ("dimension_of_hostile_text", "__import__('os')", "not a dimension expression"),
    ("dimension_without_a_symbol", "8", "dimension '8' has no symbol: write it as an integer"),
]


@pytest.mark.parametrize(
    ("text", "fragment"), [c[1:] for c in BAD_DIMENSIONS], ids=[c[0] for c in BAD_DIMENSIONS]
)
def test_a_dimension_that_is_no_symbolic_expression_is_refused(text, fragment):
    e = refused(two_o(_set(["arguments", 0, "shape", 0], text)), f"(got {text!r}")
    assert e.field == "functions[0].arguments[0].shape[0]"
    assert fragment in e.message and "valid integer" not in e.message
    argument = {"name": "x", "path": "args[0]", "shape": [text], "dtype": "float32"}
    with pytest.raises(ValueError, match=re.escape(fragment)):
        Argument.model_validate(argument)


def test_a_function_for_several_platforms_with_a_batched_module_is_refused():
    """A function lowered for several platforms (format 2.1, SPEC.md 2.14) has no batched module."""

    def edit(f):
        f["arguments"][0]["shape"] = [4, 3]
        f["results"][0]["shape"] = [4, 2]
        f["platforms"] = ["cpu", "cuda"]

    data = two_o(edit)
    data["format_version"] = "2.1"
    assert parse(data).views["f"].platforms == ["cpu", "cuda"]  # valid without the module
    data["functions"][0]["batched"] = {
        "text": "module.mlir",
        "arguments": ["x"],
        "portable": {"file": "module.mlirbc", "target_version": "1.0.0"},
    }
    refused(data, "a function lowered for several platforms has no batched module or executables")

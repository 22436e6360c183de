"""Each writer option is defined once (`hlobundle/_write/_options.py`): its name, type, default
and help text, and its flag where the command line offers it. The writers' signatures, their
docstrings' option lists and the writing commands' flags are made from the definitions; a
function or a parser that spells an option again is found here (and each guard is shown to fail
on a made-up module that breaks its rule)."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import pydoc
import re
from pathlib import Path

import numpy as np
import pytest
from helpers import ROOT, cli

import hlobundle
from hlobundle._cli import _pack, _parser
from hlobundle._write._options import OPTIONS, PackOptions

# The writers' own layers: nothing in them takes a writer option with a default of its own.
SCANNED = ["hlobundle/_write", "hlobundle/_cli"]
PARSER = "hlobundle/_cli/_parser_write.py"  # the parser of the commands that write bundles
READING = "hlobundle/_cli/_parser_read.py"
OCI = "hlobundle/_cli/_parser_oci.py"
# What may still spell an option, and why: (file, function or parser, name).
ALLOWED = {
    # compile()'s `function` is which of the bundle's functions to compile: another option
    # than pack's `function` (the name a packed function gets), under the same name.
    ("hlobundle/_write/_compile.py", "compile", "function"),
    (PARSER, "add_compile", "--function"),
    # The reading commands' own options under a writer option's flag, in every parser file:
    # which function to read, `fingerprint`'s and `run`'s;
    (READING, "add_fingerprint", "--function"),
    (READING, "_add_function", "--function"),
    # the orientation of `run`'s input arrays (pack's is of its example arrays);
    (READING, "add_run", "--layout"),
    # replacing what `emit` and `pull` write, not a bundle a writer packs;
    (READING, "add_emit", "--force"),
    (OCI, "add_pull", "--force"),
    # the key `load()` verifies a bundle with (`Trust`), not the one `sign` checks before
    # signing again.
    (READING, "_add_trust", "--public-key"),
    (OCI, "add_pull", "--public-key"),
    ("hlobundle/_cli/_common.py", "trust_options", "public_key"),
}
FLAGS = {flag.flag: name for name, f in OPTIONS.items() for flag in f.metadata["flags"]}
WRITERS = [
    hlobundle.pack,
    hlobundle.pack_files,
    hlobundle.export,
    hlobundle.from_reactant,
    hlobundle.from_exported,
    hlobundle.from_reactant_server,
    hlobundle.from_torch,
    hlobundle.refresh,
    hlobundle.reshard,
    hlobundle.sign,
    hlobundle.compile,
]


def _restated(path: str, source: str) -> list[tuple[str, str, str]]:
    """(file, where, name) for each writer option `source` spells again: a parameter with a
    default, a class field with a default (another options class), an option read by its
    name with a default of the call's own (`kw.get("force", False)`), or, in any module of
    the CLI (each parser file), an `add_argument` with an option's flag."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            positional = a.posonlyargs + a.args
            defaulted = positional[len(positional) - len(a.defaults) :] + [
                k for k, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d is not None
            ]
            found += [(path, node.name, p.arg) for p in defaulted if p.arg in OPTIONS]
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and item.value is not None:
                    target = getattr(item.target, "id", None)
                    if target in OPTIONS:
                        found.append((path, node.name, target))
    found += _read_with_a_default(path, source)
    if path.startswith("hlobundle/_cli/"):
        found += _flags_spelled(path, source)
        found += _renamed_by_hand(path, source)
    return found


# Calls that read a named value and can give it a default of their own.
READERS = {"get", "pop", "setdefault", "getattr"}


def _read_with_a_default(path: str, source: str) -> list[tuple[str, str, str]]:
    """(file, function, option) for each option read by its name from keywords or an object
    with a default the call gives (`kw.get("force", False)`, `kw.pop("roles", {})`,
    `getattr(args, "names", None)`): a default spelled again, where the definition's is the
    one."""
    found = []
    for function in ast.walk(ast.parse(source)):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(function):
            if not isinstance(node, ast.Call):
                continue
            called = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
            args = node.args[1:] if called == "getattr" else node.args
            if called in READERS and len(args) >= 2 and isinstance(args[0], ast.Constant):
                if args[0].value in OPTIONS:
                    found.append((path, function.name, args[0].value))
    return found


# A flag's parsed attribute where it is not its option's name (`--sign-key`: `private_key`).
RENAMED = {
    flag.dest: name
    for name, f in OPTIONS.items()
    for flag in f.metadata["flags"]
    if flag.dest and flag.dest != name
}


def _renamed_by_hand(path: str, source: str) -> list[tuple[str, str, str]]:
    """(file, function, option) for each option a command hands a writer from its flag's
    renamed attribute, the rename spelled again (`allow_custom_calls=args.allow_custom_call`,
    `{"roles": dict(args.role)}`) rather than read by `_common.option_value`."""
    found = []
    for function in ast.walk(ast.parse(source)):
        if not isinstance(function, ast.FunctionDef):
            continue
        for node in ast.walk(function):
            pairs = [(k.arg, k.value) for k in node.keywords] if isinstance(node, ast.Call) else []
            if isinstance(node, ast.Dict):
                pairs = [
                    (getattr(k, "value", None), v)
                    for k, v in zip(node.keys, node.values, strict=True)
                ]
            found += [
                (path, function.name, key)
                for key, value in pairs
                if key in OPTIONS
                and any(RENAMED.get(getattr(n, "attr", "")) == key for n in ast.walk(value))
            ]
    return found


def _flags_spelled(path: str, source: str) -> list[tuple[str, str, str]]:
    """(file, function, flag) for each writer option's flag given to `add_argument` in any
    module of the CLI (every parser file, and any module that adds arguments): a flag is made
    from its definition (`_option`), never spelled again."""
    found = []
    for function in ast.walk(ast.parse(source)):
        if not isinstance(function, ast.FunctionDef):
            continue
        for node in ast.walk(function):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
                strings = [a.value for a in node.args if isinstance(a, ast.Constant)]
                found += [(path, function.name, s) for s in strings if s in FLAGS]
    return found


def _sources() -> list[tuple[str, str]]:
    return [
        (str(p.relative_to(ROOT)), p.read_text())
        for folder in SCANNED
        for p in sorted((ROOT / folder).rglob("*.py"))
        if p.name != "_options.py"
    ]


def test_each_writer_option_is_defined_once():
    found = [hit for path, source in _sources() for hit in _restated(path, source)]
    assert set(found) - ALLOWED == set(), "spell it in _write/_options.py, and take it from there"
    assert set(ALLOWED) <= set(found), "an allowance that nothing needs any more: remove it"


def test_the_definitions_define_each_option_once():
    tree = ast.parse((ROOT / "hlobundle/_write/_options.py").read_text())
    fields = [
        item.target.id
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and node.name == "PackOptions"
        for item in node.body
        if isinstance(item, ast.AnnAssign)
    ]
    assert sorted(fields) == sorted(OPTIONS) and len(set(fields)) == len(fields)
    for name, f in OPTIONS.items():
        assert f.metadata["help"].strip(), name
        assert f.default is not dataclasses.MISSING, name


@pytest.mark.parametrize(
    ("path", "source", "want"),
    [
        (
            "hlobundle/_write/_writer.py",
            "def pack(module, *, names=None, force=False): ...\n",
            [("pack", "names"), ("pack", "force")],
        ),
        (
            "hlobundle/_write/_new.py",
            "def from_x(path, out, target_version=None): ...\n",
            [("from_x", "target_version")],
        ),
        (
            "hlobundle/_write/_new.py",
            "@dataclass\nclass ExportOptions:\n    force: bool = False\n    fn: object = None\n",
            [("ExportOptions", "force")],
        ),
        (
            PARSER,
            "def add_pack(p):\n    p.add_argument('--names', type=csv)\n",
            [("add_pack", "--names")],
        ),
        (
            PARSER,
            "def add_sign(p):\n    g = p.add_mutually_exclusive_group()\n"
            "    g.add_argument('--compute-expected', action='store_true')\n",
            [("add_sign", "--compute-expected")],
        ),
        (
            "hlobundle/_cli/_pack.py",
            "def pack_keywords(args):\n    return dict(roles=dict(args.role), "
            "allow_custom_calls=args.allow_custom_call, force=args.force)\n",
            [("pack_keywords", "roles"), ("pack_keywords", "allow_custom_calls")],
        ),
        (
            "hlobundle/_cli/_writes.py",
            "def reshard(args):\n    options = {'sign_key': key(args) if args.private_key else None}\n",
            [("reshard", "sign_key")],
        ),
    ],
    ids=[
        "pack keywords",
        "a new importer",
        "another options class",
        "a flag",
        "a group's flag",
        "a command's renamed attributes",
        "a command's signing key",
    ],
)
def test_the_guard_fails_on_an_option_spelled_again(path, source, want):
    assert [(where, name) for _, where, name in _restated(path, source)] == want


def test_the_guard_passes_an_option_taken_from_the_definitions():
    source = (
        "@takes('names', 'force')\ndef pack(module, inputs, out, opt): ...\n"
        "def _pack_checked(module, items, out, opt, *, force): ...\n"  # no default: a value passed on
        "def add_pack(p):\n    _option(p, 'names')\n    p.add_argument('--inputs', nargs='+')\n"
    )
    assert _restated(PARSER, source) == []


def _options(writer):
    """The writer options among `writer`'s keywords (pack's `inputs` is its own argument; an
    ALLOWED keyword is the writer's own)."""
    params = inspect.signature(writer).parameters.values()
    own = {name for file, fn, name in ALLOWED if fn == writer.__name__}
    return [p for p in params if p.kind is p.KEYWORD_ONLY and p.name in OPTIONS.keys() - own]


@pytest.mark.parametrize("writer", WRITERS, ids=lambda f: f.__name__)
def test_a_writer_s_signature_has_the_definitions_defaults_and_types(writer):
    options = _options(writer)
    assert options, writer.__name__
    for p in options:
        assert (p.default, p.annotation) == (OPTIONS[p.name].default, OPTIONS[p.name].type)


def test_the_signature_test_sees_every_public_writer():
    """Every public function of the writer's layer is one of WRITERS."""
    writers = {
        name
        for name in hlobundle.__all__
        if inspect.isfunction(getattr(hlobundle, name))
        and getattr(hlobundle, name).__module__.startswith("hlobundle._write")
    }
    assert writers == {f.__name__ for f in WRITERS}


@pytest.mark.parametrize("writer", WRITERS, ids=lambda f: f.__name__)
def test_help_shows_each_option_with_its_default_and_help(writer):
    shown = pydoc.render_doc(writer, renderer=pydoc.plaintext)
    for p in _options(writer):
        assert f"{p.name}: {p.annotation!r} = {p.default!r}" in shown, p.name
        first = " ".join(OPTIONS[p.name].metadata["help"].split()[:4])
        assert f"- `{p.name}={p.default!r}`: {first}" in " ".join(shown.split()), p.name


TEXT = "func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {\n  return %x : tensor<2xf32>\n}\n"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda out: hlobundle.pack(TEXT, None, out, nmes=["x"]),
            "pack() got an unexpected keyword argument 'nmes'; did you mean 'names'?",
        ),
        (
            lambda out: hlobundle.pack(TEXT, None, out, sign_key="k.pem"),
            "pack() got an unexpected keyword argument 'sign_key'",
        ),
        (
            lambda out: hlobundle.pack(TEXT, None, out, opt=PackOptions()),
            "pack() got an unexpected keyword argument 'opt'; did you mean 'out'?",
        ),
        (
            lambda out: hlobundle.pack(TEXT, None, out, ["x"]),
            "pack() too many positional arguments",
        ),
        (lambda out: hlobundle.pack(TEXT, None), "pack() missing a required argument: 'out'"),
        (
            lambda out: hlobundle.from_exported(None, out, input=[1]),
            "from_exported() got an unexpected keyword argument 'input'; did you mean 'inputs'?",
        ),
        (
            lambda out: hlobundle.refresh(out, target="1.0.0"),
            "refresh() got an unexpected keyword argument 'target'; did you mean 'target_version'?",
        ),
        (
            lambda out: hlobundle.export(abs, 1.0, out=out, vmap_axes=0),
            "export() got an unexpected keyword argument 'vmap_axes'; did you mean 'vmap_in_axes'?",
        ),
    ],
    ids=[
        "misspelled",
        "another writer's",
        "the options object",
        "positional",
        "missing",
        "from_exported",
        "refresh",
        "export",
    ],
)
def test_a_keyword_a_writer_does_not_take_is_a_type_error_naming_it(tmp_path, call, message):
    with pytest.raises(TypeError, match=f"^{re.escape(message)}$"):
        call(tmp_path / "b")
    assert not (tmp_path / "b").exists()


def test_keyword_calls_reach_the_options(tmp_path):
    out = hlobundle.pack(
        TEXT,
        [np.ones(2, np.float32)],
        tmp_path / "b",
        names=["x"],
        result_names=["y"],
        function="identity",
        roles={"x": "parameter"},
        timestamp="2026-01-01T00:00:00Z",
    )
    m = hlobundle.load(out).manifest
    assert (m.function, m.arguments[0].name, m.arguments[0].role) == ("identity", "x", "parameter")
    assert (m.results[0].name, m.provenance.timestamp) == ("y", "2026-01-01T00:00:00Z")
    with pytest.raises(hlobundle.errors.OutputExistsError):
        hlobundle.pack(TEXT, None, out)
    assert hlobundle.pack(TEXT, None, out, force=True) == out


def test_the_options_convert_what_they_are_given():
    opt = PackOptions(allow_custom_calls=["a"], constraints=["b >= 1"], sign_key="k.pem")
    assert (opt.allow_custom_calls, opt.constraints) == (("a",), ("b >= 1",))
    assert opt.sign_key.private_key == Path("k.pem")  # a SigningKey, as sign() takes it
    assert dataclasses.replace(opt, force=True).sign_key == opt.sign_key


# --- the command line ---------------------------------------------------------------------------


def _commands() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in _parser.build()._actions if isinstance(a, argparse._SubParsersAction))
    return {name: sub.choices[name] for name in ("pack", "refresh", "reshard", "compile", "sign")}


def _option_actions(p: argparse.ArgumentParser) -> list[tuple[argparse.Action, str]]:
    return [(a, FLAGS[s]) for a in p._actions for s in a.option_strings if s in FLAGS]


def test_the_writing_commands_take_their_flags_and_help_from_the_definitions():
    offered = {name: _option_actions(p) for name, p in _commands().items()}
    flags = {s for actions in offered.values() for a, _ in actions for s in a.option_strings}
    assert flags >= set(FLAGS), "a flag the definitions give that no writing command offers"
    for command, actions in offered.items():
        for action, name in actions:
            if action.option_strings == ["--function"] and command == "compile":
                continue  # compile's own option (ALLOWED)
            flag = next(
                f for f in OPTIONS[name].metadata["flags"] if f.flag in action.option_strings
            )
            want = re.sub(r"`([^`]*)`", r"\1", flag.help or OPTIONS[name].metadata["help"])
            assert action.help.replace("%%", "%").startswith(want), (command, flag.flag)


def test_pack_help_shows_each_option_with_its_help():
    r = cli("pack", "--help")
    assert r.returncode == 0, r.stderr
    for action, _ in _option_actions(_commands()["pack"]):
        flag = action.option_strings[-1]
        entry = re.search(rf"^  {re.escape(flag)}\b(.*\n)(\s{{8,}}.*\n)*", r.stdout, re.M)
        assert entry, flag
        words = action.help.replace("%%", "%").split()
        assert " ".join(words[:3]) in " ".join(entry[0].split()), flag


def _empty(value):
    return value in (None, (), [], {}, False)


def test_a_bare_pack_passes_the_functions_defaults():
    """`pack m.mlir -o b` gives the writer exactly its defaults (an empty list for an empty
    tuple), but the layout: the command's is auto, as its definition says (it reads files)."""
    args = _parser.build().parse_args(["pack", "m.mlir", "-o", "b"])
    defaults = inspect.signature(hlobundle.pack_files).parameters
    for name, value in _pack.pack_keywords(args).items():
        default = defaults[name].default
        assert value == default or (_empty(value) and _empty(default)), name
    assert args.layout == OPTIONS["layout"].metadata["flags"][0].default == "auto"


@pytest.mark.parametrize(
    ("argv", "writer"),
    [
        (["refresh", "b"], hlobundle.refresh),
        (["reshard", "b", "-o", "c"], hlobundle.reshard),
        (["sign", "b", "--private-key", "k.pem"], hlobundle.sign),
        (["pack", "--from-reactant-server", "d", "-o", "b"], hlobundle.from_reactant_server),
        (["pack", "--from-torch-export", "m.pt2", "-o", "b"], hlobundle.from_torch),
    ],
    ids=["refresh", "reshard", "sign", "from-reactant-server", "from-torch-export"],
)
def test_each_writing_command_s_defaults_are_its_function_s(argv, writer):
    args = _parser.build().parse_args(argv)
    command = _commands()[argv[0]]
    for action, name in _option_actions(command):
        if name not in inspect.signature(writer).parameters or name == "layout":
            continue
        default = inspect.signature(writer).parameters[name].default
        value = getattr(args, action.dest)
        assert value == default or (_empty(value) and _empty(default)), (argv[0], name)


# --- an option reaches every step that reads it -------------------------------------------------

KERNEL = (
    "module @reactant_kernel {{\n  func.func @main({args}) -> {result} {{\n"
    "    %y = stablehlo.custom_call @my_kernel({operands}) : ({types}) -> {result}\n"
    "    return %y : {result}\n  }}\n}}\n"
)


def test_from_reactant_allows_the_custom_calls_it_is_given(tmp_path):
    """The export's module is read for its signature before it is packed: with the same
    allowances (it was refused there, whatever `allow_custom_calls` said)."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "m.mlir").write_text(
        KERNEL.format(
            args="%x: tensor<2xf32>", operands="%x", types="tensor<2xf32>", result="tensor<2xf32>"
        )
    )
    (src / "run.py").write_text(
        '"""Written by export_to_enzymejax.\n\n'
        '    arg1: Array of shape (2,) and dtype float32. Path: arg.2\n"""\n'
        'def run():\n    open("m.mlir")\n'
    )
    with pytest.raises(hlobundle.errors.NotPortableError, match="custom_call @my_kernel"):
        hlobundle.from_reactant(src, tmp_path / "refused")
    out = hlobundle.from_reactant(src, tmp_path / "b", allow_custom_calls=["my_kernel"])
    assert hlobundle.load(out).manifest.module.allowed_custom_calls == ["my_kernel"]


def test_from_reactant_server_allows_the_custom_calls_it_is_given(tmp_path):
    from test_reactant_server import MANIFEST, server_bundle

    src = server_bundle(tmp_path)
    for n in (4, 8):
        (src / f"model.b{n}.mlir").unlink()
    (src / "manifest.yaml").write_text(MANIFEST.replace("[4, 8]", "[4]"))
    (src / "model.mlir").write_text(
        KERNEL.format(
            args="%x: tensor<4x3xf32>, %w: tensor<3x2xf32>, %b: tensor<2xf32>",
            operands="%x, %w",
            types="tensor<4x3xf32>, tensor<3x2xf32>",
            result="tensor<4x2xf32>",
        )
    )
    with pytest.raises(hlobundle.errors.NotPortableError, match="custom_call @my_kernel"):
        hlobundle.from_reactant_server(src, tmp_path / "refused")
    out = hlobundle.from_reactant_server(src, tmp_path / "b", allow_custom_calls=["my_kernel"])
    assert hlobundle.load(out).manifest.module.allowed_custom_calls == ["my_kernel"]
    r = cli(
        "pack",
        "--from-reactant-server",
        src,
        "-o",
        tmp_path / "c",
        "--allow-custom-call",
        "my_kernel",
    )
    assert r.returncode == 0, r.stderr  # the command passes it on (it had dropped it)
    r = cli(
        "pack",
        "--from-jax-export",
        tmp_path / "blob",
        "-o",
        tmp_path / "d",
        "--allow-custom-call",
        "my_kernel",
    )
    assert r.returncode == 2 and "--allow-custom-call does not apply" in r.stderr, r.stderr


def test_export_passes_its_options_on(tmp_path):
    x = np.ones(3, np.float32)
    out = hlobundle.export(
        lambda x: x * 2,
        x,
        out=tmp_path / "b",
        name="double",
        store_expected=False,
        timestamp="2026-01-01T00:00:00Z",
    )
    b = hlobundle.load(out)
    assert (b.manifest.function, b.manifest.provenance.timestamp) == (
        "double",
        "2026-01-01T00:00:00Z",
    )
    assert b.manifest.results[0].expected is None


def test_export_s_constraints_are_recorded_and_hold_for_the_example_values(tmp_path):
    """`constraints`, defined once in PackOptions (which the lowering and the plan's check of
    the examples read), is recorded in the manifest, and the example values must meet it."""
    specs = {"shapes_specs": ("b, 3",), "constraints": ("b >= 2",)}
    out = hlobundle.export(
        lambda x: x * 2, np.ones((4, 3), np.float32), out=tmp_path / "a", **specs
    )
    assert hlobundle.load(out).manifest.constraints == ["b >= 2"]
    with pytest.raises(hlobundle.InputError, match="constraint b >= 2 does not hold: 1 >= 2"):
        hlobundle.export(lambda x: x * 2, np.ones((1, 3), np.float32), out=tmp_path / "c", **specs)


@pytest.mark.parametrize(
    ("path", "source", "want"),
    [
        (  # another parser file than the writing commands'
            "hlobundle/_cli/_parser_read.py",
            "def add_check(p):\n    p.add_argument('--target-version')\n",
            [("add_check", "--target-version")],
        ),
        (  # an option read from keywords with a default of its own, in a helper
            "hlobundle/_write/_helper.py",
            "def _finish(kw):\n    return kw.get('force', False)\n",
            [("_finish", "force")],
        ),
        (
            "hlobundle/_cli/_common.py",
            "def opts(args):\n    return getattr(args, 'names', None), kw.pop('roles', {})\n",
            [("opts", "names"), ("opts", "roles")],
        ),
    ],
    ids=["a flag in another parser file", "kw.get with a default", "getattr and pop"],
)
def test_the_guard_fails_on_an_option_spelled_again_elsewhere(path, source, want):
    assert [(where, name) for _, where, name in _restated(path, source)] == want

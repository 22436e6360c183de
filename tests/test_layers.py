"""The package's floors (docs/layout.md): imports only go down.

    8  __main__
    7  _cli (commands)        integrations (public)
    6  _serve (OIP v2)        hlobundle (the public facade, its lazy table)
    5  _write (pack)          _remote (remote load)   _emit (run.py)
    4  _run (backends)        _oci (push, pull)
    3  _interop (foreign)     _read (load, verify)
    2  _bundle_io (a bundle's bytes through the ground floor)   _parse (its programs parsed)
       _output (where a bundle is written)   errors (public)
    1  _format (what a bundle is: the model, the rules, the errors)
    0  the ground floor (`GROUND`)

A layer imports its own modules and the floors below it, never one above nor another room of its
own floor (a room inside a layer, `SUB_ROOMS`, stands over the rest of its layer: the rest
imports it only through its door, at call time); and each layer sits one floor above the highest it imports (`FLOORS`), so that the
floors show how deep each room's imports go. The public modules' floors are found the same way
(`_floors_of_the_public`), not set by hand. The writer imports the runner it calls (expected outputs, backward modules), nothing registers itself
anywhere. A foreign system read and written both ways has one room in `_interop`, which its
importer and its emitter or exporter import (`ROOMS`). The documented exceptions are `Bundle.function()` and `Bundle.to_exported()`, the
entry points from a read bundle into the runner, which import `_run._function` and the xla
backend door (`_run._backends`) inside the method.

Under every layer lies the ground floor (`GROUND`): rooms that do one thing for any layer
(isolating untrusted parsing in child processes, writing files, the terminal) and leaf modules.
Each imports nothing of the package outside itself. What runs as a process of its own (`RUN_ALONE`:
a child script, the fork server, code given to `python -c`, the scripts `emit` writes) imports
nothing of the package at all; the guard finds each one in the source, where the package names
it to run it, so that a new one cannot be left out.

`_format` is the model, the rules and the errors: it imports none of the ground floor's machinery
(`MACHINERY`), and opens, maps and walks no file and parses no MLIR (`DOES_NOT_READ_OR_PARSE`,
`PATH_METHODS`); `_bundle_io` reads a bundle's files for it and `_parse` parses its programs.

The benchmarks (`benchmarks/*.py`) are held to the backends' door and to private jax symbols
in `_compat` alone, as the package is.

Each guard checks what the source means, not how it is spelled (issue 69): names are resolved
through the module's imports (`import importlib as il`, `from jax import _src as src`), attribute
chains through what they start from (`_backends._backend`), and a dynamic import's name is
folded when it is constant (`"hlobundle._write." + "_writer"`); one that is not names no module
the guards can see, so it is allowed only in the places `DYNAMIC_IMPORTS` names, each with the
table its names come from.

Each guard is also run on small made-up modules that break its rule, so that it is shown to
fail on the thing it names.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import re

import pytest
from helpers import ROOT

import hlobundle

FLOORS = {
    "_format": 1,
    "_bundle_io": 2,
    "_parse": 2,
    "_output": 2,
    "_interop": 3,
    "_read": 3,
    "_run": 4,
    "_oci": 4,
    "_write": 5,
    "_remote": 5,
    "_emit": 5,
    "_serve": 6,
    "_cli": 7,
}
# The ground floor: each imports nothing of the package outside itself (a room's modules may
# import each other).
GROUND = {
    "hlobundle._version",
    "hlobundle._compat",  # every private jax and enzyme-ad symbol
    "hlobundle._extras",  # how an extra is installed, in every message
    # the MLIR context the reader parses in; the artifact child, run alone, imports it by its
    # bare name from the package's folder (the one import across the ground floor)
    "hlobundle._mlir_context",
    "hlobundle._isolation",  # child processes that read untrusted bytes
    "hlobundle._file_io",  # the hashing writer, libc's calls
    "hlobundle._terminal",  # showing untrusted text, tables, progress bars
}
# Run as processes of their own: import nothing of the package, except a module that a script
# imports by its bare name from its own folder or the package's (on its path; `_portable_child.py`
# appends the package's folder), which then runs in its process too and is held to the same rule
# (`import _mlir_context`).
RUN_ALONE = {
    "hlobundle._isolation._fork_server",
    "hlobundle._isolation._portable_child",
    "hlobundle._isolation._jax_export_child",
    "hlobundle._run._backends._iree_compile:_LIMIT_AND_EXEC",  # limits, then iree-compile
    "hlobundle._emit.run_template",  # the scripts `emit` writes, run where hlobundle is not
    "hlobundle._emit.run_iree_template",
    "hlobundle._emit.run_shared",  # written into both
}
# The package itself in a process of its own, run by its module's name: not a script run alone
# but the server's own process (a front door of `serve --frontends`), held to the floors.
THE_PACKAGE_AGAIN = {"hlobundle", "hlobundle._serve._frontdoor"}
ALLOWED_UPWARD = {
    ("hlobundle._read._reader", "hlobundle._run._function"),  # Bundle.function()
    ("hlobundle._read._reader", "hlobundle._run._backends"),  # Bundle.to_exported(), BackendName
}
LAZY = {name: "hlobundle" + module for name, module in hlobundle._LAZY.items()}
# Each source is parsed once for all the tests (the trees are only read): every test walks the
# whole package, and parsing it again took most of each one's time.
_parse = functools.cache(ast.parse)


@functools.cache
def _walk(tree: ast.AST) -> tuple[ast.AST, ...]:
    """Every node of a parsed module (`_parse`'s), in `ast.walk`'s order, listed once: the
    guards walk each module's tree a dozen times, and the walk, not the checks, took most of
    this file's time (cProfile: 3.5 million `ast.walk` steps, 34 of its 57 s)."""
    return tuple(ast.walk(tree))


def _modules():
    for path in sorted((ROOT / "hlobundle").rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        yield ".".join(parts), path.read_text(), is_package


def _bindings(tree: ast.Module, package: str) -> dict[str, str]:
    """What each name an import binds stands for, anywhere in the module (functions included):
    `import importlib as il` binds `il` to `importlib`, `from importlib import import_module as
    load` binds `load` to `importlib.import_module`, `from .. import _backends` binds
    `_backends` to the absolute name of the module, and `import a.b` binds `a`."""
    bound = {}
    for node in _walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                first = a.name.partition(".")[0]
                bound[a.asname or first] = a.name if a.asname else first
        elif isinstance(node, ast.ImportFrom):
            base = _from_target(node, package)
            for a in node.names:
                bound[a.asname or a.name] = f"{base}.{a.name}"
    return bound


def _from_target(node: ast.ImportFrom, package: str) -> str:
    """The absolute module a `from` statement imports from."""
    if not node.level:
        return node.module or ""
    parts = package.split(".")
    base = parts[: len(parts) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _dotted(node: ast.expr, bound: dict[str, str]) -> str:
    """A name or an attribute chain, its first name resolved through the module's imports
    (`il.import_module`: `importlib.import_module`; `door._backend`:
    `hlobundle._run._backends._backend`); "" for anything else."""
    if isinstance(node, ast.Name):
        return bound.get(node.id, node.id)
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value, bound)
        return f"{base}.{node.attr}" if base else ""
    if _is_getattr(node, bound):  # getattr(importlib, "import_module"): the attribute it names
        base = _dotted(node.args[0], bound)
        return f"{base}.{node.args[1].value}" if base else ""
    return ""


def _is_getattr(node: ast.expr, bound: dict[str, str]) -> bool:
    """`getattr(X, "constant")`, under whatever name the module gave getattr."""
    return (
        isinstance(node, ast.Call)
        and _dotted(node.func, bound) in ("getattr", "builtins.getattr")
        and len(node.args) >= 2
        and isinstance(node.args[1], ast.Constant)
        and isinstance(node.args[1].value, str)
    )


IMPORTERS = {"importlib.import_module", "__import__", "builtins.__import__", "importlib.__import__"}


def _is_import_module(func: ast.expr, bound: dict[str, str]) -> bool:
    """`importlib.import_module` or `__import__`, under whatever name the module gave it."""
    return _dotted(func, bound) in IMPORTERS


def _constant_text(node: ast.expr, strings: dict[str, str]) -> str | None:
    """The string an expression always has: a constant, a sum of constants, an f-string of
    constants, or a module-level string constant by name; None where it is computed."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return strings.get(node.id)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _constant_text(node.left, strings), _constant_text(node.right, strings)
        return None if left is None or right is None else left + right
    if isinstance(node, ast.JoinedStr):
        parts = [_constant_text(v, strings) for v in node.values]
        return None if None in parts else "".join(p or "" for p in parts)
    return None


def _constant_start(node: ast.expr, strings: dict[str, str]) -> str:
    """The constant start of a computed string (`f"hlobundle._write.{x}"`, `"a." + x`)."""
    text = _constant_text(node, strings)
    if text is not None:
        return text
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _constant_start(node.left, strings)
    if isinstance(node, ast.JoinedStr) and node.values:
        return _constant_text(node.values[0], strings) or ""
    return ""


# The modules and packages of the package's own folder, by name.
_TOP_MODULES = {p.stem for p in (ROOT / "hlobundle").iterdir() if p.suffix == ".py" or p.is_dir()}


class _Module:
    """One module's parse and what its names resolve to, made once per source."""

    def __init__(self, name: str, source: str, is_package: bool):
        self.name, self.tree = name, _parse(source)
        self.package = name if is_package else name.rpartition(".")[0]
        self.bound = _bindings(self.tree, self.package)
        self.strings = _strings(self.tree)

    def dynamic_imports(self):
        """(call, the module it names or "" where its name is computed) for each dynamic import."""
        for node in _walk(self.tree):
            if (
                isinstance(node, ast.Call)
                and node.args
                and _is_import_module(node.func, self.bound)
            ):
                yield node, _imported_by_name(node, self)


@functools.cache
def _module(name: str, source: str, is_package: bool) -> _Module:
    return _Module(name, source, is_package)


@functools.cache
def _imports(name: str, source: str, is_package: bool = False) -> tuple[str, ...]:
    """`_each_import`'s names, found once per source: every guard asks."""
    return tuple(_each_import(name, source, is_package))


def _each_import(name: str, source: str, is_package: bool = False):
    """Every module of the package that `source` (module `name`) imports, by what its names
    resolve to: `import` and `from` statements anywhere (functions included), names of the
    top-level package's lazy surface (`from hlobundle import load`), the facade itself
    (`import hlobundle`, or a name of it that is no module), an attribute reached through an
    imported name (`_backends._backend`: `hlobundle._run._backends._backend`), and dynamic
    imports under any name (`importlib.import_module`, `__import__`, an alias of either) whose
    name is a constant (summed or an f-string's constant start, relative names resolved against
    the package they are given). The facade's own dynamic imports are its lazy table's."""
    m = _module(name, source, is_package)
    if name == "hlobundle":
        yield from LAZY.values()
    for node in _walk(m.tree):
        if isinstance(node, ast.ImportFrom):
            target = _from_target(node, m.package)
            if target == "hlobundle":
                for alias in node.names:  # a lazy name, a module, or the facade's own
                    yield LAZY.get(alias.name) or (
                        f"hlobundle.{alias.name}" if alias.name in _TOP_MODULES else "hlobundle"
                    )
            elif target.startswith("hlobundle."):
                yield target
                yield from (f"{target}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.partition(".")[0] == "hlobundle")
        elif isinstance(node, ast.Attribute):
            dotted = _dotted(node, m.bound)
            if dotted.startswith("hlobundle.") and isinstance(node.ctx, ast.Load):
                yield dotted
    for _, target in m.dynamic_imports():
        yield target if target.partition(".")[0] == "hlobundle" else ""


def _imported_by_name(call: ast.Call, m: _Module) -> str:
    """The module an `import_module` call names: an absolute name, a relative one resolved
    against its `package` argument (`__package__`, `__name__`, which a package's `__init__`
    passes, or a constant), or the package a computed name's constant start names
    (`f"hlobundle._write.{x}"`: some module of `hlobundle._write`)."""
    first = call.args[0]
    text = _constant_text(first, m.strings)
    if text is None:
        return _constant_start(first, m.strings).rpartition(".")[0]
    if not text.startswith("."):
        return text
    anchor = call.args[1] if len(call.args) > 1 else None
    anchor = next((k.value for k in call.keywords if k.arg == "package"), anchor)
    if isinstance(anchor, ast.Name) and anchor.id == "__name__":
        return importlib.util.resolve_name(text, m.name)
    given = _constant_text(anchor, m.strings) if anchor is not None else None
    return importlib.util.resolve_name(text, given or m.package)


# Where an import's name is computed, and the table it is read from: the guard cannot read
# the name, so it reads the table (every other dynamic import names a constant).
DYNAMIC_IMPORTS = {
    "hlobundle": "_LAZY, the public names and the modules that hold them",
    "hlobundle._run._backends": "_ROOMS, each backend's room",
    "hlobundle._serve": "EXTRA and the grpc pair: whether an extra is installed",
    "hlobundle._interop._torch_aten": "_Lazy's two names, jax and jax.numpy, imported on first use",
}


def _dynamic_imports(modules) -> list[tuple[str, int]]:
    """(module, line) of each dynamic import whose name is not a constant, outside the places
    named in `DYNAMIC_IMPORTS`: a name the guards cannot read is an import they cannot see."""
    found = []
    for name, source, is_package in modules:
        m = _module(name, source, is_package)
        for call, _ in m.dynamic_imports():
            if name not in DYNAMIC_IMPORTS and _constant_text(call.args[0], m.strings) is None:
                found.append((name, call.lineno))
    return found


def _layer(module: str) -> str | None:
    """The layer (a key of `FLOORS`) that holds `module`, if one does."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in FLOORS else None


def _ground(module: str) -> str | None:
    """The room or leaf of the ground floor that holds `module`, if one does."""
    return next((g for g in GROUND if module == g or module.startswith(g + ".")), None)


def _upward(modules) -> list[tuple[str, str]]:
    """(importer, imported) for every import that goes up a floor, or to another layer of the same
    floor, or out of a room or leaf of the ground floor."""
    modules = list(modules)
    known = {name for name, _, _ in modules} | set(LAZY.values())
    found = []
    for name, source, is_package in modules:
        mine, room = _layer(name), _ground(name)
        for target in _imports(name, source, is_package):
            if target == "hlobundle" and (mine or room) and name != "hlobundle":
                found.append((name, target))  # the facade, which imports every floor
            if target not in known or target == "hlobundle":
                continue
            if room is not None:
                if _ground(target) != room:
                    found.append((name, target))
                continue
            theirs = _layer(target)
            if mine is None or theirs is None or theirs == mine:
                continue
            if FLOORS[theirs] >= FLOORS[mine] and (name, target) not in ALLOWED_UPWARD:
                found.append((name, target))
    return found


@pytest.mark.slow
def test_imports_only_go_down():
    assert _upward(_modules()) == []


# A room inside a layer that stands over the rest of it (docs/layout.md): {room: its door}. The
# backends are built from the runner's parts (`_batched`, `_binding`, `_by_text`, `_shapes`,
# `_transforms`, the function object of `_function`), which they import; the rest of `_run`
# imports none of them when it is imported: it reaches the room only through its door's
# functions, imported inside the function that calls one (or for a type checker alone), so
# that at import time the imports go one way, up the room's floor.
SUB_ROOMS = {"hlobundle._run._backends": "hlobundle._run._backends"}


class _TypeChecking(ast.NodeTransformer):
    """A module as it runs when it is imported: functions' bodies and `if TYPE_CHECKING:`
    blocks left out (their defaults, decorators and the rest of the module kept)."""

    def visit_FunctionDef(self, node):
        node.decorator_list = [self.visit(d) for d in node.decorator_list]
        node.args = self.visit(node.args)
        node.body = [ast.Pass()]
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_If(self, node):
        if _dotted(node.test, {}) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            return node.orelse or None
        return self.generic_visit(node)


def _at_import_time(source: str) -> str:
    return ast.unparse(_TypeChecking().visit(ast.parse(source)))


def _into_sub_rooms(modules) -> list[tuple[str, str]]:
    """(importer, imported) for each import of a sub-room (`SUB_ROOMS`) by another module of
    its layer that runs when the importer is imported, or that names a module of the room
    other than its door, wherever it is made."""
    modules = list(modules)
    known = {name for name, _, _ in modules}
    found = []
    for room, door in SUB_ROOMS.items():
        layer = room.rpartition(".")[0]
        for name, source, is_package in modules:
            inside = name == room or name.startswith(room + ".")
            if inside or not name.startswith(layer + "."):
                continue
            mine = _imports(name, source, is_package)
            then = set(_imports(name, _at_import_time(source), is_package))
            for target in dict.fromkeys(mine):
                if target != room and not target.startswith(room + "."):
                    continue
                if target in then or (target in known and target != door):
                    found.append((name, target))
    return found


@pytest.mark.slow
def test_the_rest_of_a_layer_reaches_its_sub_room_only_through_the_door_at_call_time():
    assert _into_sub_rooms(_modules()) == []


@pytest.mark.slow
def test_the_sub_room_guard_fails_on_each_import_back_down_into_the_room():
    real = {name: (source, pkg) for name, source, pkg in _modules()}
    function = real["hlobundle._run._function"][0]
    broken = {
        # the import `_function` had, at module level again
        "hlobundle._run._function": function + "\nfrom . import _backends\n",
        "hlobundle._run._a": "from ._backends import Backend\n",
        "hlobundle._run._b": "import hlobundle._run._backends._xla\n",
        "hlobundle._run._c": "def f():\n    from ._backends import _iree\n",  # past the door
        "hlobundle._run._d": "import importlib\nimportlib.import_module('hlobundle._run._backends')\n",
        "hlobundle._run._e": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    pass\n"
        "else:\n    from ._backends import resolve\n",
        "hlobundle._run._f": "from . import _shapes\nclass F:\n    from ._backends import kind\n",
    }
    assert broken["hlobundle._run._function"] != function
    real.update((name, (source, False)) for name, source in broken.items())
    found = _into_sub_rooms([(n, s, p) for n, (s, p) in real.items()])
    assert {n for n, _ in found} == set(broken), found
    # at call time, or for a type checker alone, through the door: what `_function` does
    fine = {
        "hlobundle._run._g": "def f():\n    from . import _backends\n    return _backends.resolve\n",
        "hlobundle._run._h": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from ._backends import Backend\n",
    }
    assert _into_sub_rooms([(n, s, False) for n, s in fine.items()]) == []


def _floors_by_imports(modules) -> dict[str, int]:
    """Each layer's floor as its imports put it: one above the highest floor it imports (the
    ground floor's rooms are 0), the documented arrows left out."""
    modules = list(modules)
    known = {name for name, _, _ in modules} | set(LAZY.values())
    highest = dict.fromkeys(FLOORS, 0)
    for name, source, is_package in modules:
        mine = _layer(name)
        for target in set(_imports(name, source, is_package)) & known:
            theirs = _layer(target)
            if mine is None or theirs in (None, mine) or (name, target) in ALLOWED_UPWARD:
                continue
            highest[mine] = max(highest[mine], FLOORS[theirs])
    return {layer: floor + 1 for layer, floor in highest.items()}


def _floated(modules, floors: dict[str, int]) -> dict[str, tuple[int, int]]:
    """{layer: (its floor in `floors`, the floor its imports put it on)} for each layer that
    sits elsewhere than one floor above the highest it imports."""
    by_imports = _floors_by_imports(modules)
    return {k: (floors[k], by_imports[k]) for k in floors if floors[k] != by_imports[k]}


@pytest.mark.slow  # parses every module of the package, as the guard does
def test_each_layer_sits_one_floor_above_the_highest_it_imports():
    assert _floated(_modules(), FLOORS) == {}


@pytest.mark.slow
def test_the_floor_guard_fails_on_a_layer_floated_above_its_imports():
    real = list(_modules())
    assert _floated(real, {**FLOORS, "_cli": 8}) == {"_cli": (8, 7)}
    # the arrow `pull` once had into the writer (its atomic directory) lifts `_oci` and all above
    pulled = [*real, ("hlobundle._oci._f", "from .._write import _atomic\n", False)]
    assert _floated(pulled, FLOORS) == {"_oci": (4, 6)}


@pytest.mark.slow  # parses every module of the package, as the guard does
def test_the_layer_guard_fails_on_each_kind_of_upward_import():
    real = list(_modules())
    broken = {
        "hlobundle._format._a": "from hlobundle import load\n",
        "hlobundle._format._b": "from .. import pack\n",
        "hlobundle._read._c": "import importlib\nimportlib.import_module('hlobundle._run._run')\n",
        "hlobundle._read._c2": "__import__('hlobundle._write._writer')\n",
        # a relative name, against the package the module sits in or its own name
        "hlobundle._format._c3": "import importlib\nimportlib.import_module('.._write._writer', __package__)\n",
        "hlobundle._format._c4": "from importlib import import_module\nimport_module('.._run', package=__package__)\n",
        "hlobundle._format._c5": "import importlib\nimportlib.import_module(f'hlobundle._oci.{x}')\n",
        "hlobundle._run._d": "def f():\n    from .._write import _writer\n",
        "hlobundle._interop._e": "from .._read import _reader\n",
        "hlobundle._oci._f": "def f():\n    from .._write import _atomic\n",
        # a room of the same floor: the floor would no longer say how deep its imports go
        "hlobundle._run._g": "from .._oci import _client\n",
        "hlobundle._remote._h": "from .._emit import _emit\n",
    }
    found = _upward(real + [(n, s, False) for n, s in broken.items()])
    assert {n for n, _ in found} == set(broken), found


@pytest.mark.slow
def test_the_ground_floor_guard_fails_on_an_import_out_of_its_room():
    real = list(_modules())
    broken = {
        "hlobundle._file_io._a": "from .._format._errors import LimitError\n",  # up a floor
        "hlobundle._isolation._b": "def f():\n    from .._terminal import _display\n",  # a room beside
        "hlobundle._terminal._c": "from hlobundle import load\n",  # the lazy surface
        "hlobundle._version": "from . import _compat\n",  # a leaf
    }
    found = _upward(real + [(n, s, False) for n, s in broken.items()])
    assert {n for n, _ in found} == set(broken), found


# `_format` is what a bundle *is*, in its imports too (issue 60): none of the machinery that moves
# a bundle's bytes, which `_bundle_io/` (the floor above it) runs for it: no child processes
# (`_isolation`), hashing threads (`_file_io`) or progress bars (`_terminal`), no processes,
# threads or signals of its own (`subprocess`, `multiprocessing`, `threading`, `concurrent`,
# `signal`), and no model-signing (signing is not the format's model).
MACHINERY = ("hlobundle._isolation", "hlobundle._file_io", "hlobundle._terminal")
NOT_THE_FORMAT_S = (
    "signal",
    "subprocess",
    "multiprocessing",
    "threading",
    "_thread",
    "concurrent",
    "model_signing",
)


@functools.cache
def _outside_imports(name: str, source: str, is_package: bool = False) -> tuple[str, ...]:
    """`_each_outside_import`'s names, found once per source: every guard asks."""
    return tuple(_each_outside_import(name, source, is_package))


def _each_outside_import(name: str, source: str, is_package: bool = False):
    """Every module (or name of one) `source` (module `name`) reaches by an absolute name, of
    the package or not, by what its names resolve to: `import` and `from` statements anywhere
    (`from jax import _src`: `jax._src`), an attribute reached through an imported name
    (`jax._src.core`), and dynamic imports under any name by a constant name (a relative one
    resolved as `_imports` does)."""
    m = _module(name, source, is_package)
    for node in _walk(m.tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level:
            yield node.module or ""
            yield from (f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            dotted = _dotted(node, m.bound)
            if "." in dotted and dotted.partition(".")[0] in m.bound.values():
                yield dotted
    for _, target in m.dynamic_imports():
        yield target


def _machinery_in_the_format(modules) -> list[tuple[str, str]]:
    """(importer, imported) for each import of `_format` from a machinery room of the ground
    floor (`MACHINERY`), or of a process, thread or signal module or model-signing
    (`NOT_THE_FORMAT_S`), under whatever name it is imported."""
    found = []
    for name, source, is_package in modules:
        if name != "hlobundle._format" and not name.startswith("hlobundle._format."):
            continue
        rooms = [t for t in _imports(name, source, is_package) if _ground(t) in MACHINERY]
        others = [
            t
            for t in _outside_imports(name, source, is_package)
            if t.split(".")[0] in NOT_THE_FORMAT_S
        ]
        found += [(name, t) for t in rooms + others]
    return found


@pytest.mark.slow
def test_the_format_imports_no_machinery():
    assert _machinery_in_the_format(_modules()) == []


@pytest.mark.slow
def test_the_format_guard_fails_on_each_way_machinery_comes_in():
    real = {name: (source, pkg) for name, source, pkg in _modules()}
    paths = real["hlobundle._format._paths"][0]
    broken = {
        # a real module of the format with a progress bar's import added
        "hlobundle._format._paths": paths + "\nfrom .._terminal import _progress\n",
        "hlobundle._format": "from .._file_io import _hashing_writer\n",  # the room's door
        "hlobundle._format._a": "def f():\n    from hlobundle._isolation import _child\n",
        "hlobundle._format._b": "import hlobundle._isolation._fork_servers\n",
        "hlobundle._format._c": "import importlib\nimportlib.import_module('.._file_io._libc', __package__)\n",
        "hlobundle._format._d": "import signal\n",
        "hlobundle._format._e": "def f():\n    from subprocess import run\n",
        "hlobundle._format._f": "__import__('subprocess')\n",
        "hlobundle._format._g": "import importlib\nimportlib.import_module('signal')\n",
        "hlobundle._format._h": "def f():\n    import model_signing.signing\n",
    }
    assert broken["hlobundle._format._paths"] != paths
    real.update((name, (source, name == "hlobundle._format")) for name, source in broken.items())
    found = _machinery_in_the_format([(n, s, p) for n, (s, p) in real.items()])
    assert {n for n, _ in found} == set(broken), found
    # the same imports elsewhere are the floors' business, not this guard's
    assert _machinery_in_the_format([("hlobundle._bundle_io._x", "import signal\n", False)]) == []


# `_format` is the model, the rules and the errors, and nothing that does (issue 69): it opens,
# maps and walks no file, starts no thread or process, and parses no MLIR. `_bundle_io/` reads a
# bundle's files for it and `_parse/` parses its programs. Each name is judged by what it
# resolves to (`import mmap as m`, `from os import walk as w`, `getattr(os, "scandir")`, an
# `importlib.import_module` of a constant name), and a path's methods are refused on any object,
# since which objects are paths cannot be read from the source.
DOES_NOT_READ_OR_PARSE = (
    "open",  # the builtin
    "builtins.open",
    "io.open",
    "io.FileIO",
    "os.open",
    "os.fdopen",
    "os.read",
    "os.pread",
    "os.walk",
    "os.fwalk",
    "os.scandir",
    "os.listdir",
    "mmap",
    "threading",
    "_thread",
    "multiprocessing",
    "jaxlib",  # its MLIR bindings (jaxlib.mlir) and the rest of it
    "mlir",  # MLIR's own Python bindings
    "jax.interpreters.mlir",
    "jax._src.interpreters.mlir",
    "hlobundle._mlir_context",
)
PATH_METHODS = frozenset(
    {"open", "read_bytes", "read_text", "write_bytes", "write_text", "iterdir"}
)


def _reached(m: _Module):
    """Every name `m`'s code uses, resolved through its imports: bare names (`open`), attribute
    chains (`os.walk`, `m.mmap` after `import mmap as m`) and `getattr` of a constant."""
    for node in ast.walk(m.tree):
        if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load):
            yield _dotted(node, m.bound)
        elif _is_getattr(node, m.bound):
            yield _dotted(node, m.bound)


def _path_methods(m: _Module):
    """Each use of a path's file method (`.open`, `.read_bytes`...), on whatever object."""
    for node in ast.walk(m.tree):
        if isinstance(node, ast.Attribute) and node.attr in PATH_METHODS:
            yield f".{node.attr}"
        elif _is_getattr(node, m.bound) and node.args[1].value in PATH_METHODS:
            yield f".{node.args[1].value}"


def _refused(target: str) -> bool:
    return any(target == f or target.startswith(f + ".") for f in DOES_NOT_READ_OR_PARSE)


def _reading_or_parsing_in_the_format(modules) -> list[tuple[str, str]]:
    """(module, what) for each thing a `_format` module opens, maps, walks, threads or parses
    with (`DOES_NOT_READ_OR_PARSE`, `PATH_METHODS`), imported or used, under whatever name."""
    found = []
    for name, source, is_package in modules:
        if name != "hlobundle._format" and not name.startswith("hlobundle._format."):
            continue
        m = _module(name, source, is_package)
        names = {
            *_imports(name, source, is_package),
            *_outside_imports(name, source, is_package),
            *_reached(m),
        }
        found += [(name, t) for t in sorted(t for t in names if _refused(t))]
        found += [(name, t) for t in sorted(set(_path_methods(m)))]
    return found


@pytest.mark.slow
def test_the_format_reads_no_file_and_parses_no_mlir():
    assert _reading_or_parsing_in_the_format(_modules()) == []


# Each way a file or MLIR could come back into the format, one module each.
_READING_OR_PARSING = {
    "import mmap\n": "mmap",
    "import mmap as m\n\nm.mmap(-1, 8)\n": "mmap",
    "def f():\n    from mmap import mmap as M\n    return M\n": "mmap",
    "import threading\n": "threading",
    "from multiprocessing import Pool as P\n": "multiprocessing",
    "def f(p):\n    return open(p).read()\n": "open",
    "import builtins\n\nbuiltins.open('f')\n": "builtins.open",
    "import io as x\n\nx.open('f')\n": "io.open",
    "import os\n\nos.open('f', os.O_RDONLY)\n": "os.open",
    "from os import open as o\n\no('f', 0)\n": "os.open",
    "import os as system\n\nsystem.walk('.')\n": "os.walk",
    "from os import walk as w\n\nw('.')\n": "os.walk",
    "import os\n\ngetattr(os, 'scandir')('.')\n": "os.scandir",
    "from os import scandir\n": "os.scandir",
    "def f(p):\n    return p.read_bytes()\n": ".read_bytes",
    "from pathlib import Path\n\nPath('x').read_text()\n": ".read_text",
    "def f(p):\n    with p.open() as g:\n        return g\n": ".open",
    "def f(p):\n    return getattr(p, 'read_bytes')()\n": ".read_bytes",
    "from jaxlib.mlir import ir\n": "jaxlib.mlir",
    "def f():\n    from jaxlib.mlir.dialects import stablehlo\n": "jaxlib.mlir.dialects",
    "import jaxlib.mlir.ir as ir\n": "jaxlib.mlir.ir",
    "import importlib as il\n\nil.import_module('mmap')\n": "mmap",
    "from .._mlir_context import new_context\n": "hlobundle._mlir_context",
    "from .. import _mlir_context as ctx\n": "hlobundle._mlir_context",
    "import hlobundle._mlir_context\n": "hlobundle._mlir_context",
    "import importlib\n\nimportlib.import_module('.._mlir_context', __package__)\n": (
        "hlobundle._mlir_context"
    ),
}


def test_the_reading_guard_fails_on_each_way_a_file_or_mlir_comes_in():
    for i, (source, what) in enumerate(_READING_OR_PARSING.items()):
        found = _reading_or_parsing_in_the_format([(f"hlobundle._format._m{i}", source, False)])
        assert what in {t for _, t in found}, (source, found)
    # the code that left the format, put back in a copy of the module it left
    paths = (ROOT / "hlobundle" / "_format" / "_paths.py").read_text()
    fields = (ROOT / "hlobundle" / "_format" / "_fields.py").read_text()
    opening = (ROOT / "hlobundle" / "_bundle_io" / "_opening.py").read_text()
    bounded = (ROOT / "hlobundle" / "_file_io" / "_bounded.py").read_text()
    walk = opening[opening.index("def walk(") :]
    read = bounded[bounded.index("def read_at_most(") :]
    copies = [
        ("hlobundle._format._paths", paths),
        ("hlobundle._format._fields", fields),
        ("hlobundle._format._paths", paths + "\nimport stat\n\n\n" + walk),
        ("hlobundle._format._fields", fields + "\n\n" + read),
    ]
    assert [
        sorted({t for _, t in _reading_or_parsing_in_the_format([(n, s, False)])})
        for n, s in copies
    ] == [
        [],
        [],
        ["os.walk"],
        ["open"],
    ]
    # what is not a file's I/O passes, and the same code outside the format is not its business
    fine = "import os\nfrom pathlib import PurePosixPath\n\n\ndef f(st: os.stat_result, p):\n    return p.opened, os.sep\n"
    assert _reading_or_parsing_in_the_format([("hlobundle._format._m", fine, False)]) == []
    assert (
        _reading_or_parsing_in_the_format([("hlobundle._bundle_io._x", "import mmap\n", False)])
        == []
    )


def _run_alone(modules) -> dict[str, tuple[str, str]]:
    """What the package runs as a process of its own, found where its source names it: a file
    beside a module, by its name (`Path(__file__).with_name("_portable_child.py")`), code given
    to `python -c` (a module's string constant; code written in the command itself is named by
    its line, and cannot be declared), a module given to `python -m`.

    **Returns:** {name (`module` or `module:CONSTANT`): (the package it sits in, its source)}."""
    modules = {name: (source, is_package) for name, source, is_package in modules}
    found = {}
    for name, (source, is_package) in modules.items():
        package = name if is_package else name.rpartition(".")[0]
        tree = _parse(source)
        for node in _walk(tree):
            if isinstance(node, ast.Constant) and str(node.value).endswith(".py"):
                beside = f"{package}.{node.value.removesuffix('.py')}"
                if beside in modules:
                    found[beside] = (package, modules[beside][0])
            elif isinstance(node, (ast.List, ast.Tuple)):
                found |= _command_line(node.elts, name, _strings(tree), modules)
    return found


def _strings(tree: ast.Module) -> dict[str, str]:
    """A module's top-level string constants, by name."""
    return {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
        for target in node.targets
        if isinstance(target, ast.Name)
    }


def _command_line(elts, name: str, strings: dict[str, str], modules) -> dict[str, tuple[str, str]]:
    """What a command line (`[sys.executable, "-c", CODE]`) in module `name` runs alone. Code
    given to `-c` is a module-level string constant, declared by its name; any other (written
    in the command, or a variable, an f-string, a call's result) is named by its line and
    cannot be declared, so that code the guard cannot read is never run alone."""
    package, found = name.rpartition(".")[0], {}
    for flag, what in zip(elts, elts[1:], strict=False):
        if not isinstance(flag, ast.Constant):
            continue
        if flag.value == "-c" and isinstance(what, ast.Name) and what.id in strings:
            found[f"{name}:{what.id}"] = (package, strings[what.id])
        elif flag.value == "-c":
            text = what.value if isinstance(what, ast.Constant) else ""
            found[f"{name}:code at line {what.lineno}"] = (package, str(text))
        elif flag.value == "-m" and isinstance(what, ast.Constant) and what.value in modules:
            if what.value not in THE_PACKAGE_AGAIN:  # the command line itself, a front door
                found[what.value] = (what.value.rpartition(".")[0], modules[what.value][0])
    return found


@pytest.mark.slow
def test_every_script_run_alone_is_declared():
    assert set(_run_alone(_modules())) == RUN_ALONE


@pytest.mark.slow  # over half a second alone (the edit loop's --durations, 2026-12-07)
def test_the_declaration_guard_finds_each_way_of_running_a_new_script():
    made_up = {
        "hlobundle._write._z": "from pathlib import Path\nCHILD = Path(__file__).with_name('_z_child.py')\n",
        "hlobundle._write._z_child": "import sys\n",
        "hlobundle._read._y": "import sys\nCODE = 'import os'\nARGV = [sys.executable, '-c', CODE]\n",
        "hlobundle._read._v": "import sys\nARGV = [sys.executable, '-c', 'import os']\n",
        "hlobundle._run._x": "import sys\nARGV = [sys.executable, '-m', 'hlobundle._run._w']\n",
        "hlobundle._run._w": "import sys\n",
    }
    found = _run_alone([*_modules(), *((n, s, False) for n, s in made_up.items())])
    new = {
        "hlobundle._write._z_child",
        "hlobundle._read._y:CODE",
        "hlobundle._read._v:code at line 2",
        "hlobundle._run._w",
    }
    assert set(found) - RUN_ALONE == new


def _bare_imports(source: str) -> set[str]:
    """The first names of every absolute import in `source` (`import _x`, `from _x import y`)."""
    names = set()
    for node in _walk(_parse(source)):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module.split(".")[0])
    return names


def _reaching_the_package(modules) -> list[tuple[str, str]]:
    """(script, module) for each module of the package that a script run alone imports, itself
    or through a module beside it or in the package's folder that it imports by its bare
    name."""
    modules = list(modules)
    sources = {name: source for name, source, _ in modules}
    found = []
    for script, (package, source) in _run_alone(modules).items():
        pending, seen = [(script, source)], {script}
        while pending:
            name, text = pending.pop()
            found += [(script, t) for t in _imports(name.partition(":")[0], text) if t]
            for n in _bare_imports(text):
                for beside in (f"{package}.{n}", f"hlobundle.{n}"):
                    if beside in sources and beside not in seen:
                        seen.add(beside)
                        pending.append((beside, sources[beside]))
    return found


@pytest.mark.slow
def test_scripts_run_alone_import_nothing_of_the_package():
    assert _reaching_the_package(_modules()) == []


@pytest.mark.slow
def test_the_script_guard_fails_on_each_way_a_script_reaches_the_package():
    real = {name: (source, pkg) for name, source, pkg in _modules()}
    iree = "hlobundle._run._backends._iree_compile"
    broken = {
        "hlobundle._isolation._portable_child": "from hlobundle._parse import _mlir\n",
        "hlobundle._isolation._fork_server": "def main():\n    from . import _child\n",
        "hlobundle._emit.run_shared": "import importlib\nimportlib.import_module('hlobundle._run._tolerance')\n",
        # through a module of the package's folder, imported by its bare name
        "hlobundle._isolation._jax_export_child": "import _mlir_context\n",
        "hlobundle._mlir_context": "from ._format import _limits\n",
        # code given to `python -c`
        iree: real[iree][0].replace(
            '"import os, resource, sys', '"import hlobundle, os, resource, sys'
        ),
    }
    assert broken[iree] != real[iree][0]
    real.update((name, (source, False)) for name, source in broken.items())
    found = _reaching_the_package([(n, s, p) for n, (s, p) in real.items()])
    assert {s for s, _ in found} == {
        "hlobundle._isolation._portable_child",
        "hlobundle._isolation._fork_server",
        "hlobundle._emit.run_shared",
        "hlobundle._isolation._jax_export_child",
        f"{iree}:_LIMIT_AND_EXEC",
    }, found


# Each foreign system read and written both ways: its room, and the modules of each direction.
ROOMS = {
    "hlobundle._interop._jax_export": [
        "hlobundle._write._jax_export",
        "hlobundle._run._backends._xla",
    ],
    "hlobundle._interop._reactant_server": [
        "hlobundle._write._reactant_server",
        "hlobundle._emit._reactant_server",
    ],
}


def _outside_rooms(modules) -> list[tuple[str, str]]:
    """(direction, room) for each direction that keeps its own copy of its foreign system's
    format: one that does not import its room, or that assigns again one of the room's
    module-level constants, under its name or another (`BATCH_LETTERS = ("n", "b")`)."""
    modules = list(modules)
    sources = {name: source for name, source, _ in modules}
    constants = {room: _literals(_parse(sources[room]).body) for room in ROOMS if room in sources}
    found = []
    for name, source, is_package in modules:
        imported = set(_imports(name, source, is_package))
        for room, directions in ROOMS.items():
            if name not in directions:
                continue
            mine = _literals(_walk(_parse(source)))
            theirs = constants.get(room, {})
            again = any(n in theirs or (v in theirs.values()) for n, v in mine.items())
            if room not in imported or again:
                found.append((name, room))
    return found


def _literals(nodes) -> dict[str, object]:
    """{name: value} for each assignment among `nodes` of a literal to a plain name (strings
    of a few characters, numbers and booleans left out: they name nothing)."""
    found: dict[str, object] = {}
    for node in nodes:
        targets = getattr(node, "targets", None) or [getattr(node, "target", None)]
        value = getattr(node, "value", None)
        if not isinstance(node, ast.Assign | ast.AnnAssign) or value is None:
            continue
        try:
            literal = ast.literal_eval(value)
        except ValueError:
            continue
        if isinstance(literal, bool | int | float) or (
            isinstance(literal, str) and len(literal) < 4
        ):
            continue
        found |= {t.id: literal for t in targets if isinstance(t, ast.Name)}
    return found


def test_each_foreign_system_has_one_room_that_both_directions_import():
    assert _outside_rooms(_modules()) == []


def test_the_room_guard_fails_on_a_direction_that_keeps_its_own_format():
    real = {name: (source, pkg) for name, source, pkg in _modules()}
    own = "BATCH_LETTERS = ('n', 'b')\n"  # the emitter spelling the format itself again
    real["hlobundle._emit._reactant_server"] = (own, False)
    found = _outside_rooms([(n, s, p) for n, (s, p) in real.items()])
    assert found == [("hlobundle._emit._reactant_server", "hlobundle._interop._reactant_server")]


def _module_level_jax(source: str) -> list[str]:
    """jax or enzyme_ad imported when the module is: at its top level, or inside a top-level
    `try`, `if` or `with` block (not inside a function)."""
    found: list[str] = []
    pending = list(_parse(source).body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            found.append(node.module or "")
        elif isinstance(node, (ast.Try, ast.If, ast.With)):
            for field in ("body", "orelse", "finalbody", "handlers"):
                for child in getattr(node, field, []):
                    pending.extend(child.body if isinstance(child, ast.ExceptHandler) else [child])
    return [m for m in found if m.split(".")[0] in ("jax", "enzyme_ad")]


def test_the_ground_floor_format_read_and_write_never_import_a_backend_or_jax_at_module_level():
    checked = {"_format", "_interop", "_read", "_output", "_write"}
    for name, source, _ in _modules():
        if _ground(name) is not None or _layer(name) in checked:
            assert _module_level_jax(source) == [], name


def test_the_jax_guard_fails_on_a_guarded_import():
    assert _module_level_jax("try:\n    import jax\nexcept ImportError:\n    jax = None\n")
    assert _module_level_jax("if True:\n    from jax import numpy\n")
    assert not _module_level_jax("def f():\n    import jax\n")


PRIVATE = ("jax._src", "enzyme_ad.jax.primitives")


def _private_symbols(modules) -> list[tuple[str, str]]:
    """(module, what) for each private jax or enzyme-ad module or symbol (`PRIVATE`) reached
    outside `_compat`, by what its names resolve to: `from jax import _src as src`,
    `jax._src.core` after `import jax`, a dynamic import under any name."""
    found = []
    for name, source, is_package in modules:
        if name == "hlobundle._compat":
            continue
        reached = set(_outside_imports(name, source, is_package))
        found += sorted(
            (name, r) for r in reached if any(r == p or r.startswith(p + ".") for p in PRIVATE)
        )
    return found


def test_private_jax_and_enzyme_symbols_are_used_only_in_compat():
    assert _private_symbols([*_modules(), *_benchmarks()]) == []


# The backends' door (`_run/_backends/__init__.py`): the rest of the house asks a `Backend`
# object what it can do, and never imports a backend's room or branches on a backend's name.
DOOR = "hlobundle._run._backends"
# Emitted scripts' templates are standalone programs (they import nothing of the package): a
# script's own BACKEND setting is its configuration, not the house asking which backend it holds.
TEMPLATES = {
    "hlobundle._emit.run_template",
    "hlobundle._emit.run_iree_template",
    "hlobundle._emit.run_shared",
}


def _past_the_door(modules) -> list[tuple[str, str]]:
    """(importer, imported) for each import of a backend's room from outside `_backends/`."""
    found = []
    for name, source, is_package in modules:
        if name == DOOR or name.startswith(DOOR + "."):
            continue
        for target in _imports(name, source, is_package):
            if target.startswith(DOOR + "._"):
                found.append((name, target))
    return found


def test_nothing_outside_the_backends_imports_a_backends_room():
    assert _past_the_door(_modules()) == []


# The benchmarks (`benchmarks/*.py`) measure what a user and the house call: the public API
# (`hlobundle`, `hlobundle.integrations`) and the rooms, as the top floor imports them, and a
# backend only through its door, `hlobundle._run._backends` (`kind(name)` or `resolve(name)`,
# then the `Backend` object), the one seam they are given into a backend's work.
def _benchmarks():
    for path in sorted((ROOT / "benchmarks").glob("*.py")):
        yield f"benchmarks.{path.stem}", path.read_text(), False


def _benchmark_errors(modules) -> list[str]:
    return [
        f"{name.replace('.', '/')}.py imports {target}: a benchmark reaches a backend only "
        "through its door, hlobundle._run._backends (kind(name) or resolve(name), then the "
        "Backend object's fields), or uses the public API"
        for name, target in _past_the_door(modules)
    ]


def test_benchmarks_reach_a_backend_only_through_its_door():
    assert _benchmark_errors(_benchmarks()) == []


def test_the_benchmark_guard_fails_on_a_backend_s_room():
    real = {name: source for name, source, _ in _benchmarks()}
    past = "    from hlobundle._run._backends._enzyme import prepared_for_hlo_call\n"
    broken = real["benchmarks.startup"].replace(
        "    import hlobundle\n", "    import hlobundle\n" + past, 1
    )
    assert broken != real["benchmarks.startup"]
    errors = _benchmark_errors([("benchmarks.startup", broken, False)])
    assert errors and errors[0].startswith(
        "benchmarks/startup.py imports hlobundle._run._backends._enzyme: a benchmark reaches"
    )


def test_the_door_guard_fails_on_each_way_past_it():
    broken = {
        "hlobundle._emit._a": "from .._run._backends import _iree\n",
        "hlobundle._write._b": "def f():\n    from .._run._backends._xla import to_exported\n",
        "hlobundle._cli._c": "import hlobundle._run._backends._enzyme\n",
        "hlobundle._serve._d": "import importlib\nimportlib.import_module('hlobundle._run._backends._iree')\n",
    }
    found = _past_the_door([(n, s, False) for n, s in broken.items()])
    assert {n for n, _ in found} == set(broken), found
    assert (
        _past_the_door([("hlobundle._emit._e", "from .._run._backends import Script\n", False)])
        == []
    )


def _branches_on_a_backend_name(source: str) -> list[int]:
    """Lines that name a backend outside the door: compare with a backend's name (`==`, `!=`,
    `in`, a `match` case), look one up by it (a dict keyed by backend names, `{"xla": ...}` or
    `dict(xla=...)`), hold one in a name (`_IREE = "iree"`, to compare later), or match a piece
    of one (`name.startswith("ir")`, `"ree" in name`): code that asks which backend it holds
    instead of what it can do."""
    from hlobundle._run import _backends

    names = set(_backends.NAMES) - {"auto"}  # `auto` is a choice, not a backend

    def named(node: ast.expr | None) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in names
        return isinstance(node, ast.Tuple | ast.List | ast.Set) and any(map(named, node.elts))

    lines = []
    for node in _walk(_parse(source)):
        if isinstance(node, ast.Compare) and any(map(named, [node.left, *node.comparators])):
            lines.append(node.lineno)
        elif isinstance(node, ast.Compare) and _a_piece_in(node, names):
            lines.append(node.lineno)
        elif isinstance(node, ast.MatchValue) and named(node.value):
            lines.append(node.value.lineno)
        elif isinstance(node, ast.Dict) and any(k is not None and named(k) for k in node.keys):
            lines.append(node.lineno)
        elif isinstance(node, ast.Assign | ast.AnnAssign) and named(node.value):
            lines.append(node.lineno)
        elif _keyed_by(node, names) or _matched_by_a_piece(node, names):
            lines.append(node.lineno)
    return sorted(set(lines))


def _pieces(node: ast.expr) -> list[str]:
    """The strings a constant or a tuple of constants holds."""
    elts = node.elts if isinstance(node, ast.Tuple | ast.List | ast.Set) else [node]
    return [e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]


def _matched_by_a_piece(node: ast.AST, names: set[str]) -> bool:
    """`x.startswith("ir")`, `x.endswith(("la", ...))`: the start or end of a backend's name."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args):
        return False
    pieces = [p for p in _pieces(node.args[0]) if p]
    if node.func.attr in ("startswith", "removeprefix"):
        return any(n.startswith(p) for p in pieces for n in names)
    if node.func.attr in ("endswith", "removesuffix"):
        return any(n.endswith(p) for p in pieces for n in names)
    return False


def _a_piece_in(node: ast.Compare, names: set[str]) -> bool:
    """`"ree" in name`: a piece of a backend's name looked for in a string."""
    return any(isinstance(op, ast.In | ast.NotIn) for op in node.ops) and any(
        p and p in n for p in _pieces(node.left) for n in names
    )


def _keyed_by(node: ast.AST, names: set[str]) -> bool:
    """`dict(xla=..., ...)`: a dict keyed by one of `names`."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "dict"
        and any(k.arg in names for k in node.keywords)
    )


# What names a backend's name outside the door, and why (module, the line's start): the values
# of a manifest's `executables[].compiler` (SPEC.md 2.7) name compilers, which the format
# defines, not backends; the caches' folder names on disk (one holds IREE's compiled modules).
FORMAT_TABLES = {
    ("hlobundle._format._fields", "COMPILERS = {"),
    ("hlobundle._read._cache", "CHECKS, IREE, JAX, HEADERS = "),
}


def _format_table(name: str, source: str, line: int) -> bool:
    text = source.splitlines()[line - 1].strip()
    return any(name == m and text.startswith(start) for m, start in FORMAT_TABLES)


def test_no_code_outside_the_backends_branches_on_a_backend_name():
    found = {
        name: lines
        for name, source, _ in _modules()
        if not (name == DOOR or name.startswith(DOOR + ".") or name in TEMPLATES)
        and (
            lines := [
                n for n in _branches_on_a_backend_name(source) if not _format_table(name, source, n)
            ]
        )
    }
    assert found == {}


def test_the_branch_guard_fails_on_each_kind_of_branch():
    assert _branches_on_a_backend_name("if backend == 'enzyme':\n    pass\n") == [1]
    assert _branches_on_a_backend_name("x = 1 if 'iree' != b else 2\n") == [1]
    assert _branches_on_a_backend_name("ok = b not in ('auto', 'xla')\n") == [1]
    assert _branches_on_a_backend_name("match b:\n    case 'xla':\n        pass\n") == [2]
    assert _branches_on_a_backend_name("if b != 'auto':\n    pass\n") == []
    # looked up by name: the branch written as a table
    assert _branches_on_a_backend_name("SUFFIX = {'xla': '.py', 'iree': '.vmfb'}\n") == [1]
    assert _branches_on_a_backend_name("x = dict(enzyme=1)[b]\n") == [1]
    assert _branches_on_a_backend_name("d = {'auto': 1, **more}\n") == []


def test_the_branch_guard_fails_on_a_table_of_backends_in_the_emitter():
    real = {name: source for name, source, _ in _modules()}
    emit = real["hlobundle._emit._emit"] + "\nNOTE = {'xla': 'jax', 'iree': 'iree-runtime'}\n"
    assert _branches_on_a_backend_name(emit) == [len(emit.splitlines())]


def _circles(modules, layer: str) -> list[list[str]]:
    """The import circles among one layer's modules, each as its modules, sorted. Every import
    counts (a function's, and one for a type checker alone): each is a module that cannot be
    read, or moved, without the other."""
    mine = [(n, s, p) for n, s, p in modules if n.startswith(f"hlobundle.{layer}.")]
    names = {n for n, _, _ in mine}
    graph = {n: set(_imports(n, s, p)) & names - {n} for n, s, p in mine}

    def reaches(start: str) -> set[str]:
        seen, pending = set(), [start]
        while pending:
            for target in graph.get(pending.pop(), ()):
                if target not in seen:
                    seen.add(target)
                    pending.append(target)
        return seen

    reached = {name: reaches(name) for name in graph}
    circles = {tuple(sorted(n for n in reached[name] if name in reached[n])) for name in graph}
    return sorted(list(c) for c in circles if len(c) > 1)


def test_the_writer_s_modules_import_one_another_without_a_circle():
    assert _circles(_modules(), "_write") == []


def test_the_circle_guard_fails_on_a_circle_through_a_type_checking_import():
    broken = {  # the circle the writer's options once made: plan -> writer -> expected -> plan
        "hlobundle._write._plan": "if TYPE_CHECKING:\n    from ._writer import PackOptions\n",
        "hlobundle._write._writer": "from . import _expected\nfrom ._plan import plan\n",
        "hlobundle._write._expected": "from ._plan import EXPECTED_FILE\n",
        "hlobundle._write._other": "from ._plan import plan\n",
    }
    found = _circles([(n, s, False) for n, s in broken.items()], "_write")
    assert found == [
        ["hlobundle._write._expected", "hlobundle._write._plan", "hlobundle._write._writer"]
    ]


# docs/layout.md's table of rooms, checked against the tree: each room a row on its floor, and
# each row naming every module of its room and no module its room lacks.


def _rooms_in_the_tree() -> dict[str, set[str]]:
    """Each room (a folder of modules, or a module of the package's own folder) and its modules."""
    package = ROOT / "hlobundle"
    rooms = {f"hlobundle/{p.name}": {p.name} for p in package.glob("*.py")}
    for folder in package.rglob("*"):
        modules = {p.name for p in folder.glob("*.py")} if folder.is_dir() else set()
        if modules:
            rooms[folder.relative_to(ROOT).as_posix() + "/"] = modules
    return rooms


def _floor_of(room: str) -> int:
    name = "hlobundle." + room.removeprefix("hlobundle/").rstrip("/").removesuffix(".py").replace(
        "/", "."
    )
    if name in GROUND:
        return 0
    layer = name.split(".")[1]
    return FLOORS[layer] if layer in FLOORS else _public_floors()[_public(name)]


def _public(module: str) -> str:
    """The public room that holds `module`: the facade (`hlobundle`, its `__init__`), or a
    public module or package of the package's folder (`hlobundle.errors`,
    `hlobundle.integrations`)."""
    parts = module.split(".")
    return "hlobundle" if len(parts) == 1 or parts[1] == "__init__" else ".".join(parts[:2])


@functools.cache
def _public_floors() -> dict[str, int]:
    return _floors_of_the_public(_modules())


def _floor(module: str, public: dict[str, int]) -> int:
    """The floor of `module`: the ground floor's 0, its layer's, or its public room's in `public`."""
    if _ground(module) is not None:
        return 0
    layer = _layer(module)
    return FLOORS[layer] if layer else public[_public(module)]


def _floors_of_the_public(modules) -> dict[str, int]:
    """Each public room's floor (the facade, `errors`, `__main__`, `integrations`), found as
    every layer's: one above the highest floor it imports (a layer's in `FLOORS`, the ground
    floor's 0, another public room's found the same way; the facade imports its lazy table's
    modules)."""
    modules = list(modules)
    known = {name for name, _, _ in modules} | set(LAZY.values())
    imported: dict[str, set[str]] = {}
    for name, source, is_package in modules:
        if _layer(name) is None and _ground(name) is None:
            targets = set(_imports(name, source, is_package)) & known
            imported.setdefault(_public(name), set()).update(targets)
    floors = dict.fromkeys(imported, 1)
    for _ in imported:  # as many rounds as rooms: a longer chain would be a circle
        floors = {
            room: 1 + max((_floor(t, floors) for t in targets if _public(t) != room), default=0)
            for room, targets in imported.items()
        }
    return floors


def _layout_errors(text: str, rooms: dict[str, set[str]]) -> list[str]:
    table = text.split("<!-- rooms: checked by tests/test_layers.py -->")[1].split(
        "<!-- /rooms -->"
    )[0]
    rows = [r.split("|")[1:4] for r in table.strip().splitlines()[2:]]
    errors, seen, floors = [], set(), []
    for floor, room, holds in ((f.strip(), r.strip().strip("`"), h) for f, r, h in rows):
        seen.add(room)
        floors.append(int(floor))
        if room not in rooms:
            errors.append(f"{room}: no such room")
            continue
        if int(floor) != _floor_of(room):
            errors.append(f"{room}: on floor {floor}, but its imports put it on {_floor_of(room)}")
        named = set(re.findall(r"`(\w+\.py)`", holds)) | ({room.split("/")[-1]} - {""})
        errors += [
            f"{room}: names {m}, which it does not have" for m in sorted(named - rooms[room])
        ]
        errors += [
            f"{room}: does not name {m}" for m in sorted(rooms[room] - named - {"__init__.py"})
        ]
    errors += [f"{room}: a room the table lacks" for room in sorted(rooms.keys() - seen)]
    if floors != sorted(floors):
        errors.append("the rows are not in the order of their floors")
    return errors


def test_the_layout_table_is_the_tree():
    assert _layout_errors((ROOT / "docs" / "layout.md").read_text(), _rooms_in_the_tree()) == []


@pytest.mark.slow
def test_the_public_modules_floors_are_found_from_their_imports():
    real = {name: (source, pkg) for name, source, pkg in _modules()}
    assert _floors_of_the_public(_with(real, {}))["hlobundle.errors"] == 2
    errors = real["hlobundle.errors"][0] + "\nfrom ._read import _reader\n"
    floors = _floors_of_the_public(_with(real, {"hlobundle.errors": (errors, False)}))
    assert floors["hlobundle.errors"] == 4
    # the facade one floor higher lifts what imports it (the adapters)
    init = real["hlobundle"][0] + "\nfrom ._cli import _main\n"
    floors = _floors_of_the_public(_with(real, {"hlobundle": (init, True)}))
    assert floors["hlobundle"] == 8 and floors["hlobundle.integrations"] == 9


def test_the_layout_guard_fails_on_each_way_the_table_drifts():
    text = (ROOT / "docs" / "layout.md").read_text()
    rooms = _rooms_in_the_tree()
    assert "names _nowhere.py" in " ".join(
        _layout_errors(text.replace("`_cache.py`", "`_nowhere.py`"), rooms)
    )  # a module that does not exist (and the one it replaced, unnamed)
    assert "does not name _new.py" in " ".join(
        _layout_errors(text, {**rooms, "hlobundle/_read/": rooms["hlobundle/_read/"] | {"_new.py"}})
    )
    assert "a room the table lacks" in " ".join(
        _layout_errors(text, {**rooms, "hlobundle/_new/": {"_a.py"}})
    )
    moved = text.replace("| 3 | `hlobundle/_read/`", "| 4 | `hlobundle/_read/`")
    assert "on floor 4, but its imports put it on 3" in " ".join(_layout_errors(moved, rooms))
    # a public module's floor set by hand
    lifted = text.replace("| 2 | `hlobundle/errors.py`", "| 8 | `hlobundle/errors.py`")
    assert "errors.py: on floor 8, but its imports put it on 2" in " ".join(
        _layout_errors(lifted, rooms)
    )


# Issue 69: each of these passed every guard (a mutation in a copy of the tree); each guard now
# checks what an import or a name resolves to, and is shown to catch the kind.
def _with(real: dict, broken: dict) -> list[tuple[str, str, bool]]:
    """The package's modules with `broken`'s ({name: (source, is_package)}) put in or over."""
    return [(n, s, p) for n, (s, p) in {**real, **broken}.items()]


@pytest.mark.slow
def test_the_layer_guard_fails_on_an_import_spelled_another_way():
    real = {name: (source, pkg) for name, source, pkg in _modules()}
    broken = {
        "hlobundle._format._m1": (
            "from importlib import import_module as load_module\n"
            "load_module('hlobundle._write._writer')\n",
            False,
        ),
        "hlobundle._format._m2": (
            "import importlib as il\nil.import_module('hlobundle._write._writer')\n",
            False,
        ),
        "hlobundle._read._m3": (
            "import importlib\nimportlib.import_module('hlobundle._write.' + '_writer')\n",
            False,
        ),
        # a relative name in a package's `__init__.py`, against itself or a named package
        "hlobundle._read": (
            real["hlobundle._read"][0]
            + "\nimport importlib\nimportlib.import_module('.._write._writer', __name__)\n",
            True,
        ),
        "hlobundle._oci": (
            real["hlobundle._oci"][0]
            + "\nfrom importlib import import_module\nimport_module('._writer', 'hlobundle._write')\n",
            True,
        ),
        # the facade, which imports every floor, from a lower one
        "hlobundle._run._m4": ("import hlobundle\n\ndef f():\n    return hlobundle.pack\n", False),
        "hlobundle._file_io._m5": ("def f():\n    import hlobundle as hb\n    return hb\n", False),
        "hlobundle._read._m6": ("from hlobundle import __version__\n", False),
    }
    found = _upward(_with(real, broken))
    assert {n for n, _ in found} == set(broken), found


@pytest.mark.slow
def test_every_dynamic_import_names_a_constant_outside_the_named_places():
    modules = list(_modules())
    assert _dynamic_imports(modules) == []
    computing = {
        name
        for name, source, is_package in modules
        for call, _ in _module(name, source, is_package).dynamic_imports()
        if _constant_text(call.args[0], _module(name, source, is_package).strings) is None
    }
    present = {name for name, _, _ in modules} & DYNAMIC_IMPORTS.keys()
    assert present <= computing, "a named place that computes no name any more: remove it"


def test_the_dynamic_import_guard_fails_on_a_name_it_cannot_read():
    broken = {
        "hlobundle._read._a": "import importlib\n\ndef f(x):\n    importlib.import_module(x)\n",
        "hlobundle._read._b": "from importlib import import_module as load\nload(f'hlobundle.{x}')\n",
        "hlobundle._write._c": "def f(x):\n    __import__('hlobundle._write.' + x)\n",
    }
    found = _dynamic_imports([(n, s, False) for n, s in broken.items()])
    assert {n for n, _ in found} == set(broken), found
    fine = "import importlib\nimportlib.import_module('hlobundle._write.' + '_writer')\n"
    assert _dynamic_imports([("hlobundle._read._d", fine, False)]) == []


@pytest.mark.slow
def test_the_format_guard_fails_on_threads_and_processes():
    real = {name: (source, pkg) for name, source, pkg in _modules()}
    broken = {
        "hlobundle._format._t1": ("import threading\n", False),
        "hlobundle._format._t2": ("def f():\n    from multiprocessing import Pool\n", False),
        "hlobundle._format._t3": ("from concurrent.futures import ThreadPoolExecutor\n", False),
        "hlobundle._format._t4": (
            "from importlib import import_module as load\nload('multiprocessing')\n",
            False,
        ),
    }
    found = _machinery_in_the_format(_with(real, broken))
    assert {n for n, _ in found} == set(broken), found


def test_the_door_guard_fails_on_a_private_name_reached_as_an_attribute():
    broken = {
        "hlobundle._emit._p1": "from .._run import _backends\n\n_backends._backend('iree')\n",
        "hlobundle._cli._p2": "import hlobundle._run._backends as door\n\ndoor._ROOMS\n",
        "hlobundle._serve._p3": "def f():\n    import hlobundle\n    hlobundle._run._backends._backend('xla')\n",
    }
    found = _past_the_door([(n, s, False) for n, s in broken.items()])
    assert {n for n, _ in found} == set(broken), found
    fine = "from .._run import _backends\n\n_backends.resolve('auto')\n"
    assert _past_the_door([("hlobundle._emit._p4", fine, False)]) == []


def test_the_branch_guard_fails_on_a_name_held_or_matched_by_a_piece():
    assert _branches_on_a_backend_name("_IREE = 'iree'\n") == [1]
    assert _branches_on_a_backend_name("def f():\n    name: str = 'enzyme'\n") == [2]
    assert _branches_on_a_backend_name("ok = name.startswith('ir')\n") == [1]
    assert _branches_on_a_backend_name("ok = name.endswith(('la', 'me'))\n") == [1]
    assert _branches_on_a_backend_name("ok = 'ree' in name\n") == [1]
    assert _branches_on_a_backend_name("ok = path.startswith('/tmp')\n") == []
    assert _branches_on_a_backend_name("MODE = 'auto'\n") == []


@pytest.mark.slow
def test_the_declaration_guard_fails_on_code_given_through_a_variable():
    made_up = {
        "hlobundle._read._u": "import sys\n\ndef f(code):\n    return [sys.executable, '-c', code]\n",
        "hlobundle._read._t": "import sys\nARGV = [sys.executable, '-c', f'import {x}']\n",
    }
    found = _run_alone([*_modules(), *((n, s, False) for n, s in made_up.items())])
    assert {k.partition(":")[0] for k in set(found) - RUN_ALONE} == set(made_up), found


@pytest.mark.slow
def test_the_room_guard_fails_on_a_direction_that_spells_its_room_s_constant_again():
    real = {name: (source, pkg) for name, source, pkg in _modules()}
    emit = real["hlobundle._emit._reactant_server"][0]
    broken = {
        # the room imported, and its constant spelled again beside it, under its name or another
        "hlobundle._emit._reactant_server": (emit + "\nBATCH_LETTERS = ('n', 'b')\n", False),
        "hlobundle._write._reactant_server": (
            real["hlobundle._write._reactant_server"][0] + "\n_BATCH = ('n', 'b')\n",
            False,
        ),
    }
    found = _outside_rooms(_with(real, broken))
    assert {n for n, _ in found} == set(broken), found


def test_the_compat_guard_fails_on_each_way_to_a_private_symbol():
    broken = {
        "hlobundle._run._j1": "from jax import _src as src\n",
        "hlobundle._run._j2": "import jax\n\ndef f():\n    return jax._src.core\n",
        "hlobundle._run._j3": "from importlib import import_module as load\nload('jax._src.core')\n",
        "hlobundle._run._j4": "from enzyme_ad.jax import primitives as p\n",
        "benchmarks.b": "import jax as j\nj._src.dispatch\n",
    }
    found = _private_symbols([(n, s, False) for n, s in broken.items()])
    assert {n for n, _ in found} == set(broken), found
    assert _private_symbols([("hlobundle._compat", broken["hlobundle._run._j1"], False)]) == []


@pytest.mark.slow  # parses every module of the package, as the guard does
def test_the_dynamic_import_guards_see_an_importer_reached_through_getattr():
    # `getattr(importlib, "import_module")` is `importlib.import_module` (issue 69's rule: what
    # the source means, not how it is spelled); before, `_dotted` read no name there, so
    # neither the layer guard nor the dynamic-import guard saw the import
    upward = {
        "hlobundle._read._g1": (
            "import importlib\ngetattr(importlib, 'import_module')('hlobundle._write._writer')\n"
        ),
        "hlobundle._format._g2": "import builtins\ngetattr(builtins, '__import__')('hlobundle._run')\n",
    }
    found = _upward([*_modules(), *((n, s, False) for n, s in upward.items())])
    assert {n for n, _ in found} == set(upward), found
    computed = "import importlib\n\ndef f(x):\n    getattr(importlib, 'import_module')(x)\n"
    assert _dynamic_imports([("hlobundle._read._g3", computed, False)]) == [
        ("hlobundle._read._g3", 4)
    ]


# Code run from data, or data that runs code as it is read: nothing in the package evaluates
# text or unpickles (a bundle, a request and a .pt2 are hostile input, docs/security.md). The
# one exception is torch's own loader of a .pt2, which the writer calls inside
# `_torch_archive.restricted_loads` (every `torch.load` forced to weights_only) after
# `refuse_code` refused each entry torch would unpickle unrestricted (docs/torch.md).
RUNS_DATA = {
    *(f"{m}{f}" for m in ("", "builtins.") for f in ("eval", "exec", "compile")),
    *(
        f"{m}.{f}"
        for m in ("pickle", "_pickle", "dill", "cloudpickle", "joblib")
        for f in ("load", "loads", "Unpickler")
    ),
    "marshal.load",
    "marshal.loads",
    "shelve.open",
    "runpy.run_path",
    "runpy.run_module",
    "code.InteractiveInterpreter",
    "torch.load",
    "torch.export.load",
    "torch.jit.load",
}
RUNS_DATA_ALLOWED = {("hlobundle._write._torch", "torch.export.load")}
# numpy's readers unpickle an object array only when told to
_NUMPY_READERS = {
    "numpy.load",
    "numpy.lib.format.read_array",
    "np.load",
    "np.lib.format.read_array",
}


def _runs_data(modules) -> list[tuple[str, int, str]]:
    """(module, line, what) for each use of `RUNS_DATA` (called or not: `f = eval` is one), and
    each numpy reader given `allow_pickle` other than a constant False, outside
    `RUNS_DATA_ALLOWED`."""
    found = []
    for name, source, is_package in modules:
        m = _module(name, source, is_package)
        for node in _walk(m.tree):
            dotted = (
                _dotted(node, m.bound)
                if isinstance(node, ast.Name | ast.Attribute | ast.Call)
                else ""
            )
            if isinstance(node, ast.ImportFrom):  # `from marshal import loads`
                target = _from_target(node, m.package)
                dotted = next(
                    (f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in RUNS_DATA),
                    "",
                )
            if dotted in RUNS_DATA and (name, dotted) not in RUNS_DATA_ALLOWED:
                found.append((name, node.lineno, dotted))
            if isinstance(node, ast.Call) and _dotted(node.func, m.bound) in _NUMPY_READERS:
                pickles = [k.value for k in node.keywords if k.arg == "allow_pickle"]
                if any(not (isinstance(v, ast.Constant) and v.value is False) for v in pickles):
                    found.append((name, node.lineno, "allow_pickle"))
    return found


@pytest.mark.slow
def test_nothing_in_the_package_evaluates_text_or_unpickles():
    assert _runs_data(_modules()) == []


def test_the_unpickling_guard_fails_on_each_way_to_run_data():
    broken = {
        "hlobundle._read._x1": "def f(text):\n    return eval(text)\n",
        "hlobundle._read._x2": "import builtins\nrun = getattr(builtins, 'exec')\n",
        "hlobundle._serve._x3": "import pickle as p\n\ndef f(b):\n    return p.loads(b)\n",
        "hlobundle._read._x4": "from marshal import loads\n",
        "hlobundle._read._x5": "import numpy as np\n\ndef f(p, x):\n    return np.load(p, allow_pickle=x)\n",
        "hlobundle._interop._x6": "import torch\ntorch.export.load('m.pt2')\n",
        "hlobundle._write._x7": "def f(s):\n    return compile(s, 'f', 'exec')\n",
    }
    found = _runs_data([(n, s, False) for n, s in broken.items()])
    assert {n for n, _, _ in found} == set(broken), found
    fine = "import numpy as np\n\ndef f(p, lowered):\n    lowered.compile()\n    np.load(p, allow_pickle=False)\n"
    assert _runs_data([("hlobundle._read._x8", fine, False)]) == []


# Ways to import that no `import` statement or importer call shows: an importer held in a
# variable (`f = importlib.import_module`), reached through a namespace's dict
# (`vars(importlib)["import_module"]`), a file loaded as a module (`spec_from_file_location`,
# `exec_module`), or a module taken from `sys.modules` by a name the guards cannot read or that
# is the package's. Allowed only where `HIDDEN_IMPORTS` says why.
HIDDEN_IMPORTS = {
    "hlobundle._isolation._fork_server": "runs a child script by its path (RUN_ALONE's)",
}
_LOADERS = {
    "importlib.util.spec_from_file_location",
    "importlib.util.module_from_spec",
    "importlib.machinery.SourceFileLoader",
    "importlib.machinery.SourcelessFileLoader",
    "importlib.reload",
    "zipimport.zipimporter",
}
_NAMESPACES = {"importlib", "builtins", "importlib.util", "sys"}


def _hidden_imports(modules) -> list[tuple[str, int]]:
    """(module, line) of each import done a way the other guards cannot follow, outside
    `HIDDEN_IMPORTS`."""
    found = []
    for name, source, is_package in modules:
        if name in HIDDEN_IMPORTS:
            continue
        m = _module(name, source, is_package)
        called = {id(n.func) for n in _walk(m.tree) if isinstance(n, ast.Call)}
        for node in _walk(m.tree):
            if isinstance(node, ast.Name | ast.Attribute) and id(node) not in called:
                if _dotted(node, m.bound) in IMPORTERS:  # held, not called
                    found.append((name, node.lineno))
            if not isinstance(node, ast.Call):
                continue
            func = _dotted(node.func, m.bound)
            loads = func in _LOADERS or (
                isinstance(node.func, ast.Attribute)
                and node.func.attr in ("exec_module", "load_module")
            )
            namespace = func == "vars" and any(
                _dotted(a, m.bound) in _NAMESPACES for a in node.args
            )
            if loads or namespace:
                found.append((name, node.lineno))
        for node in _walk(m.tree):
            if isinstance(node, ast.Attribute) and node.attr == "__dict__":
                if _dotted(node.value, m.bound) in _NAMESPACES:
                    found.append((name, node.lineno))
            if isinstance(node, ast.Subscript | ast.Call):
                target = node.value if isinstance(node, ast.Subscript) else node.func
                if isinstance(node, ast.Call) and isinstance(target, ast.Attribute):
                    if _dotted(target.value, m.bound) != "sys.modules" or not node.args:
                        continue
                    key = node.args[0]
                elif isinstance(node, ast.Subscript) and _dotted(target, m.bound) == "sys.modules":
                    key = node.slice
                else:
                    continue
                text = _constant_text(key, m.strings)
                if text is None or text.partition(".")[0] == "hlobundle":
                    found.append((name, node.lineno))
    return found


@pytest.mark.slow
def test_no_module_imports_a_way_the_guards_cannot_follow():
    assert _hidden_imports(_modules()) == []


def test_the_hidden_import_guard_fails_on_each_way_past_the_others():
    broken = {
        "hlobundle._read._h1": "import importlib\nf = importlib.import_module\nf('hlobundle._write._writer')\n",
        "hlobundle._read._h2": "import importlib\nvars(importlib)['import_module']('hlobundle._write')\n",
        "hlobundle._read._h3": (
            "import importlib.util as u\nspec = u.spec_from_file_location('w', 'w.py')\n"
            "spec.loader.exec_module(u.module_from_spec(spec))\n"
        ),
        "hlobundle._read._h4": "import sys\nw = sys.modules['hlobundle._write._writer']\n",
        "hlobundle._read._h5": "import sys\n\ndef f(n):\n    return sys.modules.get(n)\n",
        "hlobundle._read._h6": "import builtins\nbuiltins.__dict__['__import__']('hlobundle._write')\n",
    }
    found = _hidden_imports([(n, s, False) for n, s in broken.items()])
    assert {n for n, _ in found} == set(broken), found
    fine = "import sys\nimport importlib\njax = sys.modules.get('jax')\nimportlib.import_module('json')\n"
    assert _hidden_imports([("hlobundle._read._h7", fine, False)]) == []

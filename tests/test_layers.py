"""The package's floors (docs/layout.md): imports only go down.

    8  the public modules: hlobundle, errors, __main__, integrations
    7  _cli (commands)
    6  _serve (OIP v2)
    5  _write (pack)          _remote (remote load)   _emit (run.py)
    4  _run (backends)        _oci (push, pull)
    3  _interop (foreign)     _read (load, verify)
    2  _bundle_io (a bundle's bytes through the ground floor)   _output (where a bundle is written)
    1  _format (what a bundle is)
    0  the ground floor (`GROUND`)

A layer imports its own modules and the floors below it, never one above nor another room of its
own floor; and each layer sits one floor above the highest it imports (`FLOORS`), so that the
floors show how deep each room's imports go. The writer imports the runner it calls (expected outputs, backward modules), nothing registers itself
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

The benchmarks (`benchmarks/*.py`) are held to the backends' door and to private jax symbols
in `_compat` alone, as the package is.

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
ALLOWED_UPWARD = {
    ("hlobundle._read._reader", "hlobundle._run._function"),  # Bundle.function()
    ("hlobundle._read._reader", "hlobundle._run._backends"),  # Bundle.to_exported(), BackendName
}
LAZY = {name: "hlobundle" + module for name, module in hlobundle._LAZY.items()}
# Each source is parsed once for all the tests (the trees are only read): every test walks the
# whole package, and parsing it again took most of each one's time.
_parse = functools.cache(ast.parse)


def _modules():
    for path in sorted((ROOT / "hlobundle").rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        yield ".".join(parts), path.read_text(), is_package


def _imports(name: str, source: str, is_package: bool = False):
    """Every module of the package that `source` (module `name`) imports: `import` and `from`
    statements anywhere (functions included), names of the top-level package's lazy surface
    (`from hlobundle import load`), and `importlib.import_module` calls (`"hlobundle..."`, a
    relative name with its package, or an f-string's constant start)."""
    package = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(_parse(source)):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("hlobundle"):
                yield target
                for alias in node.names:  # `from . import _x` imports a module
                    yield (
                        LAZY.get(alias.name, f"{target}.{alias.name}")
                        if target == "hlobundle"
                        else f"{target}.{alias.name}"
                    )
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.startswith("hlobundle"))
        elif isinstance(node, ast.Call) and _is_import_module(node.func) and node.args:
            target = _imported_by_name(node, name, package)
            yield target if target.startswith("hlobundle") else ""


def _imported_by_name(call: ast.Call, name: str, package: str) -> str:
    """The module an `import_module` call names: an absolute name, a relative one resolved
    against its `package` argument (`__package__`, or `__name__`, which a package's
    `__init__` passes), or the package an f-string's constant start names
    (`f"hlobundle._write.{x}"`: some module of `hlobundle._write`)."""
    first = call.args[0]
    if isinstance(first, ast.JoinedStr):
        start = first.values[0] if first.values else None
        text = start.value if isinstance(start, ast.Constant) else ""
        return str(text).rpartition(".")[0]
    if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
        return ""
    if not first.value.startswith("."):
        return first.value
    anchor = call.args[1] if len(call.args) > 1 else None
    anchor = next((k.value for k in call.keywords if k.arg == "package"), anchor)
    by_name = isinstance(anchor, ast.Name) and anchor.id == "__name__"
    return importlib.util.resolve_name(first.value, name if by_name else package)


def _is_import_module(func: ast.expr) -> bool:
    """`importlib.import_module`, `import_module` or `__import__`."""
    return (isinstance(func, ast.Attribute) and func.attr == "import_module") or (
        isinstance(func, ast.Name) and func.id in ("import_module", "__import__")
    )


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
# (`_isolation`), hashing threads (`_file_io`) or progress bars (`_terminal`), no process or
# signal handling of its own, and no model-signing (signing is not the format's model).
MACHINERY = ("hlobundle._isolation", "hlobundle._file_io", "hlobundle._terminal")
NOT_THE_FORMAT_S = ("signal", "subprocess", "model_signing")


def _outside_imports(name: str, source: str, is_package: bool = False):
    """Every module `source` (module `name`) imports by an absolute name, of the package or
    not: `import` and `from` statements anywhere, and `importlib.import_module` and
    `__import__` calls by a constant name (a relative one resolved as `_imports` does)."""
    package = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(_parse(source)):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level:
            yield node.module or ""
        elif isinstance(node, ast.Call) and _is_import_module(node.func) and node.args:
            yield _imported_by_name(node, name, package)


def _machinery_in_the_format(modules) -> list[tuple[str, str]]:
    """(importer, imported) for each import of `_format` from a machinery room of the ground
    floor (`MACHINERY`), or of `signal`, `subprocess` or model-signing."""
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
    tensors = real["hlobundle._format._tensors"][0]
    broken = {
        # the import the tensor files' module had, back in it
        "hlobundle._format._tensors": tensors + "\nfrom .._terminal import _progress\n",
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
    assert broken["hlobundle._format._tensors"] != tensors
    real.update((name, (source, name == "hlobundle._format")) for name, source in broken.items())
    found = _machinery_in_the_format([(n, s, p) for n, (s, p) in real.items()])
    assert {n for n, _ in found} == set(broken), found
    # the same imports elsewhere are the floors' business, not this guard's
    assert _machinery_in_the_format([("hlobundle._bundle_io._x", "import signal\n", False)]) == []


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
        for node in ast.walk(tree):
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
    """What a command line (`[sys.executable, "-c", CODE]`) in module `name` runs alone."""
    package, found = name.rpartition(".")[0], {}
    for flag, what in zip(elts, elts[1:], strict=False):
        if not isinstance(flag, ast.Constant) or not isinstance(what, (ast.Name, ast.Constant)):
            continue
        if flag.value == "-c" and isinstance(what, ast.Name) and what.id in strings:
            found[f"{name}:{what.id}"] = (package, strings[what.id])
        elif flag.value == "-c" and isinstance(what, ast.Constant):
            found[f"{name}:code at line {what.lineno}"] = (package, str(what.value))
        elif flag.value == "-m" and isinstance(what, ast.Constant) and what.value in modules:
            if what.value != "hlobundle":  # the command line itself
                found[what.value] = (what.value.rpartition(".")[0], modules[what.value][0])
    return found


@pytest.mark.slow
def test_every_script_run_alone_is_declared():
    assert set(_run_alone(_modules())) == RUN_ALONE


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
    for node in ast.walk(_parse(source)):
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


def test_scripts_run_alone_import_nothing_of_the_package():
    assert _reaching_the_package(_modules()) == []


def test_the_script_guard_fails_on_each_way_a_script_reaches_the_package():
    real = {name: (source, pkg) for name, source, pkg in _modules()}
    iree = "hlobundle._run._backends._iree_compile"
    broken = {
        "hlobundle._isolation._portable_child": "from hlobundle._format import _mlir\n",
        "hlobundle._isolation._fork_server": "def main():\n    from . import _child\n",
        "hlobundle._emit.run_shared": "import importlib\nimportlib.import_module('hlobundle._format._tolerance')\n",
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
    """(direction, room) for each direction that does not import its room."""
    found = []
    for name, source, is_package in modules:
        imported = set(_imports(name, source, is_package))
        for room, directions in ROOMS.items():
            if name in directions and room not in imported:
                found.append((name, room))
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


def test_private_jax_and_enzyme_symbols_are_used_only_in_compat():
    for name, source, _ in [*_modules(), *_benchmarks()]:
        if name == "hlobundle._compat":
            continue
        assert "jax._src" not in source and "enzyme_ad.jax import primitives" not in source, name


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
    """Lines that compare with a backend's name (`==`, `!=`, `in`, a `match` case) or look one
    up by it (a dict keyed by backend names, `{"xla": ...}` or `dict(xla=...)`): code that asks
    which backend it holds instead of what it can do."""
    from hlobundle._run import _backends

    names = set(_backends.NAMES) - {"auto"}  # `auto` is a choice, not a backend

    def named(node: ast.expr) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in names
        return isinstance(node, ast.Tuple | ast.List | ast.Set) and any(map(named, node.elts))

    lines = []
    for node in ast.walk(_parse(source)):
        if isinstance(node, ast.Compare) and any(map(named, [node.left, *node.comparators])):
            lines.append(node.lineno)
        elif isinstance(node, ast.MatchValue) and named(node.value):
            lines.append(node.value.lineno)
        elif isinstance(node, ast.Dict) and any(k is not None and named(k) for k in node.keys):
            lines.append(node.lineno)
        elif _keyed_by(node, names):
            lines.append(node.lineno)
    return lines


def _keyed_by(node: ast.AST, names: set[str]) -> bool:
    """`dict(xla=..., ...)`: a dict keyed by one of `names`."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "dict"
        and any(k.arg in names for k in node.keywords)
    )


# The one table keyed by such a name outside the door, and why: the values of a manifest's
# `executables[].compiler` (SPEC.md 2.7) name compilers, which the format defines, not backends.
FORMAT_TABLES = {("hlobundle._format._fields", "COMPILERS = {")}


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
TOP = max(FLOORS.values()) + 1  # the public modules above every layer


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
    return FLOORS.get(layer, TOP)


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

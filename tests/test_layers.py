"""The package's layers (README, "Layout of the repository"): imports only go down.

    _format  <-  _read  <-  _write  <-  _run  <-  _emit  <-  _serve  <-  _cli
    (what a bundle is) (load, verify)  (pack)   (backends) (run.py)  (OIP v2)  (commands)

A layer imports its own modules and the layers to its left, never one to its right. The
documented exceptions are `Bundle.function()` and `Bundle.to_exported()`, the entry points from
a read bundle into the runner, which import `_run._function` and the xla backend inside the method (and `_run` registers how to run a
module into `_write`, which never imports `_run`).
"""

from __future__ import annotations

import ast

from helpers import ROOT

ORDER = ["_format", "_read", "_write", "_run", "_emit", "_serve", "_cli"]
LEAVES = {
    "hlobundle._version",
    "hlobundle._compat",
    "hlobundle._progress",
}  # import nothing of the package
ALLOWED_UPWARD = {
    ("hlobundle._read._reader", "hlobundle._run._function"),  # Bundle.function()
    ("hlobundle._read._reader", "hlobundle._run._backends._xla"),  # Bundle.to_exported()
}


def _modules():
    for path in sorted((ROOT / "hlobundle").rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        yield ".".join(parts), path


def _imports(name: str, path):
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("hlobundle"):
                yield target
                for alias in node.names:  # `from . import _x` imports a module
                    yield f"{target}.{alias.name}"
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.startswith("hlobundle"))


def _layer(module: str) -> int | None:
    parts = module.split(".")
    return ORDER.index(parts[1]) if len(parts) > 1 and parts[1] in ORDER else None


def test_imports_only_go_down():
    known = {name for name, _ in _modules()}
    upward = []
    for name, path in _modules():
        mine = _layer(name)
        for target in _imports(name, path):
            if target not in known or target in LEAVES or target == "hlobundle":
                continue
            theirs = _layer(target)
            if name in LEAVES or name == "hlobundle._portable_child":
                upward.append((name, target))
            elif mine is not None and theirs is not None and theirs > mine:
                if (name, target) not in ALLOWED_UPWARD:
                    upward.append((name, target))
    assert upward == []


def test_format_read_and_write_never_import_a_backend_or_jax_at_module_level():
    for name, path in _modules():
        if _layer(name) is None or _layer(name) > ORDER.index("_write"):
            continue
        tree = ast.parse(path.read_text())
        top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        modules = [a.name for n in top if isinstance(n, ast.Import) for a in n.names]
        modules += [n.module or "" for n in top if isinstance(n, ast.ImportFrom) and not n.level]
        assert not [m for m in modules if m.split(".")[0] in ("jax", "enzyme_ad")], name


def test_private_jax_and_enzyme_symbols_are_used_only_in_compat():
    for name, path in _modules():
        if name == "hlobundle._compat":
            continue
        text = path.read_text()
        assert "jax._src" not in text and "enzyme_ad.jax import primitives" not in text, name

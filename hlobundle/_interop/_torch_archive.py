"""What a `.pt2` (torch.export.save's zip) may hold before torch.export.load reads it.

torch.export.load runs code a file can carry: an opaque-object constant goes through
`pickle.loads`, a custom-object constant through TorchScript's unpickler, a library under
`data/aotinductor/` is loaded as native code, and weights, constants and sample inputs go
through `torch.load`, with `weights_only=False` where a payload is marked `use_pickle` or where
the restricted load fails. `refuse_code` reads the zip's directory and the payload configs (JSON)
and refuses the first three by entry; `restricted_loads` forces every `torch.load` of the call to
`weights_only=True` (docs/security.md, docs/torch.md). A compressed entry is refused too:
torch.export.save stores every entry as it is, and torch's reader would inflate one whole into
memory (a zip bomb), so that what torch reads is bounded by the file's size.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from .._format._errors import InputError

MAX_ENTRIES = 1 << 20  # a model of a million weights; the zip's directory is read whole
MAX_CONFIG_BYTES = 64 << 20  # a payload config (JSON, a few hundred bytes a weight)
_ARGUMENT = "from_torch_export"
_FORCE = "TORCH_FORCE_WEIGHTS_ONLY_LOAD"
_FORCE_NOT = "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"
_SAFE_NAME = re.compile(r"[A-Za-z0-9_.\-]{0,4096}\Z")


def refuse_code(path: Path) -> None:
    """Raise an `InputError` naming the first entry of `path` that torch would unpickle
    unrestricted or load as native code, or that is compressed (inflated whole)."""
    names = _Names()
    try:
        with zipfile.ZipFile(path) as zf:
            infos = _entries(zf, path)
            for info in infos:
                _refuse_entry(info, names, path)
            for info in infos:
                inside = _inside(info.filename)
                if inside.endswith("_config.json"):
                    _refuse_config(zf, info, names, path)
                elif inside.startswith("models/") and inside.endswith(".json"):
                    _refuse_names(_named(_json_entry(zf, info, path)), inside, path)
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        if isinstance(e, FileNotFoundError):
            raise InputError(f"{path}: no such file", argument=_ARGUMENT) from None
        raise InputError(
            f"{path}: not a program torch.export.save wrote (not a zip: {e})",
            path=path,
            argument=_ARGUMENT,
        ) from None


@contextlib.contextmanager
def restricted_loads() -> Iterator[None]:
    """Every `torch.load` in the block is `weights_only=True` (torch reads the variable on each
    call, over the `weights_only=False` its callers pass); the environment is restored after."""
    saved = {k: os.environ.get(k) for k in (_FORCE, _FORCE_NOT)}
    os.environ[_FORCE] = "1"
    os.environ.pop(_FORCE_NOT, None)  # both set, torch raises rather than choose
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


class _Names:
    """torch's own names for the archive's folders and the prefixes it dispatches on
    (torch/csrc/export/pt2_archive_constants.h)."""

    def __init__(self) -> None:
        from torch.export.pt2_archive import constants as c

        self.constants_dir: str = c.CONSTANTS_DIR
        self.unpickled: tuple[str, ...] = (
            c.CUSTOM_OBJ_FILENAME_PREFIX,
            c.OPAQUE_OBJ_FILENAME_PREFIX,
        )
        self.native: tuple[str, ...] = (c.AOTINDUCTOR_DIR, c.EXECUTORCH_DIR, c.MTIA_DIR)


def _entries(zf: zipfile.ZipFile, path: Path) -> list[zipfile.ZipInfo]:
    infos = zf.infolist()
    if len(infos) > MAX_ENTRIES:
        raise InputError(
            f"{path}: more than {MAX_ENTRIES} entries ({len(infos)})", path=path, argument=_ARGUMENT
        )
    return infos


def _inside(name: str) -> str:
    """An entry's name as torch's reader sees it: below the archive's root folder."""
    return name.replace("\\", "/").split("/", 1)[-1]


def _refuse_entry(info: zipfile.ZipInfo, names: _Names, path: Path) -> None:
    name = _inside(info.filename)
    if info.compress_type != zipfile.ZIP_STORED or info.file_size != info.compress_size:
        raise InputError(  # a zip bomb: torch's reader inflates an entry whole into memory
            f"{path}: entry {name} is compressed ({info.compress_size} bytes to "
            f"{info.file_size}); torch.export.save stores every entry as it is: refused unread",
            path=path,
            argument=_ARGUMENT,
        )
    where = names.constants_dir
    if name.startswith(where) and name[len(where) :].startswith(names.unpickled):
        raise InputError(
            f"{path}: entry {name} is a constant torch loads through an unrestricted pickle "
            "(a custom or opaque object): refused unread",
            path=path,
            argument=_ARGUMENT,
        )
    if name.startswith(names.native):
        raise InputError(
            f"{path}: entry {name} is compiled native code torch would load "
            "(AOTInductor, ExecuTorch, MTIA): refused unread",
            path=path,
            argument=_ARGUMENT,
        )


def _refuse_config(zf: zipfile.ZipFile, info: zipfile.ZipInfo, names: _Names, path: Path) -> None:
    """A payload config names the file of each weight or constant; torch picks the unpickler by
    that name, whatever the entry read is called."""
    name = _inside(info.filename)
    config = _json_entry(zf, info, path)
    table = config.get("config") if isinstance(config, dict) else None
    _refuse_names(table if isinstance(table, dict) else (), name, path)
    for payload in _payloads(config):
        named = payload.get("path_name") if isinstance(payload, dict) else None
        if isinstance(named, str) and named.startswith(names.unpickled):
            raise InputError(
                f"{path}: entry {name} names {named!r}, a constant torch loads through an "
                "unrestricted pickle (a custom or opaque object): refused unread",
                path=path,
                argument=_ARGUMENT,
            )


def _json_entry(zf: zipfile.ZipFile, info: zipfile.ZipInfo, path: Path) -> Any:
    name = _inside(info.filename)
    if info.file_size > MAX_CONFIG_BYTES:
        raise InputError(
            f"{path}: entry {name} is {info.file_size} bytes, over {MAX_CONFIG_BYTES}",
            path=path,
            argument=_ARGUMENT,
        )
    try:
        return json.loads(zf.read(info))
    except (ValueError, UnicodeDecodeError, RecursionError) as e:  # deep nesting: RecursionError
        raise InputError(
            f"{path}: entry {name} is not JSON ({e})", path=path, argument=_ARGUMENT
        ) from None


def _refuse_names(found: Iterable[Any], name: str, path: Path) -> None:
    """torch.fx writes a weight's, a constant's or a subgraph's name into the Python source of
    the program's module, unescaped (`getattr(self.linear, "NAME")`), and runs it: every name
    in a program (`graph_module`'s `*_name`, `name`, `fqn` and `target` strings) and every key
    of a payload config must be letters, digits, '_', '-' and '.' (what a `state_dict` key
    is), or it is refused unread."""
    for value in found:
        if not isinstance(value, str) or not _SAFE_NAME.match(value):
            raise InputError(
                f"{path}: entry {name} names {value[:80]!r}, which torch would write into "
                "Python source that it runs (torch.fx's code of the program): only letters, "
                "digits, '_', '-' and '.' are taken",
                path=path,
                argument=_ARGUMENT,
            )


def refuse_program_names(program: Any) -> None:
    """`_refuse_names`' rule for a program already loaded (`from_torch` of an
    `ExportedProgram`): the names torch.fx writes into its module's source, its signature's
    targets and its graphs' `get_attr` targets, checked before `.module()` writes and runs it."""
    signature = program.graph_signature
    names = [s.target for s in [*signature.input_specs, *signature.output_specs]]
    for module in program.graph_module.modules():
        graph = getattr(module, "graph", None)
        names += [n.target for n in getattr(graph, "nodes", ()) if n.op == "get_attr"]
    for value in names:
        if value is not None and not (isinstance(value, str) and _SAFE_NAME.match(value)):
            raise InputError(
                f"the program names {value!r:.80}, which torch.fx would write into Python "
                "source that it runs (the program's module): only letters, digits, '_', '-' "
                "and '.' are taken",
                argument="model",
            )


def _named(tree: Any) -> Iterator[str]:
    """The strings under a name-like key anywhere in `tree` (walked without recursion)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        items = (
            node.items()
            if isinstance(node, dict)
            else enumerate(node)
            if isinstance(node, list)
            else ()
        )
        for key, value in items:
            if isinstance(value, str):
                if isinstance(key, str) and (key.endswith("name") or key in ("fqn", "target")):
                    yield value
            else:
                stack.append(value)


def _payloads(config: Any) -> list[Any]:
    table = config.get("config") if isinstance(config, dict) else None
    return list(table.values()) if isinstance(table, dict) else []

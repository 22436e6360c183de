"""Reading what `Reactant.Serialization.export_to_enzymejax` writes (SPEC.md, "Writing bundles from Julia").

The generated script is parsed with `ast`, never executed. From it come the `.mlir` file it
opens, the `_inputs.npz` it loads (absent when exported with `export_data_as_npz=false`),
the export's `function_name` (the script defines `run_<function_name>`, which calls
`hlo_call`), and, from its docstring, each argument's shape, dtype and Julia path
(`Path: arg.3.1.1`).
"""

from __future__ import annotations

import ast
import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path

from .._format import _limits
from .._format._errors import InputError
from .._format._manifest import identifier
from .._interop._sources import check_regular, inside, read_regular
from .._parse import _main_signature
from ._options import PackOptions, takes
from ._pytree_names import unique

# A generated script: a few KiB of code and one docstring line per argument.
MAX_SCRIPT_BYTES = 16 << 20

_ARG_LINE = re.compile(
    r"^\s*arg(\d+): Array of shape \(([\d,\s]*)\) and dtype (\w+)\. Path: (\S+)\s*$", re.M
)


@dataclass(frozen=True)
class ReactantArgument:
    path: str  # Julia's traced path, e.g. arg.3.1.1 (arg.1 is the callable itself)
    shape: tuple[int, ...]
    dtype: str

    @property
    def name(self) -> str:
        """A stable Python identifier from the path: `arg.3.1.1` -> `arg_3_1_1`."""
        return identifier(self.path, prefix="arg_")


@dataclass(frozen=True)
class ReactantExport:
    script: Path
    module: Path
    inputs: Path | None
    arguments: tuple[ReactantArgument, ...]
    function_name: str | None  # export_to_enzymejax's function_name, where the script says it

    @property
    def names(self) -> list[str]:
        """The arguments' names from their paths, a name two paths share numbered (`_2`)."""
        return unique([a.name for a in self.arguments])


def read_export(path: str | Path) -> ReactantExport:
    script = _find_script(Path(path))
    source = read_regular(script, MAX_SCRIPT_BYTES, what="the Reactant script")
    try:
        tree = ast.parse(source.decode("utf-8"), filename=str(script))
    except (SyntaxError, UnicodeDecodeError, ValueError, RecursionError, MemoryError) as e:
        raise InputError(
            f"cannot read the Reactant script {str(script)!r}: {e}", path=script
        ) from None
    strings = [
        n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    ]
    module = _one(script, [s for s in strings if s.endswith(".mlir")], ".mlir file", required=True)
    inputs = _one(
        script,
        [s for s in strings if s.endswith("_inputs.npz")],
        "_inputs.npz file",
        required=False,
    )
    arguments = _arguments(script, strings)
    return ReactantExport(
        script=script,
        module=inside(script.parent, module, what="the module the script opens"),  # type: ignore[arg-type]
        inputs=None if inputs is None else inside(script.parent, inputs, what="the inputs file"),
        arguments=arguments,
        function_name=_function_name(tree),
    )


def _find_script(path: Path) -> Path:
    if path.is_file():
        return path
    if not path.is_dir():
        raise InputError(f"{str(path)!r} is neither a Reactant script nor its directory", path=path)
    scripts = sorted(p for p in path.glob("*.py") if b"export_to_enzymejax" in _script_bytes(p))
    if len(scripts) != 1:
        raise InputError(
            f"expected one script written by export_to_enzymejax in {str(path)!r}, found "
            f"{[p.name for p in scripts]}; pass the script itself",
            path=path,
        )
    return scripts[0]


def _script_bytes(path: Path) -> bytes:
    check_regular(path, what="the Python file")  # a FIFO or a link to /dev/zero is never read
    return read_regular(path, MAX_SCRIPT_BYTES, what="the Python file")


def _one(script: Path, found: list[str], what: str, *, required: bool) -> str | None:
    names = sorted(set(found))
    if len(names) > 1 or (required and not names):
        raise InputError(
            f"{script.name}: expected one {what} in the script, found {names}", path=script
        )
    return names[0] if names else None


def _function_name(tree: ast.Module) -> str | None:
    """`<name>` of the one `def run_<name>(...)` that calls `hlo_call`: export_to_enzymejax's
    `function_name`. None where the script has no such function, or several."""
    found = {
        node.name.removeprefix("run_")
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef)
        and node.name.startswith("run_")
        and any(_calls(call, "hlo_call") for call in ast.walk(node))
    }
    return identifier(found.pop()) if len(found) == 1 else None


def _calls(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name


def _arguments(script: Path, strings: list[str]) -> tuple[ReactantArgument, ...]:
    found: dict[int, ReactantArgument] = {}
    for text in strings:
        for m in _ARG_LINE.finditer(text):
            shape = tuple(int(d) for d in m.group(2).replace(",", " ").split())
            found[int(m.group(1))] = ReactantArgument(m.group(4), shape, m.group(3))
    if sorted(found) != list(range(1, len(found) + 1)):
        raise InputError(
            f"{script.name}: the docstring's 'argK: Array of shape ... Path: ...' lines are not "
            f"arg1..argN (found {sorted(found)})",
            path=script,
        )
    return tuple(found[k] for k in sorted(found))


@takes(
    "names",
    "result_names",
    "roles",
    "function",
    "force",
    "target_version",
    "expected",
    "allow_custom_calls",
    "with_vjp",
    "max_shard_size",
    "metadata",
    "card",
    "sign_key",
)
def from_reactant(path: str | Path, out: str | Path, opt: PackOptions) -> Path:
    """Pack what `export_to_enzymejax` wrote: its module, its inputs, its argument paths.

    Arrays in the `_inputs.npz` are already permuted to the MLIR shapes, so they are stored as
    they are and flagged `column_major`: the producer's (Julia's) arrays are their axis-reversed
    views. Unless given, the function is named by the export's `function_name` and the
    arguments by their Julia paths (`arg.3.1.1` -> `arg_3_1_1`); results by SPEC.md 2.1's rule.

    **Arguments:**

    - `path`: the generated `.py`, or the directory it is in.
    - `out`: the bundle to write.

    **Returns:** the path of the written bundle.
    """
    from .._parse import _mlir
    from . import _normalize
    from ._pack_files import pack_file_inputs

    export = read_export(path)
    data = read_regular(export.module, _limits.MAX_MODULE_BYTES, what="the module")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(
            f"the module {str(export.module)!r} is not UTF-8 text", path=export.module
        ) from None
    normalized = _normalize.normalize(
        text, path=str(export.module), allow_custom_calls=opt.allow_custom_calls
    )
    _check_against_module(export, _main_signature.signature(_mlir.parse(normalized.text)))
    options = dataclasses.replace(
        opt,
        paths=[a.path for a in export.arguments],
        layout="column_major",
        already_permuted=True,
        producer=("Reactant.jl export_to_enzymejax", "unknown"),
        names=opt.names if opt.names is not None else export.names,
        function=opt.function or export.function_name,
    )
    inputs = [export.inputs] if export.inputs else []
    return pack_file_inputs(text, inputs, out, options)


def _check_against_module(export: ReactantExport, sig: _main_signature.Signature) -> None:
    types = sig.arguments
    if len(types) != len(export.arguments):
        raise InputError(
            f"{export.script.name} documents {len(export.arguments)} arguments, but @main in "
            f"{export.module.name} has {len(types)}",
            path=export.script,
        )
    for k, (a, t) in enumerate(zip(export.arguments, types, strict=True), start=1):
        if (a.dtype, a.shape) != (t.dtype.name, t.shape):
            raise InputError(
                f"{export.script.name}: arg{k} (Path: {a.path}) is documented as {a.dtype}{list(a.shape)}, "
                f"but @main's argument {k - 1} is {t.dtype.name}{list(t.shape)}",
                path=export.script,
                argument=a.name,
            )

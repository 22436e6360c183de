"""`emit_reactant_server()`: a bundle as a ReactantServer.jl model bundle, the directory that
server loads (SPEC.md section 6.3, read the other way): `manifest.yaml`, `model.mlir` (a
portable artifact; a `model.bN.mlir` per function when a bundle's functions are one model's
batch sizes `bN`) and `weights.safetensors` with its `argument_order`. What that layout is, and
how each file is written, is `_interop/_reactant_server.py` (the importer reads it there too).

That server calls `@main` with the request's inputs first, then the weights. A bundle whose
`@main` takes them in another order (JAX's: parameters first) gets a new `@main` in that order,
which calls the original.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from .._file_io._durable import set_modes
from .._format._errors import InputError, ModuleError, OutputExistsError
from .._format._manifest import Argument, Manifest, Result
from .._format._prechecks import short
from .._interop import _reactant_server as rs
from .._output._target import refuse_inside_a_bundle
from .._parse import _main_signature, _mlir
from .._read._reader import Bundle, load

if TYPE_CHECKING:
    from jaxlib.mlir import ir


def emit_reactant_server(
    bundle: Bundle | str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    function: str | None = None,
) -> Path:
    """Write `out`, a ReactantServer.jl model bundle named after its directory, for `bundle`:
    its inputs (role `input`) as the executable inputs, its other arguments as weights (their
    stored values). One function (`function`, or a bundle's only one) is one static shape,
    `model.mlir` (`compiled_batch_sizes` empty). A bundle whose functions are batch sizes of
    one model (`bN`, as `from_reactant_server` imports them) is written whole: a `model.bN.mlir`
    per function, the batch axis `n`, one `weights.safetensors`; any other bundle of several
    functions is refused unless `function` names the one to write.

    **Returns:** `out`. It must not exist: nothing is replaced.
    """
    b = bundle if isinstance(bundle, Bundle) else load(bundle)
    target = Path(out)
    refuse_inside_a_bundle(target)
    if target.exists() or target.is_symlink():
        raise OutputExistsError(f"{str(target)!r} already exists", path=target)
    if not target.parent.is_dir():
        raise InputError(
            f"the directory {str(target.parent)!r} does not exist; create it first", path=target
        )
    if function is not None or len(b.functions) == 1:
        views = {rs.MODULE: b.select(function)}
        batch_axes: dict[tuple[str, str], int | None] = {}
    else:
        by_size, batch_axes = _batch_sizes(b)
        views = {rs.module_file(n): view for n, view in by_size.items()}
    ref = next(iter(views.values()))
    for view in views.values():
        _check_servable(view.manifest)
    m = ref.manifest
    inputs = [i for i, a in enumerate(m.arguments) if a.role == "input"]
    weights = [i for i, a in enumerate(m.arguments) if a.role != "input"]
    unstored = [m.arguments[i].name for i in weights if m.arguments[i].value is None]
    if unstored:
        raise InputError(
            f"a ReactantServer.jl bundle stores every weight; {unstored[:5]} have no stored value",
            argument=unstored[0],
        )
    sizes = [int(v.manifest.function[1:]) for v in views.values()] if batch_axes else []
    files = {rs.MANIFEST: _manifest_yaml(m, target.name, inputs, batch_axes, sizes)}
    files |= {file: _portable_main(view, inputs + weights) for file, view in views.items()}
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=target.parent))
    try:
        for name, data in files.items():
            (tmp / name).write_bytes(data)
        stored = (m.arguments[i] for i in weights)
        rs.write_weights(tmp / rs.WEIGHTS, {a.name: (ref.tensor(a.name), a.dtype) for a in stored})
        set_modes(tmp)  # mkdtemp's directory is private
        os.rename(tmp, target)  # fails, rather than replaces, if `out` appeared meanwhile
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def _portable_main(view: Bundle, order: list[int]) -> bytes:
    """The function's module as a portable artifact whose `@main` takes inputs, then weights."""
    from jaxlib.mlir import ir

    module = _mlir.parse(view.module_text)
    if order != list(range(len(order))):
        try:
            _reorder_main(module, view.signature, order)
        except (ir.MLIRError, RuntimeError, ValueError) as e:  # MLIR refused the rewrite
            raise ModuleError(
                f"function {view.manifest.function}: reordering @main's arguments for "
                f"ReactantServer.jl failed in MLIR: {short(str(e))}"
            ) from None
    return _mlir.to_portable_oldest(module)[0]


def _not_batch_sizes(b: Bundle, why: str) -> InputError:
    return InputError(
        f"the functions {b.functions[:10]} are not batch sizes of one model (a "
        f"ReactantServer.jl bundle's model.bN.mlir): {why}; emit one of them alone "
        "(function=NAME, --function NAME)",
        argument="function",
    )


def _batch_sizes(b: Bundle) -> tuple[dict[int, Bundle], dict[tuple[str, str], int | None]]:
    """The functions by batch size (smallest first), if they are one model's compiled batch
    sizes, and each input's and result's batch axis (in the module's orientation; None: none)."""
    sizes = {}
    for name in b.functions:
        match = re.fullmatch(r"b([1-9][0-9]{0,8})", name)
        if match is None:
            raise _not_batch_sizes(b, f"{name!r} is not named bN (N its batch size)")
        sizes[int(match.group(1))] = b.select(name)
    views = dict(sorted(sizes.items()))
    ref = next(iter(views.values()))
    for view in views.values():
        for what, attr in (("takes", "arguments"), ("gives", "results")):
            got, want = (
                [(v.name, getattr(v, "role", None)) for v in getattr(x.manifest, attr)]
                for x in (view, ref)
            )
            if got != want:
                raise _not_batch_sizes(
                    b,
                    f"{view.manifest.function} {what} {[n for n, _ in got]} "
                    f"but {ref.manifest.function} {what} {[n for n, _ in want]}",
                )
    axes: dict[tuple[str, str], int | None] = {}
    for kind, attr in (("argument", "arguments"), ("result", "results")):
        for k, value in enumerate(getattr(ref.manifest, attr)):
            per_size = {n: getattr(v.manifest, attr)[k] for n, v in views.items()}
            axes[(kind, value.name)] = _batch_axis(b, kind, per_size, views)
    if not any(axes[("argument", a.name)] is not None for a in ref.arguments if a.role == "input"):
        raise _not_batch_sizes(b, "no input has an axis whose size is each function's batch size")
    return views, axes


def _batch_axis(b: Bundle, kind: str, per_size: dict, views: dict[int, Bundle]) -> int | None:
    """The one axis of a tensor whose size is each function's batch size, None when the tensor
    is the same in every function; a weight is the same stored tensor in every function."""
    (n0, first), *rest = per_size.items()
    fn = {n: v.manifest.function for n, v in views.items()}
    for n, value in rest:
        if (value.dtype, len(value.shape)) != (first.dtype, len(first.shape)) or not all(
            type(d) is int for d in (*value.shape, *first.shape)
        ):
            raise _not_batch_sizes(b, _differ(kind, value, fn[n], first, fn[n0]))
    differ = {k for n, v in rest for k, d in enumerate(v.shape) if d != first.shape[k]}
    weight = getattr(first, "role", "input") != "input"
    if weight and (differ or any(v.value != first.value for v in per_size.values())):
        raise _not_batch_sizes(b, f"weight {first.name!r} differs between the functions")
    if not differ:
        return None
    axis = min(differ)
    for n, value in [*rest, (n0, first)]:  # each function against the smallest, then it
        if len(differ) > 1 or value.shape[axis] != n:
            other = next(m for m in per_size if m != n)
            raise _not_batch_sizes(b, _differ(kind, value, fn[n], per_size[other], fn[other]))
    return axis


def _differ(
    kind: str, value: Argument | Result, fn: str, other: Argument | Result, other_fn: str
) -> str:
    v, o = value, other
    return (
        f"{kind} {v.name!r} is {v.dtype}{list(v.shape)} in {fn} but "
        f"{o.dtype}{list(o.shape)} in {other_fn}"
    )


def _check_servable(m: Manifest) -> None:
    if m.mesh is not None:
        raise InputError("a sharded bundle: ReactantServer.jl runs a model on one device")
    if m.platforms:
        raise InputError(
            f"{m.function} is lowered for several platforms {m.platforms} (SPEC.md 2.14); "
            "ReactantServer.jl calls @main without a platform index: export it for one"
        )
    values = m.tensors()
    lacking = sorted({v.dtype for v in values} - set(rs.TOKEN_OF))
    if lacking:
        raise InputError(
            f"ReactantServer.jl has no dtype token for {lacking}; it knows {sorted(rs.TOKEN_OF)}"
        )
    symbolic = [v.name for v in values if any(type(d) is not int for d in v.shape)]
    if symbolic:
        raise InputError(
            f"{symbolic[0]} has a symbolic dimension; a ReactantServer.jl bundle "
            "holds static shapes (a module per batch size): re-export it at fixed "
            "sizes (hlobundle.export without shapes_specs, a function bN per batch "
            "size N, added with add=True), or pack it from a static module, and "
            "emit that bundle",
            argument=symbolic[0],
        )
    deep = [v.name for v in values if len(v.shape) > len(rs.LETTERS)]
    if deep:
        raise InputError(f"{deep[0]} has more axes than the {len(rs.LETTERS)} shape letters")


def _manifest_yaml(
    m: Manifest,
    name: str,
    inputs: list[int],
    axes: dict[tuple[str, str], int | None],
    sizes: list[int],
) -> bytes:
    description = (
        f"{m.function if not axes else f'batch sizes {sizes}'}, from an hlobundle "
        f"({m.provenance.producer})"
    )
    return rs.manifest_yaml(
        name,
        description,
        [
            rs.tensor_spec(a.name, a.dtype, a.shape, axes.get(("argument", a.name)))
            for a in (m.arguments[i] for i in inputs)
        ],
        [rs.tensor_spec(r.name, r.dtype, r.shape, axes.get(("result", r.name))) for r in m.results],
        sizes,
    )


def _reorder_main(module: ir.Module, sig: _main_signature.Signature, order: list[int]) -> None:
    """Rename `@main` and add a public `@main` taking its arguments in `order`, which calls it."""
    from jaxlib.mlir import ir

    with _mlir.context(), ir.Location.unknown():
        _add_reordered_main(module, sig, order)


def _add_reordered_main(
    module: ir.Module, sig: _main_signature.Signature, order: list[int]
) -> None:
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import func

    inner_name = _mlir.free_symbol(module, "hlobundle_original_main")  # the module's own
    main = _main_signature.find_main(module)  # private functions keep their names
    ir.SymbolTable.set_symbol_name(main, inner_name)
    main.attributes["sym_visibility"] = ir.StringAttr.get("private")
    args = [_mlir.tensor_type(t.shape, t.dtype.name) for t in sig.arguments]
    results = [_mlir.tensor_type(t.shape, t.dtype.name) for t in sig.results]
    with ir.InsertionPoint(module.body):
        wrapper = func.FuncOp(  # type: ignore[call-arg]  # jaxlib's stubs lack it
            _mlir.ENTRY, ([args[i] for i in order], results), visibility="public"
        )
    with ir.InsertionPoint(wrapper.add_entry_block()):  # type: ignore[attr-defined]  # jaxlib's stubs lack it
        arguments = wrapper.arguments  # type: ignore[attr-defined]  # jaxlib's stubs lack it
        by_position = {i: arguments[k] for k, i in enumerate(order)}
        call = func.CallOp(results, inner_name, [by_position[i] for i in range(len(order))])
        func.ReturnOp(list(call.results))

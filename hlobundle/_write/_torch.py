"""PyTorch in: `from_torch(model, example_args, out=...)` and `pack --from-torch-export
MODEL.pt2` write a `torch.nn.Module` or a `torch.export` program as a bundle that JAX calls,
differentiates and serves (docs/torch.md).

The program is exported (`torch.export.export`, with the `Dim`s of `dynamic_shapes`),
decomposed to core ATen, and read by its room (`_interop/_torch.py`): every parameter, buffer
and constant becomes an argument bound by its name, never folded into the module. Its graph is
then run on JAX values and lowered by `export`'s own path (`_export.export_named`), so that the
bundle is what a JAX function's is: StableHLO of the dialects SPEC.md allows, symbolic
dimensions, a backward module (`with_vjp`), signing. The expected outputs are eager PyTorch's
on the example inputs, so that a run checks the conversion itself.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import pickle
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._extras import pip_line
from .._format._errors import BackendUnavailableError, InputError
from .._interop import _torch, _torch_archive
from ._export import Naming, export_named
from ._options import PackOptions, takes
from ._pytree_names import result_name, unique

_OPTIONS = (
    "name",
    "roles",
    "with_vjp",
    "independent_rows",
    "platforms",
    "store_inputs",
    "store_expected",
    "force",
    "add",
    "default",
    "target_version",
    "timestamp",
    "max_shard_size",
    "metadata",
    "card",
    "sign_key",
    "public_key",
    "replace_signature",
)


@takes(*_OPTIONS)
def from_torch(
    model: Any,
    example_args: Sequence[Any] | None = None,
    *,
    out: str | os.PathLike[str],
    example_kwargs: Mapping[str, Any] | None = None,
    dynamic_shapes: Any = None,
    opt: PackOptions,
) -> Path:
    """Write a PyTorch model as a bundle: a `torch.nn.Module` (in eval mode), exported here
    with `torch.export.export`, or a `torch.export.ExportedProgram`.

    Each parameter, buffer and constant tensor is an argument with its stored value, named
    after its `state_dict` key (`encoder.layer.0.weight` becomes `encoder_layer_0_weight`,
    the key its path) with role `parameter` (buffers: `state`); a weight the model ties is one
    argument. The model's inputs come first, named as torch.export names them (`forward`'s
    parameters), so `f(x)` calls the bundle with its weights; the results keep the model's
    output structure. The expected outputs are eager PyTorch's on the example inputs.

    **Arguments:**

    - `model`: the module or program; `example_args`, `example_kwargs`: its example inputs,
      tensors (for a program, default: the ones it was exported with).
    - `out`: the bundle directory to create.
    - `dynamic_shapes`: for a module, as `torch.export.export` takes it (`({0: Dim("batch")},)`):
      each `Dim` becomes a symbolic dimension of its name, its range the constraints.

    **Returns:** the path of the written bundle.
    """
    torch = _import_torch()
    _check_model(torch, model)
    args, kwargs = _examples(model, example_args, example_kwargs)
    if isinstance(model, torch.export.ExportedProgram):
        if dynamic_shapes is not None:
            raise InputError(
                "dynamic_shapes is for a module; a program has its own, from its export",
                argument="dynamic_shapes",
            )
        _torch_archive.refuse_program_names(model)  # before .module() writes and runs code
        program, eager = model, model.module()
    else:
        program, eager = _export(torch, model, args, kwargs, dynamic_shapes), model
    return _write(program, eager, args, kwargs, Path(out), opt)


def _check_model(torch: Any, model: Any) -> None:
    if isinstance(model, torch.export.ExportedProgram | torch.nn.Module):
        return
    saved = (
        " (a saved program: torch.export.load(path) first, or pack --from-torch-export PATH)"
        if isinstance(model, str | os.PathLike)
        else ""
    )
    raise InputError(
        f"model is a {type(model).__name__}: give a torch.nn.Module or a "
        f"torch.export.ExportedProgram{saved}",
        argument="model",
    )


# what a saved program is packed with: one function's options (the CLI adds one with --add)
_FILE_OPTIONS = tuple(
    o for o in _OPTIONS if o not in ("add", "default", "public_key", "replace_signature")
)


@takes(*_FILE_OPTIONS)
def from_torch_file(
    path: str | os.PathLike[str], out: str | os.PathLike[str], opt: PackOptions
) -> Path:
    """`from_torch()` of a program saved with `torch.export.save` (`MODEL.pt2`), on the
    example inputs it was exported with: the CLI's `pack --from-torch-export`. Loading a `.pt2`
    runs torch's deserializer in this process, with what would run code refused first
    (`_interop/_torch_archive.py`, docs/security.md)."""
    torch = _import_torch()
    _torch_archive.refuse_code(Path(path))
    try:
        with _torch_archive.restricted_loads():
            program = torch.export.load(os.fspath(path))
    except FileNotFoundError:
        raise InputError(f"{path}: no such file", argument="from_torch_export") from None
    except pickle.UnpicklingError as e:
        raise InputError(
            f"{path}: holds a pickle torch's restricted loader (weights_only) refused, which "
            f"only an unrestricted one would read: refused ({(str(e).splitlines() or [''])[-1][:200]})",
            path=os.fspath(path),
            argument="from_torch_export",
        ) from None
    except Exception as e:  # torch's loader raises what its zip and JSON readers raise
        raise InputError(
            f"{path}: not a program torch.export.save wrote ({type(e).__name__}: {str(e)[:200]})",
            argument="from_torch_export",
        ) from None
    return from_torch(program, out=out, **{f: getattr(opt, f) for f in _FILE_OPTIONS})


def _import_torch() -> Any:
    try:
        import torch
    except ImportError:
        raise BackendUnavailableError(
            "from_torch and pack --from-torch-export need PyTorch, the torch extra: "
            f"{pip_line('torch')}; its CPU build is enough "
            "(pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu)"
        ) from None
    return torch


def _examples(
    model: Any, args: Sequence[Any] | None, kwargs: Mapping[str, Any] | None
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The example inputs given, else (for a program) the ones it was exported with."""
    if args is None and kwargs is None:
        recorded = getattr(model, "example_inputs", None)
        if recorded is None:
            raise InputError(
                "example_args is needed: the model records no example inputs",
                argument="example_args",
            )
        return tuple(recorded[0]), dict(recorded[1])
    if args is not None and not isinstance(args, tuple | list):
        raise InputError(
            f"example_args is a {type(args).__name__}: give a tuple of the model's positional "
            "inputs, (x,) for one",
            argument="example_args",
        )
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise InputError(
            f"example_kwargs is a {type(kwargs).__name__}: give a dict of the model's keyword "
            "inputs by name",
            argument="example_kwargs",
        )
    return tuple(args or ()), dict(kwargs or {})


def _export(
    torch: Any, model: Any, args: tuple[Any, ...], kwargs: dict[str, Any], dynamic: Any
) -> Any:
    if model.training:
        raise InputError(
            "the module is in training mode (dropout draws, BatchNorm updates its statistics): "
            "call model.eval() first",
            argument="model",
        )
    try:
        with _quiet_fake_tensors():
            return torch.export.export(model, args, kwargs, dynamic_shapes=dynamic)
    except Exception as e:  # torch.export's own errors say what it could not trace, and why
        raise InputError(
            f"torch.export could not export the model: {type(e).__name__}: {str(e)[:1500]}",
            argument="model",
        ) from None


@contextlib.contextmanager
def _quiet_fake_tensors() -> Iterator[None]:
    """Torch's fake-tensor logger prints the traceback of an operator that fails on the example
    inputs' shapes (a Linear given the wrong width) before export raises it: the error then
    says it once, as an `InputError`."""
    logger = logging.getLogger("torch._subclasses.fake_tensor")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def _write(
    program: Any,
    eager: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    out: Path,
    opt: PackOptions,
) -> Path:
    import torch

    read = _torch.read_program(_decomposed(program), args, kwargs)
    with torch.no_grad():
        results = eager(*args, **kwargs)
    flat_results = torch.utils._pytree.tree_leaves(results)
    names = unique([s.name for s in read.slots])
    result_names = unique([result_name(p) for p in read.out_paths])
    if len(flat_results) != len(result_names):
        raise InputError(
            f"eager PyTorch gave {len(flat_results)} results where the program has "
            f"{len(result_names)}",
            argument="model",
        )
    for value, name in zip(flat_results, result_names, strict=True):
        if not isinstance(value, torch.Tensor):
            raise InputError(
                f"the model's result {name} is a {type(value).__name__}, not a tensor: a "
                "bundle's results are tensors (return torch.tensor(...) for a number)",
                argument="model",
            )
    naming = Naming(
        names=names,
        paths=[s.key for s in read.slots],
        roles={n: s.role for n, s in zip(names, read.slots, strict=True)},
        result_names=result_names,
        input_tree=None,  # the weights are arguments of no user's pytree: bind by name
        output_tree=read.output_tree(result_names),
        producer=(_torch.PRODUCER, torch.__version__),
        function="forward",
        expected=[
            _narrowed(r, f"result {n}") for r, n in zip(flat_results, result_names, strict=True)
        ],
    )
    flat = tuple(_narrowed(s.value, s.key) for s in read.slots)
    shapes = [s.shape for s in read.slots]
    if any(s is not None for s in shapes):
        opt = dataclasses.replace(opt, shapes_specs=tuple(shapes), constraints=read.constraints)
    return export_named(lambda *a: read.call(a), flat, out, opt, naming)


def _decomposed(program: Any) -> Any:
    """The program in core ATen, but for scaled dot-product attention, which the table takes
    whole (torch 2.13's decomposition of it retraces views that its own strides refuse, in
    GPT-2 of transformers 5). torch's decomposition copies tree specs through a check it
    deprecated itself (a FutureWarning about `LeafSpec` that no caller can act on)."""
    import torch

    table = torch.export.default_decompositions()
    for op in _KEPT_WHOLE:
        table.pop(getattr(torch.ops.aten, op).default, None)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", r".*treespec, LeafSpec", FutureWarning)
        return program.run_decompositions(table)


# what the operator table takes undecomposed (`_interop/_torch_aten.py`)
_KEPT_WHOLE = (
    "scaled_dot_product_attention",
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_attention_math",
)


def _narrowed(tensor: Any, where: str) -> np.ndarray:
    """A tensor's values in the dtype JAX holds them in: int64 as int32 while x64 is off,
    where every value fits (token ids do)."""
    a = _torch.to_numpy(tensor)
    held = _torch.jax_dtype(tensor.dtype)
    if a.dtype == held:
        return a
    if (
        a.dtype.kind in "iu"
        and a.size
        and (a.min() < np.iinfo(held).min or a.max() > np.iinfo(held).max)
    ):
        raise InputError(
            f"{where} is {a.dtype.name} with values outside {held.name}, the type JAX holds it "
            "in while jax_enable_x64 is off: call jax.config.update('jax_enable_x64', True) "
            "first",
            argument=where,
        )
    if a.dtype.kind == "f" and a.dtype.itemsize > held.itemsize:
        raise InputError(
            f"{where} is {a.dtype.name}, but jax_enable_x64 is off, so JAX would hold it as "
            f"{held.name}: call jax.config.update('jax_enable_x64', True) first, or convert the "
            "model with model.float()",
            argument=where,
        )
    return a.astype(held)

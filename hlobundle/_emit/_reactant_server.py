"""`emit_reactant_server()`: a bundle as a ReactantServer.jl model bundle, the directory that
server loads (SPEC.md section 6.3, read the other way): `manifest.yaml`, `model.mlir` (a
portable artifact) and `weights.safetensors` with its `argument_order`.

That server calls `@main` with the request's inputs first, then the weights. A bundle whose
`@main` takes them in another order (JAX's: parameters first) gets a new `@main` in that order,
which calls the original. Shapes are written in Julia's axis order (the module's reversed), and
each weight as SafeTensors.jl will read it into the Julia array whose memory is the tensor's.
Manifest strings reach `manifest.yaml` only through a YAML serializer, as quoted data.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from .._format import _dtypes, _mlir, _tensors
from .._format._errors import InputError, OutputExistsError
from .._format._manifest import Manifest
from .._read._reader import Bundle, load
from .._write._atomic import refuse_inside_a_bundle, set_modes
from .._write._reactant_server import BATCH_LETTERS, FORMAT_VERSIONS, TOKENS

_TOKEN_OF = {name: token for token, name in TOKENS.items()}
# One letter per axis; `n` and `b` mark a batch axis, which these static shapes do not have.
_LETTERS = "".join(c for c in "abcdefghijklmnopqrstuvwxyz" if c not in BATCH_LETTERS) + (
    "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
)


def emit_reactant_server(
    bundle: Bundle | str | os.PathLike[str], out: str | os.PathLike[str]
) -> Path:
    """Write `out`, a ReactantServer.jl model bundle named after its directory, for `bundle`:
    its inputs (role `input`) as the executable inputs, its other arguments as weights (their
    stored values), one static shape (no batch axis; `compiled_batch_sizes` empty).

    **Returns:** `out`. It must not exist: nothing is replaced.
    """
    b = bundle if isinstance(bundle, Bundle) else load(bundle)
    target = Path(out)
    refuse_inside_a_bundle(target)
    if target.exists() or target.is_symlink():
        raise OutputExistsError(f"{str(target)!r} already exists", path=target)
    m = b.manifest
    _check_servable(m)
    inputs = [i for i, a in enumerate(m.arguments) if a.role == "input"]
    weights = [i for i, a in enumerate(m.arguments) if a.role != "input"]
    unstored = [m.arguments[i].name for i in weights if m.arguments[i].value is None]
    if unstored:
        raise InputError(f"a ReactantServer.jl bundle stores every weight; {unstored[:5]} have "
                         "no stored value", argument=unstored[0])  # fmt: skip
    module = _mlir.parse(b.module_text)
    if inputs + weights != list(range(len(m.arguments))):
        _reorder_main(module, b.signature, inputs + weights)
    files = {
        "manifest.yaml": _manifest_yaml(m, target.name, inputs).encode("utf-8"),
        "model.mlir": _mlir.to_portable(module, _mlir.default_target()),
    }
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=target.parent))
    try:
        for name, data in files.items():
            (tmp / name).write_bytes(data)
        _tensors.write(
            tmp / "weights.safetensors",
            {m.arguments[i].name: _julia_stored(b.tensor(m.arguments[i].name), m.arguments[i].dtype)
             for i in weights},
            metadata={"argument_order": json.dumps([m.arguments[i].name for i in weights])},
        )  # fmt: skip
        set_modes(tmp)  # mkdtemp's directory is private
        os.rename(tmp, target)  # fails, rather than replaces, if `out` appeared meanwhile
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def _check_servable(m: Manifest) -> None:
    if m.mesh is not None:
        raise InputError("a sharded bundle: ReactantServer.jl runs a model on one device")
    values = [*m.arguments, *m.results]
    lacking = sorted({v.dtype for v in values} - set(_TOKEN_OF))
    if lacking:
        raise InputError(f"ReactantServer.jl has no dtype token for {lacking}; it knows "
                         f"{sorted(_TOKEN_OF)}")  # fmt: skip
    deep = [v.name for v in values if len(v.shape) > len(_LETTERS)]
    if deep:
        raise InputError(f"{deep[0]} has more axes than the {len(_LETTERS)} shape letters")


def _tensor_spec(name: str, dtype: str, shape: list[int]) -> dict:
    julia = list(reversed(shape))
    letters = _LETTERS[: len(julia)]
    return {"name": name, "dtype": _TOKEN_OF[dtype], "shape": letters,
            "dims": dict(zip(letters, julia, strict=True))}  # fmt: skip


def _manifest_yaml(m: Manifest, name: str, inputs: list[int]) -> str:
    import yaml

    doc = {
        "format_version": FORMAT_VERSIONS[0],
        "name": name,
        "kind": "model",
        "description": f"{m.function}, from an hlobundle ({m.provenance.producer})",
        "executable_inputs": [
            _tensor_spec(m.arguments[i].name, m.arguments[i].dtype, m.arguments[i].shape)
            for i in inputs
        ],
        "executable_outputs": [_tensor_spec(r.name, r.dtype, r.shape) for r in m.results],
        "batching": {"compiled_batch_sizes": []},
    }
    return yaml.safe_dump(doc, sort_keys=False)


def _julia_stored(value: np.ndarray, dtype: str) -> tuple[np.ndarray, _dtypes.DType]:
    """The weight as Python will see it after SafeTensors.jl reads the Julia array whose
    memory is the tensor's row-major memory: its axes reversed."""
    return np.asarray(np.asarray(value).transpose(), order="C"), _dtypes.BY_NAME[dtype]


def _reorder_main(module: object, sig: _mlir.Signature, order: list[int]) -> None:
    """Rename `@main` and add a public `@main` taking its arguments in `order`, which calls it."""
    from jaxlib.mlir import ir

    with _mlir.context(), ir.Location.unknown():
        _add_reordered_main(module, sig, order)


def _add_reordered_main(module: object, sig: _mlir.Signature, order: list[int]) -> None:
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import func

    inner_name = "hlobundle_original_main"
    main = _mlir.find_main(module)
    ir.SymbolTable.set_symbol_name(main, inner_name)
    main.attributes["sym_visibility"] = ir.StringAttr.get("private")
    args = [_mlir.tensor_type(t.shape, t.dtype.name) for t in sig.arguments]
    results = [_mlir.tensor_type(t.shape, t.dtype.name) for t in sig.results]
    with ir.InsertionPoint(module.body):  # type: ignore[attr-defined]
        wrapper = func.FuncOp(_mlir.ENTRY, ([args[i] for i in order], results),
                              visibility="public")  # fmt: skip
    with ir.InsertionPoint(wrapper.add_entry_block()):
        by_position = {i: wrapper.arguments[k] for k, i in enumerate(order)}
        call = func.CallOp(results, inner_name, [by_position[i] for i in range(len(order))])
        func.ReturnOp(list(call.results))

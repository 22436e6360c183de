"""Proving a call's shapes against the module (SPEC.md 2.8, "Proven against the module").

A manifest's symbolic shapes are the producer's word. What a module needs is in the module: a
module adding two `tensor<?xf32>` needs their sizes equal whatever symbols the manifest gives
them, and jax.export's `shape_assertion` calls say what its exporter assumed. So before any
backend runs a call of a function with symbolic dimensions, the call's concrete shapes are
proven here: `@main` is wrapped in a static entry of exactly those shapes and refined by
StableHLO's shape refinement (jaxlib's, the one jax.export calls run), which evaluates the
shape assertions and fails on any op whose operand shapes disagree; nothing dynamic may be
left. Each result's refined shape must then equal its declared expression. A contradiction is
an `InputError` naming the function, an argument (or result) and a symbol.

A proof is kept per distinct shape, up to `max_shapes` per function (least recently used
first out): the bound the backends' own per-shape work (compiles, registrations) follows. A
static function's module is proven once, at its own shapes, when it names an op whose result
shape its operands' values choose or a jax shape assertion (`needs_proof`); and every backend's
results are checked against the proven (or declared) shapes (`check_results`).
"""

from __future__ import annotations

import io
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._format import _symbolic
from .._format._errors import InputError, ModuleError, TransformError
from .._format._prechecks import short
from . import _binding

if TYPE_CHECKING:
    from .._format._manifest import Manifest
    from .._read._reader import Bundle

Shapes = tuple[tuple[int, ...], ...]
DEFAULT_MAX_SHAPES = 16  # distinct shapes a function keeps proven (and compiled) at once
_ARGS_INDEX = re.compile(r"args\[(\d+)\]")


@dataclass(frozen=True)
class Proof:
    """A call's shapes, proven: the symbols' values, each result's shape, and the module
    refined to those shapes (MLIR bytecode with a static `@main`, the enzyme backend runs it)."""

    shapes: Shapes
    env: dict[str, int]
    results: Shapes
    refined: bytes


class Prover:
    """Proves a symbolic function's call shapes, once per distinct shape (thread-safe)."""

    def __init__(self, bundle: Bundle, max_shapes: int = DEFAULT_MAX_SHAPES) -> None:
        if not isinstance(max_shapes, int) or isinstance(max_shapes, bool) or max_shapes < 1:
            raise InputError(
                f"max_shapes must be a positive integer, got {max_shapes!r}", argument="max_shapes"
            )
        self.bundle = bundle
        self.manifest = bundle.manifest
        self.max_shapes = max_shapes
        self._proofs: OrderedDict[Shapes, Proof] = OrderedDict()
        self._lock = threading.Lock()

    def prove(self, shapes: Sequence[Sequence[int]]) -> Proof:
        """The proof of `shapes` (one per argument, bound to the symbols already), computed on
        first use and kept while it is among the `max_shapes` most recent."""
        if not concrete(shapes):
            raise TransformError(
                f"{self.manifest.function}: its symbolic shapes are proven against the module "
                "for concrete shapes only; tracing it at symbolic shapes (jax.export, "
                "jax.eval_shape of symbolic specs) is not supported on this backend: use "
                "backend='xla', whose jax.export call jax refines itself"
            )
        key = tuple(tuple(int(n) for n in s) for s in shapes)
        with self._lock:  # held for lookups only: a warm call never waits for a new proof
            proof = self._proofs.get(key)
            if proof is not None:
                self._proofs.move_to_end(key)
                return proof
        proof = prove(self.bundle, key)  # two threads may prove one shape: the same verdict
        with self._lock:
            self._proofs[key] = proof
            while len(self._proofs) > self.max_shapes:
                self._proofs.popitem(last=False)
        return proof

    def known(self) -> list[Shapes]:
        with self._lock:
            return list(self._proofs)


def concrete(shapes: Sequence[Sequence[Any]]) -> bool:
    """Whether every dimension is a number (not a jax.export symbolic dimension of a trace)."""
    return all(isinstance(n, int) or type(n).__name__ == "int64" for s in shapes for n in s)


def prove(bundle: Bundle, shapes: Shapes) -> Proof:
    """Prove `shapes` (module docstring); an `InputError` when the module refuses them."""
    from .. import _compat

    manifest = bundle.manifest
    env = _binding.bind_symbols(manifest, shapes)
    bundle.modules["module"].check_artifact()  # the text proven is the artifact's program
    entry = _static_entry(bundle.modules["module"].text_bytes, manifest, shapes)
    try:
        refined = _compat.refine_shapes(entry)
    except ValueError as e:
        raise _refused(manifest, env, shapes, str(e)) from None
    results = _result_shapes(refined, manifest)
    for r, got in zip(manifest.results, results, strict=True):
        want = _symbolic.evaluate(r.shape, env)
        if got != want:
            symbol = min(
                _symbolic.symbols_of(_symbolic.parse(d) for d in r.shape if isinstance(d, str)),
                default=None,
            )
            error = InputError if manifest.symbolic else ModuleError
            raise error(
                f"{manifest.function}: at {_shown(manifest, shapes, env)} the module computes "
                f"result {r.name!r} of shape {list(got)}, but the manifest declares "
                f"{list(r.shape)} = {list(want)}; the bundle's symbolic shapes are not the "
                "module's (SPEC.md 2.8)",
                **(
                    {"argument": r.name if symbol is None else f"{r.name} ({symbol})"}
                    if manifest.symbolic
                    else {}
                ),
            )
    return Proof(shapes, env, results, refined)


def prove_static(bundle: Bundle) -> Proof:
    """A static function's module, proven once at its own shapes (`needs_proof`)."""
    return prove(bundle, tuple(tuple(int(d) for d in a.shape) for a in bundle.manifest.arguments))


def check_results(manifest: Manifest, proof: Proof | None, outs: Sequence[Any]) -> None:
    """Every result a backend returned has the shape the proof computed, or for a static
    function the manifest's (a module whose op computes another size than its type says, a
    `real_dynamic_slice` of a size its operands choose, must not hand that on)."""
    wants = proof.results if proof is not None else [tuple(r.shape) for r in manifest.results]
    for r, want, x in zip(manifest.results, wants, outs, strict=True):
        got = tuple(getattr(x, "shape", ()))
        if not concrete([got]):
            continue  # traced at symbolic shapes (xla): jax refines the caller's module
        if tuple(int(n) for n in got) != want:
            raise InputError(
                f"{manifest.function}: the module computed result {r.name!r} of shape "
                f"{list(got)} on these inputs, not the {'proven' if proof else 'declared'} "
                f"{list(want)}: one of its ops computes another size than its type says "
                "(SPEC.md 2.8)",
                argument=r.name,
            )


def _static_entry(text: bytes, manifest: Manifest, shapes: Shapes) -> bytes:
    """The module with an `@main` that takes exactly `shapes`: the original entry, renamed and
    private, called from a new public `@main` through `stablehlo.convert` (static to dynamic),
    as MLIR bytecode."""
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import func, stablehlo

    from .._parse import _main_signature, _mlir

    module = _mlir.parse(text)
    with _mlir.context(), ir.Location.unknown():
        main = _main_signature.find_main(module)
        inner = _mlir.free_symbol(module, "hb_proven_main")
        ir.SymbolTable.set_symbol_name(main, inner)
        main.attributes["sym_visibility"] = ir.StringAttr.get("private")
        kind = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
        inputs = list(kind.inputs)
        if manifest.platforms:  # the platform index comes first (SPEC.md 2.14), a scalar
            shapes = ((), *shapes)
        if len(inputs) != len(shapes):  # verified already: the manifest has one per argument
            raise InputError(
                f"{manifest.function}: @main takes {len(inputs)} arguments, the call {len(shapes)}"
            )
        static = [
            ir.RankedTensorType.get(list(s), ir.RankedTensorType(t).element_type)
            for s, t in zip(shapes, inputs, strict=True)
        ]
        with ir.InsertionPoint(module.body):
            entry = func.FuncOp(_mlir.ENTRY, (static, list(kind.results)), visibility="public")  # type: ignore[call-arg]  # jaxlib's stubs lack it
        with ir.InsertionPoint(entry.add_entry_block()):  # type: ignore[attr-defined]  # jaxlib's stubs lack it
            arguments = entry.arguments  # type: ignore[attr-defined]  # jaxlib's stubs lack it
            converted = [stablehlo.convert(t, v) for v, t in zip(arguments, inputs, strict=True)]
            call = func.CallOp(list(kind.results), inner, converted)
            func.ReturnOp(call.results)
        buffer = io.BytesIO()
        module.operation.write_bytecode(buffer)
        return buffer.getvalue()


def _result_shapes(refined: bytes, manifest: Manifest) -> Shapes:
    """The refined `@main`'s result shapes; refused while an op whose result shape its operands'
    values choose is left (refinement turns those of constant operands into static ops)."""
    from jaxlib.mlir import ir

    from .._parse import _main_signature, _mlir

    with _mlir.context(), ir.Location.unknown():
        module = ir.Module.parse(refined)
        left = _mlir.find_ops(module, VALUE_SHAPED_OPS)
        if left:
            name, where = left[0]
            error = InputError if manifest.symbolic else ModuleError
            raise error(
                f"{manifest.function}: {name} at {where} takes its result's shape from its "
                "operands' values, which nothing proves before the module runs (a backend may "
                "then return another size than its type says); only shapes computed from the "
                "arguments' shapes are accepted (SPEC.md 2.8)"
            )
        main = _main_signature.find_main(module)
        kind = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
        return tuple(tuple(ir.RankedTensorType(t).shape) for t in kind.results)


# Ops whose result shape comes from operand values: after refinement to static shapes, one left
# has shape operands that are not constants (they depend on the arguments' values).
VALUE_SHAPED_OPS = (
    "stablehlo.real_dynamic_slice",
    "stablehlo.dynamic_reshape",
    "stablehlo.dynamic_iota",
    "stablehlo.dynamic_broadcast_in_dim",
    "stablehlo.dynamic_pad",
    "stablehlo.dynamic_gather",
    "stablehlo.dynamic_conv",
)


def needs_proof(bundle: Bundle) -> bool:
    """Whether a static function's module is proven once before it runs: when its text names
    an op whose result shape its operands' values choose, or a jax shape assertion (which
    IREE ignores). A mention in a string only costs a proof."""
    text = bundle.modules["module"].text_bytes
    names = (*(op.split(".")[1] for op in VALUE_SHAPED_OPS), "shape_assertion")
    return any(n.encode() in text for n in names)


def _shown(manifest: Manifest, shapes: Shapes, env: dict[str, int]) -> str:
    args = ", ".join(
        f"{a.name}: {list(s)}" for a, s in zip(manifest.arguments, shapes, strict=True)
    )
    bound = ", ".join(f"{k}={v}" for k, v in env.items())
    return f"({args}; {bound})" if bound else f"({args})"


def _refused(
    manifest: Manifest, env: dict[str, int], shapes: Shapes, reason: str
) -> InputError | ModuleError:
    """The module's refusal of a call's shapes, naming an argument and a symbol: the argument a
    jax.export shape assertion names, else the one where the last symbol is first bound (the
    symbol a relabelled manifest made independent of the others)."""
    detail = short(" ".join(reason.replace("INVALID_ARGUMENT: ", "").split()))[:600]
    if not manifest.symbolic:  # nothing the caller chose: the module, at its own types
        return ModuleError(
            f"{manifest.function}: the module fails StableHLO's shape refinement at its own "
            f"static shapes: {detail}. It is refused before any backend runs it (SPEC.md 2.8)"
        )
    argument, symbol = _blamed(manifest, reason)
    return InputError(
        f"{manifest.function}: the module does not accept the shapes {_shown(manifest, shapes, env)}"
        f" that the manifest's symbolic shapes allow; argument {argument!r}, symbol {symbol!r}: "
        f"{detail}. The manifest's symbols are not the module's (SPEC.md 2.8)",
        argument=argument,
    )


def _blamed(manifest: Manifest, reason: str) -> tuple[str, str | None]:
    first: dict[str, str] = {}  # symbol -> the argument it first appears in
    for a in manifest.arguments:
        for d in a.shape:
            if isinstance(d, str):
                for s in sorted(_symbolic.parse(d).symbols):
                    first.setdefault(s, a.name)
    found = _ARGS_INDEX.findall(reason)
    if found and int(found[-1]) < len(manifest.arguments):
        a = manifest.arguments[int(found[-1])]
        symbols = sorted(
            s for d in a.shape if isinstance(d, str) for s in _symbolic.parse(d).symbols
        )
        return a.name, symbols[0] if symbols else None
    if not first:
        return manifest.arguments[0].name if manifest.arguments else "", None
    symbol = list(first)[-1]
    return first[symbol], symbol

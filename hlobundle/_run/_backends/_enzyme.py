"""The enzyme backend: enzyme-ad's `hlo_call` on the module text, prepared once per bundle
(`_enzyme_prepare`); derivatives through Enzyme, with the rules of `_enzyme_rules`."""

from __future__ import annotations

import hashlib
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ... import _compat
from ..._format import _dtypes
from ..._format._policy import calls_lapack
from ..._read._trust import Trust
from .. import _batched, _transforms
from .._shapes import DEFAULT_MAX_SHAPES, Prover
from . import _installed
from ._backend import Backend, JaxFunctions, Script
from ._enzyme_prepare import Prepared
from ._enzyme_rules import SECOND_ORDER, EnzymeBlockers, register_module
from ._jax_script import jax_script

if TYPE_CHECKING:
    from ..._format._manifest import Manifest
    from ..._read._reader import Bundle

NAME = "enzyme"


def make(
    bundle: Bundle,
    *,
    donate: Any = (),
    devices: int | None = None,
    trust: Trust = Trust.NOTHING,
    max_shapes: int = DEFAULT_MAX_SHAPES,
) -> Any:
    """The backend's function (`_backends`' interface): a `BundleFunction`."""
    from .._function import BundleFunction

    return BundleFunction(bundle, NAME, JAX, donate, devices, max_shapes, trust)


def install_rules() -> None:
    from . import _enzyme_rules

    _transforms.install_exported_loop_rule()  # a batched module runs through jax.export
    _enzyme_rules.install()


def check_derivatives(bundle: Bundle, args: Sequence[Any]) -> None:
    mode = _transforms.differentiated(args, SECOND_ORDER)
    if mode is None:
        return
    blockers = enzyme_blockers(bundle)
    error = blockers.forward_error() if mode == "forward" else blockers.reverse_error()
    if error:
        raise error


# Per-bundle state of the enzyme backend, kept here (not on the Bundle) and dropped with it.
_PREPARED: weakref.WeakKeyDictionary[Bundle, Prepared] = weakref.WeakKeyDictionary()
_BLOCKERS: weakref.WeakKeyDictionary[Bundle, EnzymeBlockers] = weakref.WeakKeyDictionary()


def prepared_for_hlo_call(bundle: Bundle) -> Prepared:
    """The module rewritten for enzyme_ad's `hlo_call` (computed once per Bundle)."""
    from ._enzyme_prepare import for_hlo_call, symbol_prefix

    if bundle in _PREPARED:
        return _PREPARED[bundle]
    digest = bundle.modules["module"].text_sha256
    batched = bundle.modules.get("batched")
    if batched is None:
        prefix = symbol_prefix(digest)
    else:
        # The runner finds a batched module by the prepared text (`_batched.lookup`): name it
        # after both modules' bytes as read (never the digests the manifest claims), in full,
        # so that no other bundle's module text is the same.
        both = hashlib.sha256(f"{digest} {batched.portable_sha256}".encode())
        prefix = symbol_prefix(both.hexdigest(), length=64)
    _PREPARED[bundle] = for_hlo_call(bundle.module_text, prefix=prefix)
    return _PREPARED[bundle]


def enzyme_blockers(bundle: Bundle) -> EnzymeBlockers:
    """Ops whose derivatives enzyme-ad 0.0.16 cannot compute, found once per Bundle."""
    if bundle not in _BLOCKERS:
        values = bundle.manifest.tensors()
        _BLOCKERS[bundle] = EnzymeBlockers.of(
            bundle.modules["module"].parsed, [(v.name, v.dtype) for v in values]
        )
    return _BLOCKERS[bundle]


def implementation(
    bundle: Bundle, prover: Prover | None = None, folds: bool = False
) -> Callable[..., tuple[Any, ...]]:
    lapack = any(calls_lapack(m.custom_calls) for m in bundle.modules.values())
    if lapack:  # hlo_call does not, and an uninitialized kernel jumps through a null pointer
        _compat.initialize_lapack()
    if prover is not None:
        return _refined_per_shape(bundle, prover, folds)
    prepared = prepared_for_hlo_call(bundle)
    call = enzyme_callable(prepared, [r.dtype for r in bundle.manifest.results])
    register_module(prepared.text, enzyme_blockers(bundle), owner=call)
    if (fast := _batched.fast_path(bundle, "jvp", prepared.result_carriers)) is not None:
        _batched.register(prepared.text, fast, owner=call)
    return call


def _refined_per_shape(
    bundle: Bundle, prover: Prover, folds: bool
) -> Callable[..., tuple[Any, ...]]:
    """A function with symbolic dimensions (SPEC.md 2.8): enzyme-ad's `hlo_call` needs static
    shapes, so it runs the module the prover refined to each call's shapes (`_shapes`), kept
    for the prover's `max_shapes` most recent shapes. With `folds`, a vmap of each such call
    runs as one call at the folded shape (`_batched.folded`)."""
    from jaxlib.mlir import ir

    from ..._parse import _mlir
    from ._enzyme_prepare import for_hlo_call, symbol_prefix

    results = [r.dtype for r in bundle.manifest.results]
    blockers = enzyme_blockers(bundle)
    digest = bundle.modules["module"].text_sha256
    rows = bundle.manifest.independent_rows
    folding = rows.model_dump_json() if folds and rows is not None else "loops"
    cache: OrderedDict[tuple[tuple[int, ...], ...], tuple[str, Callable[..., Any]]] = OrderedDict()
    lock = threading.Lock()

    def impl(*flat: Any) -> tuple[Any, ...]:
        proof = prover.prove([tuple(x.shape) for x in flat])
        with lock:
            if proof.shapes in cache:
                cache.move_to_end(proof.shapes)
            else:
                with _mlir.context():
                    text = str(ir.Module.parse(proof.refined))
                # Named after whether it folds and the declaration it folds by: JAX's rules
                # find a fold by the module's text (`_batched`), and an untrusted function
                # whose module is the same text must never find a trusted one's.
                key = hashlib.sha256(f"{digest} {proof.shapes} {folding}".encode()).hexdigest()
                prepared = for_hlo_call(text, prefix=symbol_prefix(key))
                call = enzyme_callable(prepared, results)
                register_module(prepared.text, blockers, owner=call)  # dropped with it
                carriers = prepared.result_carriers
                fold = _batched.folded(bundle, prover, impl, "jvp", carriers) if folds else None
                if fold is not None:
                    _batched.register(prepared.text, fold, owner=call)
                cache[proof.shapes] = (prepared.text, call)
                while len(cache) > prover.max_shapes:
                    cache.popitem(last=False)
            call = cache[proof.shapes][1]
        return call(*flat)

    return impl


def enzyme_callable(
    prepared: Prepared, result_dtypes: Sequence[str]
) -> Callable[..., tuple[Any, ...]]:
    """`hlo_call` on a prepared module, converting carried dtypes on the way in and out."""
    from enzyme_ad.jax import hlo_call

    results = [_dtypes.BY_NAME[d].numpy for d in result_dtypes]

    def impl(*flat: Any) -> tuple[Any, ...]:
        carried = [
            x if c is None else x.astype(c)
            for x, c in zip(flat, prepared.argument_carriers, strict=True)
        ]
        outs = hlo_call(*carried, source=prepared.text) if results else []
        return tuple(
            o if c is None else o.astype(d)
            for o, c, d in zip(outs, prepared.result_carriers, results, strict=True)
        )

    return impl


def text_primal(manifest: Manifest, text: str) -> Callable[..., Sequence[Any]]:
    """A JAX-differentiable function of the flat arguments running the module `text` (what
    `with_vjp=True` lowers a module text's backward module from)."""
    from ._enzyme_prepare import for_hlo_call, symbol_prefix

    prefix = symbol_prefix(hashlib.sha256(text.encode()).hexdigest())
    return enzyme_callable(for_hlo_call(text, prefix), [r.dtype for r in manifest.results])


def _script(bundle: Bundle, trust: Trust) -> Script:
    return jax_script(bundle, NAME, prepared_for_hlo_call(bundle))


JAX = JaxFunctions(
    implementation=implementation,
    install_rules=install_rules,
    check_derivatives=check_derivatives,
)

BACKEND = Backend(
    name=NAME,
    unavailable=(
        "the enzyme backend needs enzyme-ad >= 0.0.16 (Python 3.11 wheels only): "
        "pip install \"enzyme-ad>=0.0.16\", or use backend='xla'"
    ),
    available=lambda: _installed.enzyme_ad(),  # looked up when asked (tests patch it)
    make=make,
    script=_script,
    jax=JAX,
)

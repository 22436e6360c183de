"""A bundle as a JAX function: `Bundle.function()` (docs/jax.md, "Calling a bundle from
JAX").

Arguments are bound and checked before anything is traced (`_binding`), placed on the bundle's
mesh when it has one (`_placement`), then passed to one cached `jax.jit` of the chosen backend's
implementation (`_backends`). Results come back in the manifest's `output_tree` when it has one
(JSON arrays become tuples); otherwise as a tuple with one array per `@main` result.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from .._format import _dtypes
from .._format._errors import (
    BackendUnsupportedError,
    HloBundleError,
    InputError,
    LimitError,
    X64DisabledError,
)
from .._format._fields import identifier, needs_x64
from .._read._trust import Trust
from . import _binding, _placement, _shapes

if TYPE_CHECKING:
    from .._format._manifest import Manifest
    from .._read._reader import Bundle
    from ._backends import Backend, BackendName, JaxFunctions

__all__ = [
    "BundleFunction",
    "Function",
    "ProducerOrientation",
    "check_x64",
    "function",
    "function_on",
    "needs_x64",
]


@runtime_checkable
class Function(Protocol):
    """What `Bundle.function()` returns, whatever the backend (`hlobundle.Function`).

    - `backend`: the backend's name; `jax_function`: whether it is a JAX function (jit, grad
      and vmap it) or runs outside JAX with NumPy arrays in and out (iree);
    - `manifest`: the function's manifest; `bundle`: the bundle it came from;
    - `__call__`: positional, named or pytree arguments (stored parameters for those left
      out), the results in the manifest's `output_tree`;
    - `call_flat`: one array per argument in manifest order, one per result back;
    - `prove_shapes`: prove one call's argument shapes against the module without running it
      (SPEC.md 2.8; nothing to prove for a static function), or an `InputError`.
    """

    backend: str
    jax_function: bool
    manifest: Manifest
    bundle: Bundle

    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...

    def call_flat(self, *flat: Any) -> tuple[Any, ...]: ...

    def prove_shapes(self, shapes: Sequence[Sequence[int]]) -> None: ...


def function(
    bundle: Bundle,
    backend: BackendName = "auto",
    donate: Sequence[str] | str = (),
    devices: int | None = None,
    trust: Trust = Trust.NOTHING,
    max_shapes: int = _shapes.DEFAULT_MAX_SHAPES,
    layout: str = "stored",
    precision: str | None = None,
) -> Function:
    """`Bundle.function()`: the function of the backend `backend` names; with
    `layout="producer"`, taking and returning arrays in the producer's orientation."""
    if layout not in ("stored", "producer"):
        raise InputError(
            f"layout must be 'stored' or 'producer', not {layout!r}", argument="layout"
        )
    from . import _backends  # the room above this one, reached at call time (docs/layout.md)

    chosen = _backends.resolve(backend, bundle.manifest)
    made = function_on(
        bundle,
        chosen,
        donate=donate,
        devices=devices,
        trust=trust,
        max_shapes=max_shapes,
        precision=precision,
    )
    return ProducerOrientation(made) if layout == "producer" else made


class ProducerOrientation:
    """A function that takes and returns column-major values in the producer's (Julia's)
    orientation, their axes reversed, as `run --layout producer` does: the same values, each
    array transposed at the call's edge (a view for NumPy; JAX traces it)."""

    def __init__(self, inner: Function) -> None:
        self.inner = inner
        self.backend, self.jax_function = inner.backend, inner.jax_function
        self.manifest, self.bundle = inner.manifest, inner.bundle
        arguments = self.manifest.arguments
        self._column_major = {a.name for a in arguments if a.layout == "column_major"}

    def __repr__(self) -> str:
        return f"{self.inner!r} (layout='producer')"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        flat = _binding.bind(self.manifest, args, kwargs, stored=self._stored)
        return _binding.structure(self.manifest, self.call_flat(*flat))

    def _stored(self, name: str) -> Any:
        """A left-out parameter's stored value, in the orientation of the values given."""
        x = self.bundle.tensor(name)
        return x.T if name in self._column_major else x

    def call_flat(self, *flat: Any) -> tuple[Any, ...]:
        """One array per argument in manifest order, in the producer's orientation."""
        arguments = self.manifest.arguments
        if len(flat) != len(arguments):
            raise _binding.count_error(arguments, len(flat))
        checked = [
            _binding.check_value(x, a, i, producer=True)
            for i, (x, a) in enumerate(zip(flat, arguments, strict=True))
        ]
        outs = self.inner.call_flat(*_reversed(checked, arguments))
        return tuple(_reversed(list(outs), self.manifest.results))

    def prove_shapes(self, shapes: Sequence[Sequence[int]]) -> None:
        """Prove a call's argument shapes, given in the producer's orientation."""
        described = self.manifest.arguments
        if len(shapes) == len(described):  # else the inner function says what is wrong
            shapes = [
                tuple(s)[::-1] if a.layout == "column_major" else tuple(s)
                for s, a in zip(shapes, described, strict=True)
            ]
        self.inner.prove_shapes(shapes)


def _reversed(values: list[Any], described: Sequence[Any]) -> list[Any]:
    """Each column-major value (by its argument or result) with its axes reversed."""
    return [
        x.T if d.layout == "column_major" else x for x, d in zip(values, described, strict=True)
    ]


def function_on(
    bundle: Bundle,
    backend: Backend,
    *,
    donate: Sequence[str] | str = (),
    devices: int | None = None,
    trust: Trust = Trust.NOTHING,
    max_shapes: int = _shapes.DEFAULT_MAX_SHAPES,
    precision: str | None = None,
) -> Function:
    """The function of a backend already resolved (`_backends.resolve`), as `hlobundle run`
    resolves it once at its entry point: the backend's function (`_backends`' interface). With
    `precision="highest"` a JAX backend runs the modules rewritten to ask for HIGHEST
    (`_precision`); IREE's CPU runtime computes float32 at float32 anyway and runs them as stored."""
    from . import _backends, _precision  # the backends' room above, reached at call time

    _precision.check(precision)
    _backends.refuse_platforms(backend, bundle.manifest)
    if precision == "highest" and backend.jax is not None:
        bundle = _precision.at_highest(bundle)
    return backend.make(bundle, donate=donate, devices=devices, trust=trust, max_shapes=max_shapes)


class StoredExecutables(Protocol):
    """A backend's stored executables (SPEC.md 2.7) for a function's eager calls: `run` runs
    the one compiled for the arguments' shapes and returns its results and file, or None
    when none was (the call then compiles); `source` names them."""

    source: str

    def run(self, flat: Sequence[Any]) -> tuple[list[Any], str] | None: ...


class BundleFunction:
    """A callable that behaves like a jitted JAX function of the bundle's `@main`: that of
    backend `backend`, made of `parts`, its `Backend.jax` (`_backends.JaxFunctions`)."""

    jax_function = True  # jit, grad and vmap it

    def __init__(
        self,
        bundle: Bundle,
        backend: str,
        parts: JaxFunctions,
        donate: Sequence[str] | str = (),
        devices: int | None = None,
        max_shapes: int = _shapes.DEFAULT_MAX_SHAPES,
        trust: Trust = Trust.NOTHING,
        *,
        stored: StoredExecutables | None = None,
    ) -> None:
        self.bundle = bundle
        self.manifest = bundle.manifest
        self._parts = parts
        self.backend = backend
        self.donated = _binding.donated_arguments(self.manifest, donate)
        parts.install_rules()
        # A symbolic function's call shapes are proven against the module before it runs, and
        # it keeps at most `max_shapes` shapes compiled (SPEC.md 2.8; `_shapes`).
        self._prover = _shapes.Prover(bundle, max_shapes) if self.manifest.symbolic else None
        if self._prover is None and _shapes.needs_proof(bundle):
            _shapes.prove_static(bundle)  # an op whose result shape its operands' values choose
        # Declared independent rows fold a vmap into one call, for a bundle the user trusts
        # (SPEC.md 2.13): its key verified it, or `trust` has Trust.BATCHED.
        folds = bundle.trusted or Trust.BATCHED in trust
        self._impl = parts.implementation(bundle, self._prover, folds)
        # Arguments @main never reads are neither transferred nor read from disk: the jitted
        # function takes the others and passes zeros, which XLA removes as dead code.
        unused = frozenset() if self.manifest.symbolic else bundle.signature.unused  # no zeros
        self._used = [i for i in range(len(self.manifest.arguments)) if i not in unused]
        self.mesh = _placement.device_mesh(self.manifest, devices)
        self._placement = _placement.placement(self.manifest, self.mesh)
        placement = self._placement
        self._in_shardings = [placement[0][i] for i in self._used] if placement else None
        self._jitted = self._jit()
        # A stored executable (SPEC.md 2.7) runs the eager calls of an unsharded function at
        # the shapes it was compiled for; `source` says where the last one ran from (None:
        # compiled), as the iree backend's does.
        self._executables = stored if not placement else None
        self.source: str | None = None if self._executables is None else self._executables.source
        self._per_shape: OrderedDict[_shapes.Shapes, Callable[..., Any]] = OrderedDict()
        self._lock = threading.Lock()

    def _jit(self) -> Callable[..., Any]:
        """A new `jax.jit` of the implementation (one per shape for a symbolic function, so
        that dropping it drops what it compiled)."""
        import jax

        placement = self._placement
        names = [self.manifest.arguments[i].name for i in self._used]
        shardings: dict[str, Any] = {}
        if placement:
            assert self._in_shardings is not None, "__init__ made it from the same placement"
            shardings = {
                "in_shardings": tuple(self._in_shardings),
                "out_shardings": tuple(placement[1]),
            }
        return jax.jit(
            _named(_with_zeros_for_unused(self._impl, self.manifest, self._used), self.manifest),
            donate_argnums=tuple(names.index(n) for n in self.donated if n in names),
            **shardings,
        )

    def _jitted_for(self, shapes: _shapes.Shapes) -> Callable[..., Any]:
        with self._lock:
            jitted = self._per_shape.get(shapes)
            if jitted is not None:
                self._per_shape.move_to_end(shapes)
                return jitted
            jitted = self._per_shape[shapes] = self._jit()
            assert self._prover is not None, "only a symbolic function compiles per shape"
            while len(self._per_shape) > self._prover.max_shapes:
                self._per_shape.popitem(last=False)
            return jitted

    @property
    def arguments_read(self) -> tuple[str, ...]:
        """The arguments a call transfers to the device: those `@main` reads (the others are
        passed as zeros inside the jitted function, which XLA drops)."""
        return tuple(self.manifest.arguments[i].name for i in self._used)

    def __repr__(self) -> str:
        return f"<hlobundle function {self.manifest.function!r} backend={self.backend}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        flat = self.bind(args, kwargs)
        return self.structure(self.call_flat(*flat))

    def call_flat(self, *flat: Any) -> tuple[Any, ...]:
        """Call with one array per argument in manifest order; returns one array per result."""
        check_x64(self.manifest)
        arguments = self.manifest.arguments
        if len(flat) != len(arguments):
            raise _binding.count_error(arguments, len(flat))
        checked = [
            _binding.check_value(x, a, i)
            for i, (x, a) in enumerate(zip(flat, arguments, strict=True))
        ]
        jitted, proof = self._jitted, None
        shapes = tuple(tuple(x.shape) for x in checked)
        if self._prover is not None and _shapes.concrete(shapes):
            proof = self._prover.prove(shapes)
            jitted = self._jitted_for(proof.shapes)
        else:  # static, or traced at symbolic shapes (jax refines the caller's module itself)
            _binding.check_symbols(self.manifest, checked)
        self._parts.check_derivatives(self.bundle, checked)
        checked = [checked[i] for i in self._used]
        if self._in_shardings is not None:
            checked = [
                _placement.place(x, s) for x, s in zip(checked, self._in_shardings, strict=True)
            ]
        try:
            ran = None
            if self._executables is not None and not _traced(checked):
                ran = self._executables.run(checked)
                self.source = None if ran is None else f"stored executable {ran[1]}"
            outs = tuple(jitted(*checked) if ran is None else ran[0])
        except HloBundleError:
            raise
        except (RuntimeError, ValueError, NotImplementedError, MemoryError) as e:  # lowering, shape
            raise backend_failure(self.backend, e) from None  # refinement or XLA's compile
        _shapes.check_results(self.manifest, proof, outs)
        return outs

    def prove_shapes(self, shapes: Sequence[Sequence[int]]) -> None:
        """Prove a call's argument shapes against the module, without running it (SPEC.md 2.8)."""
        if self._prover is not None:
            self._prover.prove(shapes)

    def bind(self, args: Sequence[Any], kwargs: Any) -> list[Any]:
        """One value per argument, in manifest order, from positional, named or pytree arguments."""
        return _binding.bind(self.manifest, args, kwargs, stored=self.bundle.tensor)

    def structure(self, flat: tuple[Any, ...]) -> Any:
        return _binding.structure(self.manifest, flat)


def _traced(values: Sequence[Any]) -> bool:
    """Whether a call is traced (under jit, grad or vmap): a stored executable runs only
    concrete arrays, compiled alone."""
    from .._compat import jax_core

    tracer = jax_core().Tracer
    return any(isinstance(x, tracer) for x in values)


def _named(
    impl: Callable[..., tuple[Any, ...]], manifest: Manifest
) -> Callable[..., tuple[Any, ...]]:
    """`impl` under the name JAX shows in traces, logs and profiles: `bundle_<function>`."""

    def call(*flat: Any) -> tuple[Any, ...]:
        return impl(*flat)

    call.__name__ = call.__qualname__ = "bundle_" + identifier(manifest.function, prefix="")
    return call


def _with_zeros_for_unused(
    impl: Callable[..., tuple[Any, ...]], manifest: Manifest, used: list[int]
) -> Callable[..., tuple[Any, ...]]:
    if len(used) == len(manifest.arguments):
        return impl

    def call(*used_values: Any) -> tuple[Any, ...]:
        import jax.numpy as jnp

        values = [jnp.zeros(a.shape, _dtypes.BY_NAME[a.dtype].numpy) for a in manifest.arguments]
        for i, x in zip(used, used_values, strict=True):
            values[i] = x
        return impl(*values)

    return call


def backend_failure(backend: str, e: Exception) -> HloBundleError:
    """A JAX backend's failure on a verified bundle, coded: out of memory is LIMIT_EXCEEDED;
    anything else (a custom call XLA does not implement, an op it cannot compile) is
    BACKEND_UNSUPPORTED with the backend's reason."""
    reason = " ".join(str(e).split())[:400]
    if "RESOURCE_EXHAUSTED" in reason or isinstance(e, MemoryError):
        return LimitError(f"the {backend} backend ran out of memory running this bundle: {reason}")
    return BackendUnsupportedError(
        f"the {backend} backend failed to lower, compile or run this bundle's module "
        f"({type(e).__name__}): {reason}"
    )


def check_x64(manifest: Manifest) -> None:
    import jax

    if needs_x64(manifest) and not jax.config.jax_enable_x64:  # type: ignore[attr-defined]  # jax's stubs lack its flags
        raise X64DisabledError(
            "this bundle has 64-bit values, and with jax_enable_x64 off JAX would silently "
            "truncate them; call jax.config.update('jax_enable_x64', True) at start-up "
            "(or set JAX_ENABLE_X64=1) before calling it"
        )

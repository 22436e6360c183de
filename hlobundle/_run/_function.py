"""A bundle as a JAX function: `Bundle.function()` (README, "Calling a bundle").

Arguments are checked before anything is traced, then passed to one cached `jax.jit`
of the backend's implementation:

- `enzyme`: `enzyme_ad.jax.hlo_call` on the module prepared by `_prepare`;
- `xla`: a `jax.export.Exported` built from the stored portable artifact (needs only jax);
- `auto`: `enzyme` when enzyme_ad imports, else `xla`.

Results come back in the manifest's `output_tree` when it has one (JSON arrays become
tuples); otherwise as a tuple with one array per `@main` result.
"""

from __future__ import annotations

import dataclasses
import hashlib
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from .._format import _dtypes
from .._format._errors import (
    BackendUnavailableError,
    DevicesUnavailableError,
    InputDtypeError,
    InputError,
    TransformError,
    X64DisabledError,
)
from .._format._manifest import Argument, BatchedModule, Manifest
from .._format._sharding import partition_spec_entries
from . import _batched
from ._transforms import EnzymeBlockers, check_derivatives, install_rules, register_module

if TYPE_CHECKING:
    from .._read._reader import Bundle
    from ._prepare import Prepared

Backend = Literal["auto", "enzyme", "xla"]
BACKENDS = ("auto", "enzyme", "xla")


def resolve_backend(backend: str) -> str:
    if backend not in BACKENDS:
        raise InputError(f"backend must be one of {BACKENDS}, got {backend!r}", argument="backend")
    if backend == "xla":
        return backend
    try:
        import enzyme_ad.jax  # noqa: F401
    except ImportError:
        if backend == "auto":
            return "xla"
        raise BackendUnavailableError(
            "the enzyme backend needs enzyme-ad >= 0.0.16 (Python 3.11 wheels only): "
            "pip install 'enzyme-ad>=0.0.16', or use backend='xla'",
        ) from None
    return "enzyme"


X64_DTYPES = frozenset({"int64", "uint64", "float64", "complex128"})


def needs_x64(manifest: Manifest) -> bool:
    return any(v.dtype in X64_DTYPES for v in [*manifest.arguments, *manifest.results])


class BundleFunction:
    """A callable that behaves like a jitted JAX function of the bundle's `@main`."""

    def __init__(
        self,
        bundle: Bundle,
        backend: Backend = "auto",
        donate: Sequence[str] | str = (),
        devices: int | None = None,
    ) -> None:
        import jax

        self.bundle = bundle
        self.manifest = bundle.manifest
        self.backend = resolve_backend(backend)
        self.donated = donated_arguments(self.manifest, donate)
        impl = _enzyme_impl(bundle) if self.backend == "enzyme" else _xla_impl(bundle)
        install_rules(self.backend)
        # Arguments @main never reads are neither transferred nor read from disk: the jitted
        # function takes the others and passes zeros, which XLA removes as dead code.
        self._used = [
            i for i in range(len(self.manifest.arguments)) if i not in bundle.signature.unused
        ]
        names = [self.manifest.arguments[i].name for i in self._used]
        self.mesh = device_mesh(self.manifest, devices)
        placement = _placement(self.manifest, self.mesh)
        self._in_shardings = [placement[0][i] for i in self._used] if placement else None
        self._jitted = jax.jit(
            _with_zeros_for_unused(impl, self.manifest, self._used),
            donate_argnums=tuple(names.index(n) for n in self.donated if n in names),
            **(
                {"in_shardings": tuple(self._in_shardings), "out_shardings": tuple(placement[1])}
                if placement
                else {}
            ),
        )

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
            raise _count_error(arguments, len(flat))
        checked = [
            _check_value(x, a, i) for i, (x, a) in enumerate(zip(flat, arguments, strict=True))
        ]
        blockers = enzyme_blockers(self.bundle) if self.backend == "enzyme" else None
        check_derivatives(checked, self.backend, blockers)
        checked = [checked[i] for i in self._used]
        if self._in_shardings is not None:
            checked = [_place(x, s) for x, s in zip(checked, self._in_shardings, strict=True)]
        return tuple(self._jitted(*checked))

    def bind(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[Any]:
        """One value per argument, in manifest order, from positional, named or pytree arguments."""
        arguments = self.manifest.arguments
        tree = self.manifest.input_tree
        if (
            tree is not None
            and not kwargs
            and any(isinstance(a, (dict, list, tuple)) for a in args)
        ):
            if len(args) != len(tree):
                raise InputError(
                    f"expected {len(tree)} positional argument(s) with the exported pytree "
                    f"structure, or {len(arguments)} arrays; got {len(args)}"
                )
            by_name = _flatten_by_tree(tree, list(args), "args")
            return [by_name[a.name] for a in arguments]
        if len(args) > len(arguments):
            raise _count_error(arguments, len(args) + len(kwargs))
        values: dict[str, Any] = {a.name: x for a, x in zip(arguments, args, strict=False)}
        for name, x in kwargs.items():
            if name not in {a.name for a in arguments}:
                raise InputError(
                    f"unexpected argument {name!r}; the arguments are {[a.name for a in arguments]}",
                    argument=name,
                )
            if name in values:
                raise InputError(
                    f"argument {name!r} given twice (by position and by name)", argument=name
                )
            values[name] = x
        missing = [a.name for a in arguments if a.name not in values]
        if missing:
            raise InputError(f"missing argument(s) {missing}", argument=missing[0])
        return [values[a.name] for a in arguments]

    def structure(self, flat: tuple[Any, ...]) -> Any:
        tree = self.manifest.output_tree
        if tree is None:
            return flat
        by_name = {r.name: x for r, x in zip(self.manifest.results, flat, strict=True)}
        return _unflatten_tree(tree, by_name)


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


def device_mesh(manifest: Manifest, devices: int | None) -> Any:
    """The `jax.sharding.Mesh` to run on: the bundle's, on the first devices; None for one device."""
    import jax
    import numpy as np

    mesh = manifest.mesh
    if mesh is None or devices == 1:
        if devices not in (None, 1):
            raise DevicesUnavailableError(
                f"this bundle records no device mesh, so it runs on 1 device, not {devices}",
            )
        return None
    shape = " x ".join(f"{a.name}={a.size}" for a in mesh.axes)
    if devices is not None and devices != mesh.size:
        raise DevicesUnavailableError(
            f"the bundle's mesh ({shape}) spans {mesh.size} devices; it cannot run on {devices}. "
            f"Use {mesh.size} devices, or 1 to run it unsharded",
        )
    visible = jax.devices()
    if len(visible) < mesh.size:
        raise DevicesUnavailableError(
            f"the bundle's mesh ({shape}) needs {mesh.size} devices, but {len(visible)} are visible "
            f"(jax.devices()). Run it on 1 device (devices=1, --devices 1), or where {mesh.size} "
            "devices are (on CPU: XLA_FLAGS=--xla_force_host_platform_device_count=N)",
        )
    order = mesh.device_ids or list(range(mesh.size))
    grid = np.array([visible[i] for i in order]).reshape([a.size for a in mesh.axes])
    names = tuple(a.name for a in mesh.axes)
    try:
        from jax.sharding import AxisType

        return jax.sharding.Mesh(grid, names, axis_types=(AxisType.Auto,) * len(names))
    except ImportError:  # jax < 0.6 has no axis types; its meshes are all "auto"
        return jax.sharding.Mesh(grid, names)


def _spec(sharding: list[list[str]] | None) -> Any:
    from jax.sharding import PartitionSpec

    return PartitionSpec(*partition_spec_entries(sharding))


def _placement(manifest: Manifest, mesh: Any) -> tuple[list[Any], list[Any]] | None:
    """NamedShardings of every argument and result on `mesh` (unsharded values are replicated)."""
    if mesh is None:
        return None
    from jax.sharding import NamedSharding

    return (
        [NamedSharding(mesh, _spec(a.sharding)) for a in manifest.arguments],
        [NamedSharding(mesh, _spec(r.sharding)) for r in manifest.results],
    )


def _place(x: Any, sharding: Any) -> Any:
    """Concrete inputs go to the mesh with jax.device_put; tracers are placed by jit."""
    import jax

    return x if isinstance(x, jax.core.Tracer) else jax.device_put(x, sharding)


def donated_arguments(manifest: Manifest, donate: Sequence[str] | str) -> tuple[str, ...]:
    """Argument names to donate: given by name, or `"aliased"` for every argument a result
    writes back (Reactant's `tf.aliasing_output`)."""
    names = [a.name for a in manifest.arguments]
    if donate == "aliased":
        return tuple(names[r.aliases] for r in manifest.results if r.aliases is not None)
    if isinstance(donate, str):
        donate = [donate]
    unknown = [n for n in donate if n not in names]
    if unknown:
        raise InputError(
            f"cannot donate unknown argument(s) {unknown}; the arguments are {names}",
            argument=unknown[0],
        )
    return tuple(donate)


def _count_error(arguments: list[Argument], got: int) -> InputError:
    names = ", ".join(a.name for a in arguments)
    return InputError(f"expected {len(arguments)} argument(s) ({names}), got {got}")


def check_x64(manifest: Manifest) -> None:
    import jax

    if needs_x64(manifest) and not jax.config.jax_enable_x64:
        raise X64DisabledError(
            "this bundle has 64-bit values, and with jax_enable_x64 off JAX would silently "
            "truncate them; call jax.config.update('jax_enable_x64', True) at start-up "
            "(or set JAX_ENABLE_X64=1) before calling it"
        )


def _check_value(x: Any, arg: Argument, index: int) -> Any:
    want_dtype = _dtypes.BY_NAME[arg.dtype].numpy
    if isinstance(x, (bool, int, float, complex)) and not arg.shape:
        x = np.asarray(x, dtype=want_dtype)
    elif not hasattr(x, "shape") or not hasattr(x, "dtype"):
        x = np.asarray(x)
    got = (np.dtype(x.dtype), tuple(x.shape))
    if got != (want_dtype, tuple(arg.shape)):
        # A wrong dtype is a TypeError, a wrong shape a ValueError, as JAX raises them.
        error = InputDtypeError if got[0] != want_dtype else InputError
        raise error(
            f"argument {arg.name!r} (args[{index}], path {arg.path}): expected "
            f"{arg.dtype}{list(arg.shape)}, got {got[0].name}{list(got[1])}",
            argument=arg.name,
        )
    return x


def _flatten_by_tree(tree: Any, value: Any, where: str) -> dict[str, Any]:
    if isinstance(tree, str):
        return {tree: value}
    if tree is None:
        return {}
    if isinstance(tree, list):
        if not isinstance(value, (list, tuple)) or len(value) != len(tree):
            raise InputError(
                f"{where}: expected a sequence of {len(tree)}, got {_describe(value)}",
                argument=where,
            )
        found: dict[str, Any] = {}
        for i, (t, v) in enumerate(zip(tree, value, strict=True)):
            found.update(_flatten_by_tree(t, v, f"{where}[{i}]"))
        return found
    if not isinstance(value, Mapping) or set(value) != set(tree):
        raise InputError(
            f"{where}: expected a dict with keys {sorted(tree)}, got {_describe(value)}",
            argument=where,
        )
    found = {}
    for k, t in tree.items():
        found.update(_flatten_by_tree(t, value[k], f"{where}[{k!r}]"))
    return found


def _describe(value: Any) -> str:
    if isinstance(value, Mapping):
        return f"a dict with keys {sorted(map(str, value))}"
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of {len(value)}"
    return type(value).__name__


def _unflatten_tree(tree: Any, by_name: dict[str, Any]) -> Any:
    if isinstance(tree, str):
        return by_name[tree]
    if isinstance(tree, list):
        return tuple(_unflatten_tree(t, by_name) for t in tree)
    if isinstance(tree, dict):
        return {k: _unflatten_tree(t, by_name) for k, t in tree.items()}
    return None


# Per-bundle state of the enzyme backend, kept here (not on the Bundle) and dropped with it.
_PREPARED: weakref.WeakKeyDictionary[Bundle, Prepared] = weakref.WeakKeyDictionary()
_BLOCKERS: weakref.WeakKeyDictionary[Bundle, EnzymeBlockers] = weakref.WeakKeyDictionary()


def prepared_for_hlo_call(bundle: Bundle) -> Prepared:
    """The module rewritten for enzyme_ad's `hlo_call` (computed once per Bundle)."""
    from ._prepare import for_hlo_call, symbol_prefix

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
        values = [*bundle.manifest.arguments, *bundle.manifest.results]
        _BLOCKERS[bundle] = EnzymeBlockers.of(
            bundle.modules["module"].parsed, [(v.name, v.dtype) for v in values]
        )
    return _BLOCKERS[bundle]


def _enzyme_impl(bundle: Bundle) -> Callable[..., tuple[Any, ...]]:
    prepared = prepared_for_hlo_call(bundle)
    register_module(prepared.text, enzyme_blockers(bundle))
    if (batched := _batched_module(bundle)) is not None:
        _batched.register(prepared.text, _fast(bundle, batched, "jvp", prepared))
    return enzyme_callable(prepared, [r.dtype for r in bundle.manifest.results])


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


def _xla_impl(bundle: Bundle) -> Callable[..., tuple[Any, ...]]:
    m = bundle.manifest
    backward = bundle.backward_artifact
    if backward is None:
        get_vjp = _no_vjp
    else:
        from .._write._lowering import cotangent_avals

        def get_vjp(_: Any) -> Any:
            return exported_for(m, backward, inputs=[*_avals(m.arguments), *cotangent_avals(m.results)],
                                outputs=cotangent_avals(m.arguments), name=f"{m.function}_vjp",
                                get_vjp=_no_second_order)  # fmt: skip

    exported = exported_for(m, bundle.portable_artifact, get_vjp=get_vjp)
    if (batched := _batched_module(bundle)) is not None:
        _batched.register(exported, _fast(bundle, batched, "vjp"))
    return lambda *flat: tuple(exported.call(*flat))


def _batched_module(bundle: Bundle) -> BatchedModule | None:
    """The batched module to use: only unsharded bundles use one (it is lowered for one device)."""
    return bundle.manifest.batched if bundle.manifest.mesh is None else None


def _fast(
    bundle: Bundle,
    batched_module: BatchedModule,
    derivative: Literal["jvp", "vjp"],
    prepared: Prepared | None = None,
) -> Any:
    """The batched module, run by jax.export, in place of a loop over the bundle's call.

    On the enzyme backend the call's values may be carried in other dtypes (`_prepare`):
    they are converted, exactly, to the manifest's dtypes and back.
    """
    m = bundle.manifest
    inputs, outputs = _batched.symbolic_avals(m, batched_module.arguments)
    batched = exported_for(m, bundle.batched_artifact, inputs=inputs, outputs=outputs,
                           name=f"{m.function}_batched", polymorphic=True)  # fmt: skip
    call = batched.call
    if prepared is not None:
        args = [_dtypes.BY_NAME[a.dtype].numpy for a in m.arguments]

        def call(*xs: Any) -> list[Any]:
            outs = batched.call(*[x.astype(d) for x, d in zip(xs, args, strict=True)])
            return [o if c is None else o.astype(c) for o, c in zip(outs, prepared.result_carriers, strict=True)]  # fmt: skip

    names = set(batched_module.arguments)
    mapped = tuple(a.name in names for a in m.arguments)
    return _batched.Fast(mapped, bundle.signature.unused, call, derivative)


def _no_vjp(_: Any) -> Any:
    raise TransformError(
        "differentiating this bundle on the xla backend needs a backward module, and it stores "
        "none: pack it with --with-vjp (hlobundle.pack(..., with_vjp=True)), or use "
        "backend='enzyme'"
    )


def _no_second_order(_: Any) -> Any:
    raise TransformError(
        "second-order differentiation (grad of grad, jax.hessian, jacfwd of grad) of a bundle "
        "is not supported: on the xla backend the stored backward module is itself not "
        "differentiable. Differentiate once, or export the derivative as a bundle"
    )


def _avals(values: Sequence[Any]) -> list[Any]:
    import jax

    return [jax.core.ShapedArray(tuple(v.shape), _dtypes.BY_NAME[v.dtype].numpy) for v in values]


def exported_for(
    manifest: Manifest,
    portable: bytes,
    *,
    inputs: Sequence[Any] | None = None,
    outputs: Sequence[Any] | None = None,
    name: str | None = None,
    get_vjp: Callable[[Any], Any] | None = None,
    polymorphic: bool = False,
) -> Any:
    """A `jax.export.Exported` for a portable artifact, built field by field (any jax >= 0.6).

    By default its avals are the manifest's arguments and results; a backward module passes its own.
    """
    import jax
    from jax import export

    in_avals = tuple(inputs if inputs is not None else _avals(manifest.arguments))
    out_avals = tuple(outputs if outputs is not None else _avals(manifest.results))
    n, m = len(in_avals), len(out_avals)
    fields = {
        "fun_name": name or manifest.function,
        "in_tree": jax.tree_util.tree_structure((tuple(range(n)), {})),
        "in_avals": in_avals,
        "out_tree": jax.tree_util.tree_structure(tuple(range(m))),
        "out_avals": out_avals,
        "_has_named_shardings": False,
        "_in_named_shardings": (None,) * n,
        "_out_named_shardings": (None,) * m,
        "in_shardings_hlo": (None,) * n,
        "out_shardings_hlo": (None,) * m,
        "nr_devices": 1,
        "platforms": ("cpu",),
        "ordered_effects": (),
        "unordered_effects": (),
        "disabled_safety_checks": (export.DisabledSafetyCheck.platform(),),
        "mlir_module_serialized": portable,
        "calling_convention_version": export.maximum_supported_calling_convention_version,
        "module_kept_var_idx": tuple(range(n)),
        "uses_global_constants": polymorphic,  # symbolic dimensions (a batched module)
        "_get_vjp": get_vjp,
    }
    known = {f.name for f in dataclasses.fields(export.Exported)}
    return export.Exported(**{k: v for k, v in fields.items() if k in known})

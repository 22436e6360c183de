"""The xla backend: a `jax.export.Exported` of the stored portable artifact; needs only jax.

Differentiation uses the stored backward module (SPEC.md 2.4) as the Exported's VJP; vmap loops,
or runs the batched module (`_batched`). Forward mode is not available: an Exported has a VJP only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ... import _compat
from ..._format._errors import TransformError
from ..._format._manifest import Manifest
from .. import _batched, _transforms
from .._avals import cotangent_avals, value_avals

if TYPE_CHECKING:
    from ..._read._reader import Bundle

NAME = "xla"
JAX = True
STORED_EXECUTABLES = False
UNAVAILABLE = "the xla backend needs jax"


def available() -> bool:
    return True


def make(
    bundle: Bundle, *, donate: Any = (), devices: int | None = None, trust_executables: bool = False
) -> Any:
    """The backend's function (`_backends`' interface): a `BundleFunction`."""
    from .._function import BundleFunction

    return BundleFunction(bundle, NAME, donate, devices)


def install_rules() -> None:
    _transforms.install_loop_rule(_compat.call_exported_p())


def check_derivatives(bundle: Bundle, args: Sequence[Any]) -> None:
    if _transforms.differentiated(args, NAME) == "forward":
        raise TransformError(
            "forward-mode differentiation (jax.jvp, jax.jacfwd) is not available on the xla "
            "backend: a jax.export function has only a VJP. Use reverse mode (jax.grad, "
            "jax.vjp, jax.jacrev), or backend='enzyme'"
        )


def implementation(bundle: Bundle) -> Callable[..., tuple[Any, ...]]:
    exported = exported_for(bundle.manifest, bundle.portable_artifact, get_vjp=_vjp_of(bundle),
                            lapack=_calls_lapack(bundle, "module"))  # fmt: skip
    if (fast := _batched.fast_path(bundle, "vjp")) is not None:
        _batched.register(exported, fast)
    return lambda *flat: tuple(exported.call(*flat))


def _no_vjp(bundle: Bundle) -> Callable[[Any], Any]:
    """The refusal to differentiate a bundle without a backward module, saying how one is
    stored for a bundle made the way this one was (its provenance's producer)."""
    from ..._format._manifest import PRODUCER_JAX, PRODUCER_JAX_EXPORT
    from . import _enzyme

    producer = bundle.manifest.provenance.producer
    if producer == PRODUCER_JAX_EXPORT:
        where = ("serialize it with `exported.serialize(vjp_order=1)` and pack that blob again "
                 "(pack --from-jax-export, or hlobundle.from_exported(exported, ...))")  # fmt: skip
    elif producer == PRODUCER_JAX:
        where = "export it again with hlobundle.export(..., with_vjp=True)"
    elif _enzyme.available():
        where = (
            "pack it with --with-vjp (hlobundle.pack(..., with_vjp=True)), or use backend='enzyme'"
        )
    else:
        where = ("export it from JAX with hlobundle.export(..., with_vjp=True), or pack it with "
                 "--with-vjp where enzyme-ad is installed (Python 3.11)")  # fmt: skip

    def refuse(_: Any) -> Any:
        raise TransformError(
            "differentiating this bundle on the xla backend needs a backward module, and it "
            f"stores none: {where}"
        )

    return refuse


def _no_second_order(_: Any) -> Any:
    raise TransformError(
        "second-order differentiation (grad of grad, jax.hessian, jacfwd of grad) of a bundle "
        "is not supported: on the xla backend the stored backward module is itself not "
        "differentiable. Differentiate once, or export the derivative as a bundle"
    )


def to_exported(bundle: Bundle) -> Any:
    """The bundle as a `jax.export.Exported`: its portable artifact, called with the pytrees it
    was exported with (when the manifest records them), and its backward module as the VJP."""
    import jax

    from ..._format._manifest import unflatten

    m = bundle.manifest
    in_tree = out_tree = None
    if m.input_tree is not None:
        positions = {a.name: i for i, a in enumerate(m.arguments)}
        args = unflatten(m.input_tree, positions)
        if jax.tree_util.tree_leaves(args) == list(range(len(m.arguments))):  # @main's order
            in_tree = jax.tree_util.tree_structure((tuple(args), {}))
    if m.output_tree is not None:
        positions = {r.name: i for i, r in enumerate(m.results)}
        results = unflatten(m.output_tree, positions)
        if jax.tree_util.tree_leaves(results) == list(range(len(m.results))):
            out_tree = jax.tree_util.tree_structure(results)
    return exported_for(m, bundle.portable_artifact, get_vjp=_vjp_of(bundle),
                        in_tree=in_tree, out_tree=out_tree,
                        lapack=_calls_lapack(bundle, "module"))  # fmt: skip


def _calls_lapack(bundle: Bundle, form: str) -> bool:
    from ..._format._policy import calls_lapack

    return calls_lapack(bundle.modules[form].custom_calls)


def _vjp_of(bundle: Bundle) -> Callable[[Any], Any]:
    """The Exported's `_get_vjp`: the stored backward module, or a clear refusal."""
    m = bundle.manifest
    backward = bundle.backward_artifact
    if backward is None:
        return _no_vjp(bundle)

    def get_vjp(_: Any) -> Any:
        return exported_for(m, backward, inputs=[*value_avals(m, m.arguments),
                                                 *cotangent_avals(m, m.results)],
                            outputs=cotangent_avals(m, m.arguments), name=f"{m.function}_vjp",
                            get_vjp=_no_second_order, lapack=_calls_lapack(bundle, "vjp"))  # fmt: skip

    return get_vjp


def exported_for(
    manifest: Manifest,
    portable: bytes,
    *,
    inputs: Sequence[Any] | None = None,
    outputs: Sequence[Any] | None = None,
    name: str | None = None,
    get_vjp: Callable[[Any], Any] | None = None,
    polymorphic: bool = False,
    in_tree: Any = None,
    out_tree: Any = None,
    lapack: bool = True,
) -> Any:
    """A `jax.export.Exported` for a portable artifact, built field by field (any jax >= 0.6).

    By default its avals are the manifest's arguments and results, and its trees flat; a
    backward module passes its own avals. `lapack=False` says the module's checked custom calls
    include no LAPACK kernel, so lowering it need not initialize them.
    """
    import jax
    from jax import export

    in_avals = tuple(inputs if inputs is not None else value_avals(manifest, manifest.arguments))
    out_avals = tuple(outputs if outputs is not None else value_avals(manifest, manifest.results))
    n, m = len(in_avals), len(out_avals)
    fields = {
        "fun_name": name or manifest.function,
        "in_tree": in_tree or jax.tree_util.tree_structure((tuple(range(n)), {})),
        "in_avals": in_avals,
        "out_tree": out_tree or jax.tree_util.tree_structure(tuple(range(m))),
        "out_avals": out_avals,
        "_has_named_shardings": True,  # all None (unspecified), as jax.export writes them
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
        "uses_global_constants": polymorphic or manifest.symbolic,  # symbolic dimensions
        "_get_vjp": get_vjp,
    }
    exported = _compat.new_exported(fields)
    if not lapack:
        _compat.skip_lapack_initialization(exported)
    return exported

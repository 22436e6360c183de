"""The xla backend: a `jax.export.Exported` of the stored portable artifact (built by the
jax.export room, `_interop/_jax_export.py`); needs only jax. `to_exported` is the exporter.

Differentiation uses the stored backward module (SPEC.md 2.4) as the Exported's VJP; vmap loops,
or runs the batched module (`_batched`). Forward mode is not available: an Exported has a VJP only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..._format._errors import TransformError
from ..._interop._jax_export import cotangent_avals, exported_for, trees, value_avals
from ..._read._trust import Trust
from .. import _batched, _transforms
from .._shapes import DEFAULT_MAX_SHAPES, Prover
from . import _installed, _xla_executables
from ._backend import Backend, Executables, JaxFunctions, Script
from ._jax_script import jax_script

if TYPE_CHECKING:
    from ..._read._reader import Bundle

NAME = "xla"
SECOND_ORDER = "on the xla backend the stored backward module is itself not differentiable"


def make(
    bundle: Bundle,
    *,
    donate: Any = (),
    devices: int | None = None,
    trust: Trust = Trust.NOTHING,
    max_shapes: int = DEFAULT_MAX_SHAPES,
) -> Any:
    """The backend's function (`_backends`' interface): a `BundleFunction`, whose eager calls
    run the bundle's stored XLA executables for this machine when the user trusts it (each at
    the shapes it was compiled for)."""
    from .._function import BundleFunction

    trusted = bundle.trusted or Trust.EXECUTABLES in trust
    stored = _xla_executables.stored(bundle, trusted) if not donate else None
    return BundleFunction(bundle, NAME, JAX, donate, devices, max_shapes, trust, stored=stored)


def check_derivatives(bundle: Bundle, args: Sequence[Any]) -> None:
    if _transforms.differentiated(args, SECOND_ORDER) == "forward":
        raise TransformError(
            "forward-mode differentiation (jax.jvp, jax.jacfwd) is not available on the xla "
            "backend: a jax.export function has only a VJP. Use reverse mode (jax.grad, "
            "jax.vjp, jax.jacrev), or backend='enzyme'"
        )


def implementation(
    bundle: Bundle, prover: Prover | None = None, folds: bool = False
) -> Callable[..., tuple[Any, ...]]:
    exported = exported_for(
        bundle.manifest,
        bundle.portable_artifact,
        get_vjp=_vjp_of(bundle),
        lapack=_calls_lapack(bundle, "module"),
    )
    if (fast := _batched.fast_path(bundle, "vjp")) is not None:
        _batched.register(exported, fast)
    if folds and prover is not None:
        fold = _batched.folded(bundle, prover, lambda *flat: exported.call(*flat), "vjp")
        if fold is not None:
            _batched.register(exported, fold)
    return lambda *flat: tuple(exported.call(*flat))


def _no_vjp(bundle: Bundle) -> Callable[[Any], Any]:
    """The refusal to differentiate a bundle without a backward module, saying how one is
    stored for a bundle made the way this one was (its provenance's producer)."""
    from ..._format._fields import PRODUCER_JAX, PRODUCER_JAX_EXPORT, PRODUCER_TORCH

    producer = bundle.manifest.provenance.producer
    if producer == PRODUCER_JAX_EXPORT:
        where = (
            "serialize it with `exported.serialize(vjp_order=1)` and pack that blob again "
            "(pack --from-jax-export, or hlobundle.from_exported(exported, ...))"
        )
    elif producer == PRODUCER_JAX:
        where = "export it again with hlobundle.export(..., with_vjp=True)"
    elif producer == PRODUCER_TORCH:
        where = (
            "pack the model again with hlobundle.from_torch(..., with_vjp=True) "
            "(pack --from-torch-export MODEL.pt2 --with-vjp)"
        )
    elif _installed.enzyme_ad():
        where = (
            "pack it with --with-vjp (hlobundle.pack(..., with_vjp=True)), or use backend='enzyme'"
        )
    else:
        where = (
            "export it from JAX with hlobundle.export(..., with_vjp=True), or pack it with "
            "--with-vjp where enzyme-ad is installed (Python 3.11)"
        )

    def refuse(_: Any) -> Any:
        raise TransformError(
            "differentiating this bundle on the xla backend needs a backward module, and it "
            f"stores none: {where}"
        )

    return refuse


def _no_second_order(_: Any) -> Any:
    raise _transforms.second_order_error(SECOND_ORDER)


def to_exported(bundle: Bundle) -> Any:
    """The bundle as a `jax.export.Exported`: its portable artifact, called with the pytrees it
    was exported with (when the manifest records them), and its backward module as the VJP."""
    in_tree, out_tree = trees(bundle.manifest)
    return exported_for(
        bundle.manifest,
        bundle.portable_artifact,
        get_vjp=_vjp_of(bundle),
        in_tree=in_tree,
        out_tree=out_tree,
        lapack=_calls_lapack(bundle, "module"),
    )


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
        return exported_for(
            m,
            backward,
            inputs=[*value_avals(m, m.arguments), *cotangent_avals(m, m.results)],
            outputs=cotangent_avals(m, m.arguments),
            name=f"{m.function}_vjp",
            get_vjp=_no_second_order,
            lapack=_calls_lapack(bundle, "vjp"),
        )

    return get_vjp


def _script(bundle: Bundle, trust: Trust) -> Script:
    return jax_script(bundle, NAME)


JAX = JaxFunctions(
    implementation=implementation,
    install_rules=_transforms.install_exported_loop_rule,
    check_derivatives=check_derivatives,
    platforms=True,
    symbolic_scripts=True,  # jax.export calls symbolic shapes
)

BACKEND = Backend(
    name=NAME,
    unavailable="the xla backend needs jax",
    available=lambda: True,
    make=make,
    script=_script,
    jax=JAX,
    executables=Executables(
        targets=_xla_executables.TARGETS,
        compile_for=_xla_executables.compile_executable,
        check_target=_xla_executables.check_target,
        here=lambda: (_xla_executables.here().target,),
    ),
)

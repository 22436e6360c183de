"""Sharding between the module, the manifest and JAX (SPEC.md, "Sharding")."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _main_signature

if TYPE_CHECKING:
    from .._format._manifest import DeviceMesh


def sharding_fields(sharding: _main_signature.Sharding | None, what: str, i: int) -> dict[str, Any]:
    if sharding is None:
        return {}
    spec = getattr(sharding, what)[i]
    hlo = getattr(sharding, f"hlo_{what}")[i]
    return {"sharding": None if spec is None else [list(d) for d in spec], "hlo_sharding": hlo}


def manifest_mesh(sharding: _main_signature.Sharding | None) -> DeviceMesh | None:
    if sharding is None or sharding.mesh is None:
        return None
    from .._format._manifest import DeviceMesh, MeshAxis  # the writer's, and a module check's

    return DeviceMesh(
        axes=[MeshAxis(name=n, size=s) for n, s in sharding.mesh],
        device_ids=list(sharding.device_ids) or None,
    )


def partition_spec_entries(sharding: list[list[str]] | None) -> list[str | tuple[str, ...] | None]:
    """A manifest partition spec as `jax.sharding.PartitionSpec` entries ([] -> None)."""
    return [None if not d else d[0] if len(d) == 1 else tuple(d) for d in sharding or []]

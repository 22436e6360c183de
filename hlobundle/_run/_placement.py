"""Placing a sharded bundle's values on a device mesh (SPEC.md 2.5)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._format._errors import DevicesUnavailableError
from .._parse._sharding import partition_spec_entries

if TYPE_CHECKING:
    from .._format._manifest import Manifest


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
        processes = jax.process_count()
        where = (
            f" across {processes} processes ({len(jax.local_devices())} each): give every process "
            f"{-(-mesh.size // processes)} devices (on CPU: XLA_FLAGS="
            "--xla_force_host_platform_device_count=N), or change JAX_NUM_PROCESSES"
            if processes > 1
            else f". Run it on 1 device (devices=1, --devices 1), or where {mesh.size} devices are "
            "(on CPU: XLA_FLAGS=--xla_force_host_platform_device_count=N)"
        )
        raise DevicesUnavailableError(
            f"the bundle's mesh ({shape}) needs {mesh.size} devices, but {len(visible)} are visible "
            f"(jax.devices()){where}",
        )
    order = mesh.device_ids or list(range(mesh.size))
    grid = np.array([visible[i] for i in order]).reshape([a.size for a in mesh.axes])
    names = tuple(a.name for a in mesh.axes)
    try:
        from jax.sharding import AxisType

        return jax.sharding.Mesh(grid, names, axis_types=(AxisType.Auto,) * len(names))
    except ImportError:  # jax < 0.6 has no axis types; its meshes are all "auto"
        return jax.sharding.Mesh(grid, names)


def spec(sharding: list[list[str]] | None) -> Any:
    from jax.sharding import PartitionSpec

    return PartitionSpec(*partition_spec_entries(sharding))


def placement(manifest: Manifest, mesh: Any) -> tuple[list[Any], list[Any]] | None:
    """NamedShardings of every argument and result on `mesh` (unsharded values are replicated)."""
    if mesh is None:
        return None
    from jax.sharding import NamedSharding

    return (
        [NamedSharding(mesh, spec(a.sharding)) for a in manifest.arguments],
        [NamedSharding(mesh, spec(r.sharding)) for r in manifest.results],
    )


def place(x: Any, sharding: Any) -> Any:
    """Concrete inputs go to the mesh with jax.device_put; tracers are placed by jit.

    On a mesh that spans several processes (hosts), each process builds the global array from
    the slices its own devices hold: from a memory-mapped stored tensor, only those bytes are
    read from disk.
    """
    import jax
    import numpy as np

    if isinstance(x, jax.core.Tracer):
        return x
    if sharding.is_fully_addressable or isinstance(x, jax.Array):
        return jax.device_put(x, sharding)
    return jax.make_array_from_callback(np.shape(x), sharding, lambda index: np.asarray(x[index]))


def to_host(x: Any) -> Any:
    """A result as one NumPy array on this process, gathered from every process when the mesh
    spans several."""
    import numpy as np

    if getattr(x, "is_fully_addressable", True):
        return np.asarray(x)
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(x, tiled=True))

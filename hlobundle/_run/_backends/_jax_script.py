"""The emitted script of a JAX backend (`_emit/run_template.py`): the slots that say how it
calls the module, a `jax.export` function of the portable artifact or enzyme-ad's `hlo_call` of
the module text (`prepared` for it), and which of the bundle's module files it reads."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._format._fields import needs_x64
from ..._format._policy import calls_lapack
from ..._format._sharding import partition_spec_entries
from ._backend import Script

if TYPE_CHECKING:
    from ..._read._reader import Bundle
    from ._enzyme_prepare import Prepared


def jax_script(bundle: Bundle, name: str, prepared: Prepared | None = None) -> Script:
    """The script of backend `name`: `prepared` is the module text rewritten for `hlo_call`,
    None for a script that calls the portable artifact (and the backward module, if any)."""
    m = bundle.manifest
    vjp = m.vjp.portable.file if m.vjp else None
    if prepared is None:
        reads: tuple[str, ...] = (m.module.portable.file, *([vjp] if vjp else []))
    else:  # a changed text is written into the script, which then reads no module file
        reads = () if prepared.changed else (m.module.text,)
    mesh = m.mesh
    slots = {
        "BACKEND": name,
        "CONSTRAINTS": list(m.constraints or ()),
        "X64": needs_x64(m),
        "ARGUMENT_CARRIERS": list(prepared.argument_carriers) if prepared else [],
        "RESULT_CARRIERS": list(prepared.result_carriers) if prepared else [],
        "MESH_AXES": [(a.name, a.size) for a in mesh.axes] if mesh else None,
        "DEVICE_ORDER": (mesh.device_ids or list(range(mesh.size))) if mesh else None,
        "ARGUMENT_SHARDINGS": (
            [list(partition_spec_entries(a.sharding)) for a in m.arguments] if mesh else None
        ),
        "PORTABLE_FILE": m.module.portable.file,
        "BACKWARD_FILE": vjp,
        "MODULE_FILE": m.module.text,
        "MODULE_LINES": prepared.text.split("\n") if prepared and prepared.changed else [],
        "CALLS_LAPACK": prepared is not None
        and calls_lapack(bundle.modules["module"].custom_calls),
    }
    return Script("run_template.py", slots, reads, "JAX or NumPy")

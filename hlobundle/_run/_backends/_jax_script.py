"""The emitted script of a JAX backend (`_emit/run_template.py`): the slots that say how it
calls the module, a `jax.export` function of the portable artifact or enzyme-ad's `hlo_call` of
the module text (`prepared` for it), or either (`auto`: the one that imports where it runs), and
which of the bundle's module files it reads."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._format._fields import needs_x64
from ..._format._policy import calls_lapack
from ..._parse._sharding import partition_spec_entries
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


def either(*scripts: Script) -> Script:
    """The scripts of the JAX backends as one, whose BACKEND "auto" calls the module with the
    first of them whose modules import where it runs: each backend's script fills every slot
    of the template (the others' with what it leaves unused), so the first's slots, taken
    over the later ones', serve each; it reads the files each reads."""
    slots: dict[str, object] = {}
    for s in reversed(scripts):
        slots.update(s.slots)
    reads = tuple(dict.fromkeys(f for s in scripts for f in s.reads))
    return Script(scripts[0].template, {**slots, "BACKEND": "auto"}, reads, scripts[0].takes)

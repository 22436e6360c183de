"""What a backend is to the rest of the house: one `Backend` object, which offers everything
that the runner, the writer, the emitter and the commands ask of it. Each backend's room
(`_xla`, `_enzyme`, `_iree`) builds its own, and `_backends` hands them out by name."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from ..._format._manifest import Manifest
    from ..._read._reader import Bundle
    from ..._read._trust import Trust


@dataclass(frozen=True)
class Script:
    """What `emit` writes for a backend: one of the emitter's templates (`_emit/`), the slots
    that this backend fills in, the module files of the bundle the script reads (their
    sha256s go into it), and what arrays the script's function takes."""

    template: str
    slots: dict[str, Any]
    reads: tuple[str, ...]
    takes: str


@dataclass(frozen=True)
class Compiled:
    """A compiled module and what it was made from and with (a manifest `Executable`'s fields;
    `suffix`: its file's, and XLA's key: `device_kind`, `topology`, `libtpu_version`)."""

    data: bytes
    compiler: Literal["iree", "xla"]
    target: str
    cpu: str
    flags: tuple[str, ...]
    compiler_version: str
    architecture: str
    suffix: str = ".vmfb"
    device_kind: str | None = None
    topology: str | None = None
    libtpu_version: str | None = None


@dataclass(frozen=True)
class Backend:
    """One backend, as the rest of the house sees it.

    - `name`: what `function(backend=...)` and `run --backend` call it.
    - `jax`: its functions are JAX functions (jit, grad and vmap them; 64-bit values need
      `jax_enable_x64`); otherwise they run outside JAX, NumPy arrays in and out.
    - `unavailable`: what is missing when `available()` is false, with the pip line.
    - `make(bundle, *, donate, devices, trust, max_shapes)`: the bundle's function,
      with `backend` (`name`), `jax_function` (`jax`), `call_flat(*flat)` and `__call__`.
    - `script(bundle, trust)`: what an emitted `run.py` is for it (checked before anything is
      written); `symbolic_scripts`: whether such a script can call symbolic shapes.
    - `stored_executables`: it runs a bundle's stored executables (SPEC.md, "Executables"),
      which it compiles for `executable_targets` with `compile_executable(bundle, target=,
      cpu=)` (of the bundle's selected function); `check_target(target, cpu)` refuses an unknown one before any work; `scripted_executables`:
      its emitted script runs them too; `targets_here()`: the targets it compiles for on this
      machine (none where its compiler is not installed).
    - `limit_memory(limit)`: caps the process's address space so that running out of memory is
      a coded error (`run --max-memory`), where the backend can need it.
    - A JAX backend's `BundleFunction` takes `implementation(bundle, prover)`, installs
      `install_rules()` and asks `check_derivatives(bundle, args)` before each traced call.
    - `to_exported(bundle)`: the bundle as a `jax.export.Exported`, where the backend's
      function is one.
    - `text_primal(manifest, text)`: a differentiable JAX function of a module's text (what
      `with_vjp=True` lowers a backward module from), where the backend offers one.
    - `platforms`: it runs a function lowered for several platforms (SPEC.md 2.14), passing
      the index of the platform it runs on.
    """

    name: str
    jax: bool
    unavailable: str
    available: Callable[[], bool]
    make: Callable[..., Any]
    script: Callable[[Bundle, Trust], Script]
    symbolic_scripts: bool = False
    stored_executables: bool = False
    scripted_executables: bool = False
    executable_targets: tuple[str, ...] = ()
    compile_executable: Callable[..., Compiled] | None = None
    check_target: Callable[[str, str], object] | None = None
    targets_here: Callable[[], tuple[str, ...]] = lambda: ()
    limit_memory: Callable[[int | None], int] | None = None
    implementation: Callable[..., Callable[..., tuple[Any, ...]]] | None = None
    install_rules: Callable[[], None] = lambda: None
    check_derivatives: Callable[[Bundle, Sequence[Any]], None] = lambda bundle, args: None
    to_exported: Callable[[Bundle], Any] | None = None
    text_primal: Callable[[Manifest, str], Callable[..., Sequence[Any]]] | None = None
    platforms: bool = False

"""What a backend is to the rest of the house: one `Backend` object, which offers everything
that the runner, the writer, the emitter and the commands ask of it: what every backend
answers, and a few capabilities, each one object or None (`JaxFunctions`, `Executables`, a
memory cap). Each backend's room (`_xla`, `_enzyme`, `_iree`) builds its own, and `_backends`
hands them out by name."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
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
class JaxFunctions:
    """A backend whose functions are JAX functions (jit, grad and vmap them; 64-bit values need
    `jax_enable_x64`): what its `BundleFunction` (`_run/_function.py`) is made of.

    - `implementation(bundle, prover, folds)`: the flat function that `jax.jit` compiles;
      `install_rules()`: its transformation rules, installed before it is traced;
      `check_derivatives(bundle, args)`: asked before each traced call.
    - `platforms`: it runs a function lowered for several platforms (SPEC.md 2.14), passing
      the index of the platform it runs on.
    - `symbolic_scripts`: its emitted script can call symbolic shapes (SPEC.md 2.8).
    """

    implementation: Callable[..., Callable[..., tuple[Any, ...]]]
    install_rules: Callable[[], None]
    check_derivatives: Callable[[Bundle, Sequence[Any]], None]
    platforms: bool = False
    symbolic_scripts: bool = False


@dataclass(frozen=True)
class Executables:
    """A backend that runs a bundle's stored executables (SPEC.md, "Executables") and
    compiles them (`hlobundle compile`).

    - `targets`: what it compiles for; `check_target(target, cpu)` refuses an unknown one
      before any work; `here()`: the targets it compiles for on this machine (none where its
      compiler is not installed).
    - `compile_for(bundle, target=, cpu=)`: the bundle's selected function, compiled for
      `target`.
    - `scripted`: its emitted script runs them too.
    """

    targets: tuple[str, ...]
    compile_for: Callable[..., Compiled]
    check_target: Callable[[str, str], object]
    here: Callable[[], tuple[str, ...]]
    scripted: bool = False


@dataclass(frozen=True)
class Backend:
    """One backend, as the rest of the house sees it: what every backend answers, and the
    capabilities a backend may have, each None where it has none (the rule:
    `tests/test_backend.py`).

    - `name`: what `function(backend=...)` and `run --backend` call it.
    - `unavailable`: what is missing when `available()` is false, with the pip line.
    - `make(bundle, *, donate, devices, trust, max_shapes)`: the bundle's function,
      with `backend` (`name`), `jax_function`, `call_flat(*flat)` and `__call__`.
    - `script(bundle, trust)`: what an emitted `run.py` is for it (checked before anything is
      written).
    - `jax`: its functions are JAX functions, made of these (`JaxFunctions`); otherwise they
      run outside JAX, NumPy arrays in and out.
    - `executables`: it runs and compiles stored executables (`Executables`).
    - `limit_memory(limit)`: caps the process's address space so that running out of memory is
      a coded error (`run --max-memory`), where the backend can need it.
    """

    name: str
    unavailable: str
    available: Callable[[], bool]
    make: Callable[..., Any]
    script: Callable[[Bundle, Trust], Script]
    jax: JaxFunctions | None = None
    executables: Executables | None = None
    limit_memory: Callable[[int | None], int] | None = None

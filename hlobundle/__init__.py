"""hlobundle: compiled array programs (StableHLO) as versioned, verifiable bundles for JAX.

The public surface is exactly `__all__`; everything else lives in private modules.
"""

import typing as _typing

from . import errors
from ._version import __version__
from .errors import (
    BundleError,
    ConfigError,
    HloBundleError,
    HloBundleWarning,
    InputError,
    TransformError,
)

# The rest of the surface is imported on first use (PEP 562), so that `import hlobundle` and
# light commands (`inspect`) do not pay for pydantic's models, numpy or jax until they need them.
_LAZY = {
    "FORMAT_VERSION": "._format._manifest",
    "Argument": "._format._manifest",
    "Manifest": "._format._manifest",
    "Result": "._format._manifest",
    "Executable": "._format._manifest",
    "Metadata": "._format._metadata",
    "SigningKey": "._format._signature",
    "Trust": "._read._trust",
    "Bundle": "._read._reader",
    "Function": "._run._function",
    "load": "._remote._load",
    "compile": "._write._compile",
    "configure_jax": "._run._process",
    "emit_script": "._emit._emit",
    "emit_reactant_server": "._emit._reactant_server",
    "export": "._write._export",
    "from_exported": "._write._jax_export",
    "from_reactant_server": "._write._reactant_server",
    "from_reactant": "._write._reactant",
    "from_torch": "._write._torch",
    "pack": "._write._writer",
    "pack_files": "._write._pack_files",
    "pull": "._oci._pull",
    "push": "._oci._push",
    "Pulled": "._oci._pull",
    "Pushed": "._oci._push",
    "sign": "._write._sign",
    "refresh": "._write._refresh",
    "reshard": "._write._reshard",
}


# Names of the surface before 2.0, kept working with a DeprecationWarning. The scheme now:
# `pack` (MLIR text), `export` (a JAX function), `from_<system>` (a foreign system's artifact),
# `emit_<format>` (writing one), and `Bundle.to_exported()`.
_DEPRECATED = {"pack_reactant": "from_reactant"}


def __getattr__(name: str) -> _typing.Any:
    if name in errors.__all__ or name in errors._DEPRECATED:  # before 2.1, every error was here
        import warnings

        target = errors._DEPRECATED.get(name, name)
        warnings.warn(
            f"hlobundle.{name} is now hlobundle.errors.{target}; the old name goes in hlobundle 3.0",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(errors, target)
    if name in _DEPRECATED:
        import warnings

        warnings.warn(
            f"hlobundle.{name} is now hlobundle.{_DEPRECATED[name]}; the old name goes in 3.0",
            DeprecationWarning,
            stacklevel=2,
        )
        return __getattr__(_DEPRECATED[name])
    if name not in _LAZY:
        raise AttributeError(f"module 'hlobundle' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


if _typing.TYPE_CHECKING:
    from ._emit._emit import emit_script
    from ._emit._reactant_server import emit_reactant_server
    from ._format._manifest import FORMAT_VERSION, Argument, Executable, Manifest, Result
    from ._format._metadata import Metadata
    from ._format._signature import SigningKey
    from ._oci._pull import Pulled, pull
    from ._oci._push import Pushed, push
    from ._read._reader import Bundle
    from ._read._trust import Trust
    from ._remote._load import load
    from ._run._function import Function
    from ._run._process import configure_jax
    from ._write._compile import compile
    from ._write._export import export
    from ._write._jax_export import from_exported
    from ._write._pack_files import pack_files
    from ._write._reactant import from_reactant
    from ._write._reactant_server import from_reactant_server
    from ._write._refresh import refresh
    from ._write._reshard import reshard
    from ._write._sign import sign
    from ._write._torch import from_torch
    from ._write._writer import pack

__all__ = [
    "Argument",
    "Bundle",
    "BundleError",
    "ConfigError",
    "Executable",
    "FORMAT_VERSION",
    "Function",
    "HloBundleError",
    "HloBundleWarning",
    "InputError",
    "Manifest",
    "Metadata",
    "Pulled",
    "Pushed",
    "Result",
    "SigningKey",
    "Trust",
    "TransformError",
    "__version__",
    "errors",
    "compile",
    "configure_jax",
    "emit_reactant_server",
    "emit_script",
    "export",
    "from_exported",
    "from_reactant_server",
    "from_torch",
    "load",
    "pack",
    "pack_files",
    "pull",
    "push",
    "from_reactant",
    "refresh",
    "reshard",
    "sign",
]

"""hlobundle: compiled array programs (StableHLO) as versioned, verifiable bundles for JAX.

The public surface is exactly `__all__`; everything else lives in private modules.
"""

from ._emit import emit_script
from ._errors import (
    BundleError,
    ConfigError,
    FileSetError,
    HloBundleError,
    HloBundleWarning,
    InputError,
    IntegrityError,
    LimitError,
    ManifestError,
    ModuleError,
    ModuleMismatchError,
    NotABundleError,
    NotPortableError,
    OutputExistsError,
    SignatureError,
    TensorFileError,
    TransformError,
    UnsafePathError,
    VersionError,
)
from ._export import export
from ._manifest import FORMAT_VERSION, Argument, Manifest, Result
from ._reactant import pack_reactant
from ._reader import Bundle, load
from ._version import __version__
from ._writer import pack, pack_files

__all__ = [
    "FORMAT_VERSION",
    "Argument",
    "Bundle",
    "BundleError",
    "ConfigError",
    "FileSetError",
    "HloBundleError",
    "HloBundleWarning",
    "InputError",
    "IntegrityError",
    "LimitError",
    "Manifest",
    "ManifestError",
    "ModuleError",
    "ModuleMismatchError",
    "NotABundleError",
    "NotPortableError",
    "OutputExistsError",
    "Result",
    "SignatureError",
    "TensorFileError",
    "TransformError",
    "UnsafePathError",
    "VersionError",
    "__version__",
    "emit_script",
    "export",
    "load",
    "pack",
    "pack_files",
    "pack_reactant",
]

"""hlobundle: compiled array programs (StableHLO) as versioned, verifiable bundles for JAX.

The public surface is exactly `__all__`; everything else lives in private modules.
"""

from ._errors import (
    BundleError,
    FileSetError,
    HloBundleError,
    HloBundleWarning,
    InputError,
    IntegrityError,
    ManifestError,
    ModuleError,
    NotABundleError,
    OutputExistsError,
    SignatureError,
    TensorFileError,
    UnsafePathError,
    VersionError,
)
from ._export import export
from ._manifest import FORMAT_VERSION, Argument, Manifest, Result
from ._reader import Bundle, load
from ._writer import pack, pack_files

__version__ = "0.1.0"

__all__ = [
    "FORMAT_VERSION",
    "Argument",
    "Bundle",
    "BundleError",
    "FileSetError",
    "HloBundleError",
    "HloBundleWarning",
    "InputError",
    "IntegrityError",
    "Manifest",
    "ManifestError",
    "ModuleError",
    "NotABundleError",
    "OutputExistsError",
    "Result",
    "SignatureError",
    "TensorFileError",
    "UnsafePathError",
    "VersionError",
    "__version__",
    "export",
    "load",
    "pack",
    "pack_files",
]

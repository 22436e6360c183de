"""hlobundle: compiled array programs (StableHLO) as versioned, verifiable bundles for JAX.

The public surface is exactly `__all__`; everything else lives in private modules.
"""

from . import _run  # noqa: E402, F401  (registers the runner into the writer: README, "Layout")
from ._emit._emit import emit_script
from ._format._errors import (
    BackendUnavailableError,
    BundleError,
    ConfigError,
    DevicesUnavailableError,
    DtypeUnsupportedError,
    FileMissingError,
    FileSetError,
    FileUnlistedError,
    HashMismatchError,
    HloBundleError,
    HloBundleWarning,
    InputAmbiguousError,
    InputDtypeError,
    InputError,
    IntegrityError,
    LimitError,
    ManifestError,
    ManifestTooLargeError,
    ModuleError,
    ModuleMismatchError,
    NotABundleError,
    NotPortableError,
    OutputExistsError,
    SignatureError,
    SizeMismatchError,
    TensorFileError,
    TensorMismatchError,
    TransformError,
    UnsafePathError,
    VersionError,
    X64DisabledError,
)
from ._format._manifest import FORMAT_VERSION, Argument, Manifest, Result
from ._read._reader import Bundle, load
from ._version import __version__
from ._write._export import export
from ._write._reactant import pack_reactant
from ._write._writer import pack, pack_files

__all__ = [
    "Argument",
    "BackendUnavailableError",
    "Bundle",
    "BundleError",
    "ConfigError",
    "DevicesUnavailableError",
    "DtypeUnsupportedError",
    "FORMAT_VERSION",
    "FileMissingError",
    "FileSetError",
    "FileUnlistedError",
    "HashMismatchError",
    "HloBundleError",
    "HloBundleWarning",
    "InputAmbiguousError",
    "InputDtypeError",
    "InputError",
    "IntegrityError",
    "LimitError",
    "Manifest",
    "ManifestError",
    "ManifestTooLargeError",
    "ModuleError",
    "ModuleMismatchError",
    "NotABundleError",
    "NotPortableError",
    "OutputExistsError",
    "Result",
    "SignatureError",
    "SizeMismatchError",
    "TensorFileError",
    "TensorMismatchError",
    "TransformError",
    "UnsafePathError",
    "VersionError",
    "X64DisabledError",
    "__version__",
    "emit_script",
    "export",
    "load",
    "pack",
    "pack_files",
    "pack_reactant",
]

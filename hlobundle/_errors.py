"""The project's exceptions.

Every failure a user can cause raises a subclass of `HloBundleError`. Each class has a
stable `code` (listed in SPEC.md, "Error codes") and carries the context it is about:
the file (`path`), the manifest field (`field`) or the function argument (`argument`).

```
HloBundleError
├── BundleError                the bundle on disk is malformed or tampered with
│   ├── NotABundleError            NOT_A_BUNDLE
│   ├── ManifestError              MANIFEST_INVALID, MANIFEST_TOO_LARGE
│   ├── VersionError               VERSION_UNSUPPORTED
│   ├── UnsafePathError            PATH_UNSAFE
│   ├── FileSetError               FILE_MISSING, FILE_UNLISTED
│   ├── IntegrityError             SIZE_MISMATCH, HASH_MISMATCH
│   ├── TensorFileError            SAFETENSORS_INVALID, TENSOR_MISMATCH
│   ├── SignatureError             SIGNATURE_MISMATCH
│   ├── ModuleMismatchError        MODULE_MISMATCH
│   └── LimitError                 LIMIT_EXCEEDED
├── ModuleError                MLIR_INVALID, DTYPE_UNSUPPORTED
│   └── NotPortableError           MODULE_NOT_PORTABLE
├── InputError                 INPUT_INVALID, INPUT_AMBIGUOUS
├── ConfigError                X64_DISABLED, BACKEND_UNAVAILABLE, DEVICES_UNAVAILABLE
├── TransformError             TRANSFORM_UNSUPPORTED
└── OutputExistsError          OUTPUT_EXISTS
```
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "BundleError",
    "ConfigError",
    "FileSetError",
    "HloBundleError",
    "HloBundleWarning",
    "InputError",
    "IntegrityError",
    "LimitError",
    "ManifestError",
    "ModuleError",
    "ModuleMismatchError",
    "NotABundleError",
    "NotPortableError",
    "OutputExistsError",
    "SignatureError",
    "TransformError",
    "TensorFileError",
    "UnsafePathError",
    "VersionError",
]


class HloBundleWarning(UserWarning):
    """Something a reader tolerated but the user should know, e.g. a newer minor version."""


class HloBundleError(Exception):
    """Root of every error this package raises on bad input.

    **Attributes:**

    - `code`: a stable identifier from SPEC.md's error table.
    - `path`: the file the error is about, if any.
    - `field`: the manifest field (dotted, e.g. `arguments[2].shape`), if any.
    - `argument`: the function argument's name, if any.
    """

    code: str = "ERROR"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        path: str | Path | None = None,
        field: str | None = None,
        argument: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.path = None if path is None else str(path)
        self.field = field
        self.argument = argument

    def context(self) -> dict[str, str]:
        """The non-empty context fields, for reports and `--json` output."""
        items = {"path": self.path, "field": self.field, "argument": self.argument}
        return {k: v for k, v in items.items() if v is not None}

    def __str__(self) -> str:
        return f"[{self.code}] {self.message}"


class BundleError(HloBundleError):
    """The bundle on disk is malformed, unsafe or tampered with."""


class NotABundleError(BundleError):
    code = "NOT_A_BUNDLE"


class ManifestError(BundleError):
    code = "MANIFEST_INVALID"


class VersionError(BundleError):
    code = "VERSION_UNSUPPORTED"


class UnsafePathError(BundleError):
    code = "PATH_UNSAFE"


class FileSetError(BundleError):
    code = "FILE_MISSING"


class IntegrityError(BundleError):
    code = "HASH_MISMATCH"


class TensorFileError(BundleError):
    code = "SAFETENSORS_INVALID"


class SignatureError(BundleError):
    code = "SIGNATURE_MISMATCH"


class ModuleMismatchError(BundleError):
    """A module's text and its portable artifact are not the same program (SPEC.md 8)."""

    code = "MODULE_MISMATCH"


class LimitError(BundleError):
    """Something exceeds a limit of SPEC.md section 8 (size, nesting, rank, header, allocation)."""

    code = "LIMIT_EXCEEDED"


class ModuleError(HloBundleError):
    code = "MLIR_INVALID"


class NotPortableError(ModuleError):
    """The module holds an op or custom call outside the allow-list (SPEC.md 6.1 and 8)."""

    code = "MODULE_NOT_PORTABLE"


class InputError(HloBundleError):
    code = "INPUT_INVALID"


class ConfigError(HloBundleError):
    """The Python environment cannot run the bundle as asked (x64 off, a backend missing)."""

    code = "X64_DISABLED"


class TransformError(HloBundleError):
    """A JAX transformation the bundle's backend cannot apply (names the op and the transformation)."""

    code = "TRANSFORM_UNSUPPORTED"


class OutputExistsError(HloBundleError):
    code = "OUTPUT_EXISTS"

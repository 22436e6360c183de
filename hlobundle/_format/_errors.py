"""The project's exceptions: one class per stable code (SPEC.md, "Error codes").

Every failure a user can cause raises a subclass of `HloBundleError`. Each leaf class has one
`code` and carries the context it is about: the file (`path`), the manifest field (`field`) or
the function argument (`argument`). Raise sites pick the class; they never pass a code.
Families without a code of their own group leaves that callers catch together.

The tree of classes, with each one's code, is drawn in `hlobundle/errors.py`, the public
namespace that re-exports them (and whose name they carry, `__module__`).
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "BackendUnavailableError",
    "BackendUnsupportedError",
    "BundleError",
    "ConfigError",
    "DevicesUnavailableError",
    "DtypeUnsupportedError",
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
    "MainSignatureError",
    "ManifestError",
    "ManifestTooLargeError",
    "ModuleError",
    "ModuleMismatchError",
    "NotABundleError",
    "NotPortableError",
    "OutputExistsError",
    "ArtifactInvalidError",
    "BlobDigestError",
    "RegistryAuthError",
    "RegistryError",
    "RegistryLimitError",
    "RegistryNotFoundError",
    "RegistryProtocolError",
    "RegistryRefError",
    "RegistryUnreachableError",
    "SignatureInvalidError",
    "SizeMismatchError",
    "TensorConflictError",
    "TensorFileError",
    "TensorMismatchError",
    "TransformError",
    "UnsafePathError",
    "UnsignedError",
    "VersionError",
    "X64DisabledError",
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
    # The process's runtime state is lost (IREE's, after it ran out of memory): a command line
    # reports the error and exits at once, without the runtime's teardown, which would crash.
    fatal: bool = False

    def __init__(
        self,
        message: str,
        *,
        path: str | Path | None = None,
        field: str | None = None,
        argument: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
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


class ManifestTooLargeError(ManifestError):
    code = "MANIFEST_TOO_LARGE"


class VersionError(BundleError):
    code = "VERSION_UNSUPPORTED"


class UnsafePathError(BundleError):
    code = "PATH_UNSAFE"


class FileSetError(BundleError):
    """The files on disk are not the manifest's files."""


class FileMissingError(FileSetError):
    code = "FILE_MISSING"


class FileUnlistedError(FileSetError):
    code = "FILE_UNLISTED"


class IntegrityError(BundleError):
    """A file's size or sha256 differs from the manifest."""


class SizeMismatchError(IntegrityError):
    code = "SIZE_MISMATCH"


class HashMismatchError(IntegrityError):
    code = "HASH_MISMATCH"


class UnsignedError(IntegrityError):
    """A signature is required (a public key or certificate chain was given) and there is none."""

    code = "SIGNATURE_MISSING"


class SignatureInvalidError(IntegrityError):
    """The bundle's signature (`model.sig`) does not verify: a wrong key or certificate, a
    broken envelope, or files whose digests differ from the signed ones (SPEC.md, "Signature")."""

    code = "SIGNATURE_INVALID"


class TensorFileError(BundleError):
    code = "SAFETENSORS_INVALID"


class TensorMismatchError(TensorFileError):
    code = "TENSOR_MISMATCH"


class MainSignatureError(BundleError):
    code = "SIGNATURE_MISMATCH"


class ModuleMismatchError(BundleError):
    """A module's text and its portable artifact are not the same program (SPEC.md 8)."""

    code = "MODULE_MISMATCH"


class LimitError(HloBundleError):
    """Something exceeds a limit of SPEC.md section 8 (size, nesting, rank, header, allocation)."""

    code = "LIMIT_EXCEEDED"


class ModuleError(HloBundleError):
    code = "MLIR_INVALID"


class DtypeUnsupportedError(ModuleError):
    code = "DTYPE_UNSUPPORTED"


class NotPortableError(ModuleError):
    """The module holds an op or custom call outside the allow-list (SPEC.md 6.1 and 8)."""

    code = "MODULE_NOT_PORTABLE"


class InputError(HloBundleError, ValueError):
    """An argument, an input file or an option does not fit the bundle (a `ValueError`, as JAX
    raises for a bad argument)."""

    code = "INPUT_INVALID"


class TensorConflictError(InputError):
    """Two functions of one bundle give one shared tensor different values (SPEC.md 2.8)."""

    code = "TENSOR_CONFLICT"


class InputDtypeError(InputError, TypeError):
    """A value of the wrong dtype (also a `TypeError`, as JAX raises)."""


class InputAmbiguousError(InputError):
    code = "INPUT_AMBIGUOUS"


class ConfigError(HloBundleError):
    """The Python environment cannot run the bundle as asked (x64 off, a backend missing)."""


class X64DisabledError(ConfigError):
    code = "X64_DISABLED"


class BackendUnavailableError(ConfigError):
    code = "BACKEND_UNAVAILABLE"


class BackendUnsupportedError(ConfigError):
    """The chosen backend cannot run this bundle (a dtype, sharding, custom call or limit it
    lacks); the message names the reason. Another backend may run it."""

    code = "BACKEND_UNSUPPORTED"


class DevicesUnavailableError(ConfigError):
    """The visible devices cannot host the bundle's mesh, a distributed start failed, or the
    runtime could not start (a TPU held by another process)."""

    code = "DEVICES_UNAVAILABLE"


class TransformError(HloBundleError):
    """A JAX transformation the bundle's backend cannot apply (names the op and the transformation),
    or a rewrite to HIGHEST precision that StableHLO refuses (names the op's line)."""

    code = "TRANSFORM_UNSUPPORTED"


class OutputExistsError(HloBundleError):
    code = "OUTPUT_EXISTS"


class RegistryError(HloBundleError):
    """An OCI registry failed, or served what a bundle's artifact may not be (docs/distribution.md).

    **Attributes** (besides `HloBundleError`'s): `ref`, the reference asked for; `digest`, the
    manifest or blob the error is about, when there is one.
    """

    def __init__(
        self,
        message: str,
        *,
        ref: str | None = None,
        digest: str | None = None,
        path: str | Path | None = None,
        argument: str | None = None,
    ) -> None:
        super().__init__(message, path=path, argument=argument)
        self.ref = ref
        self.digest = digest

    def context(self) -> dict[str, str]:
        items = {"ref": self.ref, "digest": self.digest}
        return {**super().context(), **{k: v for k, v in items.items() if v is not None}}


class RegistryRefError(RegistryError, ValueError):
    """Not a reference of the form `oci://HOST[:PORT]/REPO[:TAG|@sha256:DIGEST]`."""

    code = "REGISTRY_REF_INVALID"


class RegistryUnreachableError(RegistryError):
    """No answer: refused, timed out, a TLS failure, or plain HTTP where it was not allowed."""

    code = "REGISTRY_UNREACHABLE"


class RegistryAuthError(RegistryError):
    code = "REGISTRY_AUTH_FAILED"


class RegistryNotFoundError(RegistryError):
    code = "REGISTRY_NOT_FOUND"


class RegistryProtocolError(RegistryError):
    """An answer the OCI distribution spec does not allow: a status, a redirect off the
    registry for anything but a blob, a digest header that disagrees, a body that is not JSON."""

    code = "REGISTRY_PROTOCOL"


class ArtifactInvalidError(RegistryError):
    """The manifest is not a bundle's artifact (docs/distribution.md): its media types, its
    config, its layers' titles, or a signature referrer that is not one."""

    code = "REGISTRY_ARTIFACT_INVALID"


class BlobDigestError(RegistryError):
    """A blob or manifest whose bytes do not have the digest it was asked by."""

    code = "REGISTRY_DIGEST_MISMATCH"


class RegistryLimitError(RegistryError):
    """A manifest, config, index or blob over the bound a pull puts on it."""

    code = "REGISTRY_LIMIT_EXCEEDED"


# Tracebacks and reprs name the public module users import them from (`hlobundle.errors`).
for _name in __all__:
    globals()[_name].__module__ = "hlobundle.errors"
del _name

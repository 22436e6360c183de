"""The exceptions hlobundle raises: one class per stable code (SPEC.md, "Error codes").

Every failure a user can cause raises a subclass of `HloBundleError`, which carries the code
(`code`) and what it is about: the file (`path`), the manifest field (`field`) or the function
argument (`argument`). Catch a family to handle its leaves together:

```
HloBundleError
├── BundleError                    the bundle on disk is malformed or tampered with
│   ├── NotABundleError                NOT_A_BUNDLE
│   ├── ManifestError                  MANIFEST_INVALID
│   │   └── ManifestTooLargeError          MANIFEST_TOO_LARGE
│   ├── VersionError                   VERSION_UNSUPPORTED
│   ├── UnsafePathError                PATH_UNSAFE
│   ├── FileSetError                   (family)
│   │   ├── FileMissingError               FILE_MISSING
│   │   └── FileUnlistedError              FILE_UNLISTED
│   ├── IntegrityError                 (family)
│   │   ├── SizeMismatchError              SIZE_MISMATCH
│   │   ├── HashMismatchError              HASH_MISMATCH
│   │   ├── UnsignedError                  SIGNATURE_MISSING: no model.sig where one is required
│   │   └── SignatureInvalidError          SIGNATURE_INVALID: model.sig does not verify
│   ├── TensorFileError                SAFETENSORS_INVALID
│   │   └── TensorMismatchError            TENSOR_MISMATCH
│   ├── MainSignatureError             SIGNATURE_MISMATCH: @main's types differ from the manifest
│   │                                  (SignatureError, its name before 2.0, goes in 3.0)
│   └── ModuleMismatchError            MODULE_MISMATCH
├── LimitError                     LIMIT_EXCEEDED: over a limit on what a bundle, an input or a
│                                  run may take (a manifest's nesting, IREE's memory at run time)
├── ModuleError                    MLIR_INVALID
│   ├── DtypeUnsupportedError          DTYPE_UNSUPPORTED
│   └── NotPortableError               MODULE_NOT_PORTABLE
├── InputError (ValueError)        INPUT_INVALID
│   ├── InputDtypeError (TypeError)    INPUT_INVALID: a value of the wrong dtype
│   ├── InputAmbiguousError            INPUT_AMBIGUOUS
│   └── TensorConflictError            TENSOR_CONFLICT: one shared tensor, two values
├── ConfigError                    (family) the Python environment cannot run the bundle as asked
│   ├── X64DisabledError               X64_DISABLED
│   ├── BackendUnavailableError        BACKEND_UNAVAILABLE
│   ├── BackendUnsupportedError        BACKEND_UNSUPPORTED: the backend cannot run this bundle
│   └── DevicesUnavailableError        DEVICES_UNAVAILABLE
├── TransformError                 TRANSFORM_UNSUPPORTED
├── OutputExistsError              OUTPUT_EXISTS
└── RegistryError                  (family) an OCI registry or an HTTP server a bundle is loaded
    │                              from, a reference to one, or what it served
    ├── RegistryRefError (ValueError)  REGISTRY_REF_INVALID: not oci://HOST[:PORT]/REPO[:TAG|@DIGEST]
    ├── RegistryUnreachableError       REGISTRY_UNREACHABLE: refused, timed out, TLS, plain HTTP
    ├── RegistryAuthError              REGISTRY_AUTH_FAILED: 401 or 403 with the credentials found
    ├── RegistryNotFoundError          REGISTRY_NOT_FOUND: no such repository, tag or manifest
    ├── RegistryProtocolError          REGISTRY_PROTOCOL: an answer the distribution spec forbids
    ├── ArtifactInvalidError           REGISTRY_ARTIFACT_INVALID: not a bundle's artifact
    ├── BlobDigestError                REGISTRY_DIGEST_MISMATCH: bytes whose digest is not asked
    └── RegistryLimitError             REGISTRY_LIMIT_EXCEEDED: over a bound on what it serves
```

`RegistryError` and its leaves carry `ref` and `digest` too (in `context()`, and `--json`).
A registry's bundle that is itself wrong raises the bundle's classes (`PATH_UNSAFE` for a layer
titled `../x`, `FILE_MISSING`, `FILE_UNLISTED`, `SIGNATURE_INVALID`), with `ref` and `digest`
in the message.

The root and the families users catch most are also at the top level (`hlobundle.HloBundleError`,
`hlobundle.BundleError`, `hlobundle.InputError`, `hlobundle.ConfigError`,
`hlobundle.TransformError`, and the warning `hlobundle.HloBundleWarning`).
"""

import typing as _typing

from ._format import _errors as _source
from ._format._errors import *  # noqa: F403  (each name of the one list, below)

# The one list of public error classes is `_format/_errors.py`'s `__all__`.
__all__ = list(_source.__all__)
del _source

# Names before 2.0, kept working with a DeprecationWarning until 3.0.
_DEPRECATED = {"SignatureError": "MainSignatureError"}


def __getattr__(name: str) -> _typing.Any:
    if name in _DEPRECATED:
        import warnings

        warnings.warn(
            f"hlobundle.errors.{name} is now hlobundle.errors.{_DEPRECATED[name]}; the old "
            "name goes in hlobundle 3.0",
            DeprecationWarning,
            stacklevel=2,
        )
        return globals()[_DEPRECATED[name]]
    raise AttributeError(f"module 'hlobundle.errors' has no attribute {name!r}")

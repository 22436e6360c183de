"""Which ops a bundle's modules may contain: an allow-list (SPEC.md 6.1 and 8).

Every module form (text and, through the identity check, the portable artifact; module,
backward and batched) is checked against it by `_parse/_unportable.py`'s `refuse_unportable`,
which walks the parsed module. Allowed:

- ops of the `func`, `stablehlo`, `chlo` and `sdy` dialects (and the `builtin.module`),
  except host transfers (`infeed`, `outfeed`, `send`, `recv`), which would wait forever for a
  host that is not there, and custom calls, which are checked by target:
- custom calls whose target `jax.export` guarantees stable (`STABLE_TARGETS`), or that the
  producer opted in to (`module.allowed_custom_calls`, recorded and shown by `inspect`), unless
  the target is one that calls back into the producer's process (`NEVER_TARGET_PREFIXES`): no
  opt-in makes those runnable anywhere else.
"""

from __future__ import annotations

from collections.abc import Iterable

ALLOWED_DIALECTS = ("func.", "stablehlo.", "chlo.", "sdy.")
ALLOWED_OPS = frozenset({"builtin.module"})
HOST_TRANSFER_OPS = frozenset(
    f"{d}.{op}" for d in ("stablehlo", "mhlo") for op in ("infeed", "outfeed", "send", "recv")
)
CUSTOM_CALL_OPS = frozenset({"stablehlo.custom_call", "mhlo.custom_call"})

# The custom-call targets jax.export guarantees stable (jax/_src/export/_export.py, jax 0.10),
# less those that carry a kernel or a foreign program in their payload (tpu_custom_call,
# mosaic_gpu_v2, tf.call_tf_function).
_LAPACK = [
    f"lapack_{t}{op}_ffi"
    for op, types in (
        ("potrf", "sdcz"),
        ("geqrf", "sdcz"),
        ("getrf", "sdcz"),
        ("geev", "sdcz"),
        ("gesdd", "sdcz"),
        ("gees", "sdcz"),
        ("trsm", "sdcz"),
        ("gtsv", "sdcz"),
        ("gehrd", "sdcz"),
    )
    for t in types
] + [
    f"lapack_{name}_ffi"
    for name in (
        "sorgqr",
        "dorgqr",
        "cungqr",
        "zungqr",
        "ssyevd",
        "dsyevd",
        "cheevd",
        "zheevd",
        "ssytrd",
        "dsytrd",
        "chetrd",
        "zhetrd",
    )
]
_GPU = [
    f"{lib}_{op}"
    for lib in ("cusolver", "hipsolver")
    for op in (
        "getrf_ffi",
        "geqrf_ffi",
        "orgqr_ffi",
        "potrf_ffi",
        "syevd_ffi",
        "gesvd_ffi",
        "gesvdj_ffi",
        "sytrd_ffi",
    )
] + [
    "cu_lu_pivots_to_permutation",
    "hip_lu_pivots_to_permutation",
    "hipsolver_gesdd_ffi",
    "cusparse_gtsv2_ffi",
    "cu_threefry2x32_ffi",
    "hip_threefry2x32_ffi",
]
STABLE_TARGETS = frozenset(
    [
        *_LAPACK,
        *_GPU,
        "Sharding",
        "SPMDFullToShardShape",
        "SPMDShardToFullShape",
        "annotate_device_placement",
        "Eigh",
        "Qr",
        "ProductOfElementaryHouseholderReflectors",
        "LuDecomposition",
        "ApproxTopK",
        "stablehlo.dynamic_approx_top_k",
        "AllocateBuffer",
        "stablehlo.dynamic_reduce_window",
        "stablehlo.dynamic_rng_bit_generator",
        "stablehlo.dynamic_top_k",
        "shape_assertion",
    ]
)

# Targets that reach into the producing process (Python or Julia callbacks, in-process
# pointers, enzyme-ad's own primitives): refused even when opted in.
NEVER_TARGET_PREFIXES = (
    "xla_python_",
    "xla_ffi_python_",
    "xla_ffi_partitioned_python_",
    "jaxzyme",
    "enzymexla_compile_",
    "reactant_julia_callback",
)

HINT = (
    "It calls into the process that produced it (a pointer, a Python or Julia callback, or LLVM "
    "code), waits for a host transfer, or uses an op outside the dialects a bundle may hold "
    "(func, stablehlo, chlo, sdy). If a custom call target is registered where the bundle will "
    "run, allow it with --allow-custom-call NAME (SPEC.md, 'Normalization')"
)


def calls_lapack(targets: Iterable[str]) -> bool:
    """Whether a module's custom calls include one of jax's CPU LAPACK kernels, which run only
    once jax has initialized them (`_compat.initialize_lapack`)."""
    return any(t.startswith("lapack_") for t in targets)


def target_problem(target: str, allowed: Iterable[str]) -> str | None:
    """Why a custom call target is refused, or None when the policy accepts it."""
    if target.startswith(NEVER_TARGET_PREFIXES):
        return "calls back into the producer's process; never allowed"
    if target in STABLE_TARGETS or target in set(allowed):
        return None
    return "not a stable target and not opted in"


def op_problem(name: str) -> str | None:
    """Why an op other than a custom call (checked by `target_problem`) is refused, or None."""
    if name in HOST_TRANSFER_OPS:
        return "a host transfer"
    if name in ALLOWED_OPS or name.startswith(ALLOWED_DIALECTS):
        return None
    return "outside the allowed dialects"

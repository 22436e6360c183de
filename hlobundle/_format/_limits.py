"""Every resource limit a reader enforces (SPEC.md, "Reader safety and security", table "Limits").

The numbers live here once; the reader, the writer and the runner check against them before
they allocate or hand bytes to a parser that is not hardened (MLIR is C++).
"""

from __future__ import annotations

MIB = 1024 * 1024
GIB = 1024 * MIB

# manifest.json
MAX_MANIFEST_BYTES = 16 * MIB
MAX_JSON_DEPTH = 64  # nesting of arrays and objects in the manifest (pytrees included)
MAX_INT_DIGITS = 20  # any integer in the manifest (sizes, dims) fits in 64 bits

# MLIR modules (text and portable artifact, each form: module, backward, batched)
MAX_MODULE_BYTES = 256 * MIB
MAX_MLIR_NESTING = 256  # brackets open at once in a text module, outside strings and comments
MAX_RANK = 64  # dimensions of any tensor type in a text module
CHILD_TIMEOUT_S = 120  # a portable artifact deserialized in a child process, at most
CHILD_BASE_S, CHILD_S_PER_MIB = 10, 2  # ... and 10 s plus 2 s per MiB of artifact
CHILD_MEMORY_BYTES = 16 * GIB  # its address-space limit, at most
# ... and the address space it may add to what it holds when it starts, which grows with the
# artifact (MLIR's bytecode reader trusts the counts it reads: 796 mutated bytes made it map
# 3.4 GB before it found them wrong): enough to import MLIR's bindings (the base), deserialize
# and print (a module of a million small ops, 14-18 MiB of artifact, took 65-75 bytes of
# memory per byte, imports included)
CHILD_ALLOWANCE_BASE, CHILD_ALLOWANCE_PER_BYTE = 1 * GIB, 256
COMPILE_TIMEOUT_S = 600  # iree-compile of a bundle's module, in a child process

# An ahead-of-time executable (SPEC.md, "Executables"), read whole into memory once.
MAX_EXECUTABLE_BYTES = 256 * MIB

# safetensors headers: a fixed allowance plus a budget per tensor the manifest lists in the file
TENSOR_HEADER_BASE = 64 * 1024
TENSOR_HEADER_PER_KEY = 1024
MAX_TENSOR_HEADER_BYTES = 100 * MIB  # safetensors' own cap

# inputs the runner makes up, and arrays it reads from .npz/.npy/.safetensors input files
MAX_GENERATED_INPUT_BYTES = 4 * GIB

# A signature file (SPEC.md, "Signature"): a few KiB, even with a certificate chain.
MAX_SIGNATURE_BYTES = 1 << 20


def child_allowance(artifact_bytes: int) -> int:
    """How much address space a child reading an artifact of this size may add to its own."""
    return min(CHILD_MEMORY_BYTES, CHILD_ALLOWANCE_BASE + CHILD_ALLOWANCE_PER_BYTE * artifact_bytes)


def child_timeout_s(artifact_bytes: int) -> float:
    """How long a child may take to deserialize and print an artifact of this size."""
    return min(CHILD_TIMEOUT_S, CHILD_BASE_S + CHILD_S_PER_MIB * artifact_bytes / MIB)

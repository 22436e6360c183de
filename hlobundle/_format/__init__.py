"""What a bundle *is* (SPEC.md): the manifest model, dtypes, limits, errors, path rules, tensor
files opened as checked, MLIR parsing and `@main`'s signature, the allow-list, the table of
stored module forms, a portable artifact's magic and versions, format 2.0's functions and
symbolic dimensions (`_symbolic`), and what a signature file is. Imports nothing of the package
above it; under it, only a leaf of the ground floor (`_mlir_context`, the MLIR context): none of
its machinery (child processes, hashing threads, progress bars), which `_bundle_io`, the floor
above, runs for it (`tests/test_layers.py` checks it)."""

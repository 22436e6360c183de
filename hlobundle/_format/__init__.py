"""What a bundle *is* (SPEC.md): the manifest model, dtypes, limits, errors, path rules, tensor
files, MLIR parsing and `@main`'s signature, the allow-list, the table of stored module forms,
the text-artifact identity check, format 2.0's functions and symbolic dimensions (`_symbolic`),
and signatures. Imports nothing of the package above it; under it, only the ground floor
(`_isolation`, which reads untrusted artifacts in child processes, `_file_io`, `_terminal`)."""

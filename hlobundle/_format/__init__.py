"""What a bundle *is* (SPEC.md): the manifest model, dtypes, limits, errors, path rules, tensor
files, MLIR parsing and `@main`'s signature, the allow-list, the table of stored module forms,
and the text-artifact identity check. Imports nothing of the package above it."""

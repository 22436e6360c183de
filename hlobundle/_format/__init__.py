"""What a bundle *is* (SPEC.md): the model, the rules and the errors. The manifest model, dtypes,
limits, errors, path rules, the allow-list, format 2.0's functions and symbolic dimensions
(`_symbolic`), what a signature file is, and whether an element agrees. Imports nothing of the
package: it opens no file (`_bundle_io`, the floor above, reads a bundle's files for it), parses
no MLIR (`_parse`, beside `_bundle_io`), and runs none of the ground floor's machinery (child
processes, hashing threads, progress bars) (`tests/test_layers.py` checks it)."""

"""Writing bundles: `pack`, `export` (JAX), Reactant ingestion, normalization, the lowering of
backward and batched modules, and atomic directory and file writes. Imports `_format` and
`_read`; what it must run (expected outputs, Enzyme's primal) goes through the executor that
`_run` registers."""

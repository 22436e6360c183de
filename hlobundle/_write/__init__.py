"""Writing bundles: `pack`, `export` (JAX), `from_exported`, Reactant and ReactantServer.jl
ingestion, their options (each defined once, in `_options`), normalization, the lowering of
backward and batched modules, several functions in one bundle (`add_function`), `sign`,
`refresh`, `compile`, and a bundle's files written atomically. Imports `_format`, `_interop`
(each importer's foreign format), `_read`, `_output` (where a bundle is written) and `_run`:
what it must run (expected outputs, Enzyme's primal) it runs through the runner
(`_run._compute`)."""

"""One room per foreign system, holding what that system's files and objects are, for both
directions: `_jax_export` (a `jax.export.Exported`: built from a manifest, read from a blob) and
`_reactant_server` (ReactantServer.jl's model bundle: read and written); `_sources` reads the
files a foreign producer wrote. The importers (`_write`) and the exporters (`_run`'s xla
backend, `_emit`) import their room; a room imports only `_format` and `_bundle_io` (the floors
are in docs/layout.md)."""

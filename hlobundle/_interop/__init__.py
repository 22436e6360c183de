"""One room per foreign system, holding what that system's files and objects are, for both
directions: `_jax_export` (a `jax.export.Exported`: built from a manifest, read from a blob),
`_reactant_server` (ReactantServer.jl's model bundle: read and written) and `_torch` (a
`torch.export` program: read, and run on JAX values through `_torch_aten`'s table of core ATen
operators); `_sources` reads the files a foreign producer wrote. The importers (`_write`) and
the exporters (`_run`'s xla backend, `_emit`) import their room; a room imports only `_format`
and `_bundle_io` (the floors are in docs/layout.md)."""

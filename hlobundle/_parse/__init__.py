"""A bundle's programs parsed: StableHLO read with the `jaxlib.mlir` bindings in this process,
in the MLIR context of the ground floor (`_mlir_context`): parsing and portable artifacts
(`_mlir`), `@main`'s signature (`_main_signature`), the allow-list of `_format/_policy.py` held
against a parsed module (`_unportable`), the table of stored module forms and their checks
(`_stored`), shardings (`_sharding`), the StableHLO versions this jaxlib reads (`_portable`); and
untrusted bytes parsed in child processes of `_isolation/` (`_children`: how a child ended, as
the format's coded errors; `_artifacts`: a portable artifact's canonical text, and the same
program as its text). Imports `_format` and the ground floor only."""

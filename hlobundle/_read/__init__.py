"""Reading bundles: `load`, `Bundle` (with its functions, `select`) and `verify`, `inspect`'s
table, and input files given by the user. Imports `_format` and `_bundle_io` only (and the
runner inside `Bundle.function()`, the entry point)."""

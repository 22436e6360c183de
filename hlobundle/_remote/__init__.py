"""Bundles loaded from where they travel to (docs/distribution.md, "Loading remotely"): `load()`
of `oci://` and `https://` references, fetching only what the chosen functions use, and the
store that keeps what was fetched."""

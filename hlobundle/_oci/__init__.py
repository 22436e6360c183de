"""Bundles in OCI registries (docs/distribution.md): `push` and `pull`, the ModelPack artifact a
bundle is there, its signature as a referrer, and the client over `oras` that talks to the
registry with every answer bounded and every digest checked."""

"""Serving bundles over the Open Inference Protocol (KServe v2 REST): `hlobundle serve`.
The floor above the runner and remote loading (`_remote`), below the CLI; it needs the `serve`
extra."""

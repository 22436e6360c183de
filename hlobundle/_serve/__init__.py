"""Serving bundles over the Open Inference Protocol (KServe v2 REST): `hlobundle serve`.
The layer above the runner and below the CLI; it needs the `serve` extra."""

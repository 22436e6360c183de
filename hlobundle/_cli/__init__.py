"""The `hlobundle` command line (`_main`: pack, run, emit, inspect, verify, serve, refresh,
compile, sign, conformance, schema) and the conformance runner: the top layer, above `_serve`."""

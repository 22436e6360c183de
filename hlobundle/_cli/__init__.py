"""The `hlobundle` command line (`_main`) and the conformance runner: the top layer."""

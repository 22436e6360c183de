"""The runner layer: a bundle as a JAX function (`Bundle.function()`), on one of the backends in
`_backends`, the `hlobundle run` logic, and what the writer runs (`_compute`). Layers:
_format < _interop < _read < _run < _write < _emit < _serve < _cli; the runner never imports the
writer."""

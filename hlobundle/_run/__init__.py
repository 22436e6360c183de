"""The runner layer: a bundle as a JAX function (`Bundle.function()`), on one of the backends in
`_backends`, the `hlobundle run` logic, and what the writer runs (`_compute`). Layers:
_format < _read < _run < _write; the runner never imports the writer."""

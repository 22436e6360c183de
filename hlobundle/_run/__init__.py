"""The runner layer: a bundle as a JAX function (`Bundle.function()`), on one of the backends in
`_backends`, the `hlobundle run` logic, and what the writer runs (`_compute`). Floor 3
(docs/layout.md), over `_format`, `_interop` and `_read`; the runner never imports the writer."""

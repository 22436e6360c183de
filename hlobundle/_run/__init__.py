"""The runner layer: a bundle as a JAX function (`Bundle.function()`), on one of the backends in
`_backends`, the `hlobundle run` logic, and what the writer runs (`_compute`). Floor 4
(docs/layout.md), over `_format`, `_interop` and `_read`; the runner never imports the writer.
The backends' room stands over the rest of this one: it imports the parts a backend is built
from, and the rest reaches it only through its door, inside the function that calls it."""

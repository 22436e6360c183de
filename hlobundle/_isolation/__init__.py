"""Reading untrusted bytes in a child process, never in this one (docs/security.md, "The
isolation boundary"): MLIR's bytecode reader and jax's deserializer are not hardened, and a few
mutated bytes can crash the process that runs them.

- `_child.run`: one child script, run once in a fresh interpreter, bounded in time and output;
- `_fork_servers.run`: the same in a fork of a server that imported the script's heavy modules
  once (`_fork_server.py`), for the reader's many artifacts and the writer's Exporteds;
- the child scripts: `_portable_child.py` (a portable artifact's canonical text, in the MLIR
  context the reader builds, `hlobundle/_mlir_context.py`) and `_jax_export_child.py` (the
  backward module of a serialized `jax.export.Exported`'s VJP).

This room imports nothing of the package; a child script imports nothing of it either, but the
leaf `_mlir_context.py`, by its bare name from the package's folder: it runs as a file, with no
package on its path.
"""

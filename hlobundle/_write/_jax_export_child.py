"""Run as a child process: the backward module of a serialized `jax.export.Exported`'s VJP.

The VJP is a nested Exported (a flatbuffer and a StableHLO portable artifact) inside an untrusted
blob; MLIR's bytecode reader is not hardened. This script deserializes the blob and lowers the
backward module through its VJP, so that a crash is an exit status of this process, never of
the packer's (`_jax_export._backward_in_child`).

Protocol: the blob on stdin; on success exit 0 and the backward module's text on stdout; when
the blob does not load, exit 1 and one line on stderr. The first argument is the address-space
limit in bytes.
"""

import resource
import sys
from pathlib import Path


def preload() -> None:
    """What a fork server (`_format/_fork_server.py`) imports once, before it forks per blob."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    import jax  # noqa: F401
    from jax import export  # noqa: F401

    from hlobundle._write import _lowering  # noqa: F401


def main() -> int:
    limit, hard = int(sys.argv[1]), resource.getrlimit(resource.RLIMIT_AS)[1]
    limit = limit if hard == resource.RLIM_INFINITY else min(limit, hard)  # never above ours
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    data = sys.stdin.buffer.read()
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # this hlobundle, not another

    import jax
    from jax import export

    from hlobundle._write._lowering import backward_of_exported

    jax.config.update("jax_enable_x64", True)  # the Exported's own dtypes, 64-bit ones too
    try:
        text = backward_of_exported(export.deserialize(bytearray(data)))
    except Exception as e:  # flatbuffers, jax and the MLIR bindings raise many kinds
        sys.stderr.write(f"{type(e).__name__}: " + " ".join(str(e).split())[:600])
        return 1
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Run as a child process: deserialize an untrusted StableHLO portable artifact.

MLIR's bytecode reader is not hardened: a few mutated bytes can crash the process (SIGSEGV,
a glibc abort). The reader therefore hands artifact bytes to this script in a child process
(`_portable.canonical`) and reads back the canonical text, or a crash as an exit status.

Protocol: the artifact on stdin; on success exit 0 and the canonical text on stdout; when the
artifact does not load, exit 1 and one line on stderr. The first argument is the address-space
limit in bytes.
"""

import resource
import sys


def main() -> int:
    limit, hard = int(sys.argv[1]), resource.getrlimit(resource.RLIMIT_AS)[1]
    limit = limit if hard == resource.RLIM_INFINITY else min(limit, hard)  # never above ours
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    data = sys.stdin.buffer.read()

    from _mlir_context import canonical, new_context
    from jaxlib.mlir.dialects import stablehlo

    try:
        module = stablehlo.deserialize_portable_artifact(new_context(), data)
    except Exception as e:  # the bindings raise bare ValueError/RuntimeError
        sys.stderr.write(" ".join(str(e).split())[:600])
        return 1
    sys.stdout.write(canonical(module))
    return 0


if __name__ == "__main__":
    sys.exit(main())

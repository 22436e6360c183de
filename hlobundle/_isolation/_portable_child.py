"""Run as a child process: deserialize an untrusted StableHLO portable artifact.

MLIR's bytecode reader is not hardened: a few mutated bytes can crash the process (SIGSEGV,
a glibc abort). The reader therefore hands artifact bytes to this script in a child process
(`_parse/_artifacts.canonical_in_child`, through a fork server: `_fork_servers.py`) and reads
back the canonical text, or a crash as an exit status. It imports nothing of the package but
`_mlir_context.py`, a leaf of the package's folder that imports nothing of it either, so that it
parses in the context the reader builds.

Protocol: the artifact on stdin; arguments: the address-space limit in bytes, the deepest op
nesting allowed, the most characters of canonical text wanted, and the address space in bytes
the child may add to what it holds when it starts (the lower of the two limits holds). On
success exit 0 and the canonical text on stdout; when the artifact does not load, exit 1 and
one line on stderr; when its ops nest deeper than allowed, exit 3 and one line on stderr (it is
not printed: a print indents every line by its depth, so a deep module of a few KiB prints
gigabytes); when the text is longer than wanted, exit 4 and its first characters on stdout;
when the limit on its address space refuses an allocation Python sees (a MemoryError, a
library that cannot be mapped), exit 5 and one line on stderr.
"""

import errno
import os
import resource
import sys
from typing import Any

# The package's folder, where `_mlir_context.py` is: after every installed module on the path, so
# that it shadows none of them.
sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def preload() -> None:
    """What a fork server (`_fork_server.py`) imports once, before it forks per artifact: every
    module of the bindings `_mlir_context.new_context` builds a context from (those a fork
    imported itself cost about 30 ms of CPU per artifact)."""
    import _mlir_context

    _mlir_context.bindings()


def main() -> int:
    limit, hard = int(sys.argv[1]), resource.getrlimit(resource.RLIMIT_AS)[1]
    max_depth, max_chars, allowance = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    limit = min(limit, mapped() + allowance)
    limit = limit if hard == resource.RLIM_INFINITY else min(limit, hard)  # never above ours
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    try:
        return read_and_print(max_depth, max_chars)
    except (MemoryError, OSError, ImportError) as e:
        if not out_of_memory(e):
            raise
        return report_out_of_memory(e)


OUT_OF_MEMORY = 5
_OUT_OF_MEMORY_LINE = b"out of memory: the limit on the child's address space refused an allocation"


def report_out_of_memory(e: BaseException) -> int:
    """One line on stderr: what failed, or, where even that cannot be allocated, a line made
    beforehand."""
    try:
        sys.stderr.write("out of memory: " + " ".join(str(e).split())[:600])
    except MemoryError:
        os.write(2, _OUT_OF_MEMORY_LINE)
    return OUT_OF_MEMORY


def out_of_memory(e: BaseException) -> bool:
    """Whether the address-space limit refused what `e` reports (an import's too)."""
    if isinstance(e, MemoryError) or (isinstance(e, OSError) and e.errno == errno.ENOMEM):
        return True
    return isinstance(e, ImportError) and "failed to map" in str(e)


def read_and_print(max_depth: int, max_chars: int) -> int:
    data = sys.stdin.buffer.read()

    from _mlir_context import canonical
    from jaxlib.mlir.dialects import stablehlo

    context = reader_context()
    try:
        module = stablehlo.deserialize_portable_artifact(context, data)
    except MemoryError:  # an allocation the limit refused, for counts the bytes claim: main()
        raise
    except Exception as e:  # the bindings raise bare ValueError/RuntimeError
        sys.stderr.write(" ".join(str(e).split())[:600])
        return 1
    with context:
        if nesting_over(module, max_depth):
            sys.stderr.write(f"its operations nest more than {max_depth} deep")
            return 3
    text = canonical(module)
    sys.stdout.write(text[:max_chars])
    return 4 if len(text) > max_chars else 0


def reader_context() -> Any:
    """The reader's context (`_mlir_context.py`) without a thread pool: its threads' stacks and
    heaps, one each per core, would take the allowance, and the text is the same."""
    from _mlir_context import new_context

    context = new_context()
    context.enable_multithreading(False)
    return context


def mapped() -> int:
    """The address space this process holds now, in bytes (Linux's /proc; where there is none,
    0, and the allowance alone is the limit)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[0]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        return 0


def nesting_over(module: object, limit: int) -> bool:
    """Whether any op lies more than `limit` ops deep (a pre-order walk that stops there)."""
    from jaxlib.mlir import ir

    depths: dict[object, int] = {}

    def visit(op: ir.Operation) -> ir.WalkResult:
        parent = op.parent
        depths[op] = depth = 0 if parent is None else depths.get(parent, 0) + 1
        return ir.WalkResult.INTERRUPT if depth > limit else ir.WalkResult.ADVANCE

    module.operation.walk(visit, ir.WalkOrder.PRE_ORDER)  # type: ignore[attr-defined]
    return max(depths.values(), default=0) > limit


if __name__ == "__main__":
    sys.exit(main())

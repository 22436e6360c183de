"""Run as a child process: the backward module of a serialized `jax.export.Exported`'s VJP.

The VJP is a nested Exported (a flatbuffer and a StableHLO portable artifact) inside an untrusted
blob; MLIR's bytecode reader is not hardened. This script deserializes the blob and lowers the
backward module through its VJP, so that a crash is an exit status of this process, never of
the packer's (`_write/_jax_export._backward_in_child`, in a fork of a server that imported jax
once: `_fork_servers.py`). It imports nothing
of the package: `backward_of_exported` lowers as the writer's `_lowering.lower_backward_of` does
(`tests/test_jax_export.py` holds the two to the same text).

Protocol: the blob on stdin; on success exit 0 and the backward module's text on stdout; when
the blob does not load, exit 1 and one line on stderr; when an allocation is refused (a
MemoryError), exit 5 and one line on stderr, as `_portable_child.py` does. The first argument is the address-space
limit in bytes; the second, the address space the VJP's artifact may add while it is first
deserialized, as `_portable_child.py` deserializes one (MLIR's bytecode reader trusts the
counts it reads: tests/hostile/maps_3_gb.mlirbc), before jax deserializes it to lower.
"""

import contextlib
import resource
import sys


def preload() -> None:
    """What a fork server (`_fork_server.py`) imports once, before it forks per Exported."""
    import jax  # noqa: F401
    from jax import export  # noqa: F401

    # What jax imports to lower any Exported on CPU (its LAPACK kernels' functions): once here,
    # not in each fork (0.23 s a backward module, 0.08 s with it). jax requires scipy; without
    # it a lowering fails in the fork as it would have.
    with contextlib.suppress(ImportError):
        import scipy.linalg  # noqa: F401


def main() -> int:
    limit, hard = int(sys.argv[1]), resource.getrlimit(resource.RLIMIT_AS)[1]
    allowance = int(sys.argv[2])  # for the VJP's artifact, while it is first deserialized
    limit = limit if hard == resource.RLIM_INFINITY else min(limit, hard)  # never above ours
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    data = sys.stdin.buffer.read()

    import jax
    from jax import export

    jax.config.update("jax_enable_x64", True)  # the Exported's own dtypes, 64-bit ones too
    try:
        exported = export.deserialize(bytearray(data))
        if exported.has_vjp():
            deserialize_within(exported.vjp().mlir_module_serialized, allowance)
        text = backward_of_exported(exported)
    except MemoryError as e:
        from _portable_child import report_out_of_memory

        return report_out_of_memory(e)
    except Exception as e:  # flatbuffers, jax and the MLIR bindings raise many kinds
        sys.stderr.write(f"{type(e).__name__}: " + " ".join(str(e).split())[:600])
        return 1
    sys.stdout.write(text)
    return 0


def deserialize_within(artifact: bytes, allowance: int) -> None:
    """Deserialize a portable artifact with the address space this process may add held to
    `allowance`, in the reader's context on one thread (`_portable_child.py`'s): a count bomb
    fails here, within its allowance; the same bytes then deserialize alike when jax lowers."""
    from _portable_child import mapped, reader_context
    from jaxlib.mlir.dialects import stablehlo

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (min(soft, mapped() + allowance), hard))
    try:
        stablehlo.deserialize_portable_artifact(reader_context(), artifact)
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def backward_of_exported(exported):
    """StableHLO text of the backward module of a `jax.export.Exported` with a VJP: JAX
    differentiates `exported.call` through the Exported's VJP, from `(*primals, *output
    cotangents)` to argument cotangents (`float0`, carried as `i1`, for integers and bools)."""
    import jax
    from jax import dtypes, export

    def primal(*flat_args):
        args, kwargs = jax.tree_util.tree_unflatten(exported.in_tree, flat_args)
        return tuple(jax.tree_util.tree_leaves(exported.call(*args, **kwargs)))

    n = len(exported.in_avals)

    def backward(*primals_and_cotangents):
        _, pullback = jax.vjp(primal, *primals_and_cotangents[:n])
        return tuple(pullback(tuple(primals_and_cotangents[n:])))

    def cotangent(aval):
        differentiable = jax.numpy.issubdtype(aval.dtype, jax.numpy.inexact)
        return jax.ShapeDtypeStruct(aval.shape, aval.dtype if differentiable else dtypes.float0)

    specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in exported.in_avals]
    specs += [cotangent(a) for a in exported.out_avals]
    jitted = jax.jit(backward, keep_unused=True)
    platforms = tuple(exported.platforms)
    if len(platforms) > 1:  # lowered for each, as the function is: @main takes the index
        return export.export(jitted, platforms=platforms)(*specs).mlir_module()
    if all(isinstance(d, int) for s in specs for d in s.shape):
        return jitted.lower(*specs).as_text()
    return export.export(jitted)(*specs).mlir_module()  # `@main` derives its dimensions


if __name__ == "__main__":
    sys.exit(main())

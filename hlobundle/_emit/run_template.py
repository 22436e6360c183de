"""Run a bundle with JAX: a script written by `hlobundle emit`.

It needs jax alone (numpy and ml_dtypes come with it), not hlobundle: enzyme_ad too only when
BACKEND is "enzyme". It reads the bundle at its path relative to this file (or the absolute path
`emit --bundle-path absolute` pinned). BACKEND says how it calls the bundle's module: "xla" runs
the portable artifact as a `jax.export` function (its gradient is the stored backward module,
when the bundle has one); "enzyme" runs the module text with enzyme_ad's `hlo_call` (which
differentiates it; `pip install "enzyme-ad>=0.0.16"`, Python 3.11 wheels); "auto" (what `emit`
writes by default) is enzyme where enzyme_ad imports when the script runs, else xla
(BACKEND_HERE says which).
Run it as a script to call the bundle's function on its example inputs (or on generated ones
of the right kinds) and compare the results with its expected outputs, when it has them.
Import it to call the function from your own JAX code: the function named after the bundle's
at the end of this file, which returns the results as `hlobundle`'s `bundle.function()` does
(nested as OUTPUT_TREE says, when the bundle records how), or `call`, which takes one array per
argument and returns a flat tuple of one array per result.

The constants below are the bundle's data, written by `hlobundle emit`; everything else is the
same in every emitted script.
"""

import dataclasses
import difflib  # noqa: F401 (the shared functions below use it)
import hashlib
import json  # noqa: F401 (the shared functions below use it)
import os
import re  # noqa: F401 (the shared functions below use it)
import sys

try:
    import jax
    import jax.numpy as jnp
    import ml_dtypes  # noqa: F401 (the shared functions below use it)
    import numpy as np
except ModuleNotFoundError as missing:  # one line that says what to install, not a traceback
    sys.exit(
        f"error: this script needs {(missing.name or 'jax').partition('.')[0]}, which is not "
        "installed: pip install jax (it brings numpy and ml_dtypes)"
    )

# --- the bundle's data (each line is filled in by `hlobundle emit`) ----------------------------
WHERE = "bundle.hlobundle"  # slot: the bundle, relative to this file (or absolute)
ABOUT = {}  # slot: function, format_version, producer, producer_version
BACKEND = "auto"  # slot: how this script calls the module: "xla", "enzyme" or "auto" (either)
X64 = False  # slot: the bundle has 64-bit values
ARGUMENTS = []  # slot: (name, shape, dtype) of each argument, in the order of @main
CONSTRAINTS = []  # slot: constraints on the symbolic dimensions (names in shapes), jax.export's
RESULTS = []  # slot: (name, shape, dtype) of each result
OUTPUT_TREE = None  # slot: how the function's results nest (result names), or None: a flat tuple
COLUMN_MAJOR = {}  # slot: the arguments and results a Julia producer holds axis-reversed
PATHS = {}  # slot: where each argument came from in the producer's program
INPUTS = None  # slot: (file, key) of each stored example input, or None when there are none
EXPECTED = []  # slot: (file, key) of each result's expected value, or [] when there are none
EXPECTED_FROM = None  # slot: where expected outputs were computed, the module's precision
ARGUMENT_CARRIERS = []  # slot: the dtype hlo_call takes each argument in, or None (its own)
RESULT_CARRIERS = []  # slot: the dtype hlo_call returns each result in, or None (its own)
MESH_AXES = None  # slot: (axis, size) of the device mesh of a sharded bundle
DEVICE_ORDER = None  # slot: the mesh's devices, in order
ARGUMENT_SHARDINGS = None  # slot: each argument's PartitionSpec entries on the mesh
PORTABLE_FILE = "module.mlirbc"  # slot: xla: the module's portable artifact
BACKWARD_FILE = None  # slot: xla: the backward module's portable artifact (the VJP), or None
MODULE_FILE = "module.mlir"  # slot: enzyme: the module text, which hlo_call runs as it is, or:
MODULE_LINES = []  # slot: enzyme: the module prepared for hlo_call (private names, wider dtypes)
CALLS_LAPACK = False  # slot: enzyme: the module calls jax's CPU LAPACK kernels (`lapack_*`)
SHA256 = {}  # slot: the sha256 of each file of the bundle this script reads, as emit verified it

# -----------------------------------------------------------------------------------------------

BUNDLE = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), WHERE))
if not os.path.isfile(os.path.join(BUNDLE, "manifest.json")):  # moved, or this script copied
    sys.exit(
        f"error: this script reads the bundle at {BUNDLE} "
        + ("(its absolute path" if os.path.isabs(WHERE) else f"({WHERE!r}, relative to the script")
        + "), and there is none: put the script beside the bundle again, or emit it again "
        "(hlobundle emit BUNDLE -o SCRIPT; --bundle-path absolute pins the bundle's absolute path)"
    )
SYMBOLIC = any(isinstance(d, str) for _, shape, _ in ARGUMENTS + RESULTS for d in shape)
if X64:  # without x64, JAX would silently truncate 64-bit values
    jax.config.update("jax_enable_x64", True)


def read_file(name):
    """A file of the bundle, read once into memory and checked against the sha256 that
    `hlobundle emit` verified: the script never runs or reads a file swapped in since."""
    if name not in _verified:
        with open(os.path.join(BUNDLE, name), "rb") as f:
            data = f.read()
        if hashlib.sha256(data).hexdigest() != SHA256.get(name):
            sys.exit(f"{name} changed since this script was written: not running it")
        _verified[name] = data
    return _verified[name]


_verified = {}


def enzyme_hlo_call():
    """enzyme_ad's `hlo_call` where BACKEND can use it and enzyme_ad imports, else None (xla);
    for BACKEND "enzyme", a missing enzyme_ad ends the script with one line saying what to do."""
    if BACKEND == "xla":
        return None
    try:
        from enzyme_ad.jax import hlo_call
    except ImportError as e:
        if BACKEND == "auto":
            return None
        sys.exit(
            f"error: this script was emitted with --backend enzyme, which calls the module with "
            f"enzyme_ad's hlo_call, and enzyme_ad does not import here ({e}): pip install "
            '"enzyme-ad>=0.0.16" (Python 3.11 wheels only), or emit the script again with '
            "--backend xla (or the default, auto), which needs jax alone"
        )
    return hlo_call


def enzyme_function(hlo_call):
    """The module as enzyme_ad's `hlo_call` runs it (differentiable by Enzyme)."""
    module = "\n".join(MODULE_LINES) if MODULE_LINES else read_file(MODULE_FILE).decode("utf-8")
    if CALLS_LAPACK:
        initialize_lapack()

    def function(*args):
        # enzyme_ad 0.0.16 cannot pass some dtypes (bool, float16, ...); the prepared module's
        # @main then takes and returns wider ones and converts exactly inside, so convert here.
        carried = [
            x if c is None else x.astype(c) for x, c in zip(args, ARGUMENT_CARRIERS, strict=True)
        ]
        outputs = hlo_call(*carried, source=module) if RESULTS else []
        return tuple(
            o if c is None else o.astype(dtype)
            for o, c, (_, _, dtype) in zip(outputs, RESULT_CARRIERS, RESULTS, strict=True)
        )

    return function


def initialize_lapack():
    """jax's CPU LAPACK kernels get their functions (from scipy) when jax lowers a linear-algebra
    op; hlo_call does not do it, and a kernel called uninitialized jumps through a null pointer.
    Lowering one small Cholesky factorization does it, with jax's public API only."""
    jax.jit(jnp.linalg.cholesky).lower(jax.ShapeDtypeStruct((1, 1), np.float32))


def avals(values, cotangents=False):
    """Shapes and dtypes of values; a cotangent of a value that is not differentiable is float0."""

    def dtype(name):
        if cotangents and not jnp.issubdtype(jnp.dtype(name), jnp.inexact):
            return jax.dtypes.float0
        return jnp.dtype(name)

    return tuple(jax.core.ShapedArray(aval_shape(shape), dtype(d)) for _, shape, d in values)


def aval_shape(shape):
    """A shape as JAX takes it: a symbolic dimension (a string) as a `jax.export` one, in one
    scope with CONSTRAINTS, as the module was exported."""
    if all(isinstance(d, int) for d in shape):
        return tuple(shape)
    from jax import export

    return tuple(export.symbolic_shape(", ".join(map(str, shape)), scope=symbolic_scope()))


def symbolic_scope():
    global _scope
    if _scope is None:
        from jax import export

        _scope = export.SymbolicScope(CONSTRAINTS)
    return _scope


_scope = None


def exported(file, in_avals, out_avals, name, get_vjp):
    """A `jax.export.Exported` of a portable artifact whose @main takes and returns flat arrays."""
    from jax import export

    n, m = len(in_avals), len(out_avals)
    fields = {
        "fun_name": name,
        "in_tree": jax.tree_util.tree_structure((tuple(range(n)), {})),
        "in_avals": in_avals,
        "out_tree": jax.tree_util.tree_structure(tuple(range(m))),
        "out_avals": out_avals,
        "_has_named_shardings": True,  # all None (unspecified), as jax.export writes them
        "_in_named_shardings": (None,) * n,
        "_out_named_shardings": (None,) * m,
        "in_shardings_hlo": (None,) * n,
        "out_shardings_hlo": (None,) * m,
        "nr_devices": 1,
        "platforms": ("cpu",),
        "ordered_effects": (),
        "unordered_effects": (),
        "disabled_safety_checks": (export.DisabledSafetyCheck.platform(),),
        "mlir_module_serialized": read_file(file),
        "calling_convention_version": export.maximum_supported_calling_convention_version,
        "module_kept_var_idx": tuple(range(n)),
        "uses_global_constants": SYMBOLIC,  # symbolic dimensions are global constants
        "_get_vjp": get_vjp,
    }
    # Exported is a dataclass; jax versions differ in a few private fields: pass those it has.
    known = {f.name for f in dataclasses.fields(export.Exported)}
    return export.Exported(**{k: v for k, v in fields.items() if k in known})


# How a bundle gets a backward module, by its provenance's producer (else: packed module text).
HOW_TO_STORE_A_VJP = {
    "jax.export": "serialize it with `exported.serialize(vjp_order=1)` and pack that blob again",
    "jax": "export it again with hlobundle.export(..., with_vjp=True)",
}


def xla_function():
    """The portable artifact as a `jax.export` function; its VJP is the stored backward module."""

    def backward(_):
        if BACKWARD_FILE is None:
            how = HOW_TO_STORE_A_VJP.get(ABOUT["producer"], "pack it with --with-vjp")
            raise NotImplementedError(
                "this bundle stores no backward module, so the xla backend cannot differentiate "
                f"it: {how}, or emit with --backend enzyme"
            )
        inputs = avals(ARGUMENTS) + avals(RESULTS, cotangents=True)
        outputs = avals(ARGUMENTS, cotangents=True)
        return exported(BACKWARD_FILE, inputs, outputs, f"{ABOUT['function']}_vjp", None)

    function = exported(
        PORTABLE_FILE, avals(ARGUMENTS), avals(RESULTS), ABOUT["function"], backward
    )
    return lambda *args: tuple(function.call(*args))


_hlo_call = enzyme_hlo_call()
BACKEND_HERE = "xla" if _hlo_call is None else "enzyme"  # how this run calls the module
_call = jax.jit(xla_function() if _hlo_call is None else enzyme_function(_hlo_call))


def call(*args):
    """The bundle's function: one JAX or NumPy array per argument (ARGUMENTS), a tuple of one
    array per result (RESULTS)."""
    check_arguments(*args)  # noqa: F821 (a shared function, below)
    return _call(*args)


def device():
    """The platform, device kind and jaxlib version this script computes with (jax's default
    device)."""
    import jaxlib

    return jax.devices()[0].platform, jax.devices()[0].device_kind, jaxlib.__version__


def numpy_dtype(name):
    """A SPEC.md dtype name as a NumPy dtype (jax's, with bfloat16 and the float8 types)."""
    return jnp.dtype(name)


def load_tensor(file, key, shape, dtype):
    """One stored value, in the bundle's dtype; a symbolic dimension of `shape` takes the stored
    size."""
    data = read_file(file)
    header, start = safetensors_header(data)  # noqa: F821 (a shared function, below)
    entry = header[key]
    return stored_array(data, start, entry, dtype, entry["shape"] if SYMBOLIC else shape)  # noqa: F821


def place_on_mesh(inputs):
    """Put each input on the mesh as the bundle records; on too few devices, run unsharded."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    size = len(DEVICE_ORDER)
    if len(jax.devices()) < size:
        print(f"only {len(jax.devices())} devices for a {size}-device mesh: running on one device")
        return inputs
    grid = np.array([jax.devices()[i] for i in DEVICE_ORDER]).reshape([n for _, n in MESH_AXES])
    mesh = Mesh(grid, [name for name, _ in MESH_AXES])
    placed = []
    for x, spec in zip(inputs, ARGUMENT_SHARDINGS, strict=True):
        sharding = NamedSharding(mesh, PartitionSpec(*spec))
        if sharding.is_fully_addressable:
            placed.append(jax.device_put(x, sharding))
        else:  # a mesh over several processes: each reads only the slices its devices hold
            placed.append(jax.make_array_from_callback(np.shape(x), sharding, x.__getitem__))
    return placed


def start_distributed():
    """With JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and JAX_PROCESS_ID set, join the other
    processes (hosts) of a run over several; CPU processes talk over gloo."""
    address = os.environ.get("JAX_COORDINATOR_ADDRESS")
    if address:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        processes, rank = int(os.environ["JAX_NUM_PROCESSES"]), int(os.environ["JAX_PROCESS_ID"])
        jax.distributed.initialize(address, processes, rank)


def to_host(x):
    """A result as one NumPy array, gathered from every process when the mesh spans several."""
    if getattr(x, "is_fully_addressable", True):
        return np.asarray(x)
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(x, tiled=True))


def example_inputs(inputs=None):
    """`inputs`, else the stored example inputs, else generated ones; on the mesh, if any."""
    if inputs is None and INPUTS is not None:
        inputs = stored_inputs()  # noqa: F821 (a shared function, below)
    elif inputs is None and SYMBOLIC:
        sys.exit("this bundle stores no example inputs and has symbolic shapes: call its function")
    elif inputs is None:
        rng = np.random.default_rng(0)
        inputs = [random_input(rng, shape, dtype) for _, shape, dtype in ARGUMENTS]  # noqa: F821
    return place_on_mesh(inputs) if MESH_AXES else inputs


def run_example(inputs=None, producer=False):
    """Call the function on the example inputs and compare with the expected outputs, or on
    `inputs` (one array per argument) and print the results (`producer`: column-major ones in
    the producer's orientation)."""
    start_distributed()
    outputs = call(*example_inputs(inputs))
    report([to_host(value) for value in outputs], compare=inputs is None, producer=producer)  # noqa: F821


SAFETENSORS_DTYPES = {
    "BOOL": "bool",
    "U8": "uint8",
    "I8": "int8",
    "U16": "uint16",
    "I16": "int16",
    "U32": "uint32",
    "I32": "int32",
    "U64": "uint64",
    "I64": "int64",
    "F16": "float16",
    "BF16": "bfloat16",
    "F32": "float32",
    "F64": "float64",
    "C64": "complex64",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
}


# shared: run_shared.py's functions (safetensors, --inputs, the command line), written here by `hlobundle emit`


# named: the bundle's function, one parameter per argument (written here by `hlobundle emit`)


if __name__ == "__main__":
    main(sys.argv[1:])  # noqa: F821 (a shared function, below)

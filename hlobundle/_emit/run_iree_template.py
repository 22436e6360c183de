"""Run a bundle with IREE's runtime: a script written by `hlobundle emit --backend iree`.

It needs only iree-base-runtime (and numpy and ml_dtypes, which it brings): no jax, no jaxlib,
no compiler. It runs the bundle's stored executable (EXECUTABLE_FILE, native code compiled by
`hlobundle compile`), after checking that the file's sha256 is the one `hlobundle emit` verified,
and reads the bundle at its path relative to this file (or the absolute path `emit
--bundle-path absolute` pinned).
Run it as a script to call the bundle's function on its example inputs (or on generated ones
of the right kinds) and compare the results with its expected outputs, when it has them.
Import it to call the function from your own code: the function named after the bundle's at the
end of this file, which returns the results as `hlobundle`'s `bundle.function()` does (nested as
OUTPUT_TREE says, when the bundle records how), or `call`, which takes one NumPy array per
argument and returns a flat tuple of one array per result.

The constants below are the bundle's data, written by `hlobundle emit`; everything else is the
same in every emitted script.
"""

import difflib  # noqa: F401 (the shared functions below use it)
import hashlib
import json  # noqa: F401 (the shared functions below use it)
import os
import re  # noqa: F401 (the shared functions below use it)
import sys

try:
    import iree.runtime as rt
    import ml_dtypes
    import numpy as np
    from iree.runtime.version import VERSION as RUNTIME_VERSION
except ModuleNotFoundError as missing:  # one line that says what to install, not a traceback
    sys.exit(
        f"error: this script needs {(missing.name or 'iree').partition('.')[0]}, which is not "
        "installed: pip install iree-base-runtime (it brings numpy and ml_dtypes), of the "
        "version IREE_VERSION below names"
    )

# --- the bundle's data (each line is filled in by `hlobundle emit`) ----------------------------
WHERE = "bundle.hlobundle"  # slot: the bundle, relative to this file (or absolute)
ABOUT = {}  # slot: function, format_version, producer, producer_version
ARGUMENTS = []  # slot: (name, shape, dtype) of each argument, in the order of @main
RESULTS = []  # slot: (name, shape, dtype) of each result
OUTPUT_TREE = None  # slot: how the function's results nest (result names), or None: a flat tuple
COLUMN_MAJOR = {}  # slot: the arguments and results a Julia producer holds axis-reversed
PATHS = {}  # slot: where each argument came from in the producer's program
INPUTS = None  # slot: (file, key) of each stored example input, or None when there are none
EXPECTED = []  # slot: (file, key) of each result's expected value, or [] when there are none
EXPECTED_FROM = None  # slot: where expected outputs were computed, the module's precision
EXECUTABLE_FILE = "compiled/llvm-cpu.vmfb"  # slot: the stored executable this script runs
EXECUTABLE_SHA256 = ""  # slot: its sha256, as verified when the script was written
IREE_VERSION = ""  # slot: the IREE version that compiled it (the runtime must be the same)
ELEMENT_TYPES = {}  # slot: IREE's element type (HalElementType) for each dtype the bundle uses
SHA256 = {}  # slot: the sha256 of each tensor file this script reads, as emit verified it

# -----------------------------------------------------------------------------------------------

BUNDLE = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), WHERE))
if not os.path.isfile(os.path.join(BUNDLE, "manifest.json")):  # moved, or this script copied
    sys.exit(
        f"error: this script reads the bundle at {BUNDLE} "
        + ("(its absolute path" if os.path.isabs(WHERE) else f"({WHERE!r}, relative to the script")
        + "), and there is none: put the script beside the bundle again, or emit it again "
        "(hlobundle emit BUNDLE -o SCRIPT; --bundle-path absolute pins the bundle's absolute path)"
    )
DRIVER = "local-task"  # IREE's CPU driver


def device():
    """The platform, device kind and jaxlib version this script computes with: IREE's CPU
    runtime, no jaxlib."""
    return "cpu", None, None


def numpy_dtype(name):
    """A SPEC.md dtype name as a NumPy dtype (ml_dtypes has the ones NumPy lacks)."""
    return np.dtype(getattr(ml_dtypes, name, None) or name)


def read_file(name, sha256):
    """A file of the bundle, read once into memory and checked against the sha256 that
    `hlobundle emit` verified: the script never runs or reads a file swapped in since."""
    with open(os.path.join(BUNDLE, name), "rb") as f:
        data = f.read()
    if hashlib.sha256(data).hexdigest() != sha256:
        sys.exit(f"{name} changed since this script was written: not running it")
    return data


def read_executable():
    """The stored executable's bytes, read once and checked against the sha256 emit verified."""
    return read_file(EXECUTABLE_FILE, EXECUTABLE_SHA256)


def load_main():
    """The module's `main`, loaded into IREE's CPU runtime."""
    if RUNTIME_VERSION != IREE_VERSION:
        sys.exit(
            f"{EXECUTABLE_FILE} was compiled by IREE {IREE_VERSION}; this is {RUNTIME_VERSION}"
        )
    device = rt.get_device(DRIVER)
    context = rt.SystemContext(config=rt.Config(device=device))
    module = rt.VmModule.copy_buffer(context.instance, read_executable())
    context.add_vm_module(module)
    return device, context.modules[module.name]["main"]


_device, _main = load_main()


def to_device(x, dtype):
    """A NumPy array as a buffer view of IREE's element type, its bytes copied as they are."""
    x = np.asarray(x, order="C")  # ascontiguousarray would make a 0-d array 1-d
    raw = x.reshape(-1).view(np.uint8) if x.size else np.zeros(0, np.uint8)
    buffer = _device.allocator.allocate_buffer_copy(
        memory_type=rt.MemoryType.DEVICE_LOCAL,
        allowed_usage=rt.BufferUsage.DEFAULT,
        device=_device,
        buffer=raw,
    )
    return rt.HalBufferView(buffer, list(x.shape), getattr(rt.HalElementType, ELEMENT_TYPES[dtype]))


def to_host(x, shape, dtype):
    """A result's bytes as the bundle's dtype and shape."""
    host = np.asarray(x.to_host(), order="C")
    return host.reshape(-1).view(np.uint8).view(numpy_dtype(dtype)).reshape(tuple(shape)).copy()


def call(*args):
    """The bundle's function: one NumPy array per argument (ARGUMENTS), a tuple of one array
    per result (RESULTS)."""
    check_arguments(*args)  # noqa: F821 (a shared function, below)
    views = [to_device(x, dtype) for x, (_, _, dtype) in zip(args, ARGUMENTS, strict=True)]
    out = _main(*views)
    out = out if isinstance(out, tuple) else () if out is None else (out,)
    return tuple(to_host(x, s, d) for x, (_, s, d) in zip(out, RESULTS, strict=True))


def load_tensor(file, key, shape, dtype):
    """One stored value: safetensors holds raw little-endian, row-major bytes after a JSON header."""
    if file not in _verified:
        _verified[file] = read_file(file, SHA256.get(file))
    data = _verified[file]
    header, start = safetensors_header(data)  # noqa: F821 (a shared function, below)
    return stored_array(data, start, header[key], dtype, shape)  # noqa: F821


_verified = {}  # file name: its bytes, checked


def example_inputs():
    """The stored example inputs, or (when the bundle stores none) generated ones."""
    if INPUTS is not None:
        return stored_inputs()  # noqa: F821 (a shared function, below)
    rng = np.random.default_rng(0)
    return [random_input(rng, shape, dtype) for _, shape, dtype in ARGUMENTS]  # noqa: F821


def run_example(inputs=None, producer=False):
    """Call the function on the example inputs and compare with the expected outputs, or on
    `inputs` (one array per argument) and print the results (`producer`: column-major ones in
    the producer's orientation)."""
    outputs = call(*(example_inputs() if inputs is None else inputs))
    report(outputs, compare=inputs is None, producer=producer)  # noqa: F821


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

"""The functions both emitted scripts share (`run_template.py`, `run_iree_template.py`): reading
safetensors, `--inputs` files and the command line, and comparing results with the expected ones.
`hlobundle emit` writes them into each script in place of its `# shared:` line, followed by
the comparison of each element (`_format/_agreement.py`'s functions: `widened`,
`largest_difference`, `mismatch`, `allowance`, `unmatched`, `difference`), so a script stays one standalone file. They use what each
template defines: ARGUMENTS, RESULTS, INPUTS, EXPECTED, COLUMN_MAJOR, SAFETENSORS_DTYPES,
EXPECTED_FROM, device, numpy_dtype, load_tensor, check_arguments and run_example (and OUTPUT_TREE,
which every script's data has).
"""

# ruff: noqa: F821
# --- shared: from here on, written into each script ----------------------------------------------


def safetensors_header(data):
    """The entries of a safetensors file's bytes, and where their data begins: safetensors holds
    raw little-endian, row-major bytes after an 8-byte length and a JSON header."""
    size = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + size])
    header.pop("__metadata__", None)
    return header, 8 + size


def stored_array(data, start, entry, dtype, shape):
    """The array of one safetensors entry, as `dtype` and `shape`, in memory of its own."""
    begin, end = entry["data_offsets"]
    raw = np.frombuffer(data, np.uint8, count=end - begin, offset=start + begin)
    return raw.copy().view(numpy_dtype(dtype)).reshape(shape)


def check_arguments(*args, option=None):
    """Raise TypeError unless the arguments have the module's dtypes and shapes: exactly, or for
    a symbolic dimension (a string) any size, which the module's runtime then checks. An array
    of a column-major argument's reversed shape is in Julia's orientation: `option` takes it."""
    if len(args) != len(ARGUMENTS):
        raise TypeError(f"expected {len(ARGUMENTS)} arguments, got {len(args)}")
    for index, (value, (name, shape, dtype)) in enumerate(zip(args, ARGUMENTS, strict=True)):
        kind = value.dtype if hasattr(value, "dtype") else np.asarray(value).dtype
        got = (tuple(np.shape(value)), np.dtype(kind).name)
        if not fits_shape(got[0], shape) or got[1] != numpy_dtype(dtype).name:
            julia = option and fits_shape(got[0], shape[::-1]) and not fits_shape(got[0], shape)
            hint = (
                f", its reversed shape: Julia's orientation, in which the bundle's producer holds "
                f"it; give arrays in that orientation with {option}"
                if julia and len(shape) > 1 and name in COLUMN_MAJOR["arguments"]
                else ""
            )
            raise TypeError(
                f"argument {name} (#{index}): expected {dtype}{list(shape)}, got {got[1]}{list(got[0])}"
                + hint
            )


def fits_shape(got, shape):
    """Whether shape `got` is `shape`: the same rank, and each dimension equal or symbolic."""
    return len(got) == len(shape) and all(
        isinstance(want, str) or size == want for size, want in zip(got, shape, strict=True)
    )


def tolerance(dtype):
    """rtol and atol for comparing results: exact for ints and bools, a few ulps for floats."""
    try:
        eps = float(ml_dtypes.finfo(numpy_dtype(dtype)).eps)
    except ValueError:  # not inexact: ints (int4 too), bools
        return 0.0
    return max(1e-5, 8 * eps)


# Unit roundoff of float32 dot and convolution operands by platform and precision asked
# (SPEC.md 2.15); HIGHEST, and every other platform, computes at float32's.
ROUNDOFF = {
    ("tpu", "DEFAULT"): 2.0**-8,
    ("tpu", "HIGH"): 2.0**-16,
    ("cuda", "DEFAULT"): 2.0**-11,
    ("cuda", "HIGH"): 2.0**-11,
    ("rocm", "DEFAULT"): 2.0**-11,
    ("rocm", "HIGH"): 2.0**-11,
}
# A platform whose float32 arithmetic is not IEEE's, at every precision (SPEC.md 2.15).
PLATFORM_ROUNDOFF = {"tpu": 2.0**-16}


def widening(here):
    """The `u` of SPEC.md 2.15 between where the expected outputs were computed and `here`
    (platform, device kind, jaxlib version): 0 where they are the same computation, else both
    sides' unit roundoffs, float32's at the least."""
    if EXPECTED_FROM is None:
        return 0.0
    platform, kind, precision, jaxlib, asked = EXPECTED_FROM
    u = [
        ROUNDOFF.get((p, q or "HIGHEST"), 2.0**-24)
        for p, q in [(platform, precision), (here[0], asked)]
    ]
    floors = [
        PLATFORM_ROUNDOFF.get(p, 2.0**-24) if q is not None else 2.0**-24
        for p, q in [(platform, precision), (here[0], asked)]
    ]
    same = (
        platform == here[0]
        and (platform == "cpu" or (kind is not None and kind == here[1]))
        and jaxlib is not None
        and jaxlib == here[2]
        and u[0] == u[1]
    )
    return 0.0 if same else sum(max(a, b) for a, b in zip(u, floors, strict=True))


def widened_from(here):
    """Which sides differed, in a line."""
    platform, kind, _, jaxlib, _ = EXPECTED_FROM
    return (
        f"expected outputs computed on {platform} ({kind}) with jaxlib {jaxlib}, "
        f"this run on {here[0]} ({here[1]}) with jaxlib {here[2]}"
    )


def widened_atol(atol, want, u):
    """`atol`, or 2 * u * the largest finite |want| where that is larger (a floating result)."""
    if not u or not atol:
        return atol
    magnitude = np.abs(widened(want))
    return max(atol, 2 * u * float(magnitude[np.isfinite(magnitude)].max(initial=0.0)))


def mismatch_told(name, shape, flat, got, want, rtol, atol, producer=False):
    """The worst element of a result that does not agree, in the words `hlobundle run` uses
    (with `producer`, its index in the producer's orientation, as the result is printed)."""
    index = [int(i) for i in np.unravel_index(flat, shape)]
    index = index[::-1] if producer else index
    values = f"  {name}{index}: got {shown_value(got)}, expected {shown_value(want)}"
    why = unmatched(got, want)
    if why:
        return f"{values}: {why}"
    allowed = float(allowance(want, rtol, atol))
    return (
        f"{values}, |diff| {float(difference(got, want)):.3g} > allowed {allowed:.3g} = atol + rtol * "
        f"|expected| (rtol {rtol:.3g}, atol {atol:.3g})"
    )


def shown_value(x):
    """One element as a message shows it: an integer exactly (64 bits hold more than 6 digits)."""
    return f"{x}" if np.asarray(x).dtype.kind in "iu" else f"{x:.6g}"


def random_input(rng, shape, dtype):
    """Values of the right kind: small non-negative ints, bools, normal floats."""
    dtype = numpy_dtype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(0, 10, shape).astype(dtype)
    if np.issubdtype(dtype, np.complexfloating):
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def stored_inputs():
    """The stored example inputs, one array per argument."""
    return [load_tensor(f, k, s, d) for (f, k), (_, s, d) in zip(INPUTS, ARGUMENTS, strict=True)]


def report(outputs, *, compare, producer=False):
    """Print each result (NumPy arrays, in order); with `compare`, also its difference from the
    expected output, and exit with a failure when any differs; with `producer`, column-major
    ones in the producer's orientation, their axes reversed."""
    failures = []
    u = widening(device()) if EXPECTED and compare else 0.0
    if u:
        print(
            f"tolerance widened (SPEC.md 2.15): {widened_from(device())}: "
            f"atol = 2 * {u:.3g} * max|expected|"
        )
    for k, ((name, shape, dtype), value) in enumerate(zip(RESULTS, outputs, strict=True)):
        julia = producer and name in COLUMN_MAJOR["results"]
        line = f"{name}: {dtype}{list(shape)[::-1] if julia else list(shape)}"
        told = None
        if EXPECTED and compare:
            want = widened(load_tensor(*EXPECTED[k], shape, dtype))
            got = widened(value)
            line += f", max abs diff from expected {largest_difference(got, want):.3g}"
            tol = tolerance(dtype)
            atol = widened_atol(tol, want, u)
            worst = mismatch(got, want, tol, atol)
            if worst is not None:
                failures.append(name)
                told = mismatch_told(name, want.shape, *worst, tol, atol, producer=julia)
        print(line)
        if told:
            print(told)
        print(np.array2string(value.T if julia else value, threshold=20))
    if failures:
        sys.exit(f"FAILED: {', '.join(failures)} differ from the expected outputs")
    print("ok")


def read_input_file(path):
    """{key: array} from a .npz or .safetensors file, or {None: array} from a .npy file."""
    suffix = os.path.splitext(path)[1].lower()
    if suffix == ".npy":
        return {None: np.load(path, allow_pickle=False)}
    if suffix == ".npz":
        with np.load(path, allow_pickle=False) as npz:
            return {key: npz[key] for key in npz.files}
    if suffix == ".safetensors":
        with open(path, "rb") as f:
            data = f.read()
        header, start = safetensors_header(data)
        return {
            key: stored_array(data, start, e, SAFETENSORS_DTYPES[e["dtype"]], e["shape"])
            for key, e in header.items()
        }
    raise ValueError(f"{path}: expected a .npy, .npz or .safetensors file")


def given_inputs(specs):
    """{argument name: array} from `--inputs [NAME=]FILE ...`: keys are argument names, or
    loose .npy files give every argument in order."""
    names = [name for name, _, _ in ARGUMENTS]
    known = set(names)  # an archive of thousands of arrays: a lookup per key, not a scan
    given, loose = {}, []
    for spec in specs:
        name, equals, path = spec.partition("=")
        if equals and name in names:
            (array,) = read_input_file(path).values()
            given[name] = array
            continue
        if equals and not os.path.exists(spec):  # NAME=FILE, NAME no argument's name
            lower = {n.lower(): n for n in names}  # `X` for `x` too
            close = difflib.get_close_matches(name.lower(), list(lower), n=1)
            hint = f"; did you mean {lower[close[0]]!r}?" if close else ""
            raise ValueError(
                f"{spec}: {name!r} is not an argument name{hint} (the arguments are {names})"
            )
        found = read_input_file(spec)
        numbered = numbered_keys(found, len(names))
        if numbered is not None:  # arr_0.. (np.savez) or arr_1.. (Julia's NPZ.jl), as run's
            found = dict(zip(names, numbered, strict=True))
        for key, array in found.items():
            if key is None:
                loose.append((spec, array))
            elif key in known:
                given[key] = array
            else:
                raise ValueError(f"{spec}: key {key!r} is not an argument name {names}")
    if loose and (given or len(loose) != len(names)):
        raise ValueError(
            f"{', '.join(s for s, _ in loose)} names no argument: give each file as NAME=FILE, "
            f"e.g. --inputs {names[0]}={loose[0][0]} (the arguments are {names})"
        )
    return dict(zip(names, (a for _, a in loose), strict=True)) if loose else given


def numbered_keys(found, n):
    """The arrays of keys arr_0..arr_{n-1} or arr_1..arr_n (one full set), in order; else None."""
    keys = [k for k in found if k is not None]
    if (
        not keys
        or len(keys) != len(found)
        or not all(re.fullmatch(r"arr_\d{1,9}", k) for k in keys)
    ):
        return None
    by_index = {int(k[4:]): found[k] for k in keys}
    for base in (0, 1):
        if set(by_index) == set(range(base, base + n)):
            return [by_index[base + i] for i in range(n)]
    return None


def main(argv):
    """`python run.py [--inputs [NAME=]FILE ...]`: run on the example inputs, or on these."""
    import argparse

    parser = argparse.ArgumentParser(
        description=f"Run {ABOUT.get('function', 'the function')} of the bundle {WHERE} on its "
        "example inputs (compared with its expected outputs), or on the arrays given; "
        "print the results.",
    )
    parser.add_argument(
        "--inputs",
        nargs="+",
        action="extend",
        default=[],
        metavar="[NAME=]FILE",
        help=".npy, .npz or .safetensors; NAME=FILE for one argument; arguments not given take "
        "their stored example values",
    )
    parser.add_argument(
        "--layout",
        choices=["stored", "producer"],
        default="stored",
        help="producer: --inputs and the results printed in the producer's orientation "
        "(Julia's, for column-major values), as hlobundle run --layout producer",
    )
    args = parser.parse_args(argv)
    producer = args.layout == "producer"
    if not args.inputs:
        return run_example(producer=producer)
    try:
        given = given_inputs(args.inputs)
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"error: {e}")
    if producer:  # the same values, in the tensors' own orientation
        given = {
            name: np.asarray(x).T if name in COLUMN_MAJOR["arguments"] else x
            for name, x in given.items()
        }
    missing = [name for name, _, _ in ARGUMENTS if name not in given]
    if missing and INPUTS is None:
        sys.exit(f"error: no value for argument(s) {missing}, and the bundle stores none")
    stored = stored_inputs() if missing else None
    values = [
        given[name] if name in given else stored[i] for i, (name, _, _) in enumerate(ARGUMENTS)
    ]
    try:
        check_arguments(*values, option=None if producer else "--layout producer")
    except TypeError as e:
        sys.exit(f"error: {e}")
    run_example(values, producer=producer)


def structured(flat):
    """The results (one array each, in RESULTS' order) nested as OUTPUT_TREE says, as
    `bundle.function()` returns them (JSON lists as tuples); a flat tuple where it says nothing."""
    if OUTPUT_TREE is None:
        return flat
    by_name = {name: x for (name, _, _), x in zip(RESULTS, flat, strict=True)}

    def nest(tree):
        if isinstance(tree, str):
            return by_name[tree]
        if isinstance(tree, list):
            return tuple(nest(t) for t in tree)
        if isinstance(tree, dict):
            return {key: nest(t) for key, t in tree.items()}
        return None

    return nest(OUTPUT_TREE)

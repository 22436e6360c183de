"""The functions both emitted scripts share (`run_template.py`, `run_iree_template.py`): reading
safetensors, `--inputs` files and the command line. `hlobundle emit` writes them into each script
in place of its `# shared:` line, so a script stays one standalone file. They use what each
template defines: ARGUMENTS, INPUTS, SAFETENSORS_DTYPES, numpy_dtype, check_arguments,
stored_inputs and run_example.
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
    given, loose = {}, []
    for spec in specs:
        name, equals, path = spec.partition("=")
        if equals and name in names:
            (array,) = read_input_file(path).values()
            given[name] = array
            continue
        for key, array in read_input_file(spec).items():
            if key is None:
                loose.append((spec, array))
            elif key in names:
                given[key] = array
            else:
                raise ValueError(f"{spec}: key {key!r} is not an argument name {names}")
    if loose and (given or len(loose) != len(names)):
        raise ValueError(
            f"{', '.join(s for s, _ in loose)} names no argument: give each file as NAME=FILE, "
            f"e.g. --inputs {names[0]}={loose[0][0]} (the arguments are {names})"
        )
    return dict(zip(names, (a for _, a in loose), strict=True)) if loose else given


def main(argv):
    """`python run.py [--inputs [NAME=]FILE ...]`: run on the example inputs, or on these."""
    import argparse

    parser = argparse.ArgumentParser(
        description=f"Run {ABOUT.get('function', 'the function')} of the bundle {WHERE} on its "
        "example inputs (compared with its expected outputs), or on the arrays given; "
        "print the results.",
    )
    parser.add_argument(
        "--inputs", nargs="+", action="extend", default=[], metavar="[NAME=]FILE",
        help=".npy, .npz or .safetensors; NAME=FILE for one argument; arguments not given take "
        "their stored example values",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if not args.inputs:
        return run_example()
    try:
        given = given_inputs(args.inputs)
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"error: {e}")
    missing = [name for name, _, _ in ARGUMENTS if name not in given]
    if missing and INPUTS is None:
        sys.exit(f"error: no value for argument(s) {missing}, and the bundle stores none")
    stored = stored_inputs() if missing else None
    values = [
        given[name] if name in given else stored[i] for i, (name, _, _) in enumerate(ARGUMENTS)
    ]
    try:
        check_arguments(*values)
    except TypeError as e:
        sys.exit(f"error: {e}")
    run_example(values)

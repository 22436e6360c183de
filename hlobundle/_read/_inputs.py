"""Reading example arrays from files, and matching them to `@main`'s arguments (SPEC.md, "Packing").

Keys map to arguments by name, or by `arr_<k>`: 0-based as `np.savez` writes them, 1-based as
Julia's NPZ.jl (Reactant) writes them. Loose `.npy` files whose names are not argument names
map by position. Anything else is ambiguous and an error.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import zipfile
import zlib
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .._format import _dtypes
from .._format._errors import InputAmbiguousError, InputError, TensorFileError
from .._parse._main_signature import TensorType
from .._terminal._display import did_you_mean, some_names

if TYPE_CHECKING:
    from .._format._manifest import Layout

_ARR_KEY = re.compile(r"^arr_(\d+)$")


@dataclass(frozen=True)
class Keyed:
    """One array from an input file, with the key it was stored under and where it came from."""

    key: str
    array: Any
    source: str
    positional: bool = False


def read_files(files: Sequence[str | os.PathLike[str]]) -> list[Keyed]:
    """The arrays of input files; `NAME=FILE` gives one argument the file's only array."""
    items: list[Keyed] = []
    for f in files:
        name, sep, rest = str(f).partition("=")
        if sep and name.isidentifier() and not Path(f).exists():
            items.append(_read_named(name, Path(rest)))
        else:
            items.extend(_read_file(Path(f)))
    return items


def _read_named(name: str, path: Path) -> Keyed:
    found = _read_file(path)
    if len(found) != 1:
        raise InputError(
            f"{name}={path}: the file holds {len(found)} arrays; NAME=FILE takes a file of one "
            "array (.npy, or a .npz or .safetensors with one key)",
            path=path,
            argument=name,
        )
    return Keyed(name, found[0].array, f"{path.name} (as {name})")


def _read_file(path: Path) -> list[Keyed]:
    if not path.is_file():
        raise InputError(f"input file {str(path)!r} does not exist", path=path)
    suffix = path.suffix.lower()
    try:
        if suffix == ".npz":
            return _read_npz(path)
        if suffix == ".npy":
            array = np.load(path, allow_pickle=False, mmap_mode="r")
            return [Keyed(path.stem, array, path.name, positional=True)]
        if suffix == ".safetensors":
            return _read_safetensors(path)
    except InputError:
        raise
    except (ValueError, OSError, zipfile.BadZipFile, NotImplementedError) as e:
        raise InputError(f"cannot read input file {str(path)!r}: {e}", path=path) from None
    raise InputError(
        f"input file {str(path)!r} has an unknown extension {suffix!r}; "
        "expected .npz, .npy or .safetensors",
        path=path,
    )


# Deflate's best is 1032:1 (a 258-byte match in two bits): no member inflates further.
_DEFLATE_MAX_RATIO = 1032


class NpzMember:
    """One array of an `.npz` file, known by its header (shape, dtype) until it is used.

    Nothing is decompressed before the caller has checked the shape and dtype against the
    argument: a small `.npz` cannot inflate into gigabytes for a key that is then refused.
    Nor is anything allocated for a header the zip directory does not back: its shape must
    be the member's size, and that size what the bytes stored for it can hold.
    """

    def __init__(self, path: Path, info: zipfile.ZipInfo, file_size: int) -> None:
        self.path, self.member, self._info = path, info.filename, info
        self._check_directory(file_size)
        with self._reading("header"), zipfile.ZipFile(path) as zf, zf.open(info) as f:
            version = np.lib.format.read_magic(f)
            read_header = (
                np.lib.format.read_array_header_1_0
                if version == (1, 0)
                else np.lib.format.read_array_header_2_0
            )
            shape, fortran, dtype = read_header(f)
            header = f.tell()
        if dtype.hasobject:
            raise self._error("holds Python objects, which are never unpickled")
        declared = header + math.prod(shape) * dtype.itemsize
        if min(shape, default=0) < 0 or declared != info.file_size:
            raise self._error(
                f"its header declares shape {tuple(shape)} of {dtype.name} ({declared:,} bytes "
                f"with the header), but the zip directory says it holds {info.file_size:,} bytes"
            )
        self.shape: tuple[int, ...] = tuple(shape)
        self.dtype: np.dtype = dtype
        self.fortran_order: bool = bool(fortran)

    def _check_directory(self, file_size: int) -> None:
        """Refuse, from the zip directory alone, what zipfile would fail on (encryption, other
        methods), and sizes the file cannot back: a member that runs past the end of the file
        (truncated), or more bytes than its stored ones can inflate to."""
        info = self._info
        if info.flag_bits & 0x41:  # bit 0: encrypted; bit 6: strong encryption
            raise self._error("is encrypted; encrypted members are never read")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise self._error(
                f"uses compression method {info.compress_type}; only stored (0) and deflated "
                "(8) members are read, as np.savez and NPZ.jl write them"
            )
        end = info.header_offset + 30 + info.compress_size  # 30: a local header, name aside
        if end > file_size:
            raise self._error(
                f"is truncated: the zip directory puts its {info.compress_size:,} bytes up to "
                f"offset {end:,}, past the end of the file ({file_size:,} bytes)"
            )
        deflated = info.compress_type == zipfile.ZIP_DEFLATED
        if info.file_size > info.compress_size * (_DEFLATE_MAX_RATIO if deflated else 1):
            raise self._error(
                f"the zip directory says it holds {info.file_size:,} bytes, more than "
                f"{info.compress_size:,} {'deflated' if deflated else 'stored'} bytes can hold"
            )

    @contextlib.contextmanager
    def _reading(self, what: str) -> Iterator[None]:
        """What zipfile and numpy raise on a damaged member, as an `InputError` naming it."""
        try:
            yield
        except EOFError:
            raise self._error(f"its {what} ends before its declared size (truncated)") from None
        except zlib.error as e:
            raise self._error(f"its deflate stream is corrupt ({e})") from None
        except (zipfile.BadZipFile, ValueError, NotImplementedError) as e:
            raise self._error(f"cannot read its {what}: {e}") from None

    def _error(self, message: str) -> InputError:
        return InputError(
            f"input file {str(self.path)!r}, member {self.member!r}: {message}", path=self.path
        )

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        with self._reading("data"), zipfile.ZipFile(self.path) as zf, zf.open(self._info) as f:
            array = np.lib.format.read_array(f, allow_pickle=False)
        return array if dtype is None else array.astype(dtype)


def _read_npz(path: Path) -> list[Keyed]:
    with zipfile.ZipFile(path) as zf:
        members = [i for i in zf.infolist() if i.filename.endswith(".npy")]
    size = path.stat().st_size
    return [
        Keyed(key, NpzMember(path, info, size), f"{path.name}[{key}]")
        for info in members
        for key in [info.filename.removesuffix(".npy")]
    ]


def _read_safetensors(path: Path) -> list[Keyed]:
    from .._bundle_io._tensors import TensorFile

    try:
        tf = TensorFile(path.resolve(), name=path.name)  # the user named it: a symlink is theirs
    except TensorFileError as e:
        raise InputError(e.message, path=path) from None
    items = []
    for key, entry in tf.entries.items():
        row = _dtypes.NATIVE.get(entry.code)
        if row is None:
            raise InputError(f"{path.name}[{key}] has unsupported dtype {entry.code}", path=path)
        items.append(Keyed(key, tf.array(key, row, entry.shape), f"{path.name}[{key}]"))
    return items


def from_python(inputs: Sequence[Any] | Mapping[str, Any]) -> list[Keyed]:
    if isinstance(inputs, Mapping):
        return [Keyed(str(k), v, f"inputs[{k!r}]") for k, v in inputs.items()]
    return [Keyed(str(i), v, f"inputs[{i}]", positional=True) for i, v in enumerate(inputs)]


def assign(
    items: list[Keyed],
    names: Sequence[str],
    *,
    optional: Sequence[str] = (),
    inputs: Collection[str] = (),
) -> Sequence[Keyed | None]:
    """Order `items` as the arguments `names`, by name, by `arr_<k>`, or by position.

    By name, the arguments in `optional` may be left out (None): the caller has a value for
    them (a runner's stored example values). `inputs` are the arguments of role `input`: a
    model's few inputs hide among its many parameters, so errors list them first, and one
    loose array goes to the only one when every other argument is optional (`run B --inputs
    x.npy` for LeNet's images).
    """
    keys = [it.key for it in items]
    if len(set(keys)) != len(keys):
        dup = sorted({k for k in keys if keys.count(k) > 1})
        raise InputError(f"input key(s) {dup} appear more than once across the input files")
    if set(keys) <= set(names) and (keys or not names):
        by_key = {it.key: it for it in items}
        left_out = set(optional)
        _require_all(by_key, [n for n in names if n not in left_out])
        return [by_key.get(n) for n in names]
    if keys and all(_ARR_KEY.match(k) for k in keys):
        return _assign_numbered(items, names)
    if items and all(it.positional for it in items):
        role_input = set(inputs)  # a lookup per name: a bundle has thousands of arguments
        only = [n for n in names if n in role_input]
        others_have_values = set(names) <= {*only, *optional}
        if len(items) == 1 < len(names) and len(only) == 1 and others_have_values:
            return [items[0] if n == only[0] else None for n in names]
        _require_count(items, names, only)
        return items
    unknown = sorted(set(keys) - set(names))
    raise InputAmbiguousError(
        f"cannot tell which input goes to which argument: key(s) {unknown[:8]} are neither "
        f"argument names nor arr_<k>{did_you_mean(unknown, names) or '.'} The arguments are "
        f"{some_names(names, inputs)}. Rename the keys to argument names, or give each file "
        "for one argument as NAME=FILE",
    )


def _assign_numbered(items: list[Keyed], names: Sequence[str]) -> list[Keyed]:
    by_index = {_arr_index(it.key): it for it in items}
    n = len(names)
    for base in (0, 1):
        if set(by_index) == set(range(base, base + n)):
            return [by_index[base + i] for i in range(n)]
    got = sorted(by_index)
    raise InputAmbiguousError(
        f"the arr_<k> keys {got[:10]} are not one full set for {n} argument(s): numbered keys "
        f"give every argument, as arr_0..arr_{n - 1} (np.savez, 0-based) or arr_1..arr_{n} "
        "(Julia/NPZ.jl, 1-based). To give only some arguments (the rest keep their stored "
        f"values), name them: keys named after the arguments ({some_names(names)}), or "
        "NAME=FILE",
    )


def _arr_index(key: str) -> int:
    match = _ARR_KEY.match(key)
    assert match is not None, "assign() calls this for arr_<k> keys only"
    return int(match.group(1))


def _require_all(by_key: dict[str, Keyed], names: Sequence[str]) -> None:
    missing = [n for n in names if n not in by_key]
    if missing:
        raise InputError(
            f"no input given for argument(s) {missing}; every argument needs a value",
            argument=missing[0],
        )


def _require_count(items: list[Keyed], names: Sequence[str], inputs: Sequence[str]) -> None:
    got, expected = len(items), len(names)
    if got == expected:
        return
    hint = ""
    if 0 < got < expected:  # some arguments meant: a loose file does not say which
        given = ", ".join(it.source for it in items)
        hint = (
            f"; {given} names no argument: give each file as NAME=FILE, e.g. "
            f"--inputs {(inputs or names)[0]}={items[0].source} (any argument not given keeps its "
            "stored value)"
        )
    raise InputError(f"expected {expected} input array(s), one per argument, got {got}{hint}")


def check(
    item: Keyed,
    expected: TensorType,
    *,
    name: str,
    path: str,
    column_major: bool,
    what: str = "argument",
    reversed_hint: str = "",
) -> np.ndarray:
    """The array to store for one argument, in the tensor's own (row-major) orientation.

    Shape and dtype are checked before the array is read (an `.npz` member is read only then).
    `reversed_hint` ends the shape error of an array whose shape is the expected one reversed:
    the caller knows which option takes arrays in that (Julia's) orientation.
    """
    value = item.array
    if not (hasattr(value, "shape") and hasattr(value, "dtype")):
        value = np.asarray(value)
    want_shape = expected.shape[::-1] if column_major else expected.shape
    orientation = " (Julia orientation, reversed)" if column_major else ""
    where = (
        f"{what} {name!r} (path {path}, from {item.source})"
        if what == "argument"
        else f"{what} {name!r} (from {item.source})"
    )
    if np.dtype(value.dtype) != expected.dtype.numpy:
        raise InputError(
            f"{where}: expected dtype {expected.dtype.name}, got {np.dtype(value.dtype).name}",
            **({"argument": name} if what == "argument" else {"field": path}),
        )
    if len(value.shape) != len(want_shape) or any(
        isinstance(w, int) and w != g for w, g in zip(want_shape, value.shape, strict=True)
    ):  # a symbolic dimension (an expression, or None): the values' shapes bind them together
        shown = (
            f"[{', '.join(map(str, want_shape))}]"
            if any(not isinstance(w, int) for w in want_shape)
            else str(want_shape)
        )
        reversed_shape = is_reversed(want_shape, tuple(value.shape))
        raise InputError(
            f"{where}: expected shape {shown}{orientation}, got {tuple(value.shape)}"
            + (reversed_hint if reversed_shape else ""),
            **({"argument": name} if what == "argument" else {"field": path}),
        )
    array = np.asarray(value)
    return array.T if column_major else array


def is_reversed(want: Sequence[int | str | None], got: Sequence[int]) -> bool:
    """Whether `got` is the shape `want` axis-reversed (of rank 2 or more, and not `want`
    itself; a symbolic dimension fits any size): an array in Julia's orientation."""

    def fits(shape: Sequence[int | str | None]) -> bool:
        return len(shape) == len(got) and all(
            not isinstance(w, int) or w == g for w, g in zip(shape, got, strict=True)
        )

    return len(got) > 1 and fits(want[::-1]) and not fits(want)


def reversed_hint(layout: str, option: str) -> str:
    """What ends the shape error of an array in Julia's orientation (`is_reversed`): for a
    column-major argument, `option`, which takes arrays in that orientation; for a row-major
    one (`option` changes nothing for it), to reverse the array's axes."""
    if layout == "column_major":
        return (
            ", its reversed shape: Julia's orientation, in which the bundle's producer holds "
            f"it; give arrays in that orientation with {option}"
        )
    return (
        ", its reversed shape: an array in Julia's orientation? This argument is row-major "
        f"(its producer holds it in this shape, so {option} changes nothing for it): reverse "
        "the array's axes (x.T in NumPy, permutedims(x, ndims(x):-1:1) in Julia)"
    )


def detect_layout(
    items: Sequence[Keyed | None], types: Sequence[TensorType], names: Sequence[str]
) -> Layout:
    """`row_major` or `column_major`, from the evidence the arrays give.

    An array of rank 2 or more whose shape differs from its reverse tells: it has the tensor's
    shape (row-major) or its reverse (Julia's orientation). When none tells (square matrices,
    for example), arrays stored in Fortran order (as Julia's NPZ.jl writes them) say
    column-major; anything else is NumPy data, row-major, as `pack()` assumes. An argument
    without an array (None: it keeps a stored value) tells nothing.
    """
    direct, reverse, undecided = [], [], []
    for item, t, name in zip(items, types, names, strict=True):
        if item is None:
            continue
        shape = tuple(np.shape(item.array))
        if len(t.shape) < 2:
            continue
        if t.shape == t.shape[::-1]:
            if shape == t.shape:
                undecided.append(item)
        elif shape == t.shape:
            direct.append(name)
        elif shape == t.shape[::-1]:
            reverse.append(name)
    if direct and reverse:
        raise InputAmbiguousError(
            f"arguments {direct[:4]} have the tensors' shapes but {reverse[:4]} have them reversed "
            "(Julia's orientation); give all inputs in one orientation, or pass --layout",
        )
    if reverse:
        return "column_major"
    if direct or not undecided:
        return "row_major"
    return "column_major" if all(_fortran_ordered(it.array) for it in undecided) else "row_major"


def _fortran_ordered(array: Any) -> bool:
    if isinstance(array, NpzMember):
        return array.fortran_order
    flags = getattr(array, "flags", None)
    return bool(flags is not None and flags.f_contiguous and not flags.c_contiguous)

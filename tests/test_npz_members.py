"""Hostile `.npz` members (issue "Trust, round 4", class 6): each fails with INPUT_INVALID naming
the file and the member, through `pack --from-reactant`, `pack --inputs` and `run --inputs`, and
a member's sizes are checked before anything is allocated for it.

The zips are written byte by byte (`_zip`), so each lies in exactly one way.
"""

from __future__ import annotations

import io
import struct
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest
from helpers import cli

import hlobundle
from hlobundle._read._inputs import read_files

N = 4096  # 16 KiB of float32: larger than zipfile's 4 KiB reads, so data is read after the header
X = np.random.default_rng(0).standard_normal(N).astype(np.float32)
MODULE = (
    f"func.func @main(%x: tensor<{N}xf32>) -> tensor<{N}xf32> {{\n"
    f"  %y = stablehlo.add %x, %x : tensor<{N}xf32>\n"
    f"  return %y : tensor<{N}xf32>\n}}\n"
)
SCRIPT = f'''"""Written by Reactant.Serialization.export_to_enzymejax()."""
import numpy as np

HLO = "f_0.mlir"
INPUTS = "f_0_inputs.npz"


def run_f(arg1):
    """
    Args:
        arg1: Array of shape ({N},) and dtype float32. Path: arg.2
    """
'''


def _npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, array, version=(1, 0))
    return buf.getvalue()


HEADER = len(_npy(X)) - X.nbytes


def _deflate(data: bytes, tail: bytes = b"") -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush(zlib.Z_SYNC_FLUSH if tail else zlib.Z_FINISH) + tail


def _zip(
    path: Path,
    name: str,
    data: bytes,
    *,
    stored: bytes | None = None,
    method: int = zipfile.ZIP_STORED,
    flags: int = 0,
    crc: int | None = None,
    size: int | None = None,
    csize: int | None = None,
    local_extra: bytes = b"",
) -> None:
    """A zip of one member `name` whose content is `data`: its bytes in the file are `stored`
    (`data` itself unless given), its directory entry's CRC, sizes and flags `data`'s own unless
    given; `local_extra` goes only into the local header (the directory names none)."""
    stored = data if stored is None else stored
    crc = zlib.crc32(data) if crc is None else crc
    size = len(data) if size is None else size
    csize = len(stored) if csize is None else csize
    raw = name.encode()
    fields = (flags, method, 0, 0x21, crc, csize, size, len(raw))
    local = struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, *fields, len(local_extra))
    local += raw + local_extra + stored
    cd = struct.pack("<4s6H3L5H2L", b"PK\x01\x02", 20, 20, *fields, 0, 0, 0, 0, 0, 0) + raw
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 1, 1, len(cd), len(local), 0)
    path.write_bytes(local + cd + end)


def _truncated(path: Path, name: str) -> None:
    """The file cut within the member, its directory rewritten after what is left."""
    data = _npy(X)
    _zip(path, name, data, stored=data[: HEADER + 8000], csize=len(data))


def _short_read(path: Path, name: str) -> None:
    """The directory's sizes fit in the file, but the local header's extra field moves the data
    on: reading runs off the end of the file."""
    data = _npy(X)
    _zip(path, name, data, stored=data[: HEADER + 8000], csize=len(data), local_extra=bytes(8600))


def _bad_crc(path: Path, name: str) -> None:
    data = _npy(X)
    _zip(path, name, data, crc=zlib.crc32(data) ^ 1)


def _corrupt_deflate(path: Path, name: str) -> None:
    """A sound deflate stream for the header and 8 KiB of data, then a block of the reserved
    type (0b11): zlib fails on the data, after the header was read."""
    data = _npy(X)
    stored = _deflate(data[: HEADER + 8192], tail=b"\xff" * 64)
    _zip(path, name, data, stored=stored, method=zipfile.ZIP_DEFLATED)


def _corrupt_deflate_header(path: Path, name: str) -> None:
    data = _npy(X)
    _zip(path, name, data, stored=b"\xff" * 2000, method=zipfile.ZIP_DEFLATED)


def _unknown_method(path: Path, name: str) -> None:
    data = _npy(X)
    _zip(path, name, data, method=9)  # Deflate64, which zipfile cannot read


def _bzip2(path: Path, name: str) -> None:
    """A method zipfile reads, but neither np.savez nor NPZ.jl writes: not read either."""
    import bz2

    data = _npy(X)
    _zip(path, name, data, stored=bz2.compress(data), method=zipfile.ZIP_BZIP2)


def _encrypted(path: Path, name: str) -> None:
    data = _npy(X)
    _zip(path, name, data, flags=0x1)


def _size_mismatch(path: Path, name: str) -> None:
    """A well-formed zip whose member's header declares 16 KiB of data over 16 bytes of it."""
    _zip(path, name, _npy(X)[: HEADER + 16])


def _inflates_past_its_bytes(path: Path, name: str) -> None:
    """The directory's size agrees with the header, but no deflate stream of this length could
    hold it (deflate's ratio is at most 1032:1)."""
    data = _npy(np.zeros(N * 1024, np.float32))  # 16 MiB, the header's shape and the size
    head = data[: len(data) - N * 1024 * 4 + 64]  # the header and 64 bytes, ~80 deflated
    _zip(path, name, data, stored=_deflate(head), crc=zlib.crc32(head), method=zipfile.ZIP_DEFLATED)


HOSTILE = {
    "truncated": (_truncated, "is truncated: the zip directory puts its"),
    # Python 3.12+'s zipfile sees the moved data overlap the directory first ("possible zip
    # bomb"); 3.11's reads off the end of the file
    "short-read": (_short_read, ("ends before", "Overlapped entries")),
    "bad-crc": (_bad_crc, "Bad CRC-32"),
    "corrupt-deflate": (_corrupt_deflate, "deflate stream is corrupt"),
    "corrupt-deflate-header": (_corrupt_deflate_header, "deflate stream is corrupt"),
    "unknown-method": (_unknown_method, "compression method 9"),
    "bzip2": (_bzip2, "compression method 12"),
    "encrypted": (_encrypted, "encrypted"),
    "size-mismatch": (
        _size_mismatch,
        f"declares shape ({N},) of float32 ({HEADER + 4 * N:,} bytes with the header), but the "
        f"zip directory says it holds {HEADER + 16:,} bytes",
    ),
}


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return hlobundle.pack(MODULE, [X], tmp_path_factory.mktemp("npz") / "b", names=["x"])


def _on_path(how: str, tmp_path: Path, bundle: Path, make) -> tuple[tuple, str, str]:
    """The command line that reads the `.npz` `make` writes, the file's name and the member."""
    if how == "from-reactant":
        src = tmp_path / "src"
        src.mkdir()
        (src / "f.py").write_text(SCRIPT)
        (src / "f_0.mlir").write_text(MODULE)
        make(src / "f_0_inputs.npz", "arr_1.npy")
        return ("pack", "--from-reactant", src, "-o", tmp_path / "out"), "f_0_inputs.npz", "arr_1"
    make(tmp_path / "in.npz", "x.npy")
    if how == "pack":
        (tmp_path / "m.mlir").write_text(MODULE)
        argv = (
            "pack",
            tmp_path / "m.mlir",
            "--inputs",
            tmp_path / "in.npz",
            "--names",
            "x",
            "-o",
            tmp_path / "out",
        )
        return argv, "in.npz", "x"
    return ("run", bundle, "--inputs", tmp_path / "in.npz", "--backend", "xla"), "in.npz", "x"


PATHS = ["from-reactant", "pack", "run"]


@pytest.mark.parametrize("how", PATHS)
def test_a_sound_member_is_read_on_each_path(tmp_path, bundle, how):
    """The control: the same zips, written honestly, are read (so each refusal is the lie's)."""
    argv, _, _ = _on_path(how, tmp_path, bundle, lambda p, n: _zip(p, n, _npy(X)))
    r = cli(*argv)
    assert r.returncode == 0, r.stderr
    (tmp_path / "deflated").mkdir()
    argv, _, _ = _on_path(
        how,
        tmp_path / "deflated",
        bundle,
        lambda p, n: _zip(p, n, _npy(X), stored=_deflate(_npy(X)), method=8),
    )
    r = cli(*argv)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("how", PATHS)
@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_member_is_a_coded_error_naming_file_and_member(tmp_path, bundle, how, case):
    make, message = HOSTILE[case]
    argv, file, member = _on_path(how, tmp_path, bundle, make)
    r = cli(*argv)
    assert r.returncode == 1, r.stderr
    assert r.stderr.startswith("error [INPUT_INVALID] input file "), r.stderr
    assert r.stderr.count("[INPUT_INVALID]") == 1, r.stderr  # not wrapped in a second one
    assert "Traceback" not in r.stderr
    assert file in r.stderr and f"member '{member}.npy'" in r.stderr, r.stderr
    assert any(m in r.stderr for m in ((message,) if isinstance(message, str) else message)), (
        r.stderr
    )
    assert not (tmp_path / "out").exists()


def _refused_before_reading(monkeypatch):
    def read_array(*args, **kwargs):
        raise AssertionError("the member's data was read (and its shape allocated)")

    monkeypatch.setattr(np.lib.format, "read_array", read_array)


@pytest.mark.parametrize(
    "shape, data",
    [((1 << 40,), 16), ((-1, -N), 4 * N)],  # 4 TiB over 16 bytes; a product that fits, negated
    ids=["huge", "negative"],
)
def test_a_header_the_directory_does_not_back_is_refused_before_anything_is_allocated(
    tmp_path, monkeypatch, shape, data
):
    """(1 << 40,) float32 is 4 TiB: numpy would allocate it all before finding 16 bytes."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"shape": shape, "fortran_order": False, "descr": "<f4"}
    )
    _zip(tmp_path / "hostile.npz", "x.npy", header.getvalue() + bytes(data))
    _refused_before_reading(monkeypatch)
    with pytest.raises(hlobundle.InputError, match=rf"declares shape \({shape[0]},") as e:
        np.asarray(read_files([tmp_path / "hostile.npz"])[0].array)
    assert e.value.code == "INPUT_INVALID" and e.value.path == str(tmp_path / "hostile.npz")
    assert "member 'x.npy'" in e.value.message


def test_a_directory_that_agrees_with_a_huge_header_is_refused_before_reading(
    tmp_path, monkeypatch
):
    """Where the zip directory's size lies in step with the header (the shape a symbolic
    argument would accept), the bytes stored for the member still bound it."""
    _inflates_past_its_bytes(tmp_path / "big.npz", "x.npy")
    _refused_before_reading(monkeypatch)
    with pytest.raises(hlobundle.InputError, match="more than .* deflated bytes can hold"):
        np.asarray(read_files([tmp_path / "big.npz"])[0].array)

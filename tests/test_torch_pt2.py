"""A `.pt2` is hostile input: `pack --from-torch-export` must not run what it carries.

torch.export.load unpickles: its sample inputs and legacy weights through `torch.load` with
a fallback to `weights_only=False`, a weight or tensor constant marked `use_pickle` with
`weights_only=False`, a custom-object constant through TorchScript's unpickler, an
opaque-object constant through `pickle.loads`, and it loads AOTInductor's compiled libraries.
Each attack below is a real `torch.export.save` output rewritten so that loading it would
create a marker file; each must end in the coded error, the marker absent.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import pathlib
import zipfile
from pathlib import Path
from typing import Any

import pytest

from hlobundle.errors import InputError

if importlib.util.find_spec("torch") is None:
    pytest.skip(
        "torch is in the torch extra (its CPU wheel: Python 3.11 here)", allow_module_level=True
    )


class _Touch:
    """Unpickled, it creates `marker` (a reduce to a bound method of a builtin type)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        return (pathlib.Path(self.marker).touch, ())


def _saved(where: Path) -> Path:
    """A real program's `.pt2`, as torch.export.save wrote it."""
    import torch

    class Affine(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(2, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.linear(x)

    path = where / "real.pt2"
    program = torch.export.export(Affine().eval(), (torch.ones(1, 2),))
    torch.export.save(program, path)
    return path


def _rewritten(source: Path, out: Path, edit: Any) -> Path:
    """`source`'s entries, relative to its root folder, passed through `edit(name, data)`
    (which returns the new `{name: data}` for that entry) and written back under that root."""
    with zipfile.ZipFile(source) as zf:
        root = zf.namelist()[0].split("/", 1)[0]
        entries = {i.filename.split("/", 1)[1]: zf.read(i) for i in zf.infolist()}
    written: dict[str, bytes] = {}
    for name, data in entries.items():
        written.update(edit(name, data))
    with zipfile.ZipFile(out, "w") as zf:
        for name, data in written.items():
            zf.writestr(f"{root}/{name}", data)
    return out


def _torch_saved(value: Any) -> bytes:
    import torch

    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def _pack(path: Path, out: Path) -> None:
    from hlobundle._write._torch import from_torch_file

    from_torch_file(path, out)


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """Read by each test, never written: rewritten copies go to the test's own directory."""
    return _saved(tmp_path_factory.mktemp("pt2"))


def _with_constant(prefix: str, payload: bytes):
    """An edit that adds a constant `evil` stored as `data/constants/<prefix>0`."""

    def edit(name: str, data: bytes) -> dict[str, bytes]:
        if name != "data/constants/model_constants_config.json":
            return {name: data}
        config = json.loads(data)
        config["config"]["evil"] = {
            "path_name": f"{prefix}0",
            "is_param": False,
            "use_pickle": True,
            "tensor_meta": None,
        }
        return {name: json.dumps(config).encode(), f"data/constants/{prefix}0": payload}

    return edit


def test_an_opaque_object_constant_is_refused_unread(real, tmp_path):
    import pickle

    marker = tmp_path / "ran"
    evil = _rewritten(
        real, tmp_path / "evil.pt2", _with_constant("opaque_obj_", pickle.dumps(_Touch(marker)))
    )
    with pytest.raises(InputError, match=r"data/constants/opaque_obj_0.*unrestricted pickle"):
        _pack(evil, tmp_path / "out")
    assert not marker.exists()


def test_a_custom_object_constant_is_refused_unread(real, tmp_path):
    import pickle

    marker = tmp_path / "ran"
    evil = _rewritten(
        real, tmp_path / "evil.pt2", _with_constant("custom_obj_", pickle.dumps(_Touch(marker)))
    )
    with pytest.raises(InputError, match=r"data/constants/custom_obj_0.*unrestricted pickle"):
        _pack(evil, tmp_path / "out")
    assert not marker.exists()


def test_a_config_naming_an_opaque_object_under_another_entry_name_is_refused(real, tmp_path):
    """The dispatch is on the config's `path_name`, not on the entry's name: a config that
    names one is refused though no entry carries the prefix."""

    def edit(name: str, data: bytes) -> dict[str, bytes]:
        if name != "data/constants/model_constants_config.json":
            return {name: data}
        config = json.loads(data)
        config["config"]["evil"] = {
            "path_name": "opaque_obj_/../x",
            "is_param": False,
            "use_pickle": True,
            "tensor_meta": None,
        }
        return {name: json.dumps(config).encode()}

    evil = _rewritten(real, tmp_path / "evil.pt2", edit)
    with pytest.raises(InputError, match=r"model_constants_config.json.*opaque_obj_/\.\./x"):
        _pack(evil, tmp_path / "out")


def test_a_compiled_library_is_refused_unloaded(real, tmp_path):
    def edit(name: str, data: bytes) -> dict[str, bytes]:
        return (
            {name: data, "data/aotinductor/model/model.so": b"\x7fELF"}
            if name == ("archive_format")
            else {name: data}
        )

    evil = _rewritten(real, tmp_path / "evil.pt2", edit)
    with pytest.raises(InputError, match=r"data/aotinductor/model/model.so.*native code"):
        _pack(evil, tmp_path / "out")


def test_sample_inputs_that_need_the_unrestricted_fallback_run_nothing(real, tmp_path):
    """torch reads the sample inputs with `weights_only=True`, then, on failure, with
    `weights_only=False`: the load is forced to the restricted one."""
    marker = tmp_path / "ran"
    payload = _torch_saved(_Touch(marker))

    def edit(name: str, data: bytes) -> dict[str, bytes]:
        return {name: payload if name == "data/sample_inputs/model.pt" else data}

    evil = _rewritten(real, tmp_path / "evil.pt2", edit)
    with pytest.raises(InputError, match=r"restricted"):
        _pack(evil, tmp_path / "out")
    assert not marker.exists()
    assert "TORCH_FORCE_WEIGHTS_ONLY_LOAD" not in os.environ


def test_a_weight_marked_use_pickle_runs_nothing(real, tmp_path):
    """torch loads a weight marked `use_pickle` with `weights_only=False`."""
    marker = tmp_path / "ran"
    payload = _torch_saved(_Touch(marker))

    def edit(name: str, data: bytes) -> dict[str, bytes]:
        if name == "data/weights/weight_0":
            return {name: payload}
        if name != "data/weights/model_weights_config.json":
            return {name: data}
        config = json.loads(data)
        config["config"]["linear.weight"]["use_pickle"] = True
        return {name: json.dumps(config).encode()}

    evil = _rewritten(real, tmp_path / "evil.pt2", edit)
    with pytest.raises(InputError, match=r"restricted"):
        _pack(evil, tmp_path / "out")
    assert not marker.exists()


def test_too_many_entries_are_refused_before_torch_reads_them(real, tmp_path, monkeypatch):
    from hlobundle._interop import _torch_archive

    monkeypatch.setattr(_torch_archive, "MAX_ENTRIES", 5)
    with pytest.raises(InputError, match=r"more than 5 entries"):
        _pack(real, tmp_path / "out")


@pytest.mark.slow
def test_a_real_program_packs_and_the_forced_load_is_undone_after(real, tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_FORCE_WEIGHTS_ONLY_LOAD", "keep")
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    _pack(real, tmp_path / "out")
    assert (tmp_path / "out" / "manifest.json").exists()
    assert os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"] == "keep"
    assert os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] == "1"


def test_a_deeply_nested_payload_config_is_a_coded_error(real, tmp_path):
    # json.loads of 100k nested arrays raises RecursionError, which escaped as a traceback
    def edit(name: str, data: bytes) -> dict[str, bytes]:
        if name != "data/constants/model_constants_config.json":
            return {name: data}
        return {name: b"[" * 100_000 + b"]" * 100_000}

    deep = _rewritten(real, tmp_path / "deep.pt2", edit)
    with pytest.raises(InputError, match=r"model_constants_config.json is not JSON"):
        _pack(deep, tmp_path / "out")


def test_a_compressed_entry_a_zip_bomb_is_refused_before_torch_inflates_it(real, tmp_path):
    # torch.export.save stores every entry uncompressed; torch's reader inflates a deflated one
    # whole into memory, 1000 times the file's bytes (64 MiB of zeros deflate to 64 KiB)
    bomb = tmp_path / "bomb.pt2"
    with zipfile.ZipFile(real) as src, zipfile.ZipFile(bomb, "w") as out:
        for info in src.infolist():
            if info.filename.endswith("data/weights/weight_0"):
                out.writestr(info.filename, bytes(64 << 20), zipfile.ZIP_DEFLATED)
            else:
                out.writestr(info, src.read(info))
    assert bomb.stat().st_size < 1 << 20
    with pytest.raises(InputError, match=r"weight_0 is compressed"):
        _pack(bomb, tmp_path / "out")


def _code_in_a_name(real: Path, tmp_path: Path) -> tuple[Path, Path]:
    """`real` with `linear.weight` renamed to a name that is code in torch.fx's source of the
    program's module (`getattr(self.linear, "NAME")`, written unescaped): (the file, the
    directory the code would make)."""
    marker = tmp_path / "marker"
    code = f'bias")\ngetattr(__import__("os"), "mkdir")(bytes({list(os.fsencode(marker))}))\n_ = ("'

    def edit(name: str, data: bytes) -> dict[str, bytes]:
        if name not in ("models/model.json", "data/weights/model_weights_config.json"):
            return {name: data}
        return {name: data.replace(b'"linear.weight"', json.dumps("linear." + code).encode())}

    return _rewritten(real, tmp_path / "evil.pt2", edit), marker


def test_a_weight_name_that_breaks_out_of_torch_fx_s_code_runs_nothing(real, tmp_path):
    # ExportedProgram.module(), which from_torch calls for the eager outputs, generates that
    # source and its forward runs it
    evil, marker = _code_in_a_name(real, tmp_path)
    with pytest.raises(InputError, match=r"Python source"):
        _pack(evil, tmp_path / "out")
    assert not marker.exists()


def test_a_program_loaded_elsewhere_with_code_in_a_name_runs_nothing(real, tmp_path):
    # the same program loaded by the caller (torch.export.load runs nothing of it), then given
    # to from_torch: its names are checked before `.module()`
    import torch

    import hlobundle

    evil, marker = _code_in_a_name(real, tmp_path)
    program = torch.export.load(evil)
    with pytest.raises(InputError, match=r"Python source"):
        hlobundle.from_torch(program, out=tmp_path / "out")
    assert not marker.exists()

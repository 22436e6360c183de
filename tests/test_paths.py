"""The path rules of `_format/_paths` and the files reached by them (`_bundle_io/_opening`;
SPEC.md, "Reader safety"): names a manifest may use, files reached without symlinks, a bundle walked without following or reading anything but regular
files, and listed files of one hard link."""

from __future__ import annotations

import os
import re

import pytest

from hlobundle._bundle_io import _opening
from hlobundle._format import _paths
from hlobundle.errors import UnsafePathError


@pytest.mark.parametrize(
    "name", ["module.mlir", "weights/w.safetensors", "a/b/c.bin", "..hidden", "x..y", "C"]
)
def test_a_relative_posix_name_is_returned_unchanged(name):
    assert _paths.check_name(name) == name


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("", "is empty or contains NUL or a backslash"),
        ("w\x00.bin", "is empty or contains NUL or a backslash"),
        ("dir\\w.bin", "is empty or contains NUL or a backslash"),
        ("/etc/passwd", "is absolute"),
        ("C:w.bin", "is absolute"),
        ("../escape", "contains '..', '.' or an empty component"),
        ("a/../../escape", "contains '..', '.' or an empty component"),
        ("./w.bin", "contains '..', '.' or an empty component"),
        ("a//b", "contains '..', '.' or an empty component"),
        ("a/", "contains '..', '.' or an empty component"),
    ],
    ids=[
        "empty",
        "nul",
        "backslash",
        "absolute",
        "drive_letter",
        "dotdot",
        "dotdot_inside",
        "dot",
        "empty_component",
        "trailing_slash",
    ],
)
def test_an_unsafe_name_is_refused(name, problem):
    with pytest.raises(UnsafePathError, match=re.escape(problem)) as e:
        _paths.check_name(name, field="files")
    assert e.value.code == "PATH_UNSAFE" and e.value.path == name and e.value.field == "files"


def test_resolve_refuses_an_unsafe_name_before_the_disk(tmp_path):
    with pytest.raises(UnsafePathError, match="contains '..'"):
        _opening.resolve(tmp_path, "../outside")


def test_resolve_returns_a_plain_file_inside_the_root(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "w.bin").write_bytes(b"w")
    assert _opening.resolve(tmp_path, "d/w.bin") == tmp_path / "d" / "w.bin"


def test_resolve_refuses_a_symlinked_file(tmp_path):
    (tmp_path / "real.bin").write_bytes(b"w")
    (tmp_path / "w.bin").symlink_to(tmp_path / "real.bin")
    with pytest.raises(UnsafePathError, match=r"'w.bin' is reached through a symlink \(w.bin\)"):
        _opening.resolve(tmp_path, "w.bin", field="files['w.bin']")


def test_resolve_refuses_a_symlinked_directory_in_the_path(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "w.bin").write_bytes(b"w")
    (tmp_path / "d").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    with pytest.raises(UnsafePathError, match=r"'d/w.bin' is reached through a symlink \(d\)"):
        _opening.resolve(tmp_path, "d/w.bin")


def test_resolve_refuses_a_dangling_symlink(tmp_path):
    (tmp_path / "w.bin").symlink_to(tmp_path / "gone")
    with pytest.raises(UnsafePathError, match="reached through a symlink"):
        _opening.resolve(tmp_path, "w.bin")


def test_walk_lists_every_regular_file_sorted(tmp_path):
    (tmp_path / "b").mkdir()
    for name in ("z.bin", "b/a.bin", "a.bin"):
        (tmp_path / name).write_bytes(b"")
    assert _opening.walk(tmp_path) == ["a.bin", "b/a.bin", "z.bin"]


def test_walk_refuses_a_symlinked_file(tmp_path):
    (tmp_path / "real.bin").write_bytes(b"w")
    (tmp_path / "link.bin").symlink_to(tmp_path / "real.bin")
    with pytest.raises(UnsafePathError, match="'link.bin' is a symlink") as e:
        _opening.walk(tmp_path)
    assert e.value.path == "link.bin"


def test_walk_refuses_a_symlinked_directory_without_following_it(tmp_path):
    (tmp_path / "d").symlink_to("/", target_is_directory=True)
    with pytest.raises(UnsafePathError, match="'d' is a symlink"):
        _opening.walk(tmp_path)


def test_walk_refuses_a_special_file(tmp_path):
    (tmp_path / "sub").mkdir()
    os.mkfifo(tmp_path / "sub" / "pipe")
    with pytest.raises(UnsafePathError, match="'sub/pipe' is not a regular file") as e:
        _opening.walk(tmp_path)
    assert e.value.path == "sub/pipe"


def test_walk_refuses_a_directory_it_cannot_read(tmp_path):
    # os.walk reports the failure to list a directory through onerror (here: the root is gone).
    with pytest.raises(UnsafePathError, match=r"a path in the bundle cannot be read \(") as e:
        _opening.walk(tmp_path / "gone")
    assert e.value.code == "PATH_UNSAFE"


def test_a_file_of_one_link_passes(tmp_path):
    (tmp_path / "w.bin").write_bytes(b"w")
    _paths.check_single_link(os.stat(tmp_path / "w.bin"), "w.bin")


def test_a_hard_linked_file_is_refused(tmp_path):
    (tmp_path / "w.bin").write_bytes(b"w")
    os.link(tmp_path / "w.bin", tmp_path / "outside.bin")
    with pytest.raises(UnsafePathError, match="'w.bin' has 2 hard links") as e:
        _paths.check_single_link(os.stat(tmp_path / "w.bin"), "w.bin")
    assert e.value.path == "w.bin"


def test_open_no_follow_opens_a_file_and_refuses_a_symlink_or_a_missing_one(tmp_path):
    from hlobundle.errors import FileMissingError

    (tmp_path / "f").write_bytes(b"x")
    (tmp_path / "link").symlink_to(tmp_path / "f")
    fd = _opening.open_no_follow(tmp_path / "f", "f")
    assert os.read(fd, 2) == b"x"
    os.close(fd)
    with pytest.raises(UnsafePathError, match="'link' cannot be opened") as e:
        _opening.open_no_follow(tmp_path / "link", "link")
    assert e.value.code == "PATH_UNSAFE" and e.value.path == "link"
    with pytest.raises(FileMissingError, match="gone is listed in the manifest but missing"):
        _opening.open_no_follow(tmp_path / "gone", "gone")

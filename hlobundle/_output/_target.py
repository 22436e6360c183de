"""Where a bundle is written: the output path (never inside a bundle; `--force` replaces only
a bundle), the directory beside it that a bundle is built in (`built_beside`), the rename that
puts a finished bundle there, and what killed writers left beside it. The writer, `pull`, and
the emitters write through it.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from .._file_io import _libc
from .._format._errors import InputError, OutputExistsError
from .._format._manifest import MANIFEST_NAME


def refuse_inside_a_bundle(out: Path) -> None:
    """An InputError when `out` would land inside a bundle (an ancestor directory is one): the
    bundle would then hold an unlisted file (FILE_UNLISTED), and a signed one no longer verify."""
    for parent in Path(os.path.abspath(out)).parents:
        if _is_bundle(parent):
            raise InputError(
                f"{str(out)!r} is inside the bundle {str(parent)!r}; write outside it (a bundle "
                "holds exactly the files its manifest lists)",
                path=out,
            )


def check_target(out: Path, force: bool) -> None:
    refuse_inside_a_bundle(out)
    if not (out.exists() or out.is_symlink()):
        return
    if not force:
        raise OutputExistsError(
            f"{str(out)!r} already exists; pass --force (force=True) to replace it", path=out
        )
    if not _is_bundle(out):
        raise OutputExistsError(
            f"{str(out)!r} exists and is not a bundle; --force only replaces bundles (a "
            "directory whose manifest.json parses as one)",
            path=out,
        )


def _is_bundle(path: Path) -> bool:
    """A real directory whose manifest.json parses as a bundle manifest: what --force may replace."""
    from .._file_io._bounded import read_at_most
    from .._format._errors import HloBundleError
    from .._format._fields import MAX_MANIFEST_BYTES
    from .._format._manifest_json import parse_manifest

    manifest = path / MANIFEST_NAME
    if path.is_symlink() or not path.is_dir() or manifest.is_symlink() or not manifest.is_file():
        return False
    try:
        parse_manifest(read_at_most(manifest, MAX_MANIFEST_BYTES))
    except (HloBundleError, OSError):
        return False
    return True


@contextlib.contextmanager
def built_beside(out: Path, *, force: bool) -> Iterator[Path]:
    """Where to build, in several steps, the bundle that is to be `out`: a path of its name in a
    `.<name>.partial-<pid>-<random>` directory beside `out` (the same file system), to write and
    rewrite with `force=False`. When the block ends without an error, that bundle is renamed
    over `out` (with `force`, only over a bundle, checked now and at the rename); on any error
    only the scratch directory is removed (what it holds was made here), and `out` is left as
    it was."""
    check_target(out, force)
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_partials(out)
    scratch = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-{os.getpid()}-", dir=out.parent))
    try:
        built = scratch / out.name  # its name: a signature covers it
        yield built
        move_into_place(built, out, force)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def move_into_place(tmp: Path, out: Path, force: bool) -> None:
    """Rename `tmp` to `out`, never over anything but the bundle `--force` was given for.

    The rename itself refuses an existing target (renameat2 RENAME_NOREPLACE), so of several
    writers racing for one path exactly one wins; the others get OUTPUT_EXISTS. With `force`, the
    old bundle is first renamed aside and checked again there: what is not a bundle goes back.
    """
    aside = _set_aside(out) if force else None
    try:
        _rename_no_replace(tmp, out)
    except FileExistsError:
        if aside is not None:
            _restore(aside, out)
        raise OutputExistsError(
            f"{str(out)!r} was created by someone else while this pack ran; it is left as it is",
            path=out,
        ) from None
    if aside is not None:
        shutil.rmtree(aside.parent, ignore_errors=True)


def _set_aside(out: Path) -> Path | None:
    old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-{os.getpid()}-", dir=out.parent))
    try:
        os.rename(out, old / "bundle")
    except FileNotFoundError:  # gone meanwhile: nothing to replace
        old.rmdir()
        return None
    if not _is_bundle(old / "bundle"):  # replaced by something else since it was checked
        _restore(old / "bundle", out)
        raise OutputExistsError(
            f"{str(out)!r} is no longer a bundle; --force only replaces bundles", path=out
        )
    return old / "bundle"


def _restore(aside: Path, out: Path) -> None:
    try:
        _rename_no_replace(aside, out)
        aside.parent.rmdir()
    except OSError:  # the path is taken again: leave ours beside it, under its .old- name
        pass


def _rename_no_replace(src: Path, dst: Path) -> None:
    """rename(2) that fails with FileExistsError when `dst` exists (Linux renameat2)."""
    c = ctypes
    renameat2 = _libc.function("renameat2", c.c_int, c.c_char_p, c.c_int, c.c_char_p, c.c_uint)
    if renameat2 is not None:
        at_fdcwd, rename_noreplace = -100, 1
        if renameat2(at_fdcwd, os.fsencode(src), at_fdcwd, os.fsencode(dst), rename_noreplace) == 0:
            return
        err = ctypes.get_errno()
        if err not in (errno.ENOSYS, errno.EINVAL):  # EINVAL: a file system without the flag
            raise OSError(err, os.strerror(err), str(dst))
    if dst.exists() or dst.is_symlink():
        raise FileExistsError(errno.EEXIST, "exists", str(dst))
    os.rename(src, dst)  # a non-empty directory at dst still makes this fail


def remove_stale_partials(out: Path) -> None:
    """Clear what killed packs of the same target left (their process is gone): half-written
    bundles are deleted; a bundle that a `--force` pack had set aside is put back when nothing
    took its place (the pack that was to replace it never finished), else deleted (it was
    replaced, as asked)."""
    for prefix in (f".{out.name}.partial-", f".{out.name}.old-"):
        for leftover in out.parent.glob(prefix + "*"):
            pid = leftover.name[len(prefix) :].split("-", 1)[0]
            if not pid.isdigit() or _alive(int(pid)):
                continue
            if prefix.endswith(".old-") and (leftover / "bundle").is_dir():
                _restore(leftover / "bundle", out)
            shutil.rmtree(leftover, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

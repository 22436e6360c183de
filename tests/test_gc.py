"""`_read/_gc`: the cyclic collector is paused while `load()` and `inspect` turn a manifest and
its headers into objects, and left as it was found afterwards."""

from __future__ import annotations

import gc

import pytest
from helpers import small_bundle

import hlobundle
from hlobundle._read import _files, _inspect
from hlobundle.errors import ManifestError


@pytest.fixture
def seen(monkeypatch):
    """Whether the collector ran while the manifest was read, one entry per read."""
    states: list[bool] = []
    read = _files.read_manifest

    def spy(root):
        states.append(gc.isenabled())
        return read(root)

    monkeypatch.setattr(_files, "read_manifest", spy)
    return states


@pytest.mark.parametrize("how", ["load", "inspect"])
def test_the_collector_is_paused_while_reading_and_runs_after(tmp_path, seen, how):
    bundle = small_bundle(tmp_path)
    (hlobundle.load if how == "load" else _inspect.summarize)(bundle)
    assert seen == [False]
    assert gc.isenabled()


def test_the_collector_runs_again_after_a_refused_bundle(tmp_path, seen):
    bundle = small_bundle(tmp_path)
    (bundle / "manifest.json").write_text("[]")
    with pytest.raises(ManifestError):
        hlobundle.load(bundle)
    assert seen == [False] and gc.isenabled()


def test_a_collector_the_user_turned_off_stays_off(tmp_path, seen):
    bundle = small_bundle(tmp_path)
    gc.disable()
    try:
        hlobundle.load(bundle)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_two_reads_at_once_keep_the_collector_paused_until_both_end():
    """A read that ends while another is under way leaves the collector off for the other."""
    from hlobundle._read._gc import collector_paused

    with collector_paused():
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer (another thread's) read still under way
    assert gc.isenabled()

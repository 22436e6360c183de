"""`_run/_by_text.py`: what JAX's rules look up by module text lives as long as the functions
that registered it, so a process that makes many functions does not keep every module."""

from __future__ import annotations

import gc

import pytest
from helpers import needs_enzyme, small_bundle

import hlobundle
from hlobundle._run._by_text import ByText


class Owner:
    pass


@pytest.mark.slow
def test_an_entry_lives_while_any_of_its_owners_does():
    registry: ByText[int] = ByText()
    a, b = Owner(), Owner()
    registry.add("module", 1, a)
    registry.add("module", 1, b)
    assert registry.get("module") == 1
    del a
    gc.collect()
    assert registry.get("module") == 1  # b still runs it
    del b
    gc.collect()
    assert registry.get("module") is None
    assert len(registry) == 0


@pytest.mark.slow
@needs_enzyme
def test_enzyme_functions_made_and_dropped_leave_no_module_behind(tmp_path):
    from hlobundle._run._backends import _enzyme_rules

    bundle = hlobundle.load(small_bundle(tmp_path))
    gc.collect()
    before = len(_enzyme_rules._MODULES)
    for _ in range(5):
        fn = bundle.function("enzyme")
        fn(*bundle.example_args())
        bundle = hlobundle.load(bundle.path)  # a new Bundle: a new prepared text each time
    assert len(_enzyme_rules._MODULES) > before
    del fn
    gc.collect()
    assert len(_enzyme_rules._MODULES) == before

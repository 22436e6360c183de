"""Where each module's tests are, so that a newcomer finds them by name. A module
`hlobundle/<room>/_<name>.py` is tested, by name, in the first of these that exists:

1. its own files, `tests/test_<name>.py` and `tests/test_<name>_<more>.py` (`_chunks.py`:
   test_chunks.py; a file named after another module, `test_xla_executables.py`, is that
   module's own, not `_xla.py`'s); where a module of another room is also called `_<name>.py`,
   those of them that import it (test_torch.py imports `_interop/_torch.py`, not
   `_write/_torch.py`);
2. `tests/test_<room>_<name>.py`, the room's name and its own (`_serve/_shm.py`:
   test_serve_shm.py);
3. when its name extends a module's beside it in its room (`_iree_compile.py` beside
   `_iree.py`, `_grpc_messages.py` beside `_grpc.py`), that module's, by 1 and 2;
4. its room's, `tests/test_<room>.py` and `tests/test_<room>_<more>.py` (`_oci/_ref.py`:
   test_oci.py, test_oci_hostile.py; `_write/_plan.py`: test_write.py).

`MAP` names the test files of every other module, by its room-qualified name
(`hlobundle._format._card`), and of a module whose files by name are not all of its tests:
its line replaces them. The test below fails when a module has neither (add its tests, or its
line here), when the map names a file that is not there, and when a line names only files
the module's name already finds (delete the line).

A module's line lists every test file that guards it: `DEFENCES` records, for a check whose
removal was seen to fail one test file only, that file, and the map must name it on the
module's line (or the module's files by name must hold it)."""

from __future__ import annotations

import ast
import functools

from helpers import ROOT

MAP = {
    "hlobundle._format._card": ["test_metadata.py"],
    "hlobundle._format._model": ["test_manifest.py"],
    "hlobundle._format._fields": ["test_manifest.py"],
    "hlobundle._format._yaml": ["test_metadata.py", "test_reactant_server.py"],
    "hlobundle._write._card": ["test_metadata.py"],
    "hlobundle.__main__": ["test_cli.py"],
    "hlobundle._cli._main": ["test_cli.py", "test_error_hints.py"],
    "hlobundle._cli._pack": ["test_cli.py", "test_write_options.py"],
    "hlobundle._cli._parser_oci": ["test_oci.py", "test_error_hints.py"],
    "hlobundle._cli._parser_write": ["test_write_options.py"],
    "hlobundle._cli._writes": ["test_iree.py", "test_refresh.py", "test_signing.py"],
    "hlobundle._compat": ["test_layers.py", "test_transforms.py"],
    "hlobundle._extras": ["test_readme.py", "test_cli.py"],
    "hlobundle._emit.run_iree_template": ["test_iree.py"],
    "hlobundle._file_io._durable": ["test_tensor_writing.py", "test_write.py", "test_emit.py"],
    "hlobundle._file_io._hashing_writer": ["test_tensor_writing.py"],
    "hlobundle._file_io._libc": ["test_tensor_writing.py", "test_write.py"],
    "hlobundle._file_io._bounded": ["test_manifest.py", "test_write.py"],
    "hlobundle._format._bundle_manifest": ["test_manifest.py", "test_conformance.py"],
    "hlobundle._format._dtypes": ["test_roundtrip.py", "test_package.py"],
    "hlobundle._format._errors": ["test_package.py", "test_error_hints.py"],
    "hlobundle._format._limits": ["test_hostile.py", "test_trust.py"],
    "hlobundle._parse._main_signature": ["test_mlir.py", "test_tamper.py"],
    "hlobundle._format._manifest_json": ["test_manifest.py", "test_hostile.py"],
    "hlobundle._format._policy": ["test_trust.py", "test_mlir.py"],
    "hlobundle._parse._unportable": ["test_trust.py", "test_mlir.py"],
    "hlobundle._parse._portable": ["test_newer_jaxlib.py", "test_tamper.py"],
    "hlobundle._parse._artifacts": ["test_trust.py", "test_isolation.py"],
    "hlobundle._parse._children": ["test_trust.py", "test_isolation.py"],
    "hlobundle._bundle_io._tensor_reading": ["test_tensors.py", "test_chunks.py"],
    "hlobundle._bundle_io._opening": ["test_paths.py", "test_files.py"],
    "hlobundle._bundle_io._signature_file": ["test_signing.py"],
    "hlobundle._bundle_io._tensor_streaming": ["test_device_verify.py"],
    "hlobundle._read._device_values": ["test_device_verify.py"],
    "hlobundle._format._schema": ["test_package.py"],
    "hlobundle._format._signature": ["test_signing.py"],
    "hlobundle._parse._stored": ["test_batched.py", "test_jax_export.py"],
    "hlobundle._run._tolerance": [
        "test_run.py",
        "test_precision.py",
        "test_ieee.py",
        "test_cross_jaxlib.py",
    ],
    "hlobundle._format._agreement": ["test_ieee.py", "test_emit.py", "test_precision.py"],
    "hlobundle._run._precision": ["test_precision.py", "test_precision_rewrite.py"],
    "hlobundle._interop._sources": ["test_jax_export.py", "test_reactant_server.py"],
    "hlobundle._interop._jax_export": ["test_jax_export.py"],
    "hlobundle._interop._reactant_server": ["test_reactant_server.py"],
    "hlobundle._interop._torch_archive": ["test_torch_pt2.py"],
    "hlobundle._write._torch": ["test_torch.py", "test_torch_pt2.py", "test_torch_bundle.py"],
    "hlobundle._write._jax_export": ["test_jax_export.py"],
    "hlobundle._write._reactant_server": ["test_reactant_server.py", "test_emit.py"],
    "hlobundle._emit._reactant_server": ["test_reactant_server.py", "test_emit.py"],
    "hlobundle._isolation._jax_export_child": ["test_jax_export.py"],
    "hlobundle._mlir_context": ["test_mlir.py", "test_isolation.py"],
    "hlobundle._isolation._portable_child": ["test_isolation.py", "test_trust.py"],
    "hlobundle.integrations._models": [
        "test_adapter_decoding.py",
        "test_mlserver.py",
        "test_ray.py",
        "test_kserve.py",
    ],
    "hlobundle._oci._auth": ["test_oci_hostile.py", "test_oci.py", "test_network.py"],
    "hlobundle._read._cache": ["test_trust.py", "test_iree.py"],
    "hlobundle._read._modules": ["test_trust.py", "test_tamper.py"],
    "hlobundle._read._reader": ["test_tamper.py", "test_trust.py", "test_roundtrip.py"],
    "hlobundle._read._trust": ["test_package.py", "test_iree.py"],
    "hlobundle._read._values": ["test_roundtrip.py", "test_function.py"],
    "hlobundle._remote._sources": ["test_remote.py", "test_oci_hostile.py"],
    "hlobundle._read._store": ["test_remote.py", "test_oci.py"],
    "hlobundle._run._backends._backend": ["test_backend.py", "test_layers.py", "test_emit.py"],
    "hlobundle._run._backends._enzyme": ["test_function.py", "test_transforms.py"],
    "hlobundle._run._backends._enzyme_prepare": ["test_function.py", "test_emit.py"],
    "hlobundle._run._backends._enzyme_rules": ["test_transforms.py", "test_by_text.py"],
    "hlobundle._run._backends._installed": ["test_cli.py"],
    "hlobundle._run._backends._jax_script": ["test_emit.py"],
    "hlobundle._run._backends._xla": ["test_function.py", "test_jax_export.py"],
    "hlobundle._run._binding": ["test_function.py", "test_symbolic.py", "test_shape_proofs.py"],
    "hlobundle._run._compute": ["test_write.py", "test_cli.py"],
    "hlobundle._run._placement": ["test_sharding.py", "test_multihost.py"],
    "hlobundle._run._process": ["test_run.py", "test_multihost.py"],
    "hlobundle._run._shapes": ["test_shape_proofs.py"],
    "hlobundle._serve._app": ["test_serve.py", "test_serve_app.py", "test_serve_shm.py"],
    "hlobundle._serve._shm": ["test_serve_shm.py", "test_grpc_shm.py"],
    "hlobundle._cli._commands": ["test_cli.py", "test_cli_usage.py", "test_serve_shm.py"],
    "hlobundle._serve._predict_v2": ["test_grpc.py"],
    "hlobundle._terminal._display": ["test_inspect.py", "test_trust.py"],
    "hlobundle._version": ["test_package.py"],
    "hlobundle._write._reshard": ["test_shards.py"],
    "hlobundle._write._atomic": ["test_write.py", "test_hostile.py"],
    "hlobundle._write._compile": ["test_iree.py", "test_xla_sizes.py"],
    "hlobundle._write._export": ["test_framework_models.py", "test_batched.py", "test_torch.py"],
    "hlobundle._write._functions": ["test_write.py", "test_serve.py"],
    "hlobundle._write._lowering": ["test_batched.py", "test_jax_export.py"],
    "hlobundle._write._normalize": ["test_write.py", "test_mlir.py"],
    "hlobundle._write._pack_files": ["test_inputs.py", "test_julia.py"],
    "hlobundle._write._pytree_names": ["test_framework_models.py", "test_jax_export.py"],
    "hlobundle._write._sign": ["test_signing.py"],
    "hlobundle._output._target": ["test_write.py", "test_refresh.py"],
    "hlobundle.errors": ["test_package.py"],
}


# Checks whose removal was seen to fail one test file only (the check disabled in the source,
# the test files run): (module, the check) -> the file that fails without it.
DEFENCES = {
    ("hlobundle._remote._sources", "check_listed: a layer's digest"): "test_oci_hostile.py",
    ("hlobundle._run._binding", "check_symbols"): "test_shape_proofs.py",
    (
        "hlobundle._run._precision_rewrite",
        "_verified: the rewritten module",
    ): "test_precision_rewrite.py",
    ("hlobundle._run._precision_rewrite", "keeps_its_precision"): "test_precision_rewrite.py",
    ("hlobundle._format._agreement", "difference: 64-bit integers exactly"): "test_ieee.py",
    (
        "hlobundle._run._precision_rewrite",
        "a composite's precision_config",
    ): "test_precision_rewrite.py",
    ("hlobundle._write._compile", "_check_values, the cap counted first"): "test_xla_sizes.py",
    ("hlobundle._write._torch", "refuse_program_names before .module()"): "test_torch_pt2.py",
    ("hlobundle._serve._shm", "_check_file: a file of another user"): "test_grpc_shm.py",
    ("hlobundle._serve._app", "App._lifespan: every region closed at the end"): "test_serve_shm.py",
    (
        "hlobundle._cli._commands",
        "_shared_memory: loopback only with --shared-memory-over-loopback",
    ): "test_serve_shm.py",
}


def _modules() -> list[str]:
    return sorted(
        ".".join(p.relative_to(ROOT).with_suffix("").parts)
        for p in (ROOT / "hlobundle").rglob("*.py")
        if p.name != "__init__.py"
    )


def _name(module: str) -> str:
    return module.rsplit(".", 1)[1].lstrip("_")


def _room(module: str) -> str:
    """The folder a module sits in (`_oci`, `_backends`), "" for one of the package's folder."""
    parts = module.split(".")
    return parts[-2].lstrip("_") if len(parts) > 2 else ""


def _starting(prefix: str, tests: set[str]) -> list[str]:
    """`test_<prefix>.py` and `test_<prefix>_<more>.py`, as there are."""
    return sorted(t for t in tests if t == f"test_{prefix}.py" or t.startswith(f"test_{prefix}_"))


@functools.cache
def _imported_by(test: str) -> frozenset[str]:
    """The modules of the package a test file imports (`from hlobundle._interop import _torch`:
    `hlobundle._interop._torch`), anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse((ROOT / "tests" / test).read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return frozenset(found)


def _own(module: str, modules: list[str], tests: set[str]) -> list[str]:
    """Rule 1: the files named after the module; where a module of another room has its
    name, those of them that import it."""
    name = _name(module)
    shared = any(m != module and _name(m) == name for m in modules)
    others = {f"test_{_name(m)}.py" for m in modules if m != module}
    return [
        t
        for t in _starting(name, tests)
        if (t == f"test_{name}.py" or t not in others) and (not shared or module in _imported_by(t))
    ]


def _by_name(module: str, modules: list[str], tests: set[str]) -> list[str]:
    """The test files a module's name finds (the rules of the docstring, the first that finds
    any)."""
    room, name = _room(module), _name(module)
    if found := _own(module, modules, tests):
        return found
    if room and f"test_{room}_{name}.py" in tests:
        return [f"test_{room}_{name}.py"]
    beside = [m for m in modules if m.rpartition(".")[0] == module.rpartition(".")[0]]
    for m in sorted(beside, key=len, reverse=True):  # the longest name it extends
        if m != module and name.startswith(_name(m) + "_"):
            if found := _by_name(m, modules, tests):
                return found
    return _starting(room, tests) if room else []


def _tests_of(module: str, modules: list[str], tests: set[str], mapping) -> list[str]:
    return mapping.get(module) or _by_name(module, modules, tests)


def _unmapped(
    modules: list[str], mapping: dict[str, list[str]], defences: dict | None = None
) -> list[str]:
    """Modules whose name finds no test file (`_by_name`) and that have no line in
    `mapping`, lines that name only files the module's name finds, map lines that name a test
    file that does not exist or a module that is not there, and `defences` whose test file the
    module's tests leave out."""
    tests = {p.name for p in (ROOT / "tests").glob("test_*.py")}
    errors = []
    for module in modules:
        named = _by_name(module, modules, tests)
        if module in mapping and named and set(mapping[module]) <= set(named):
            errors.append(f"{module}: its name finds {', '.join(named)}: delete its MAP line")
        elif module not in mapping and not named:
            errors.append(f"{module}: its name finds no test file, and it has no line in MAP")
    for (module, check), test in (DEFENCES if defences is None else defences).items():
        if test not in _tests_of(module, modules, tests, mapping):
            errors.append(f"{module}: {test} guards {check}, and its tests leave it out")
    errors += [
        f"{m}: MAP names {f}, which is not there"
        for m, files in mapping.items()
        for f in files
        if f not in tests
    ]
    errors += [f"{m}: in MAP, but no such module" for m in mapping if m not in modules]
    return errors


def test_every_module_s_tests_are_found_by_name():
    assert _unmapped(_modules(), MAP) == []


def test_the_map_guard_fails_on_a_module_whose_name_another_room_shares():
    """test_jax_export.py is there, but a new `_read/_jax_export.py` is not what it tests: it
    does not import it (nor the two others of the name), and `_read` has no files of its own."""
    assert _unmapped([*_modules(), "hlobundle._read._jax_export"], MAP) == [
        "hlobundle._read._jax_export: its name finds no test file, and it has no line in MAP"
    ]


def test_each_rule_finds_the_files_the_docstring_says():
    modules, tests = _modules(), {p.name for p in (ROOT / "tests").glob("test_*.py")}
    assert _by_name("hlobundle._format._chunks", modules, tests) == ["test_chunks.py"]  # 1
    assert "test_xla_executables.py" not in _by_name(
        "hlobundle._run._backends._xla", modules, tests
    )
    assert _by_name("hlobundle._interop._torch", modules, tests) == ["test_torch.py"]  # imported
    assert _by_name("hlobundle._serve._shm", modules, tests) == ["test_serve_shm.py"]  # 2
    assert _by_name("hlobundle._run._backends._iree_compile", modules, tests) == ["test_iree.py"]
    assert _by_name("hlobundle._serve._shm_http", modules, tests) == ["test_serve_shm.py"]  # 3
    assert _by_name("hlobundle._oci._ref", modules, tests) == ["test_oci.py", "test_oci_hostile.py"]
    assert _by_name("hlobundle._format._new", [*modules, "hlobundle._format._new"], tests) == []


def test_the_map_guard_fails_on_a_line_that_leaves_out_a_defence_s_test_file():
    """The digest check in `_remote/_sources.py`, removed, fails test_oci_hostile.py alone; its
    name finds test_remote.py and test_remote_attacks.py, not it."""
    old = {m: files for m, files in MAP.items() if m != "hlobundle._remote._sources"}
    assert _unmapped(_modules(), old) == [
        "hlobundle._remote._sources: test_oci_hostile.py guards check_listed: a layer's digest, "
        "and its tests leave it out"
    ]
    mine = {("hlobundle._read._gc", "the collector paused"): "test_hostile.py"}
    assert _unmapped(_modules(), MAP, mine) == [
        "hlobundle._read._gc: test_hostile.py guards the collector paused, and its tests "
        "leave it out"
    ]  # a module with no line: its file by name (test_gc.py) is not the defence's


def test_the_map_guard_fails_on_a_new_module_and_on_a_stale_line():
    assert _unmapped([*_modules(), "hlobundle._read._new"], MAP) == [
        "hlobundle._read._new: its name finds no test file, and it has no line in MAP"
    ]
    stale = {**MAP, "hlobundle._read._gone": ["test_gone.py"]}
    assert set(_unmapped(_modules(), stale)) == {
        "hlobundle._read._gone: MAP names test_gone.py, which is not there",
        "hlobundle._read._gone: in MAP, but no such module",
    }


def test_the_map_guard_fails_on_a_line_its_module_s_name_makes_needless():
    needless = {**MAP, "hlobundle._oci._ref": ["test_oci.py"]}
    assert _unmapped(_modules(), needless) == [
        "hlobundle._oci._ref: its name finds test_oci.py, test_oci_hostile.py: delete its MAP line"
    ]

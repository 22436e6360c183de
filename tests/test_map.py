"""Where each module's tests are, so that a newcomer finds them by name: a module
`hlobundle/.../_name.py` is tested in `tests/test_name.py` when that file exists and no module
of another room is also called `_name.py`; `MAP` names the test files of every other module,
by its room-qualified name (`hlobundle._oci._sign`, `hlobundle._write._sign`). The test below
fails when a module has neither (add its tests, and its line here) or when the map names a file
that is not there.

A module's line lists every test file that guards it: `DEFENCES` records, for a check whose
removal was seen to fail one test file only, that file, and the map must name it on the
module's line (or the module's own by-name file must be it)."""

from __future__ import annotations

from helpers import ROOT

MAP = {
    "hlobundle._format._card": ["test_metadata.py"],
    "hlobundle._format._model": ["test_manifest.py"],
    "hlobundle._format._fields": ["test_manifest.py"],
    "hlobundle._format._yaml": ["test_metadata.py", "test_reactant_server.py"],
    "hlobundle._write._card": ["test_metadata.py"],
    "hlobundle.__main__": ["test_cli.py"],
    "hlobundle._cli._commands": ["test_cli.py"],
    "hlobundle._cli._common": ["test_cli_usage.py"],
    "hlobundle._cli._conformance": ["test_conformance.py"],
    "hlobundle._cli._main": ["test_cli.py", "test_error_hints.py"],
    "hlobundle._cli._pack": ["test_cli.py", "test_writer_options.py"],
    "hlobundle._cli._parser": ["test_cli_usage.py"],
    "hlobundle._cli._parser_oci": ["test_oci.py", "test_error_hints.py"],
    "hlobundle._cli._parser_read": ["test_cli_usage.py"],
    "hlobundle._cli._parser_write": ["test_writer_options.py"],
    "hlobundle._cli._values": ["test_cli_usage.py"],
    "hlobundle._cli._writes": ["test_iree.py", "test_refresh.py", "test_signing.py"],
    "hlobundle._compat": ["test_layers.py", "test_transforms.py"],
    "hlobundle._extras": ["test_readme.py", "test_cli.py"],
    "hlobundle._emit._emit": ["test_emit.py"],
    "hlobundle._emit._template": ["test_emit.py"],
    "hlobundle._emit.run_iree_template": ["test_iree.py"],
    "hlobundle._emit.run_shared": ["test_emit.py"],
    "hlobundle._emit.run_template": ["test_emit.py"],
    "hlobundle._file_io._durable": ["test_tensor_writing.py", "test_writer.py", "test_emit.py"],
    "hlobundle._file_io._hashing_writer": ["test_tensor_writing.py"],
    "hlobundle._file_io._libc": ["test_tensor_writing.py", "test_writer.py"],
    "hlobundle._format._chunks": ["test_chunks.py"],
    "hlobundle._format._bundle_manifest": ["test_manifest.py", "test_conformance.py"],
    "hlobundle._format._dtypes": ["test_roundtrip.py", "test_package.py"],
    "hlobundle._format._errors": ["test_package.py", "test_error_hints.py"],
    "hlobundle._format._limits": ["test_hostile.py", "test_trust.py"],
    "hlobundle._format._main_signature": ["test_mlir.py", "test_tamper.py"],
    "hlobundle._format._manifest_json": ["test_manifest.py", "test_hostile.py"],
    "hlobundle._format._policy": ["test_trust.py", "test_mlir.py"],
    "hlobundle._format._portable": ["test_newer_jaxlib.py", "test_tamper.py"],
    "hlobundle._bundle_io._artifacts": ["test_trust.py", "test_isolation.py"],
    "hlobundle._bundle_io._children": ["test_trust.py", "test_isolation.py"],
    "hlobundle._bundle_io._tensor_reading": ["test_tensors.py", "test_chunks.py"],
    "hlobundle._bundle_io._tensor_streaming": ["test_device_verify.py"],
    "hlobundle._read._device_values": ["test_device_verify.py"],
    "hlobundle._format._schema": ["test_package.py"],
    "hlobundle._format._sharding": ["test_sharding.py"],
    "hlobundle._format._signature": ["test_signing.py"],
    "hlobundle._format._stored": ["test_batched.py", "test_jax_export.py"],
    "hlobundle._format._tolerance": [
        "test_run.py",
        "test_precision.py",
        "test_ieee.py",
        "test_cross_jaxlib.py",
    ],
    "hlobundle._format._agreement": ["test_ieee.py", "test_emit.py", "test_precision.py"],
    "hlobundle._format._precision": ["test_precision.py", "test_precision_rewrite.py"],
    "hlobundle._run._precision": ["test_precision.py", "test_precision_rewrite.py"],
    "hlobundle._interop._sources": ["test_jax_export.py", "test_reactant_server.py"],
    "hlobundle._interop._jax_export": ["test_jax_export.py"],
    "hlobundle._interop._reactant_server": ["test_reactant_server.py"],
    "hlobundle._interop._torch": ["test_torch.py"],
    "hlobundle._interop._torch_aten": ["test_torch.py"],
    "hlobundle._interop._torch_archive": ["test_torch_pt2.py"],
    "hlobundle._write._torch": ["test_torch.py", "test_torch_pt2.py"],
    "hlobundle._write._jax_export": ["test_jax_export.py"],
    "hlobundle._write._reactant_server": ["test_reactant_server.py", "test_emit.py"],
    "hlobundle._emit._reactant_server": ["test_reactant_server.py", "test_emit.py"],
    "hlobundle._isolation._child": ["test_isolation.py"],
    "hlobundle._isolation._fork_server": ["test_isolation.py"],
    "hlobundle._isolation._fork_servers": ["test_isolation.py"],
    "hlobundle._isolation._jax_export_child": ["test_jax_export.py"],
    "hlobundle._mlir_context": ["test_mlir.py", "test_isolation.py"],
    "hlobundle._isolation._portable_child": ["test_isolation.py", "test_trust.py"],
    "hlobundle.integrations._models": [
        "test_adapter_decoding.py",
        "test_mlserver.py",
        "test_ray.py",
        "test_kserve.py",
    ],
    "hlobundle._oci._artifact": ["test_oci.py", "test_oci_hostile.py"],
    "hlobundle._oci._auth": ["test_oci_hostile.py", "test_oci.py", "test_network.py"],
    "hlobundle._oci._blobs": ["test_oci_hostile.py"],
    "hlobundle._oci._client": ["test_oci_hostile.py", "test_oci.py"],
    "hlobundle._oci._credentials": ["test_oci.py", "test_oci_hostile.py"],
    "hlobundle._oci._pull": ["test_oci_hostile.py", "test_oci.py"],
    "hlobundle._oci._push": ["test_oci.py"],
    "hlobundle._oci._ref": ["test_oci.py", "test_oci_hostile.py"],
    "hlobundle._oci._referrers": ["test_oci.py", "test_oci_hostile.py"],
    "hlobundle._oci._sign": ["test_oci.py"],
    "hlobundle._read._cache": ["test_trust.py", "test_iree.py"],
    "hlobundle._read._modules": ["test_trust.py", "test_tamper.py"],
    "hlobundle._read._reader": ["test_tamper.py", "test_trust.py", "test_roundtrip.py"],
    "hlobundle._read._trust": ["test_package.py", "test_iree.py"],
    "hlobundle._read._values": ["test_roundtrip.py", "test_function.py"],
    "hlobundle._remote._load": ["test_remote.py"],
    "hlobundle._remote._sources": ["test_remote.py", "test_oci_hostile.py"],
    "hlobundle._read._store": ["test_remote.py", "test_oci.py"],
    "hlobundle._run._backends._backend": ["test_layers.py", "test_emit.py"],
    "hlobundle._run._backends._enzyme": ["test_function.py", "test_transforms.py"],
    "hlobundle._run._backends._enzyme_prepare": ["test_function.py", "test_emit.py"],
    "hlobundle._run._backends._enzyme_rules": ["test_transforms.py", "test_by_text.py"],
    "hlobundle._run._backends._installed": ["test_cli.py"],
    "hlobundle._run._backends._iree": ["test_iree.py"],
    "hlobundle._run._backends._iree_compile": ["test_iree.py"],
    "hlobundle._run._backends._jax_script": ["test_emit.py"],
    "hlobundle._run._backends._xla": ["test_function.py", "test_jax_export.py"],
    "hlobundle._run._binding": ["test_function.py", "test_symbolic.py", "test_shape_proofs.py"],
    "hlobundle._run._compute": ["test_writer.py", "test_cli.py"],
    "hlobundle._run._function": ["test_function.py"],
    "hlobundle._run._placement": ["test_sharding.py", "test_multihost.py"],
    "hlobundle._run._process": ["test_run.py", "test_multihost.py"],
    "hlobundle._run._shapes": ["test_shape_proofs.py"],
    "hlobundle._serve._app": ["test_serve.py", "test_serve_app.py"],
    "hlobundle._serve._batching": ["test_serve_batching.py"],
    "hlobundle._serve._grpc_messages": ["test_grpc.py"],
    "hlobundle._serve._models": ["test_serve.py"],
    "hlobundle._serve._predict_v2": ["test_grpc.py"],
    "hlobundle._serve._protocol": ["test_serve.py", "test_serve_json.py", "test_serve_client.py"],
    "hlobundle._serve._responses": ["test_serve.py"],
    "hlobundle._serve._served": ["test_serve.py", "test_serve_batching.py"],
    "hlobundle._serve._server": ["test_serve_client.py"],
    "hlobundle._serve._sweep": ["test_serve_app.py"],
    "hlobundle._serve._shm": ["test_serve_shm.py"],
    "hlobundle._serve._shm_http": ["test_serve_shm.py"],
    "hlobundle._terminal._display": ["test_inspect.py", "test_trust.py"],
    "hlobundle._version": ["test_package.py"],
    "hlobundle._write._reshard": ["test_shards.py"],
    "hlobundle._write._atomic": ["test_writer.py", "test_hostile.py"],
    "hlobundle._write._compile": ["test_iree.py", "test_xla_sizes.py"],
    "hlobundle._write._expected": ["test_writer.py"],
    "hlobundle._write._export": ["test_framework_models.py", "test_batched.py", "test_torch.py"],
    "hlobundle._write._functions": ["test_writer.py", "test_serve.py"],
    "hlobundle._write._lowering": ["test_batched.py", "test_jax_export.py"],
    "hlobundle._write._module_text": ["test_writer.py"],
    "hlobundle._write._normalize": ["test_writer.py", "test_mlir.py"],
    "hlobundle._write._options": ["test_writer_options.py"],
    "hlobundle._write._pack_files": ["test_inputs.py", "test_julia.py"],
    "hlobundle._write._plan": ["test_writer.py"],
    "hlobundle._write._pytree_names": ["test_framework_models.py", "test_jax_export.py"],
    "hlobundle._write._reactant": ["test_reactant.py"],
    "hlobundle._write._sign": ["test_signing.py"],
    "hlobundle._output._target": ["test_writer.py", "test_refresh.py"],
    "hlobundle._write._writer": ["test_writer.py"],
    "hlobundle.errors": ["test_package.py"],
}


# Checks whose removal was seen to fail one test file only (the check disabled in the source,
# the test files run): (module, the check) -> the file that fails without it.
DEFENCES = {
    ("hlobundle._remote._sources", "check_listed: a layer's digest"): "test_oci_hostile.py",
    ("hlobundle._run._binding", "check_symbols"): "test_shape_proofs.py",
    (
        "hlobundle._format._precision",
        "_verified: the rewritten module",
    ): "test_precision_rewrite.py",
    ("hlobundle._format._precision", "keeps_its_precision"): "test_precision_rewrite.py",
    ("hlobundle._format._agreement", "difference: 64-bit integers exactly"): "test_ieee.py",
    ("hlobundle._format._precision", "a composite's precision_config"): "test_precision_rewrite.py",
    ("hlobundle._write._compile", "_check_values, the cap counted first"): "test_xla_sizes.py",
    ("hlobundle._write._torch", "refuse_program_names before .module()"): "test_torch_pt2.py",
}


def _modules() -> list[str]:
    return sorted(
        ".".join(p.relative_to(ROOT).with_suffix("").parts)
        for p in (ROOT / "hlobundle").rglob("*.py")
        if p.name != "__init__.py"
    )


def _by_name(module: str) -> str:
    return f"test_{module.rsplit('.', 1)[1].lstrip('_')}.py"


def _unmapped(
    modules: list[str], mapping: dict[str, list[str]], defences: dict | None = None
) -> list[str]:
    """Modules with neither a test file named after them (their name theirs alone) nor a
    line in `mapping`, map lines that name a test file that does not exist or a module that is
    not there, and `defences` whose test file the module's tests leave out."""
    tests = {p.name for p in (ROOT / "tests").glob("test_*.py")}
    errors = []
    for module in modules:
        named = _by_name(module)
        shared = [m for m in modules if m != module and _by_name(m) == named]
        if module in mapping:
            continue
        if shared:
            errors.append(
                f"{module}: {named} would also be {', '.join(shared)}'s: give it a line in MAP"
            )
        elif named not in tests:
            errors.append(f"{module}: no {named} and no line in MAP")
    for (module, check), test in (DEFENCES if defences is None else defences).items():
        if test not in mapping.get(module, [_by_name(module)]):
            errors.append(f"{module}: {test} guards {check}, and its MAP line leaves it out")
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
    """test_jax_export.py is there, but a new `_oci/_jax_export.py` is not what it tests."""
    assert _unmapped([*_modules(), "hlobundle._oci._jax_export"], MAP) == [
        "hlobundle._oci._jax_export: test_jax_export.py would also be "
        "hlobundle._interop._jax_export, hlobundle._write._jax_export's: give it a line in MAP"
    ]


def test_the_map_guard_fails_on_a_line_that_leaves_out_a_defence_s_test_file():
    """The digest check in `_remote/_sources.py`, removed, fails test_oci_hostile.py alone; its
    line once named test_remote.py only."""
    old = {**MAP, "hlobundle._remote._sources": ["test_remote.py"]}
    assert _unmapped(_modules(), old) == [
        "hlobundle._remote._sources: test_oci_hostile.py guards check_listed: a layer's digest, "
        "and its MAP line leaves it out"
    ]
    mine = {("hlobundle._read._gc", "the collector paused"): "test_hostile.py"}
    assert _unmapped(_modules(), MAP, mine) == [
        "hlobundle._read._gc: test_hostile.py guards the collector paused, and its MAP line "
        "leaves it out"
    ]  # a module with no line: its by-name file (test_gc.py) is not the defence's


def test_the_map_guard_fails_on_a_new_module_and_on_a_stale_line():
    assert _unmapped([*_modules(), "hlobundle._read._new"], MAP) == [
        "hlobundle._read._new: no test_new.py and no line in MAP"
    ]
    stale = {**MAP, "hlobundle._read._gone": ["test_gone.py"]}
    assert set(_unmapped(_modules(), stale)) == {
        "hlobundle._read._gone: MAP names test_gone.py, which is not there",
        "hlobundle._read._gone: in MAP, but no such module",
    }

"""The public surface, lazy imports, and generated files."""

from __future__ import annotations

import inspect
import json
import re
import subprocess
import sys
import types

import pytest
from helpers import ROOT, small_bundle

import hlobundle
from hlobundle._format._schema import schema_text


def _surface(module) -> set[str]:
    """What a module offers: its public globals (not `dir()`, which `__dir__` may answer with
    `__all__` itself) and the names its `__getattr__` serves lazily."""
    names = {n for n in vars(module) if not n.startswith("_")}
    # `hlobundle.integrations`, public and imported only when asked for, becomes an attribute
    # once anything in the process imports it (a test of an adapter, say): not a name of `*`.
    names -= {n for n in ON_REQUEST if n in names and hasattr(vars(module)[n], "__path__")}
    return names | set(getattr(module, "_LAZY", {})) | {"__version__"}


ON_REQUEST = ("integrations",)


def test_public_names_are_exactly_all():
    assert _surface(hlobundle) == set(hlobundle.__all__)
    for name in hlobundle.__all__:
        getattr(hlobundle, name)  # every listed name resolves
    assert _surface(hlobundle) == set(hlobundle.__all__)  # nothing new appeared on first use


def test_the_surface_guard_fails_on_a_name_left_out_of_all():
    import types

    fake = types.ModuleType("fake")
    fake.__all__ = ["load", "__version__"]
    fake._LAZY = {"load": "._read._reader"}
    fake.__dir__ = lambda: fake.__all__  # what hid extra names from the old check
    fake.helper = object()  # public, but not in __all__
    assert _surface(fake) != set(fake.__all__)


def test_schema_is_current():
    committed = (ROOT / "schemas" / "manifest.schema.json").read_text()
    assert committed == schema_text(), (
        "schema is stale: run `hlobundle schema -o schemas/manifest.schema.json`"
    )


@pytest.mark.slow
@pytest.mark.subprocess
def test_inspect_and_verify_do_not_import_jax(tmp_path):
    b = small_bundle(tmp_path)
    code = (
        "import sys, hlobundle; from hlobundle._cli._main import main; "
        f"main(['verify', {str(b)!r}]); main(['inspect', {str(b)!r}]); "
        "heavy = [m for m in ('jax', 'enzyme_ad') if m in sys.modules]; "
        "assert not heavy, heavy"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_dtype_table_in_spec_matches_code():
    from hlobundle._format._dtypes import TABLE

    spec = (ROOT / "SPEC.md").read_text()
    for row in TABLE:
        line = f"| `{row.name}` | `{row.mlir}` | `{row.safetensors}` |"
        assert line in spec, line


def _error_classes(cls=hlobundle.HloBundleError):
    for sub in cls.__subclasses__():
        yield sub
        yield from _error_classes(sub)


def test_error_codes_in_spec_match_the_class_tree():
    import re

    classes = list(_error_classes())
    codes = {c.code for c in classes if "code" in vars(c)}  # each class's own code
    spec = (ROOT / "SPEC.md").read_text()
    documented = set(re.findall(r"^\| `([A-Z0-9_]+)` \|", spec, re.M))
    assert codes == documented
    # One class per code: no two classes define the same code.
    owners = [c.code for c in classes if "code" in vars(c)]
    assert len(owners) == len(set(owners))
    assert all(hasattr(hlobundle.errors, c.__name__) for c in classes)  # all public


def test_no_raise_site_passes_a_code():
    import re

    source = "".join(p.read_text() for p in (ROOT / "hlobundle").rglob("*.py"))
    assert not re.search(r'\bcode="[A-Z_]+"', source)


def test_input_errors_are_what_jax_users_catch():
    assert issubclass(hlobundle.InputError, ValueError)
    assert issubclass(hlobundle.errors.InputDtypeError, TypeError)
    assert issubclass(hlobundle.errors.InputDtypeError, hlobundle.InputError)


def test_dtype_table_itemsizes_are_numpys():
    # `inspect` sizes tensors from the table, without importing numpy; they must agree.
    from hlobundle._format import _dtypes

    for row in _dtypes.TABLE:
        assert row.itemsize == row.numpy.itemsize, row.name


@pytest.mark.slow
@pytest.mark.subprocess
def test_the_wheel_holds_the_conformance_cases_and_runs_them_outside_the_checkout(tmp_path):
    # A wheel built from the repository, unpacked away from it, must run `hlobundle conformance`
    # and `hlobundle schema` on its own files (package data, not the checkout's).
    import importlib.metadata
    import shutil
    import zipfile

    if int(importlib.metadata.version("setuptools").split(".")[0]) < 77:
        pytest.skip("the build backend needs setuptools>=77 (pyproject.toml), offline here")
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    src = tmp_path / "src"
    for name in tracked.stdout.decode().split("\0"):
        if name and (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    # The build backend pyproject.toml names, called as a frontend calls it (what `pip wheel
    # --no-build-isolation` ran, less pip's own start and its call for the metadata first:
    # 2.2 CPU-s against 3.8, the same files).
    r = subprocess.run(
        [sys.executable, "-c", _BUILD_WHEEL, str(tmp_path / "dist")],
        cwd=src,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("hlobundle-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    cases = ROOT / "hlobundle" / "conformance_cases"
    shipped = {p.relative_to(ROOT).as_posix() for p in cases.rglob("*") if p.is_file()}
    assert "hlobundle/conformance_cases/index.json" in names
    assert sorted(shipped - names) == []  # every file of every case folder
    assert not any(p.is_symlink() for p in cases.rglob("*"))  # a wheel would carry its target
    assert "hlobundle/_format/_schema.py" in names  # `hlobundle schema` generates it from code
    zipfile.ZipFile(wheel).extractall(tmp_path / "site")
    env = {**__import__("os").environ, "PYTHONPATH": str(tmp_path / "site")}
    r = subprocess.run(
        [sys.executable, "-c", _FROM_THE_WHEEL],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    where, *outcomes = json.loads(r.stdout.splitlines()[-1])
    assert where.startswith(str(tmp_path / "site")), where
    for command, code, out, err in outcomes:
        assert code == 0, (command, out[-2000:] + err[-2000:])
    assert json.loads(out)["$schema"].startswith("https://json-schema.org/")


_BUILD_WHEEL = """
import sys, tomllib
from importlib import import_module
backend = tomllib.load(open("pyproject.toml", "rb"))["build-system"]["build-backend"]
import_module(backend).build_wheel(sys.argv[1])
"""

# The wheel's `hlobundle` in one fresh interpreter (the process the checkout is not on the path
# of): where it was imported from, then each command's exit status and output, as JSON.
_FROM_THE_WHEEL = """
import contextlib, io, json
import hlobundle
from hlobundle._cli._main import main
outcomes = [hlobundle.__file__]
for command in (
    ["conformance", "-k", "valid_dtype_float32"],
    ["conformance", "-k", "invalid_json"],
    ["conformance", "-k", "invalid_symlink"],  # a link no wheel holds, made from case.json
    ["schema"],
):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(command)
    outcomes.append([command, code, out.getvalue(), err.getvalue()])
print(json.dumps(outcomes))
"""


def test_a_name_before_2_0_still_works_with_a_deprecation_warning():
    with pytest.warns(
        DeprecationWarning, match="hlobundle.pack_reactant is now hlobundle.from_reactant"
    ):
        assert hlobundle.pack_reactant is hlobundle.from_reactant


def _hidden_keywords(namespace: types.ModuleType | types.SimpleNamespace) -> list[str]:
    """Public functions, and public methods of public classes, that take `**kwargs`: options
    neither a user nor a type checker can see. (A bundle function's `__call__` takes the
    user's own keyword arguments; dunder methods are not looked at.)"""
    found = []
    for name in namespace.__all__:
        obj = getattr(namespace, name)
        members = [(name, obj)] if inspect.isfunction(obj) else []
        if inspect.isclass(obj):
            members = [
                (f"{name}.{m}", f)
                for m, f in vars(obj).items()
                if not m.startswith("_") and inspect.isfunction(f)
            ]
        for where, f in members:
            kinds = [p.kind for p in inspect.signature(f).parameters.values()]
            if inspect.Parameter.VAR_KEYWORD in kinds:
                found.append(where)
    return found


def test_no_public_function_hides_its_options_in_kwargs():
    assert _hidden_keywords(hlobundle) == []


def test_the_kwargs_guard_fails_on_a_function_and_a_method_with_kwargs():
    def pack_files(module, inputs, out, **options): ...

    class Bundle:
        def select(self, name, **options): ...

    fake = types.SimpleNamespace(
        __all__=["pack_files", "Bundle"], pack_files=pack_files, Bundle=Bundle
    )
    assert _hidden_keywords(fake) == ["pack_files", "Bundle.select"]


def test_pack_files_takes_packs_keywords_and_a_signing_key():
    def keywords(f):
        params = inspect.signature(f).parameters.values()
        return {p.name: p.default for p in params if p.kind is p.KEYWORD_ONLY}

    files = keywords(hlobundle.pack_files)
    assert files.pop("sign_key") is None
    assert files == keywords(hlobundle.pack)


def test_errors_is_the_public_namespace_of_every_error():
    classes = {hlobundle.errors.HloBundleError, *_error_classes()}
    assert set(hlobundle.errors.__all__) == {c.__name__ for c in classes} | {"HloBundleWarning"}
    for name in hlobundle.errors.__all__:  # tracebacks name the module users import from
        assert getattr(hlobundle.errors, name).__module__ == "hlobundle.errors", name
    top = {n for n in hlobundle.__all__ if n.endswith(("Error", "Warning"))}
    assert top == {
        "HloBundleError",
        "HloBundleWarning",
        "BundleError",
        "InputError",
        "ConfigError",
        "TransformError",
    }
    assert all(getattr(hlobundle, n) is getattr(hlobundle.errors, n) for n in top)


def test_an_error_name_no_longer_at_the_top_level_warns_and_says_when_it_goes():
    with pytest.warns(DeprecationWarning, match=r"hlobundle.errors.ModuleError; .*hlobundle 3\.0"):
        assert hlobundle.ModuleError is hlobundle.errors.ModuleError
    with pytest.raises(AttributeError):
        hlobundle.NoSuchError  # noqa: B018


def test_the_signature_error_alias_warns_with_its_removal_version():
    with pytest.warns(
        DeprecationWarning, match=r"MainSignatureError; the old name goes in hlobundle 3\.0"
    ):
        assert hlobundle.errors.SignatureError is hlobundle.errors.MainSignatureError
    with pytest.warns(DeprecationWarning, match=r"hlobundle.errors.MainSignatureError; .*3\.0"):
        assert hlobundle.SignatureError is hlobundle.errors.MainSignatureError


def test_trust_is_one_typed_setting_and_the_old_keyword_warns(tmp_path):
    bundle = hlobundle.load(small_bundle(tmp_path))
    assert hlobundle.Trust.EXECUTABLES | hlobundle.Trust.BATCHED != hlobundle.Trust.NOTHING
    with pytest.warns(DeprecationWarning, match=r"trust=hlobundle.Trust.EXECUTABLES\); .*3\.0"):
        bundle.function("xla", trust_executables=True)
    from hlobundle._read._trust import trust_from

    for given, want in ((True, hlobundle.Trust.EXECUTABLES), (False, hlobundle.Trust.NOTHING)):
        with pytest.warns(DeprecationWarning):  # the old keyword grants exactly what it said
            assert trust_from(hlobundle.Trust.NOTHING, given, "function") == want
    with pytest.raises(hlobundle.InputError, match="trust must be a hlobundle.Trust") as e:
        bundle.function("xla", trust=True)
    assert e.value.argument == "trust"


def test_public_signatures_name_only_public_types():
    """No private module's type (`_signature.SigningKey`, ...) in a public function's
    signature: each type it names is a builtin's, the standard library's or hlobundle's own."""
    standard = {
        "None",
        "Any",
        "Sequence",
        "Mapping",
        "Callable",
        "Path",
        "PathLike",
        "Literal",
        "ModuleType",
        "Iterable",
    }
    aliases = {"BackendName", "Layout", "Role", "Named"}  # Literal aliases, spelled out in docs
    public = [getattr(hlobundle, n) for n in hlobundle.__all__]
    functions = [f for f in public if inspect.isfunction(f)]
    methods = [
        m for n, m in vars(hlobundle.Bundle).items() if inspect.isfunction(m) and n[0] != "_"
    ]
    for fn in functions + methods:
        sig = inspect.signature(fn)
        hints = [str(p.annotation) for p in sig.parameters.values()] + [str(sig.return_annotation)]
        for hint in hints:
            assert not re.search(r"(^|[^\w.])_[a-z]\w*\.", hint), (fn.__qualname__, hint)
            for name in set(re.findall(r"\b([A-Z]\w+)\b", hint)) - standard - aliases:
                assert name in hlobundle.__all__, (fn.__qualname__, name)

"""The public surface, lazy imports, and generated files."""

from __future__ import annotations

import subprocess
import sys

from helpers import ROOT, small_bundle

import hlobundle
from hlobundle._schema import schema_text


def test_public_names_are_exactly_all():
    public = {n for n in dir(hlobundle) if not n.startswith("_")} | {"__version__"}
    assert public == set(hlobundle.__all__)


def test_schema_is_current():
    committed = (ROOT / "schemas" / "manifest.schema.json").read_text()
    assert committed == schema_text(), (
        "schema is stale: run `hlobundle schema -o schemas/manifest.schema.json`"
    )


def test_inspect_and_verify_do_not_import_jax(tmp_path):
    b = small_bundle(tmp_path)
    code = (
        "import sys, hlobundle; from hlobundle._cli import main; "
        f"main(['verify', {str(b)!r}]); main(['inspect', {str(b)!r}]); "
        "heavy = [m for m in ('jax', 'enzyme_ad') if m in sys.modules]; "
        "assert not heavy, heavy"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_dtype_table_in_spec_matches_code():
    from hlobundle._dtypes import TABLE

    spec = (ROOT / "SPEC.md").read_text()
    for row in TABLE:
        line = f"| `{row.name}` | `{row.mlir}` | `{row.safetensors}` |"
        assert line in spec, line


def test_error_codes_in_spec_match_code():
    import re

    source = "".join(p.read_text() for p in (ROOT / "hlobundle").glob("*.py"))
    codes = set(re.findall(r'code(?: = |=)"([A-Z_]+)"', source)) - {"ERROR"}
    spec = (ROOT / "SPEC.md").read_text()
    documented = set(re.findall(r"^\| `([A-Z_]+)` \|", spec, re.M))
    assert codes == documented

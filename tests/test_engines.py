"""An engine's adapter (`hlobundle.integrations`, docs/deploy.md) where its engine is not
installed: the import says which extra installs it, with both pip lines (README.md, "Extras"),
and the server command (`python -m hlobundle.integrations.mlserver`) says it and exits 1,
without a traceback. It was Python's `ModuleNotFoundError: No module named 'mlserver'`."""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys

import pytest
from helpers import ROOT

from hlobundle.errors import BackendUnavailableError

ENGINES = {"mlserver": "mlserver", "kserve": "kserve"}  # the adapter: the module it needs


def _missing(engine: str) -> None:
    if importlib.util.find_spec(ENGINES[engine]) is not None:
        pytest.skip(f"{ENGINES[engine]} is installed here")


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_importing_an_adapter_without_its_engine_names_the_extra(engine):
    _missing(engine)
    sys.modules.pop(f"hlobundle.integrations.{engine}", None)
    with pytest.raises(BackendUnavailableError, match=rf"the {engine} extra: pip install "):
        importlib.import_module(f"hlobundle.integrations.{engine}")


@pytest.mark.slow
@pytest.mark.subprocess
@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_an_adapter_s_command_without_its_engine_says_so_and_exits_1(engine, tmp_path):
    _missing(engine)
    r = subprocess.run(
        [sys.executable, "-m", f"hlobundle.integrations.{engine}", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr
    assert r.stderr.startswith(f"error [BACKEND_UNAVAILABLE] hlobundle.integrations.{engine}")
    assert f'pip install "hlobundle[{engine}]"' in r.stderr
    assert f'pip install ".[{engine}]"' in r.stderr


def test_a_ray_serve_application_without_ray_names_the_extra():
    """Ray's adapter imports ray only when asked for an application (BundlePredictor needs none)."""
    if importlib.util.find_spec("ray") is not None:
        pytest.skip("ray is installed here")
    from hlobundle.integrations.ray import serve_deployment

    with pytest.raises(BackendUnavailableError, match=r"needs ray, the ray extra: pip install "):
        serve_deployment(ROOT / "examples" / "lenet5.hlobundle")

"""An adapter whose engine is not installed: its import raises `BackendUnavailableError`,
naming the extra with both pip lines (README.md, "Extras"), as a command of hlobundle does;
its server command (`python -m hlobundle.integrations.mlserver`) prints that and exits 1."""

from __future__ import annotations

import sys
from typing import NoReturn

from .._extras import pip_line
from .._format._errors import BackendUnavailableError


def missing(extra: str, module_name: str, error: ImportError) -> NoReturn:
    """Raise (or, run as `__main__`, print and exit 1) that `hlobundle.integrations.EXTRA`
    needs its engine, which `error` did not find."""
    e = BackendUnavailableError(
        f"hlobundle.integrations.{extra} needs {error.name or extra}, the {extra} extra: "
        f"{pip_line(extra)}, in an environment of its own (docs/deploy.md)"
    )
    if module_name == "__main__":
        print(f"error [{e.code}] {e.message}", file=sys.stderr)
        raise SystemExit(1)
    raise e from None

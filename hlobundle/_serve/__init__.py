"""Serving bundles over the Open Inference Protocol (KServe v2 REST): `hlobundle serve`.
The floor above the runner and remote loading (`_remote`), below the CLI; it needs the `serve`
extra, whose check is here, where importing it imports none of the extra's modules (`_server`
imports the app, whose protocol imports orjson)."""

from __future__ import annotations

import importlib

from .._extras import pip_line
from .._format._errors import BackendUnavailableError

# What the serve extra installs and we import.
EXTRA = ("starlette", "uvicorn", "prometheus_client", "orjson")


def require_extra() -> None:
    """Refuse, with the pip line, where the serve extra is not installed: its modules are
    imported only when the server is built, after the bundles were compiled."""
    for name in EXTRA:
        try:
            importlib.import_module(name)
        except ImportError as e:
            raise BackendUnavailableError(
                f"serve needs the serve extra: {pip_line('serve')} ({e})"
            ) from None


def require_grpc() -> None:
    """Refuse `--grpc-port`, with the pip line, where grpcio and protobuf are not installed."""
    for name in ("grpc", "google.protobuf"):
        try:
            importlib.import_module(name)
        except ImportError as e:
            raise BackendUnavailableError(
                f"serve --grpc-port needs grpcio, the grpc extra: {pip_line('serve,grpc')} ({e})"
            ) from None

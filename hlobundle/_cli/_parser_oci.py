"""The options of the commands that move bundles through OCI registries: push and pull
(docs/distribution.md)."""

from __future__ import annotations

import argparse
from typing import Any

from . import _oci, _values

REF = "oci://HOST[:PORT]/REPO[:TAG|@sha256:DIGEST]"


def add_push(sub: Any) -> None:
    p = sub.add_parser("push", help="push a bundle to an OCI registry (a ModelPack artifact)")
    p.add_argument("bundle")
    p.add_argument("ref", metavar="REF", help=REF)
    _add_connection(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=_oci.push)


def add_pull(sub: Any) -> None:
    p = sub.add_parser("pull", help="pull a bundle from an OCI registry, every byte checked")
    p.add_argument("ref", metavar="REF", help=REF)
    p.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="DIR",
        help="the bundle directory to write (nothing appears there until all is checked)",
    )
    p.add_argument("--force", action="store_true", help="replace DIR if it is a bundle")
    trust = p.add_mutually_exclusive_group()
    trust.add_argument(
        "--public-key",
        metavar="PUB.pem",
        help="require a signature referrer by this key, checked before DIR is written",
    )
    trust.add_argument(
        "--certificate-chain",
        nargs="+",
        metavar="CERT.pem",
        help="require a signature referrer by a certificate this chain trusts",
    )
    _add_connection(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=_oci.pull)


def _add_connection(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--insecure",
        action="store_true",
        help="plain HTTP, no TLS (loopback registries always may)",
    )
    p.add_argument(
        "--timeout",
        type=_values.positive_seconds,
        default=30.0,
        metavar="S",
        help="seconds to wait for a connection and between reads (default 30)",
    )

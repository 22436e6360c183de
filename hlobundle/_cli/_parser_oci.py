"""The options of the commands that move bundles: push and pull through OCI registries, and
the store of what remote loads fetched (docs/distribution.md)."""

from __future__ import annotations

import argparse
from typing import Any

from . import _oci, _values
from ._common import Handler

REF = "oci://HOST[:PORT]/REPO[:TAG|@sha256:DIGEST]"


def add_push(sub: Any) -> None:
    p = sub.add_parser("push", help="push a bundle to an OCI registry (a ModelPack artifact)")
    p.add_argument("bundle")
    p.add_argument("ref", metavar="REF", help=REF)
    p.add_argument(
        "--image",
        action="store_true",
        help="push an OCI image holding the bundle under /models (for KServe's oci+native:// "
        "and modelcars, docs/deploy.md) instead of the ModelPack artifact",
    )
    _add_connection(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=Handler(_oci, "push"))


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
    p.set_defaults(handler=Handler(_oci, "pull"))


def add_cache(sub: Any) -> None:
    p = sub.add_parser(
        "cache",
        help="show or bound what hlobundle keeps in its cache directory: the store of what remote loads fetched, compiled programs, verdicts",
    )
    what = p.add_subparsers(dest="action", required=True, metavar="{ls,prune}")
    ls = what.add_parser("ls", help="what the store and each cache hold, and where")
    ls.add_argument("--json", action="store_true", help="print one JSON object")
    ls.set_defaults(handler=Handler(_oci, "cache_ls"))
    prune = what.add_parser(
        "prune",
        help="remove what was used longest ago until the store and the caches hold at most SIZE",
    )
    prune.add_argument(
        "--max-size",
        type=_values.size_or_zero,
        default=0,
        metavar="SIZE",
        help="what the store and the caches may keep together, e.g. 10G (default 0: everything is removed)",
    )
    prune.add_argument("--json", action="store_true", help="print one JSON object")
    prune.set_defaults(handler=Handler(_oci, "cache_prune"))


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

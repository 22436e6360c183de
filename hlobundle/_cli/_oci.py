"""`hlobundle push`, `hlobundle pull` and `hlobundle cache` (docs/distribution.md)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from ._common import EXIT_OK, output_path, trust_options

if TYPE_CHECKING:
    from .._read._store import Usage


def push(args: argparse.Namespace) -> int:
    from .._oci._push import push as push_bundle

    done = push_bundle(
        args.bundle, args.ref, image=args.image, insecure=args.insecure, timeout=args.timeout
    )
    if args.json:
        print(
            json.dumps(
                {
                    "ok": True,
                    "ref": done.ref,
                    "tag": done.tag,
                    "digest": done.digest,
                    "signature": done.signature,
                    "image": args.image,
                }
            )
        )
        return EXIT_OK
    what = "the image " if args.image else ""
    print(f"pushed {args.bundle} as {what}{done.ref}" + (f" (tag {done.tag})" if done.tag else ""))
    if done.signature:
        print(f"signature: referrer {done.signature}")
    print(f"digest: {done.digest}")
    return EXIT_OK


def pull(args: argparse.Namespace) -> int:
    from .._oci._pull import pull as pull_bundle

    out = output_path("-o", args.output)
    done = pull_bundle(
        args.ref,
        out,
        force=args.force,
        insecure=args.insecure,
        timeout=args.timeout,
        **trust_options(args),
    )
    if args.json:
        print(
            json.dumps(
                {
                    "ok": True,
                    "path": str(done.path),
                    "ref": done.ref,
                    "digest": done.digest,
                    "signer": done.signer,
                    "reused": done.reused,
                }
            )
        )
        return EXIT_OK
    signed = f", signed by {done.signer}" if done.signer else ""
    reused = f"; {done.reused} bytes of it from the store" if done.reused else ""
    print(f"pulled {done.ref} into {done.path} (every file's sha256 checked{signed}{reused})")
    print(f"digest: {done.digest}")
    return EXIT_OK


def cache_ls(args: argparse.Namespace) -> int:
    from .._read import _store
    from .._read._cache import cache_root

    return _show_usage(args, _store.usage(), cache_root())


def cache_prune(args: argparse.Namespace) -> int:
    from .._read import _store
    from .._read._cache import cache_root

    return _show_usage(args, _store.prune(args.max_size), cache_root())


def _show_usage(args: argparse.Namespace, usage: Usage, root: Path) -> int:
    from .._terminal._display import human_bytes, shown

    if args.json:
        print(json.dumps({"ok": True, "path": str(root), **vars(usage)}))
        return EXIT_OK
    print(f"store: {shown(str(root))}")
    print(f"  remote bundles: {usage.views} ({human_bytes(usage.view_bytes)})")
    print(f"  records of where fetched files and chunks lie: {usage.located}")
    print("caches:")
    for name, held in usage.caches.items():
        print(f"  {name}/: {held['entries']} entries ({human_bytes(held['bytes'])})")
    return EXIT_OK

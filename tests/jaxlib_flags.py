"""Which XLA flags a jaxlib knows, without importing it (XLA ends the process on an unknown
flag): conftest.py sets the suite's compile options with it, and tests/cross_jaxlib_child.py
keeps those of them that another interpreter's jaxlib knows."""

from __future__ import annotations

import mmap
from importlib.util import find_spec
from pathlib import Path


def knows(flag: str) -> bool:
    """Whether this interpreter's jaxlib's XLA has `flag`: its name is a C string of its own in
    one of jaxlib's shared libraries, where the flags are defined. The name alone is not
    enough: jaxlib 0.12 keeps a removed flag's name in its options' protobuf descriptor,
    among the reserved names, with no NUL around it."""
    spec = find_spec("jaxlib")
    if spec is None or spec.origin is None:
        return False
    for library in sorted(Path(spec.origin).parent.glob("*.so"), key=lambda p: -p.stat().st_size):
        with open(library, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            if m.find(b"\0" + flag.encode() + b"\0") >= 0:
                return True
    return False


def known(flags: str) -> str:
    """Those of `flags` (`--name=value ...`, as in XLA_FLAGS) that this jaxlib knows."""
    return " ".join(f for f in flags.split() if knows(f.lstrip("-").partition("=")[0]))

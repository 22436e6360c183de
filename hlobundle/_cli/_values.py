"""The forms of option values: argparse `type=` functions. A value of the wrong form is a usage
error, which argparse reports naming the option (`argument --port: ...`) with exit status 2,
before any file is read."""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from typing import Any

# The manifest's own patterns (_format/_manifest.py: PortableArtifact.target_version and
# Executable.cpu; tests/test_cli_usage.py checks that they agree): a value the manifest would
# refuse is refused here, as a usage error, rather than by a validator deep inside a command.
TARGET_VERSION = re.compile(r"\d+\.\d+\.\d+")
CPU = re.compile(r"[A-Za-z0-9_.+-]{1,64}")


def _refuse(expected: str, text: str) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")


def tolerance(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also refuses nan
        raise _refuse("a number >= 0", text) from None
    return value


def _number(kind: Callable[[str], float], expected: str, fits: Callable[[float], bool]) -> Any:
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise _refuse(expected, text) from None
        if not (math.isfinite(value) and fits(value)):
            raise _refuse(expected, text)
        return value

    return parse


positive_int = _number(int, "a whole number >= 1", lambda v: v >= 1)
port = _number(int, "a port number from 0 to 65535 (0: any free one)", lambda v: 0 <= v <= 65535)
positive_seconds = _number(float, "a number of seconds > 0", lambda v: v > 0)
milliseconds = _number(float, "a number of milliseconds >= 0", lambda v: v >= 0)


def size(text: str, *, zero: bool = False) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    scale = units.get(text[-1:].upper(), 1)
    digits = text[:-1] if text[-1:].upper() in units else text
    if not digits.isdigit() or (int(digits) == 0 and not zero):
        raise _refuse("a size in bytes such as 8G", text)
    return int(digits) * scale


def size_or_zero(text: str) -> int:
    return size(text, zero=True)


def target_version(text: str) -> str:
    if not TARGET_VERSION.fullmatch(text):
        raise _refuse("a StableHLO version X.Y.Z such as 1.0.0", text)
    return text


def cpu(text: str) -> str:
    if not CPU.fullmatch(text):
        raise _refuse("generic, host or a CPU name such as znver3 (letters, digits, _.+-)", text)
    return text


def file_of(*suffixes: str) -> Callable[[str], str]:
    """A path whose suffix says one of the formats a command writes."""

    def parse(text: str) -> str:
        if not text.lower().endswith(suffixes):
            raise _refuse(f"a {' or '.join(suffixes)} file", text)
        return text

    return parse


def csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",")]


def role(item: str) -> tuple[str, str]:
    name, sep, role = item.partition("=")
    if not sep or role not in ("input", "parameter", "state"):
        raise _refuse("NAME=input|parameter|state", item)
    return name, role


_SYMBOL = re.compile(r"[a-z_][a-z0-9_]{0,63}")  # SPEC.md 2.8's symbol names
MAX_PINNED = 64  # sizes one --sizes option may list


def sizes(item: str) -> tuple[str, list[int]]:
    """`SYMBOL=N[,N...]`: the values a symbolic dimension may take (`serve --sizes b=1,8,32`)."""
    symbol, sep, values = item.partition("=")
    parts = values.split(",") if sep else []
    if (
        not _SYMBOL.fullmatch(symbol)
        or not 1 <= len(parts) <= MAX_PINNED
        or not all(p.isascii() and p.isdigit() and len(p) <= 9 and int(p) >= 1 for p in parts)
    ):
        raise _refuse(f"SYMBOL=N[,N...] with 1 to {MAX_PINNED} whole numbers >= 1", item[:80])
    return symbol, sorted({int(p) for p in parts})

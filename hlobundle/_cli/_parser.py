"""The `hlobundle` argument parser: its commands, in the order `hlobundle --help` lists them,
each with its handler (`_commands`, `_pack`) and its own parser (`usage()` reports through it).

`parser()` is the process's one parser, built at its first use (a build adds some 200 options,
7 ms: a process that calls `main` many times, the test suite's 800 in-process commands, built it
each time). A parse changes nothing in it, and hands out no list the next parse gets too; each
command's handler is held by module and name (`_common.Handler`) and looked up when it runs, so
that a name rebound after the build (a test's monkeypatch) is what runs, as with a parser built
per call."""

from __future__ import annotations

import argparse
import difflib
import functools
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from . import _commands, _parser_oci, _parser_read, _parser_write
from ._common import Handler

EXIT_STATUSES = """\
exit status:
  0    done (run: every result agrees with its expected output; diff: the same fingerprint)
  1    an error, printed as `error [CODE] message`: found in a bundle, a file or while running
       (a --function the bundle lacks, a missing file, an unverified signature), or a result
       that differs from its expected output, or bundles that differ (diff); `error [OS_ERROR]` when the machine refuses (a
       full disk, an output directory that cannot be written)
  2    a usage error, printed with the command's usage: what the command line alone shows
       wrong (an unknown or missing option, options that conflict, a value of the wrong form,
       an option that does not apply to the --backend chosen), before any file is read
  130  interrupted (Ctrl-C)"""


class Parser(argparse.ArgumentParser):
    """A parser that takes no abbreviations, and reports an unknown option with its command's
    usage and the closest option that command has.

    An abbreviation (`--input` for `--inputs`) would change meaning when a later release adds
    an option that shares the prefix. argparse hands a subcommand's unknown options up to the
    top parser, whose usage says nothing of the command's options: here the command reports
    them. The commands' parsers are of this class too (`add_subparsers` makes its own kind).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **{"allow_abbrev": False, **kwargs})

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:
        self._check_command(sys.argv[1:] if args is None else list(args))
        parsed, unknown = self.parse_known_args(args, namespace)
        if unknown:
            command = getattr(parsed, "parser", self)  # set_defaults(parser=...) in build()
            given = " ".join(unknown)
            command.error(f"unrecognized arguments: {given}{command.closest(unknown)}")
        for name, value in vars(parsed).items():  # a default list is the parser's: a copy
            if isinstance(value, list):
                setattr(parsed, name, list(value))
        return parsed

    def _check_command(self, args: list[str]) -> None:
        """A command no command is named gets the closest one (argparse lists them all).
        The top parser's own options take no value: the first word is the command."""
        commands = next(
            (a.choices for a in self._actions if isinstance(a, argparse._SubParsersAction)), None
        )
        word = next((a for a in args if not a.startswith("-")), None)
        if commands is None or word is None or word in commands:
            return
        close = difflib.get_close_matches(word, list(commands), 1)
        self.error(
            f"no command {word!r}{f'; did you mean {close[0]}?' if close else ''} "
            f"(the commands are {', '.join(commands)})"
        )

    def error(self, message: str) -> NoReturn:
        """What is wrong first, where a reader starts, then one line of usage: argparse
        printed the whole usage (ten lines for run) before the message."""
        self.exit(2, f"{self.prog}: error: {message}\n{self.short_usage()}\n")

    def short_usage(self) -> str:
        """`usage: hlobundle run [OPTIONS] bundle`: the required options and the positional
        arguments, and where the others are listed."""
        formatter = self._get_formatter()
        required = [a for a in self._actions if a.option_strings and a.required]
        positional = [a for a in self._actions if not a.option_strings]
        shown = [
            *(
                f"{a.option_strings[0]} {formatter._format_args(a, a.dest.upper())}"
                for a in required
            ),
            *(formatter._format_args(a, a.dest) for a in positional),
        ]
        return (
            f"usage: {self.prog} [OPTIONS] {' '.join(shown)}  "
            f"({self.prog} --help lists the options)"
        )

    def closest(self, unknown: Sequence[str]) -> str:
        """`; did you mean --inputs?` for the first unknown option close to one of ours."""
        options = [s for action in self._actions for s in action.option_strings]
        for arg in unknown:
            close = arg.startswith("-") and difflib.get_close_matches(arg.split("=")[0], options, 1)
            if close:
                return f"; did you mean {close[0]}?"
        return ""


# The commands that load `oci://` and `https://` references or talk to a registry.
NETWORK_COMMANDS = (
    "run", "emit", "inspect", "verify", "fingerprint", "diff", "serve", "push", "pull", "sign",
)  # fmt: skip


def _add_network_options(command: argparse.ArgumentParser) -> None:
    group = command.add_argument_group("network (docs/distribution.md, 'A registry of your own')")
    group.add_argument(
        "--ca-file",
        metavar="PEM",
        help="verify TLS answers against this certificate authority (a file or directory), or "
        "'system' (OpenSSL's store); default: $HLOBUNDLE_CA_FILE, $REQUESTS_CA_BUNDLE, "
        "$SSL_CERT_FILE, else certifi's",
    )
    group.add_argument(
        "--proxy",
        metavar="URL",
        help="send every request through this proxy ($HLOBUNDLE_PROXY), but one to a loopback "
        "host, which goes directly",
    )


@functools.cache
def parser() -> argparse.ArgumentParser:
    """The process's one parser (the module's docstring), built at the first call."""
    return build()


def build() -> argparse.ArgumentParser:
    """A new parser of every command (`parser()` is the one `main` parses with)."""
    from .._version import __version__

    parser = Parser(
        prog="hlobundle",
        description="Pack, run, emit, inspect, verify, fingerprint, diff, sign, reshard, compile, serve, push, pull and cache StableHLO bundles.",
        epilog=EXIT_STATUSES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"hlobundle {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _parser_write.add_pack(sub)
    _parser_read.add_run(sub)
    _parser_read.add_emit(sub)
    _parser_read.add_inspect(sub)
    _parser_read.add_verify(sub)
    _parser_read.add_fingerprint(sub)
    _parser_read.add_diff(sub)
    _parser_read.add_serve(sub)
    _parser_write.add_refresh(sub)
    _parser_write.add_reshard(sub)
    _parser_write.add_compile(sub)
    _parser_write.add_sign(sub)
    _parser_oci.add_push(sub)
    _parser_oci.add_pull(sub)
    _parser_oci.add_cache(sub)
    _parser_read.add_conformance(sub)
    _add_schema(sub)
    for name in NETWORK_COMMANDS:  # each command that may talk to a registry or a server
        _add_network_options(sub.choices[name])
    for command in sub.choices.values():  # a handler's usage errors name its command
        command.set_defaults(parser=command)
    return parser


def _add_schema(sub: Any) -> None:
    p = sub.add_parser("schema", help="print the manifest's JSON schema")
    p.add_argument("-o", "--output", help="write it to this file instead")
    p.set_defaults(handler=Handler(_commands, "schema"))

"""What the command modules of ``syncd`` share: their parser class and how one is added.

Every command is one module in this package with a ``register(commands)``
that adds its subparser (arguments, ``--help`` text) through
:func:`add_command`, naming the function that runs it. :func:`syncd.cli.main`
parses once and calls that function with the parsed arguments and the
environment, so each command reads its settings from the mapping it is given
(tests pass their own) rather than from ``os.environ``.

Two styles of usage error are kept from the time each command had a parser
of its own: ``syncd token`` and ``syncd mcp`` answer a bad invocation with
one line (``syncd token: <problem>``) and exit 2, so that whatever started
them (a script, an MCP host) can show it as is; the others print argparse's
usage and ``error:`` line (exit 2 as well).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from typing import Any, Final, NoReturn, Protocol, TypeAlias

from syncd.journal import refuse

Run = Callable[[argparse.Namespace, Mapping[str, str]], int]
"""Runs a parsed command with the environment; returns the exit status."""

INTERRUPTED: Final = 130
"""The exit status after Ctrl-C: 128 + SIGINT, what a shell reports for it."""

BROKEN_PIPE: Final = 141
"""The exit status when stdout's reader has gone: 128 + SIGPIPE, what a shell
reports for a command that a closed pipe ended (``yes | head -1``'s yes)."""

RUN = "command_run"
PARSER = "command_parser"
"""Namespace attributes :func:`add_command` sets: the function and the parser of
the chosen command (``main`` reports leftover arguments with that parser)."""


class UsageError(Exception):
    """A bad invocation of a one-line command; ``str()`` is the line to print."""


class CommandParser(argparse.ArgumentParser):
    """argparse's parser, with one-line usage errors when ``terse_errors`` is set."""

    def __init__(self, *args: Any, terse_errors: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.terse_errors = terse_errors

    def error(self, message: str) -> NoReturn:
        if self.terse_errors:
            raise UsageError(f"{self.prog}: {message}")
        super().error(message)


Commands: TypeAlias = "argparse._SubParsersAction[CommandParser]"  # what add_subparsers() returns
"""Where a command module adds its subparser."""


class Command(Protocol):
    """A command module."""

    def register(self, commands: Commands) -> None:
        """Add the command's subparser to ``commands`` with :func:`add_command`."""
        ...


def add_command(
    commands: Commands,
    name: str,
    run: Run,
    *,
    help: str,
    description: str,
    epilog: str | None = None,
    terse_errors: bool = False,
    formatter_class: type[argparse.HelpFormatter] = argparse.HelpFormatter,
) -> CommandParser:
    """Add the subparser of command ``name``, which ``run`` carries out."""
    parser: CommandParser = commands.add_parser(
        name,
        help=help,
        description=description,
        epilog=epilog,
        terse_errors=terse_errors,
        formatter_class=formatter_class,
    )
    parser.set_defaults(**{RUN: run, PARSER: parser})
    return parser


def fail(prog: str, message: str) -> int:
    """Print ``prog: message`` as one line on stderr (an error to the journal,
    under systemd); the exit status of a refusal (2)."""
    return refuse(prog, message)


def missing_extra(what: str, extra: str, exc: ImportError) -> int:
    """One line naming the extra to install (``what`` needs it), and exit status 2."""
    missing = exc.name or "a module"
    return fail(
        "syncd",
        f"{what} needs {missing}, which is not installed;"
        f" install it with: pip install 'syncd[{extra}]'",
    )

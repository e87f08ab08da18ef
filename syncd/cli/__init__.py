"""The ``syncd`` command: one argparse parser, one module per subcommand.

    syncd [serve]     run the service (the default)       syncd.cli.serve
    syncd keygen      print a new signing key              syncd.cli.keygen
    syncd token       issue a token offline                syncd.cli.token
    syncd backup      online backup of a running server    syncd.cli.backup
    syncd verify      check a data directory or backup     syncd.cli.verify
    syncd mcp         CRDTs as MCP tools over stdio        syncd.cli.mcp
    syncd health      is the local server ready? (exit 0/1) syncd.cli.health
    syncd --version   the version and HTTP parser          syncd.cli.version

Each module's ``register`` adds its subparser (so ``syncd <command> --help``
describes it) and names the function that runs it; :func:`main` parses once
and calls that function. Command modules import what only they need when they
run, so that, say, ``syncd token`` works on an install without the extras
``syncd mcp`` or PostgreSQL need.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

from syncd.cli import backup, health, keygen, mcp, serve, token, verify
from syncd.cli.command import (
    BROKEN_PIPE,
    INTERRUPTED,
    PARSER,
    RUN,
    Command,
    CommandParser,
    UsageError,
)
from syncd.cli.version import VersionAction

COMMANDS: tuple[Command, ...] = (serve, keygen, token, backup, verify, mcp, health)
"""In the order ``syncd --help`` lists them."""


def build_parser(env: Mapping[str, str]) -> CommandParser:
    """The whole command line; ``env`` is what ``--version`` reports on."""
    parser = CommandParser(prog="syncd", description="A self-hosted CRDT sync service.")
    parser.add_argument("--version", action=VersionAction, env=env)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in COMMANDS:
        module.register(commands)
    return parser


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """Run ``syncd`` with ``argv`` (default: the process's) and ``env`` (default:
    ``os.environ``); the exit status. No command means ``serve``."""
    args = list(sys.argv[1:] if argv is None else argv)
    environ = os.environ if env is None else env
    try:
        code = _main(args, environ)
        # Flushed here, not at exit, where a reader gone is a message of the
        # interpreter's ("Exception ignored ...") and exit status 120.
        if sys.stdout is not None:
            sys.stdout.flush()
    except BrokenPipeError:
        # Whoever read stdout has gone (`syncd verify DIR | head -1`): what it
        # did not read it did not want. No traceback; stdout goes nowhere from
        # now on, so the interpreter's own flush at exit finds nothing to say.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return BROKEN_PIPE
    return code


def _main(args: list[str], environ: Mapping[str, str]) -> int:
    parser = build_parser(environ)
    try:
        ns, extra = parser.parse_known_args(args)
        chosen: CommandParser = getattr(ns, PARSER, parser)
        if extra:
            chosen.error(f"unrecognized arguments: {' '.join(extra)}")
    except UsageError as exc:
        print(exc, file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help, --version, or argparse's own usage error
        return exc.code if isinstance(exc.code, int) else 0
    run = getattr(ns, RUN, serve.run)
    try:
        code: int = run(ns, environ)
    except KeyboardInterrupt:
        # Ctrl-C during a command (a long syncd verify, a server's start
        # before it handles signals itself): one line, not a traceback, and
        # the shell's status for SIGINT.
        print(f"{chosen.prog}: interrupted", file=sys.stderr)
        return INTERRUPTED
    return code


__all__ = ["build_parser", "main"]

"""``syncd mcp``: serve CRDTs as tools to an MCP client over stdio.

    syncd mcp --base-url URL --token TOKEN --namespace NS --crdt ID[:TYPE] [--crdt ...]
              [--origin ORIGIN] [--max-result-chars N] [--call-timeout-s SECONDS]

``--base-url``, ``--token`` and ``--namespace`` default to ``SYNCD_BASE_URL``,
``SYNCD_TOKEN`` and ``SYNCD_NAMESPACE``; ``--token-file PATH`` reads the token
from a file (a token on the command line is visible to every user in ``ps``). The server itself is
:mod:`syncd.client.mcp_server`; this module turns the command line into its
arguments. It imports the client only when the command runs, since the
client needs the ``mcp`` extra and every other command must work without
it, and it refuses everything it can (missing settings, bad or clashing
ids, a bad or expired token) with one line and exit 2 before any I/O, so
that an MCP host shows the reason instead of a server that dies on start.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import Mapping

from syncd.cli.command import Commands, UsageError, add_command, fail, missing_extra

PROG = "syncd mcp"

ENV_NAMES = ("SYNCD_BASE_URL", "SYNCD_TOKEN", "SYNCD_NAMESPACE")
"""The client's variables (:mod:`syncd.client.config`), named here for the help
text: importing the client to read them would need the extra."""


def register(commands: Commands) -> None:
    parser = add_command(
        commands,
        "mcp",
        run,
        help="serve CRDTs as tools to an MCP client over stdio (the [mcp] extra; see syncd mcp --help)",
        description="Serve syncd CRDTs as MCP tools over stdio (one namespace, one token).",
        terse_errors=True,
    )
    base_url, token, namespace = ENV_NAMES
    parser.add_argument("--base-url", help=f"service URL (default ${base_url})")
    parser.add_argument(
        "--token",
        help=f"bearer token (default ${token}); other users of the machine see it in ps:"
        f" prefer ${token} or --token-file",
    )
    parser.add_argument(
        "--token-file", metavar="PATH", help="read the bearer token from this file (one line)"
    )
    parser.add_argument("--namespace", help=f"namespace (default ${namespace})")
    parser.add_argument(
        "--crdt",
        action="append",
        default=[],
        metavar="ID[:TYPE]",
        help="a CRDT to expose (repeatable): a prefixed id (gc:visits) or ID:TYPE (visits:gcounter)",
    )
    parser.add_argument(
        "--origin",
        help="the origin every op of the tools carries (agent:task-1): what /history?origin= "
        "lists and a revert takes back (1-128 characters)",
    )
    parser.add_argument(
        "--max-result-chars",
        type=int,
        metavar="N",
        help="the longest tool result, in characters of JSON; a larger value comes back in "
        "pages the model reads on with offset (default 16000, at least 1000)",
    )
    parser.add_argument(
        "--call-timeout-s",
        type=float,
        metavar="SECONDS",
        help="the longest a tool call may take, retries and Retry-After waits included; past "
        "it the call is answered with the tool error timeout (default 30)",
    )


def parse_crdt(text: str) -> tuple[str, str]:
    """``ID`` (a prefixed id: ``gc:visits``) or ``ID:TYPE`` (``visits:gcounter``,
    ``gc:visits:gcounter``) -> ``(id, type)``: the part after the last colon is
    the type when it names one."""
    from syncd.crdt.types import TYPES, type_for_id

    crdt_id, sep, crdt_type = text.rpartition(":")
    if sep and crdt_id and crdt_type in TYPES:
        return crdt_id, crdt_type
    fixed = type_for_id(text)
    if fixed is not None:
        return text, fixed
    raise ValueError(
        f"--crdt {text!r}: expected a prefixed id (gc:visits) or ID:TYPE (visits:gcounter)"
    )


def settings(
    args: argparse.Namespace, env: Mapping[str, str]
) -> tuple[str, str, str, list[tuple[str, str]]]:
    """``(base_url, token, namespace, crdts)``, flags before the environment;
    UsageError or ValueError when incomplete."""
    base_url_env, token_env, namespace_env = ENV_NAMES
    base_url = args.base_url or env.get(base_url_env)
    token_file = args.token_file
    if args.token and token_file:
        raise UsageError("give --token or --token-file, not both")
    if token_file:
        from syncd.cli.backup import read_token_file

        try:
            token: str | None = read_token_file(token_file)
        except OSError as exc:
            raise UsageError(f"--token-file {token_file}: {exc.strerror or exc}") from None
    else:
        token = args.token or env.get(token_env)
    namespace = args.namespace or env.get(namespace_env)
    missing = [
        flag
        for flag, value in (
            ("--base-url", base_url),
            ("--token", token),
            ("--namespace", namespace),
        )
        if not value
    ]
    if missing:
        raise UsageError(f"missing {', '.join(missing)} (or the SYNCD_* variables)")
    if not args.crdt:
        raise UsageError("give at least one --crdt ID[:TYPE]")
    assert base_url is not None and token is not None and namespace is not None
    return base_url, token, namespace, [parse_crdt(item) for item in args.crdt]


def run(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    """0 when the MCP client hangs up, 2 on a usage, token or tool error."""
    try:
        from syncd.client.aio import AsyncClient
        from syncd.client.bounded import DEFAULT_MAX_RESULT_CHARS
        from syncd.client.errors import TokenError
        from syncd.client.mcp_server import serve
        from syncd.client.tools import DEFAULT_CALL_TIMEOUT_S, AgentTools, build_tools
    except ImportError as exc:
        return missing_extra(PROG, "mcp", exc)
    try:
        base_url, token, namespace, crdts = settings(args, env)
        build_tools(crdts)  # refuse bad ids before the token check and any I/O
        client = AsyncClient(base_url, token, namespace)
        tools = AgentTools(
            client,
            crdts,
            origin=args.origin,
            max_result_chars=(
                DEFAULT_MAX_RESULT_CHARS if args.max_result_chars is None else args.max_result_chars
            ),
            call_timeout_s=(
                DEFAULT_CALL_TIMEOUT_S if args.call_timeout_s is None else args.call_timeout_s
            ),
        )
    except (UsageError, ValueError, TokenError) as exc:
        return fail(PROG, str(exc))
    try:
        import anyio
        import mcp  # noqa: F401
    except ImportError:
        return fail(PROG, "the mcp package is missing (pip install 'syncd[mcp]')")
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    # Ctrl-C ends the process at once, as SIGTERM does. Left to the event loop,
    # SIGINT only cancels the server, which then waits on its stdin reader
    # (a thread blocked in read): syncd mcp run in a terminal ignored Ctrl-C
    # until Enter or Ctrl-D. Nothing is lost: the tools keep no state of their own.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    anyio.run(serve, client, tools)
    return 0

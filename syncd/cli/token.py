"""``syncd token``: issue a token offline, signed with ``SERVICE_SIGNING_KEY``.

The flags build the same body ``POST /v1/namespaces/:ns/tokens`` takes and go
through the same checks (:func:`syncd.auth.issue.parse_issue_body`), so a token
made here is one the server could have issued, with the same lifetime cap
(``SERVICE_MAX_TOKEN_TTL_MS``). Every refusal is one line on stderr and exit
2, and the signing key never appears in it.

The token carries ``issued_at`` (now), as the server's do, so revocations
apply to it alike: once an admin revokes the client
(``POST /v1/namespaces/:ns/revocations``), the tokens issued to it before are
refused with 401 ``token_revoked`` and a token made here afterwards works
(docs/permissions.md#revoking-tokens). It is signed with
``SERVICE_SIGNING_KEY`` only: ``SERVICE_PREVIOUS_SIGNING_KEYS`` is for
verifying, on the server.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Mapping
from typing import Any

from syncd.cli.command import Commands, add_command, fail

PROG = "syncd token"

TTL_HELP = "lifetime, default 3600000"
"""``--ttl-ms``'s help, written out: the default is ``syncd.auth.issue``'s
``DEFAULT_TTL_MS`` (tests/cli/test_token.py holds them equal), and importing
that module at every command's start would cost each ``syncd health`` the
engine and the Yjs library it reaches."""

EPILOG = (
    "The token carries issued_at (now). A revocation of the client (POST "
    "/v1/namespaces/NS/revocations) refuses the tokens issued to it before, with 401 "
    "token_revoked; one made after it works. Tokens are signed with SERVICE_SIGNING_KEY "
    "(the id of its key is tokens/me's key_id)."
)


def register(commands: Commands) -> None:
    p = add_command(
        commands,
        "token",
        run,
        help="issue a token offline with SERVICE_SIGNING_KEY (see syncd token --help)",
        description="Issue a token offline, signed with SERVICE_SIGNING_KEY.",
        epilog=EPILOG,
        terse_errors=True,
    )
    p.add_argument("--namespace", required=True)
    p.add_argument("--client-id", required=True, type=int)
    p.add_argument("--ttl-ms", type=int, default=None, help=TTL_HELP)
    p.add_argument(
        "--read", action="append", default=[], metavar="GLOB", help="V1 read glob (repeatable)"
    )
    p.add_argument(
        "--write", action="append", default=[], metavar="GLOB", help="V1 write glob (repeatable)"
    )
    p.add_argument("--admin", action="store_true", help="V1 namespace admin")
    p.add_argument("--rules", metavar="JSON", help='V2 rules, e.g. \'{"r":[{"p":"*"}],"w":[]}\'')


def run(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    """Print a token; exit 2 with one line on stderr on error."""
    from syncd.auth.issue import issue, parse_issue_body
    from syncd.auth.tokens import SigningKey
    from syncd.config import ConfigError, max_token_ttl_ms
    from syncd.errors import ApiError

    raw_key = env.get("SERVICE_SIGNING_KEY")
    if not raw_key:
        return fail(PROG, "SERVICE_SIGNING_KEY is not set")
    try:
        key = SigningKey.from_hex(raw_key)
    except ValueError:
        return fail(PROG, "SERVICE_SIGNING_KEY must be 64 hexadecimal characters")
    try:
        max_ttl = max_token_ttl_ms(env)
    except ConfigError as exc:
        return fail(PROG, str(exc))
    for flag, values in (
        ("--namespace", [args.namespace]),
        ("--read", args.read),
        ("--write", args.write),
        ("--rules", [args.rules or ""]),
    ):
        if not all(_is_utf8(value) for value in values):
            return fail(PROG, f"{flag} is not valid UTF-8")
    body: dict[str, Any] = {"client_id": args.client_id}
    if args.ttl_ms is not None:
        body["ttl_ms"] = args.ttl_ms
    if args.rules is not None:
        if args.read or args.write or args.admin:
            return fail(PROG, "--rules (V2) cannot be combined with --read/--write/--admin (V1)")
        try:
            body["rules"] = json.loads(args.rules)
        except json.JSONDecodeError as e:
            return fail(PROG, f"--rules is not valid JSON: {e.msg}")
        except RecursionError:
            return fail(PROG, "--rules is nested too deeply")
    elif not (any(args.read) or any(args.write) or args.admin):
        # Said in the command's words; the same check on --rules (and on the
        # issue routes) names the body's fields.
        return fail(
            PROG,
            "the token would grant nothing: give --read GLOB and/or --write GLOB "
            "(or --admin, or --rules)",
        )
    else:
        body["permissions"] = {"read": args.read, "write": args.write, "admin": args.admin}
    now_ms = time.time_ns() // 1_000_000
    try:
        request = parse_issue_body(body, args.namespace, max_ttl, now_ms)
        token = issue(key, request, now_ms)
    except ApiError as e:
        return fail(PROG, e.message)
    print(token)
    return 0


def _is_utf8(value: str) -> bool:
    """Whether an argument came as UTF-8: Python hands other bytes over as
    lone surrogates, which no token can encode (the check that would meet
    them later calls them "too large")."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True

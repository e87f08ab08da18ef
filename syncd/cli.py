"""``syncd [serve]``, ``syncd keygen``, ``syncd token ...``, ``syncd mcp ...``, ``syncd --version``."""

from __future__ import annotations

import argparse
import logging
import os
import secrets
import sys
from collections.abc import Sequence

from syncd import __version__
from syncd.config import ConfigError, from_env


def _configure_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def _version_text() -> str:
    from syncd.http.parsers import available_parsers, resolve_parser_name

    choice = os.environ.get("SERVICE_HTTP_PARSER") or "auto"
    try:
        parser = resolve_parser_name(choice)
    except ValueError:
        parser = f"{choice} (not installed)"
    return (
        f"syncd {__version__} (http parser: {parser}; available: {', '.join(available_parsers())})"
    )


def serve() -> int:
    try:
        settings = from_env()
    except ConfigError as exc:
        print(f"syncd: {exc}", file=sys.stderr)
        return 2
    if settings.database_url:
        try:
            import psycopg  # noqa: F401
            import psycopg_pool  # noqa: F401

            if settings.wal_connstr:
                import psycopg2  # noqa: F401
        except ImportError as exc:
            return _missing_extra("DATABASE_URL", "postgres", exc)
    if settings.tls_cert is not None and settings.tls_key is not None:
        from syncd.tls import TlsError, server_context

        try:
            server_context(settings.tls_cert, settings.tls_key)
        except TlsError as exc:
            print(f"syncd: {exc}", file=sys.stderr)
            return 2
    _configure_logging(settings.log_level)
    from syncd.http.parsers import resolve_parser_name

    try:
        resolve_parser_name(settings.http_parser)
    except ValueError as exc:
        print(f"syncd: SERVICE_HTTP_PARSER: {exc}", file=sys.stderr)
        return 2
    if settings.signing_key is None:
        logging.getLogger("syncd").warning(
            "SERVICE_SIGNING_KEY is unset: using a random key; every token dies with this process"
        )
    from syncd.server import run

    return run(settings)


def _missing_extra(what: str, extra: str, exc: ImportError) -> int:
    """One line naming the extra to install, and exit status 2."""
    missing = exc.name or "a module"
    print(
        f"syncd: {what} needs {missing}, which is not installed;"
        f" install it with: pip install 'syncd[{extra}]'",
        file=sys.stderr,
    )
    return 2


def keygen() -> int:
    print(secrets.token_bytes(32).hex())
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "token":
        from syncd.auth.issue import token_command

        return token_command(args[1:], os.environ)
    if args and args[0] in ("backup", "verify"):
        from syncd.backup_cli import backup_command, verify_command

        command = backup_command if args[0] == "backup" else verify_command
        return command(args[1:], os.environ)
    if args and args[0] == "mcp":
        try:
            from syncd.client.mcp_server import main as mcp_main
        except ImportError as exc:
            return _missing_extra("syncd mcp", "mcp", exc)
        return mcp_main(args[1:])
    parser = argparse.ArgumentParser(prog="syncd", description="A self-hosted CRDT sync service.")
    parser.add_argument("--version", action="version", version=_version_text())
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("serve", help="run the service (the default); configured by SERVICE_* variables")
    sub.add_parser("keygen", help="print a new SERVICE_SIGNING_KEY (64 hex characters)")
    sub.add_parser(
        "token", help="issue a token offline with SERVICE_SIGNING_KEY (see syncd token --help)"
    )
    sub.add_parser("backup", help="an online backup of a running server into DEST (embedded store)")
    sub.add_parser("verify", help="check a data directory or a backup, read-only")
    sub.add_parser(
        "mcp",
        help="serve CRDTs as tools to an MCP client over stdio (the [mcp] extra; see syncd mcp --help)",
    )
    ns = parser.parse_args(args)
    if ns.command == "keygen":
        return keygen()
    return serve()


if __name__ == "__main__":
    sys.exit(main())

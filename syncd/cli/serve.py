"""``syncd serve`` (also plain ``syncd``): run the service as its settings say.

Every check that can fail on a bad environment runs before the server binds
anything, so that a mistake is one line naming its cause and exit 2 rather
than a traceback: the settings themselves (:func:`syncd.config.from_env`), the
extras ``DATABASE_URL`` needs, the TLS files, the HTTP parser. A database that
refuses the node (no such database, a refused password, a ``wal_level`` that
cannot feed ``SERVICE_WAL_CONNSTR``) is found when the server opens it, still
before it binds, and ends the same way (:mod:`syncd.store.pg_start`).
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import socket
import sys
from collections.abc import Mapping
from pathlib import Path

from syncd.bind import MISSING_ADDRESS, bind_refusal, host_port, ipv4_instead
from syncd.cli.command import Commands, add_command, fail, missing_extra
from syncd.journal import JOURNAL_FORMAT, JournalFormatter, stderr_is_journal

EPILOG = """\
settings:
  syncd is configured only by environment variables, read once at start; an
  empty value counts as unset (except SERVICE_SIGNING_KEY, refused when
  empty), and a bad one stops the start with one line naming it (exit 2);
  a SERVICE_* name that is no setting is ignored with a warning.
  The ones most deployments set:

    SERVICE_BIND          address to listen on (default 0.0.0.0:3000)
    SERVICE_DATA_DIR      storage directory (default ./data)
    SERVICE_SIGNING_KEY   64 hex chars that sign tokens (syncd keygen makes one)
    SERVICE_ADMIN_TOKEN   the root admin secret (default: made, kept in the data dir)
    DATABASE_URL          postgresql://...: store in PostgreSQL, nodes form a cluster
    SERVICE_TLS_CERT, SERVICE_TLS_KEY   PEM files: serve HTTPS and wss:// natively
    SERVICE_LOG_LEVEL     debug, info, warning, error, critical (default info)

  Every variable, with its default and accepted values (limits, timeouts,
  storage, webhooks, CORS, proxies): docs/configuration.md in the source tree.
"""


def register(commands: Commands) -> None:
    add_command(
        commands,
        "serve",
        run,
        help="run the service (the default); configured by SERVICE_* variables",
        description="Run the syncd service in the foreground until SIGTERM or SIGINT.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def configure_logging(level: str) -> None:
    """Log to stderr; under systemd, each line with its priority for the
    journal, which stamps it itself (:mod:`syncd.journal`)."""
    handler = logging.StreamHandler(sys.stderr)
    if stderr_is_journal():
        handler.setFormatter(JournalFormatter(JOURNAL_FORMAT))
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), handlers=[handler])


DESCRIPTOR_RESERVE = 256
"""File descriptors the process needs beyond SERVICE_MAX_CONNECTIONS: up to
128 connections refused past the limit (lingering plain ones, TLS handshakes:
syncd.server.TLS_HANDSHAKES_PAST_LIMIT), and as many again for its own files
and sockets (the store's segments, snapshot and history, the listening
sockets, the database pool, webhook deliveries, standard streams)."""


def descriptor_warning(max_connections: int) -> str | None:
    """Raise this process's soft descriptor limit to what ``max_connections``
    needs, as far as its hard limit allows; a warning when that is short.
    Past the soft limit the kernel refuses accept() (EMFILE) and a client
    gets no answer at all, not the 503 of SERVICE_MAX_CONNECTIONS; the soft
    limit is often far below the hard one (systemd: 1024 and 524288)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not on this platform
        return None
    needed = max_connections + DESCRIPTOR_RESERVE
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return None
    allowed = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (allowed, hard))
    except (OSError, ValueError):  # a platform's own ceiling (macOS: OPEN_MAX)
        allowed = soft
    if allowed >= needed:
        return None
    return (
        f"SERVICE_MAX_CONNECTIONS={max_connections} needs about {needed} file descriptors,"
        f" but this process may open only {allowed}: raise LimitNOFILE (systemd) or"
        " ulimit -n, or lower SERVICE_MAX_CONNECTIONS"
    )


def bind_problem(host: str, port: int) -> str | None:
    """Why the server could not listen on ``host:port``, or None: a host that
    does not resolve, an address in use or not on this machine, a port this
    user may not listen on (below 1024 without CAP_NET_BIND_SERVICE). The server's
    bind would find them after the store is opened (an exit 1 and a bare OS
    error); found first, they are one line naming SERVICE_BIND. Each address
    is bound and let go at once, as the server will bind it (SO_REUSEADDR,
    IPv6 sockets IPv6 only but ``[::]``'s, which takes IPv4 too:
    :func:`syncd.server.dual_stack_socket`, so an IPv4 port in use is found)."""
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        return f"cannot resolve {host!r}: {reason}"
    if _ipv6_switched_off(host):
        return (
            f"cannot listen on {host_port(host, port)}: this host has no IPv6 address"
            f" (IPv6 is switched off): {ipv4_instead(port)}"
        )
    missing: str | None = None
    """The first address this machine does not have (or whose family its
    kernel lacks): the server listens on a name's other addresses without it
    (:func:`syncd.bind.present_addresses`); refused only when none is left."""
    present = False
    for family, kind, proto, _, address in addresses:
        try:
            with socket.socket(family, kind, proto) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    dual = address[0] == "::" and socket.has_dualstack_ipv6()
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0 if dual else 1)
                sock.bind(address)
        except OSError as exc:
            refusal = bind_refusal(exc, str(address[0]), port)
            if exc.errno in MISSING_ADDRESS:
                missing = missing or refusal
                continue
            if refusal is not None:
                return refusal
            # Anything else: the server's own bind reports it.
        present = True
    return None if present else missing


IPV6_ADDRESSES = Path("/proc/net/if_inet6")
"""Linux lists every IPv6 address of the host's interfaces here, one a line."""


def _ipv6_switched_off(host: str) -> bool:
    """``host`` is the IPv6 wildcard (``[::]``) and no interface has an IPv6
    address (``net.ipv6.conf.all.disable_ipv6=1``, as in many containers)
    and this host cannot make a dual-stack socket. Its bind succeeds, but no
    client could connect: the socket takes IPv6 only. Where the socket is
    dual-stack (:func:`syncd.server.dual_stack_socket`, Linux's) IPv4
    clients reach it there: no refusal. False where the addresses cannot be
    listed (not Linux)."""
    if socket.has_dualstack_ipv6():
        return False
    try:
        if not ipaddress.IPv6Address(host.partition("%")[0]).is_unspecified:
            return False
        return IPV6_ADDRESSES.read_bytes().strip() == b""
    except (ValueError, OSError):
        return False


def data_dir_problem(path: Path, *, written: bool) -> str | None:
    """Why ``SERVICE_DATA_DIR`` cannot serve, or None; creates it when missing
    (as the server would). ``written``: the server writes there (the embedded
    store, or an ``admin_token`` to make); with ``DATABASE_URL`` and
    ``SERVICE_ADMIN_TOKEN`` it only reads, so a read-only one is fine."""
    if path.exists() and not path.is_dir():
        return f"{path} is not a directory"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"cannot create {path}: {exc.strerror or exc}"
    if written and not os.access(path, os.W_OK | os.X_OK):
        return f"{path} is not writable by this user"
    return None


def run(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    # Here, not with the module: the settings' defaults import the engine,
    # the Yjs library and the metrics, which every other command (a health
    # check among them) would pay for at its start.
    from syncd.config import ConfigError, from_env, ineffective_variables, unknown_variables

    try:
        settings = from_env(env)
    except ConfigError as exc:
        return fail("syncd", str(exc))
    problem = bind_problem(settings.host, settings.port)
    if problem is not None:
        return fail("syncd", f"SERVICE_BIND: {problem}")
    if settings.database_url:
        try:
            import psycopg  # noqa: F401
            import psycopg_pool  # noqa: F401

            if settings.wal_connstr:
                import psycopg2  # noqa: F401
        except ImportError as exc:
            return missing_extra("DATABASE_URL", "postgres", exc)
    if settings.tls_cert is not None and settings.tls_key is not None:
        from syncd.tls import TlsError, server_context

        try:
            server_context(settings.tls_cert, settings.tls_key)
        except TlsError as exc:
            return fail("syncd", str(exc))
    configure_logging(settings.log_level)
    for warning in unknown_variables(env) + ineffective_variables(env):
        logging.getLogger("syncd").warning("%s", warning)
    from syncd.http.parsers import resolve_parser_name

    try:
        resolve_parser_name(settings.http_parser)
    except ValueError as exc:
        return fail("syncd", f"SERVICE_HTTP_PARSER: {exc}")
    # Last of the checks: it creates the directory, which nothing refused
    # before it should leave behind.
    written = settings.database_url is None or settings.admin_token is None
    problem = data_dir_problem(settings.data_dir, written=written)
    if problem is not None:
        return fail("syncd", f"SERVICE_DATA_DIR: {problem}")
    # After every check that refuses the start: it is a warning, not a refusal.
    descriptors = descriptor_warning(settings.max_connections)
    if descriptors is not None:
        logging.getLogger("syncd").warning("%s", descriptors)
    if settings.signing_key is None:
        logging.getLogger("syncd").warning(
            "SERVICE_SIGNING_KEY is unset: using a random key; every token dies with this process"
        )
    from syncd.server import run as run_server

    return run_server(settings)

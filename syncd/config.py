"""Settings from the environment: one frozen object, validated before binding.

Every variable of docs/configuration.md is read here, the tunables that bound
resources included (each with its default beside it). A bad value
raises :class:`ConfigError` naming the variable; the CLI prints that one line
and exits non-zero.
"""

from __future__ import annotations

import difflib
import os
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from syncd.auth.authenticator import DEFAULT_RATE_LIMIT
from syncd.bind import (
    DEFAULT_BIND,
    MAX_NUMBER_CHARS,
    NumberTooLong,
    host_port,
    parse_bind,
)
from syncd.crdt.engine import OP_ID_WINDOW as DEFAULT_OP_ID_WINDOW
from syncd.crdt.opids import OP_ID_TTL_MS
from syncd.metrics import DEFAULT_MAX_CRDT_SERIES
from syncd.proxies import Network, parse_networks
from syncd.quotas import DEFAULT_MAX_CRDT_BYTES
from syncd.residency import DEFAULT_MEMORY_BUDGET_MB
from syncd.store.history_index import DEFAULT_RETENTION, Retention

FsyncMode = Literal["batch", "always", "never"]
ParserChoice = Literal["auto", "h11", "httptools"]

DEFAULT_MAX_BODY_BYTES = 1024 * 1024
DEFAULT_MAX_TOKEN_TTL_MS = 30 * 24 * 3600 * 1000
# Past this a token's expires_at (now + ttl) no longer fits the 64-bit integer
# a token encodes, and issuing one would fail; a century is limit enough.
MAX_TOKEN_TTL_LIMIT_MS = 100 * 365 * 24 * 3600 * 1000
DEFAULT_MAX_CONNECTIONS = 10_000
# Time a client has to send a complete request head (and body) once it has
# started one, or to send anything on a fresh connection: the slowloris bound.
DEFAULT_HEADER_TIMEOUT_S = 10.0
# Idle keep-alive connections are closed after this long without a request.
DEFAULT_KEEPALIVE_TIMEOUT_S = 5.0
# A peer that reads nothing of an answer (or event stream) we owe it for this
# long is dropped, so dead readers cannot pin sockets and buffers for ever.
DEFAULT_SEND_TIMEOUT_S = 30.0
# A WebSocket peer silent this long gets a ping; silent as long again after
# it, the connection is closed (1011): a peer gone without a FIN (a dead NAT
# entry, a suspended laptop) would otherwise hold its slot and subscriptions.
DEFAULT_WS_PING_S = 20.0
# A keep-alive comment on every event stream this often (docs/protocol.md#the-sse-stream).
DEFAULT_SSE_PING_S = 15.0
# Outstanding (written but unsent) bytes a subscriber may have before it is
# marked lagging and skipped by the broadcast hub.
DEFAULT_SUBSCRIBER_BUFFER_BYTES = 1024 * 1024
# It is each WebSocket's write-buffer mark, which the event loop keeps in a C
# int: past this, every WebSocket upgrade would fail (an OverflowError).
MAX_SUBSCRIBER_BUFFER_BYTES = 2**31 - 1
DEFAULT_MAX_SUBSCRIPTIONS = 1000
DEFAULT_SHUTDOWN_TIMEOUT_S = 10.0
# After SIGTERM, how long the node goes on serving everything while
# /health/ready answers 503, so that a load balancer checking it takes the node
# out before its listener closes. 0: no drain, the shutdown starts at once.
DEFAULT_SHUTDOWN_DRAIN_S = 0.0
# Graceful shutdown gives queued webhook events this long to go out.
DEFAULT_WEBHOOK_DRAIN_S = 5.0
DEFAULT_JSON_MAX_DEPTH = 64
# JSON is decoded recursively, a frame per level, and Python stops the decoder
# at its recursion limit (1000 frames, less the server's own: about 960 levels
# in a request handler); past it a body was refused as "deeper than" a setting
# it did not reach. Half of that, leaving room for code that walks a decoded
# body the same way.
MAX_JSON_MAX_DEPTH = 512
# The demo's token window (SERVICE_DEMO_TOKEN_WINDOW_MS): 20 tokens per client
# address per window (syncd/http/handlers/demo.py). At least a second, since
# Retry-After counts whole seconds; at most a day, as any duration setting.
DEFAULT_DEMO_TOKEN_WINDOW_MS = 60_000
MIN_DEMO_TOKEN_WINDOW_MS = 1000
# The longest any timeout or interval setting may be: a day. Past it a
# timeout protects nothing (a slow client may hold its socket for days), and
# "inf" or "1e999" would switch the bound off altogether.
MAX_DURATION_S = 86_400.0
# The shortest each timeout or interval setting may be. Any positive number
# was taken, and a tiny one (a unit mistaken, "1e-9") does harm, not just nothing:
# Below a tenth of a second a client across any network cannot send a request
# head, nor read a stalled answer, nor send its next request in time: every
# connection would be cut (header, keep-alive and send timeouts).
MIN_TIMEOUT_S = 0.1
# The WebSocket and event-stream keep-alive pings: every connection's ping
# goes out this often, on a timer wheel ticking at a sixteenth of it, so a
# tiny interval keeps the loop busy ticking and writing pings (1e-9: a tick
# every 1/16 ns). Their point, keeping proxies' idle timers (tens of seconds)
# from cutting a quiet connection, needs nothing near a second.
MIN_PING_S = 1.0
# The shutdown's waits (in-flight requests, queued webhook events): the
# shutdown looks again every 20 ms (server.SHUTDOWN_POLL_S), and a delivery
# takes at least a round trip; a shorter wait gives nothing any time at all.
MIN_SHUTDOWN_WAIT_S = 0.1
# The drain before the shutdown (0: none) exists for load balancers' readiness
# checks, which come at most once a second (Kubernetes' periodSeconds: 1); a
# shorter drain is over before any of them can see its 503.
MIN_DRAIN_S = 1.0
# The longest SERVICE_OP_ID_TTL_S: a day, as for every other duration. A CRDT
# remembers each op_id younger than the TTL (past its window, 16 bytes an id,
# in its snapshots too), so the memory grows with the TTL times the op rate;
# op ids are for retries, minutes after the first send, not for days.
MAX_OP_ID_TTL_S = int(MAX_DURATION_S)
# The largest SERVICE_OP_ID_WINDOW: 64 times the default. Each id of the
# window is kept with its answer (about 250 bytes, syncd/crdt/opids.py) and
# the window is never trimmed below its size, so every CRDT that has taken
# that many ops holds 16 MB of ids for good; a retry minutes later is
# covered by the TTL, not by a bigger window.
MAX_OP_ID_WINDOW = 65_536
# The largest SERVICE_HISTORY_RETENTION. Nothing overflows past them (the
# stores compare Python ints, PostgreSQL a numeric), but nothing more is kept
# either, so a larger value is a mistake: ops are stamped in milliseconds
# since 1970, so an age of a century already keeps every op; and no CRDT has
# more ops than its largest seq (64-bit in both stores).
MAX_RETENTION_AGE_MS = 36_500 * 86_400_000
MAX_RETENTION_AGE_TEXT = "36500d (100 years)"
MAX_RETENTION_OPS = 2**63 - 1
# The largest memory budget (MB) taken: 16 TiB, beyond any machine syncd
# runs on; "inf" is refused rather than read as "no budget".
MAX_MEMORY_BUDGET_MB = 16.0 * 1024 * 1024

# Older signing keys whose tokens still verify (key rotation). Each bad token
# costs one ed25519 verify per key (~60 us each), so a long list would make
# garbage tokens that much dearer; a rotation needs one or two.
MAX_PREVIOUS_SIGNING_KEYS = 8

LOG_LEVELS = ("debug", "info", "warning", "error", "critical")

VARIABLES: frozenset[str] = frozenset(
    {
        "DATABASE_URL",
        "SERVICE_ACCESS_LOG",
        "SERVICE_ADMIN_TOKEN",
        "SERVICE_BIND",
        "SERVICE_CORS_ORIGINS",
        "SERVICE_DATA_DIR",
        "SERVICE_DEMO",
        "SERVICE_DEMO_TOKEN_WINDOW_MS",
        "SERVICE_FSYNC",
        "SERVICE_HEADER_TIMEOUT_S",
        "SERVICE_HISTORY_RETENTION",
        "SERVICE_HTTP_PARSER",
        "SERVICE_JSON_MAX_DEPTH",
        "SERVICE_KEEPALIVE_TIMEOUT_S",
        "SERVICE_LOG_LEVEL",
        "SERVICE_MAX_BODY_BYTES",
        "SERVICE_MAX_CONNECTIONS",
        "SERVICE_MAX_CRDT_BYTES",
        "SERVICE_MAX_SUBSCRIPTIONS",
        "SERVICE_MAX_TOKEN_TTL_MS",
        "SERVICE_MEMORY_BUDGET_MB",
        "SERVICE_METRICS_MAX_CRDT_SERIES",
        "SERVICE_NAMESPACE_MAX_BYTES",
        "SERVICE_NAMESPACE_MAX_CRDTS",
        "SERVICE_NODE_ID",
        "SERVICE_OP_ID_TTL_S",
        "SERVICE_OP_ID_WINDOW",
        "SERVICE_PREVIOUS_SIGNING_KEYS",
        "SERVICE_RATE_LIMIT",
        "SERVICE_SEND_TIMEOUT_S",
        "SERVICE_SHUTDOWN_DRAIN_S",
        "SERVICE_SHUTDOWN_TIMEOUT_S",
        "SERVICE_SIGNING_KEY",
        "SERVICE_SSE_PING_S",
        "SERVICE_SUBSCRIBER_BUFFER_BYTES",
        "SERVICE_TLS_CERT",
        "SERVICE_TLS_KEY",
        "SERVICE_TRUSTED_PROXIES",
        "SERVICE_WAL_CONNSTR",
        "SERVICE_WAL_PUB",
        "SERVICE_WAL_SLOT",
        "SERVICE_WEBHOOK_DRAIN_S",
        "SERVICE_WEBHOOK_SECRET",
        "SERVICE_WEBHOOK_URL",
        "SERVICE_WS_PING_S",
    }
)
"""Every variable :func:`from_env` reads (docs/configuration.md lists them)."""
_HEX64 = re.compile(r"[0-9a-fA-F]{64}")


class ConfigError(ValueError):
    """A bad configuration value. ``str()`` is the one line the CLI prints."""

    def __init__(self, variable: str, problem: str) -> None:
        super().__init__(f"{variable}: {problem}")
        self.variable = variable


@dataclass(frozen=True)
class Settings:
    host: str = "0.0.0.0"
    port: int = 3000
    data_dir: Path = Path("./data")
    # Secrets are left out of repr (repr=False): a Settings printed in a log
    # line or a traceback's locals must not carry them.
    signing_key: bytes | None = field(default=None, repr=False)
    """32-byte ed25519 seed; None means a random key per start (tokens die with the process)."""
    previous_signing_keys: tuple[bytes, ...] = field(default=(), repr=False)
    """32-byte seeds of older keys whose tokens still verify (docs/operations.md#rotating-the-signing-key)."""
    webhook_url: str | None = field(default=None, repr=False)
    webhook_secret: str | None = field(default=None, repr=False)
    database_url: str | None = field(default=None, repr=False)
    wal_connstr: str | None = field(default=None, repr=False)
    wal_slot: str = "service_wal"
    wal_pub: str = "service_pub"
    admin_token: str | None = field(default=None, repr=False)
    rate_limit: int = DEFAULT_RATE_LIMIT
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_token_ttl_ms: int = DEFAULT_MAX_TOKEN_TTL_MS
    fsync: FsyncMode = "batch"
    log_level: str = "info"
    node_id: str = field(default_factory=lambda: secrets.token_hex(4))
    http_parser: ParserChoice = "auto"
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S
    keepalive_timeout_s: float = DEFAULT_KEEPALIVE_TIMEOUT_S
    send_timeout_s: float = DEFAULT_SEND_TIMEOUT_S
    ws_ping_s: float = DEFAULT_WS_PING_S
    sse_ping_s: float = DEFAULT_SSE_PING_S
    subscriber_buffer_bytes: int = DEFAULT_SUBSCRIBER_BUFFER_BYTES
    max_subscriptions: int = DEFAULT_MAX_SUBSCRIPTIONS
    shutdown_timeout_s: float = DEFAULT_SHUTDOWN_TIMEOUT_S
    shutdown_drain_s: float = DEFAULT_SHUTDOWN_DRAIN_S
    """Seconds of serving with /health/ready at 503 between SIGTERM and the
    shutdown (0: none; syncd/server.py)."""
    webhook_drain_s: float = DEFAULT_WEBHOOK_DRAIN_S
    op_id_window: int = DEFAULT_OP_ID_WINDOW
    memory_budget_mb: float = DEFAULT_MEMORY_BUDGET_MB
    """Bound on the estimated memory of resident CRDT state (syncd/residency.py);
    a fraction is allowed (tests and benchmarks use budgets of a few KB)."""
    max_crdt_bytes: int = DEFAULT_MAX_CRDT_BYTES
    """One CRDT's state (0: no limit; syncd/quotas.py)."""
    namespace_max_crdts: int = 0
    """Live CRDTs in one namespace (0: no limit)."""
    namespace_max_bytes: int = 0
    """The sum of one namespace's CRDT sizes (0: no limit)."""
    op_id_ttl_s: int = OP_ID_TTL_MS // 1000
    """op_ids younger than this are remembered beyond the window (syncd/crdt/opids.py)."""
    json_max_depth: int = DEFAULT_JSON_MAX_DEPTH
    metrics_max_crdt_series: int = DEFAULT_MAX_CRDT_SERIES
    """CRDT ids with ``service_ops_total`` series of their own (0: none; syncd/metrics.py)."""
    cors_origins: tuple[str, ...] = ()
    demo: bool = False
    demo_token_window_ms: int = DEFAULT_DEMO_TOKEN_WINDOW_MS
    """The window of the demo's per-address token limit (syncd/http/handlers/demo.py)."""
    trusted_proxies: tuple[Network, ...] = ()
    """Proxies whose X-Forwarded-For / Forwarded name the client (syncd/proxies.py)."""
    access_log: bool = False
    """One log line per answered request (syncd/http/access.py)."""
    tls_cert: Path | None = None
    tls_key: Path | None = None
    """PEM files: set both to serve HTTPS and wss:// (syncd/tls.py)."""
    history_retention: Retention = field(default_factory=lambda: Retention.parse(DEFAULT_RETENTION))
    """At least this much history per CRDT (docs/operations.md#history-and-retention)."""

    @property
    def bind(self) -> str:
        return host_port(self.host, self.port)


def _int(
    env: Mapping[str, str],
    name: str,
    default: int,
    *,
    minimum: int = 1,
    maximum: int | None = None,
) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    if len(raw.strip()) > MAX_NUMBER_CHARS:
        raise ConfigError(name, str(NumberTooLong("a value", raw.strip())))
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(name, f"{raw!r} is not an integer") from None
    if value < minimum:
        raise ConfigError(name, f"must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ConfigError(name, f"must be at most {maximum}, got {value}")
    return value


def _retention(text: str) -> Retention:
    """``SERVICE_HISTORY_RETENTION``: a count or an age, up to its maximum."""
    name = "SERVICE_HISTORY_RETENTION"
    if len(text.strip()) > MAX_NUMBER_CHARS:
        raise ConfigError(name, str(NumberTooLong("a value", text.strip())))
    try:
        retention = Retention.parse(text)
    except ValueError as exc:
        raise ConfigError(name, str(exc)) from None
    if retention.ops is not None and retention.ops > MAX_RETENTION_OPS:
        raise ConfigError(name, f"must be at most {MAX_RETENTION_OPS}ops, got {text.strip()}")
    if retention.age_ms is not None and retention.age_ms > MAX_RETENTION_AGE_MS:
        raise ConfigError(name, f"must be at most {MAX_RETENTION_AGE_TEXT}, got {text.strip()}")
    return retention


def max_token_ttl_ms(env: Mapping[str, str]) -> int:
    """``SERVICE_MAX_TOKEN_TTL_MS``, checked as the server checks it (also for ``syncd token``)."""
    return _int(
        env, "SERVICE_MAX_TOKEN_TTL_MS", DEFAULT_MAX_TOKEN_TTL_MS, maximum=MAX_TOKEN_TTL_LIMIT_MS
    )


def _float(
    env: Mapping[str, str],
    name: str,
    default: float,
    *,
    minimum: float,
    maximum: float = MAX_DURATION_S,
    zero: bool = False,
) -> float:
    """A number from ``minimum`` (positive) up to ``maximum``; with ``zero``,
    0 is taken too (for a setting where 0 switches something off rather than
    meaning "at once")."""
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    if len(raw.strip()) > MAX_NUMBER_CHARS:
        raise ConfigError(name, str(NumberTooLong("a value", raw.strip())))
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(name, f"{raw!r} is not a number") from None
    # Written so that nan fails both: it compares false with everything.
    if zero and not value >= 0:
        raise ConfigError(name, f"must be 0 or positive, got {raw.strip()}")
    if not zero and not value > 0:
        raise ConfigError(name, f"must be positive, got {raw.strip()}")
    if 0 < value < minimum:
        least = f"0 or at least {minimum:g}" if zero else f"at least {minimum:g}"
        raise ConfigError(name, f"must be {least}, got {raw.strip()}")
    # ``float()`` takes "inf" and "1e999": an infinite timeout or budget is no
    # limit at all, which no setting here is meant to allow.
    if not value <= maximum:
        raise ConfigError(name, f"must be at most {maximum:.15g}, got {raw.strip()}")
    return value


def _bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    lowered = raw.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ConfigError(name, f"{raw!r} is not a boolean (true/false)")


def _opt(env: Mapping[str, str], name: str) -> str | None:
    raw = env.get(name)
    return raw if raw else None


def _choice(env: Mapping[str, str], name: str, default: str, choices: tuple[str, ...]) -> str:
    raw = env.get(name) or default
    if raw not in choices:
        raise ConfigError(name, f"{raw!r} is not one of {', '.join(choices)}")
    return raw


def _previous_keys(raw: str) -> tuple[bytes, ...]:
    """``SERVICE_PREVIOUS_SIGNING_KEYS``: comma-separated 64-hex seeds (spaces
    and empty items ignored). The message never repeats a value: they are secrets."""
    name = "SERVICE_PREVIOUS_SIGNING_KEYS"
    items = [item.strip() for item in raw.split(",") if item.strip()]
    if len(items) > MAX_PREVIOUS_SIGNING_KEYS:
        raise ConfigError(name, f"at most {MAX_PREVIOUS_SIGNING_KEYS} keys, got {len(items)}")
    keys: list[bytes] = []
    for position, item in enumerate(items, 1):
        if not _HEX64.fullmatch(item):
            raise ConfigError(
                name, f"key {position} must be 64 hex characters (a 32-byte ed25519 seed)"
            )
        key = bytes.fromhex(item)
        if key not in keys:
            keys.append(key)
    return tuple(keys)


def unknown_variables(env: Mapping[str, str]) -> list[str]:
    """One warning per ``SERVICE_*`` name in ``env`` (in any case) that is no
    setting, with the setting it most likely misspells: such a variable is
    ignored, and a typo would otherwise leave its default in force unnoticed."""
    # Compared without the prefix every name shares, which would make any
    # two names look alike; "DATABASE_URL" stands for itself.
    known = {name.removeprefix("SERVICE_"): name for name in VARIABLES}
    warnings: list[str] = []
    for name in sorted(env):
        if name in VARIABLES or not name.upper().startswith("SERVICE_"):
            continue
        rest = name.upper().removeprefix("SERVICE_")
        close = difflib.get_close_matches(rest, known, n=1, cutoff=0.75)
        meant = known[close[0]] if close else _MEANT.get(rest)
        hint = f" (did you mean {meant}?)" if meant else ""
        warnings.append(f"{name} is not a syncd setting and is ignored{hint}")
    return warnings


def ineffective_variables(env: Mapping[str, str]) -> list[str]:
    """One warning per setting that is set but has no effect without another
    one (a WAL stream without a database, a webhook secret without a webhook)."""
    needs = (
        ("SERVICE_WAL_CONNSTR", "DATABASE_URL", "there is no WAL stream without a database"),
        ("SERVICE_WAL_SLOT", "SERVICE_WAL_CONNSTR", "it names the WAL stream's slot"),
        ("SERVICE_WAL_PUB", "SERVICE_WAL_CONNSTR", "it names the WAL stream's publication"),
        ("SERVICE_WEBHOOK_SECRET", "SERVICE_WEBHOOK_URL", "it signs the webhook's requests"),
    )
    warnings: list[str] = []
    for name, needed, why in needs:
        if env.get(name) and not env.get(needed):
            warnings.append(f"{name} is set but ignored: {needed} is not ({why})")
    return warnings


_MEANT = {"PORT": "SERVICE_BIND", "HOST": "SERVICE_BIND", "ADDRESS": "SERVICE_BIND"}
"""Settings other servers have that syncd spells another way."""


_ORIGIN = re.compile(r"[a-z][a-z0-9+.-]*://(\[[0-9a-f:.]+\]|[a-z0-9._-]+)(:[1-9][0-9]{0,4})?")
"""An origin as a browser sends it in ``Origin``: lowercase scheme and host,
a port only when not the scheme's default, nothing after."""
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _origins(raw: str) -> tuple[str, ...]:
    """``SERVICE_CORS_ORIGINS``: comma-separated origins (spaces and empty
    items ignored), ``*`` or ``null``. Each is compared with the ``Origin``
    header as is, so one written otherwise than a browser sends it (a
    trailing slash or a path, capitals, a default port) would never match:
    refused, with the form to write."""
    name = "SERVICE_CORS_ORIGINS"
    origins: list[str] = []
    for item in (part.strip() for part in raw.split(",")):
        if not item or item in origins:
            continue
        if item in ("*", "null") or (_ORIGIN.fullmatch(item) and _port_is_kept(item)):
            origins.append(item)
            continue
        try:
            url = urlsplit(item)
            scheme, host, port = url.scheme.lower(), url.hostname, url.port
        except ValueError:  # a port out of range, a bracket left open
            scheme, host, port = "", None, None
        if not scheme or not host or "://" not in item or port == 0:
            raise ConfigError(name, f"{item!r} is not an origin: write scheme://host[:port]")
        shown = f"[{host}]" if ":" in host else host
        keep = port is not None and port != _DEFAULT_PORTS.get(scheme)
        written = f"{scheme}://{shown}" + (f":{port}" if keep else "")
        raise ConfigError(
            name,
            f"{item!r} never matches an Origin header; write {written!r}"
            " (no path or trailing slash, lowercase, no default port)",
        )
    return tuple(origins)


def _port_is_kept(origin: str) -> bool:
    """Whether a browser writes the origin's port as given: none, or one in
    range that is not its scheme's default."""
    scheme, _, rest = origin.partition("://")
    port = "" if rest.endswith("]") else rest.rpartition(":")[2] if ":" in rest else ""
    return not port or (int(port) <= 65535 and int(port) != _DEFAULT_PORTS.get(scheme))


def _path(env: Mapping[str, str], name: str) -> str | None:
    """A path setting (None: unset). Spaces around it are refused, not taken:
    with an env file's stray space before ``/var/lib/syncd`` the path is
    relative, and the server would keep its data in ``./ /var/lib/syncd``
    without a word (a TLS file would be "not a readable file", the space
    unseen in the message)."""
    raw = env.get(name)
    if not raw:
        return None
    if raw != raw.strip():
        problem = "is blank" if not raw.strip() else "has spaces or line breaks around it"
        raise ConfigError(name, f"{raw!r} {problem}: remove them or unset it")
    return raw


def from_env(env: Mapping[str, str] | None = None) -> Settings:
    env = os.environ if env is None else env
    bind = env.get("SERVICE_BIND") or DEFAULT_BIND
    try:
        host, port = parse_bind(bind)
    except NumberTooLong as exc:  # the value is not repeated: thousands of digits
        raise ConfigError("SERVICE_BIND", str(exc)) from None
    except ValueError as exc:
        raise ConfigError("SERVICE_BIND", f"{bind!r}: {exc}") from None

    signing_key = None
    raw_key = env.get("SERVICE_SIGNING_KEY")
    if raw_key is not None and not raw_key.strip():
        # Unlike the other variables, set-but-empty is not "unset": it is what
        # `export SERVICE_SIGNING_KEY=$(a command that failed)` leaves, and a
        # random key would make every token die with the process unnoticed.
        raise ConfigError(
            "SERVICE_SIGNING_KEY",
            "is set but empty: give 64 hex characters (syncd keygen makes them) or unset it",
        )
    if raw_key is not None:
        if not _HEX64.fullmatch(raw_key):
            # Never the value (a secret), but what is wrong with it.
            if raw_key != raw_key.strip() and _HEX64.fullmatch(raw_key.strip()):
                problem = "has spaces or line breaks around its 64 hex characters: remove them"
            elif len(raw_key) != 64:
                problem = f"must be 64 hex characters (a 32-byte ed25519 seed), not {len(raw_key)}"
            else:
                problem = "must be 64 hex characters (a 32-byte ed25519 seed): it holds others"
            raise ConfigError("SERVICE_SIGNING_KEY", problem)
        signing_key = bytes.fromhex(raw_key)
    previous_signing_keys = _previous_keys(env.get("SERVICE_PREVIOUS_SIGNING_KEYS") or "")

    webhook_url = _opt(env, "SERVICE_WEBHOOK_URL")
    if webhook_url is not None:
        # The webhook client's own checks (scheme, credentials, host, port),
        # here so a URL it refuses stops the start with one line, not a
        # traceback; its messages show the scheme and host only (the path,
        # the query and user:password@ often hold secrets, and the line goes
        # to the journal).
        from syncd.webhooks.client import parse_url

        try:
            parse_url(webhook_url)
        except ValueError as exc:
            raise ConfigError("SERVICE_WEBHOOK_URL", str(exc)) from None
    database_url = _opt(env, "DATABASE_URL")
    if database_url is not None and not re.match(r"postgres(ql)?://", database_url):
        raise ConfigError("DATABASE_URL", "must be a postgres:// or postgresql:// URL")
    wal_slot = env.get("SERVICE_WAL_SLOT") or "service_wal"
    if not re.fullmatch(r"[a-z0-9_]{1,40}", wal_slot):
        raise ConfigError("SERVICE_WAL_SLOT", "must be 1-40 of a-z, 0-9, _")
    wal_pub = env.get("SERVICE_WAL_PUB") or "service_pub"
    if not re.fullmatch(r"[a-z0-9_]{1,63}", wal_pub):
        raise ConfigError("SERVICE_WAL_PUB", "must be 1-63 of a-z, 0-9, _")
    node_id = env.get("SERVICE_NODE_ID") or secrets.token_hex(4)
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,32}", node_id):
        raise ConfigError("SERVICE_NODE_ID", "must be 1-32 of A-Z, a-z, 0-9, _, -")
    log_level = (env.get("SERVICE_LOG_LEVEL") or "info").lower()
    if log_level not in LOG_LEVELS:
        raise ConfigError(
            "SERVICE_LOG_LEVEL", f"{log_level!r} is not one of {', '.join(LOG_LEVELS)}"
        )
    cors = _origins(env.get("SERVICE_CORS_ORIGINS") or "")
    try:
        trusted_proxies = parse_networks(env.get("SERVICE_TRUSTED_PROXIES") or "")
    except ValueError as exc:
        raise ConfigError("SERVICE_TRUSTED_PROXIES", str(exc)) from None
    tls_cert, tls_key = _path(env, "SERVICE_TLS_CERT"), _path(env, "SERVICE_TLS_KEY")
    if (tls_cert is None) != (tls_key is None):
        missing = "SERVICE_TLS_KEY" if tls_key is None else "SERVICE_TLS_CERT"
        raise ConfigError(missing, "must be set too: TLS needs both the certificate and the key")

    history_retention = _retention(env.get("SERVICE_HISTORY_RETENTION") or DEFAULT_RETENTION)

    return Settings(
        host=host,
        port=port,
        data_dir=Path(_path(env, "SERVICE_DATA_DIR") or "./data"),
        signing_key=signing_key,
        previous_signing_keys=previous_signing_keys,
        webhook_url=webhook_url,
        webhook_secret=_opt(env, "SERVICE_WEBHOOK_SECRET"),
        database_url=database_url,
        wal_connstr=_opt(env, "SERVICE_WAL_CONNSTR"),
        wal_slot=wal_slot,
        wal_pub=wal_pub,
        admin_token=_opt(env, "SERVICE_ADMIN_TOKEN"),
        rate_limit=_int(env, "SERVICE_RATE_LIMIT", DEFAULT_RATE_LIMIT),
        max_body_bytes=_int(env, "SERVICE_MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES),
        max_token_ttl_ms=max_token_ttl_ms(env),
        fsync=_choice(env, "SERVICE_FSYNC", "batch", ("batch", "always", "never")),  # type: ignore[arg-type]
        log_level=log_level,
        node_id=node_id,
        http_parser=_choice(env, "SERVICE_HTTP_PARSER", "auto", ("auto", "h11", "httptools")),  # type: ignore[arg-type]
        max_connections=_int(env, "SERVICE_MAX_CONNECTIONS", DEFAULT_MAX_CONNECTIONS),
        header_timeout_s=_float(
            env, "SERVICE_HEADER_TIMEOUT_S", DEFAULT_HEADER_TIMEOUT_S, minimum=MIN_TIMEOUT_S
        ),
        keepalive_timeout_s=_float(
            env, "SERVICE_KEEPALIVE_TIMEOUT_S", DEFAULT_KEEPALIVE_TIMEOUT_S, minimum=MIN_TIMEOUT_S
        ),
        send_timeout_s=_float(
            env, "SERVICE_SEND_TIMEOUT_S", DEFAULT_SEND_TIMEOUT_S, minimum=MIN_TIMEOUT_S
        ),
        ws_ping_s=_float(env, "SERVICE_WS_PING_S", DEFAULT_WS_PING_S, minimum=MIN_PING_S),
        sse_ping_s=_float(env, "SERVICE_SSE_PING_S", DEFAULT_SSE_PING_S, minimum=MIN_PING_S),
        subscriber_buffer_bytes=_int(
            env,
            "SERVICE_SUBSCRIBER_BUFFER_BYTES",
            DEFAULT_SUBSCRIBER_BUFFER_BYTES,
            minimum=1024,
            maximum=MAX_SUBSCRIBER_BUFFER_BYTES,
        ),
        max_subscriptions=_int(env, "SERVICE_MAX_SUBSCRIPTIONS", DEFAULT_MAX_SUBSCRIPTIONS),
        shutdown_timeout_s=_float(
            env,
            "SERVICE_SHUTDOWN_TIMEOUT_S",
            DEFAULT_SHUTDOWN_TIMEOUT_S,
            minimum=MIN_SHUTDOWN_WAIT_S,
        ),
        shutdown_drain_s=_float(
            env,
            "SERVICE_SHUTDOWN_DRAIN_S",
            DEFAULT_SHUTDOWN_DRAIN_S,
            minimum=MIN_DRAIN_S,
            zero=True,
        ),
        webhook_drain_s=_float(
            env, "SERVICE_WEBHOOK_DRAIN_S", DEFAULT_WEBHOOK_DRAIN_S, minimum=MIN_SHUTDOWN_WAIT_S
        ),
        op_id_window=_int(
            env, "SERVICE_OP_ID_WINDOW", DEFAULT_OP_ID_WINDOW, maximum=MAX_OP_ID_WINDOW
        ),
        max_crdt_bytes=_int(env, "SERVICE_MAX_CRDT_BYTES", DEFAULT_MAX_CRDT_BYTES, minimum=0),
        namespace_max_crdts=_int(env, "SERVICE_NAMESPACE_MAX_CRDTS", 0, minimum=0),
        namespace_max_bytes=_int(env, "SERVICE_NAMESPACE_MAX_BYTES", 0, minimum=0),
        op_id_ttl_s=_int(
            env,
            "SERVICE_OP_ID_TTL_S",
            OP_ID_TTL_MS // 1000,
            minimum=0,
            maximum=MAX_OP_ID_TTL_S,
        ),
        memory_budget_mb=_float(
            env,
            "SERVICE_MEMORY_BUDGET_MB",
            DEFAULT_MEMORY_BUDGET_MB,
            # Any positive size: tests and benchmarks use budgets of a few KB.
            minimum=0.0,
            maximum=MAX_MEMORY_BUDGET_MB,
        ),
        json_max_depth=_int(
            env, "SERVICE_JSON_MAX_DEPTH", DEFAULT_JSON_MAX_DEPTH, maximum=MAX_JSON_MAX_DEPTH
        ),
        metrics_max_crdt_series=_int(
            env, "SERVICE_METRICS_MAX_CRDT_SERIES", DEFAULT_MAX_CRDT_SERIES, minimum=0
        ),
        cors_origins=cors,
        demo=_bool(env, "SERVICE_DEMO", False),
        demo_token_window_ms=_int(
            env,
            "SERVICE_DEMO_TOKEN_WINDOW_MS",
            DEFAULT_DEMO_TOKEN_WINDOW_MS,
            minimum=MIN_DEMO_TOKEN_WINDOW_MS,
            maximum=int(MAX_DURATION_S * 1000),
        ),
        trusted_proxies=trusted_proxies,
        access_log=_bool(env, "SERVICE_ACCESS_LOG", False),
        tls_cert=Path(tls_cert) if tls_cert else None,
        tls_key=Path(tls_key) if tls_key else None,
        history_retention=history_retention,
    )

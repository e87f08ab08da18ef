"""Configuration: defaults, every variable's bad values, and the one-line exit."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from syncd.config import (
    MAX_DURATION_S,
    MAX_MEMORY_BUDGET_MB,
    ConfigError,
    Settings,
    from_env,
    parse_bind,
)


def test_defaults() -> None:
    s = from_env({})
    assert (s.host, s.port) == ("0.0.0.0", 3000)
    assert s.data_dir == Path("./data")
    assert s.signing_key is None and s.fsync == "batch" and s.rate_limit == 100
    assert s.max_body_bytes == 1048576 and s.max_token_ttl_ms == 2592000000
    assert s.http_parser == "auto" and s.max_connections == 10000
    assert s.wal_slot == "service_wal" and s.wal_pub == "service_pub"
    assert s.metrics_max_crdt_series == 1000
    assert (s.op_id_window, s.op_id_ttl_s) == (1024, 120)
    assert s.memory_budget_mb == 512
    assert len(s.node_id) == 8


def test_values_are_read() -> None:
    s = from_env(
        {
            "SERVICE_BIND": "[::1]:8080",
            "SERVICE_SIGNING_KEY": "ab" * 32,
            "SERVICE_FSYNC": "always",
            "SERVICE_RATE_LIMIT": "5",
            "SERVICE_CORS_ORIGINS": "https://a.example, https://b.example",
            "SERVICE_DEMO": "true",
            "DATABASE_URL": "postgresql://x@y/z",
            "SERVICE_METRICS_MAX_CRDT_SERIES": "3",
        }
    )
    assert (s.host, s.port) == ("::1", 8080)
    assert s.signing_key == bytes.fromhex("ab" * 32)
    assert s.fsync == "always" and s.rate_limit == 5 and s.demo
    assert s.cors_origins == ("https://a.example", "https://b.example")
    assert s.metrics_max_crdt_series == 3
    assert isinstance(s, Settings)


def test_previous_signing_keys() -> None:
    """Comma-separated seeds, spaces and empty items ignored, repeats once;
    unset: none."""
    assert from_env({}).previous_signing_keys == ()
    s = from_env({"SERVICE_PREVIOUS_SIGNING_KEYS": f" {'ab' * 32}, ,{'CD' * 32},{'ab' * 32},"})
    assert s.previous_signing_keys == (bytes.fromhex("ab" * 32), bytes.fromhex("cd" * 32))


def test_a_bad_previous_key_is_named_by_position_not_value() -> None:
    secret = "ab" * 31 + "zz"
    with pytest.raises(ConfigError) as info:
        from_env({"SERVICE_PREVIOUS_SIGNING_KEYS": f"{'cd' * 32},{secret}"})
    assert "key 2" in str(info.value) and secret not in str(info.value)


def test_the_memory_budget_may_be_a_fraction_of_a_mb() -> None:
    assert from_env({"SERVICE_MEMORY_BUDGET_MB": "0.25"}).memory_budget_mb == 0.25


def test_op_id_ttl_may_be_zero() -> None:
    """0: the count window alone bounds the op_id memory."""
    assert from_env({"SERVICE_OP_ID_TTL_S": "0"}).op_id_ttl_s == 0


def test_metrics_max_crdt_series_may_be_zero() -> None:
    """0: no per-CRDT series, every op under the overflow value."""
    assert from_env({"SERVICE_METRICS_MAX_CRDT_SERIES": "0"}).metrics_max_crdt_series == 0


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("SERVICE_BIND", "nope"),
        ("SERVICE_BIND", "127.0.0.1:70000"),
        ("SERVICE_BIND", "127.0.0.1:-1"),
        ("SERVICE_BIND", "::1:80"),
        ("SERVICE_SIGNING_KEY", "abc"),
        ("SERVICE_SIGNING_KEY", "zz" * 32),
        ("SERVICE_SIGNING_KEY", ""),
        ("SERVICE_SIGNING_KEY", "  \t"),
        ("SERVICE_FSYNC", "sometimes"),
        ("SERVICE_RATE_LIMIT", "0"),
        ("SERVICE_RATE_LIMIT", "ten"),
        ("SERVICE_MAX_BODY_BYTES", "-5"),
        ("SERVICE_MAX_TOKEN_TTL_MS", "1.5"),
        ("SERVICE_LOG_LEVEL", "loud"),
        ("SERVICE_HTTP_PARSER", "picohttp"),
        ("SERVICE_MAX_CONNECTIONS", "0"),
        ("SERVICE_WEBHOOK_URL", "ftp://x"),
        ("DATABASE_URL", "mysql://x"),
        ("SERVICE_WAL_SLOT", "Bad-Slot"),
        ("SERVICE_WAL_PUB", "bad pub"),
        ("SERVICE_NODE_ID", "a/b"),
        ("SERVICE_HEADER_TIMEOUT_S", "0"),
        ("SERVICE_HEADER_TIMEOUT_S", "inf"),
        ("SERVICE_HEADER_TIMEOUT_S", "1e999"),
        ("SERVICE_HEADER_TIMEOUT_S", "nan"),
        ("SERVICE_HEADER_TIMEOUT_S", "86400.5"),
        ("SERVICE_WS_PING_S", "Infinity"),
        ("SERVICE_SSE_PING_S", "-inf"),
        ("SERVICE_SEND_TIMEOUT_S", "1e300"),
        ("SERVICE_KEEPALIVE_TIMEOUT_S", "inf"),
        ("SERVICE_SHUTDOWN_TIMEOUT_S", "inf"),
        ("SERVICE_WEBHOOK_DRAIN_S", "inf"),
        ("SERVICE_MEMORY_BUDGET_MB", "inf"),
        ("SERVICE_MEMORY_BUDGET_MB", "1e999"),
        ("SERVICE_MEMORY_BUDGET_MB", "16777216.5"),
        ("SERVICE_DEMO", "maybe"),
        ("SERVICE_ACCESS_LOG", "sometimes"),
        ("SERVICE_METRICS_MAX_CRDT_SERIES", "-1"),
        ("SERVICE_METRICS_MAX_CRDT_SERIES", "many"),
        ("SERVICE_METRICS_MAX_CRDT_SERIES", "1e3"),
        ("SERVICE_OP_ID_TTL_S", "-1"),
        ("SERVICE_MEMORY_BUDGET_MB", "0"),
        ("SERVICE_MEMORY_BUDGET_MB", "lots"),
        ("SERVICE_MEMORY_BUDGET_MB", "-2"),
        ("SERVICE_OP_ID_TTL_S", "2m"),
        ("SERVICE_PREVIOUS_SIGNING_KEYS", "abc"),
        ("SERVICE_PREVIOUS_SIGNING_KEYS", "ab" * 32 + ",zz" + "z" * 62),
        ("SERVICE_PREVIOUS_SIGNING_KEYS", ",".join(f"{i:02x}" * 32 for i in range(9))),
    ],
)
def test_bad_values_name_the_variable(variable: str, value: str) -> None:
    with pytest.raises(ConfigError) as info:
        from_env({variable: value})
    assert info.value.variable == variable
    assert str(info.value).startswith(variable + ":")
    assert "\n" not in str(info.value)


def test_parse_bind() -> None:
    assert parse_bind("localhost:0") == ("localhost", 0)
    assert parse_bind("[::]:65535") == ("::", 65535)
    with pytest.raises(ValueError):
        parse_bind("[zz]:1")


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("SERVICE_BIND", "127.0.0.1:99999"),
        ("SERVICE_FSYNC", "nope"),
        ("SERVICE_SIGNING_KEY", "short"),
        ("SERVICE_SIGNING_KEY", ""),
        ("SERVICE_METRICS_MAX_CRDT_SERIES", "-1"),
        ("SERVICE_PREVIOUS_SIGNING_KEYS", "ab" * 32 + ",nothex"),
    ],
)
def test_bad_value_exits_nonzero_with_one_line(variable: str, value: str, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "syncd"],
        env={"PATH": "/usr/bin:/bin", variable: value, "SERVICE_DATA_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and variable in lines[0], proc.stderr


def test_an_empty_signing_key_is_refused_not_taken_for_unset() -> None:
    """`export SERVICE_SIGNING_KEY=$(a failed command)` leaves it empty: that
    must stop the start, not fall back to a random key."""
    assert from_env({}).signing_key is None
    for empty in ("", " ", "\n"):
        with pytest.raises(ConfigError, match="set but empty"):
            from_env({"SERVICE_SIGNING_KEY": empty})


def test_every_variable_is_in_the_readme_table_and_the_reference() -> None:
    """The README's table and docs/configuration.md name every variable read here."""
    root = Path(__file__).resolve().parents[1]
    source = (root / "syncd" / "config.py").read_text()
    names = set(re.findall(r'"(SERVICE_[A-Z0-9_]+|DATABASE_URL)"', source))
    assert "SERVICE_HISTORY_RETENTION" in names
    for page in ("README.md", "docs/configuration.md"):
        text = (root / page).read_text()
        missing = sorted(name for name in names if f"`{name}`" not in text)
        assert not missing, f"{page} does not name {missing}"


def test_the_access_log_is_off_unless_turned_on() -> None:
    assert from_env({}).access_log is False
    assert from_env({"SERVICE_ACCESS_LOG": "true"}).access_log is True
    assert from_env({"SERVICE_ACCESS_LOG": "0"}).access_log is False


def test_durations_and_the_memory_budget_are_taken_up_to_their_maximum() -> None:
    """The limit itself is accepted; only past it (or not finite) is refused."""
    config = from_env(
        {
            "SERVICE_HEADER_TIMEOUT_S": str(MAX_DURATION_S),
            "SERVICE_MEMORY_BUDGET_MB": str(MAX_MEMORY_BUDGET_MB),
        }
    )
    assert config.header_timeout_s == MAX_DURATION_S
    assert config.memory_budget_mb == MAX_MEMORY_BUDGET_MB


@pytest.mark.parametrize(
    "url",
    [
        "ftp://user:s3cret@hooks.example/T0/B0/s3cret",
        "htp://user:s3cret@hooks.example/x?key=s3cret",
    ],
)
def test_a_refused_webhook_url_is_not_quoted_whole(url: str) -> None:
    """A URL refused for its scheme: the error names the variable and the
    scheme, never the credentials, path or query (the line goes to the
    journal; the path and query often hold the hook's secret)."""
    with pytest.raises(ConfigError) as info:
        from_env({"SERVICE_WEBHOOK_URL": url})
    assert info.value.variable == "SERVICE_WEBHOOK_URL"
    assert "s3cret" not in str(info.value), str(info.value)


def test_a_webhook_url_scheme_in_capitals_is_taken() -> None:
    settings = from_env({"SERVICE_WEBHOOK_URL": "HTTPS://hooks.example/in"})
    assert settings.webhook_url == "HTTPS://hooks.example/in"


def test_the_settings_repr_holds_no_secret() -> None:
    secrets = {
        "SERVICE_SIGNING_KEY": "ab" * 32,
        "SERVICE_PREVIOUS_SIGNING_KEYS": "cd" * 32,
        "SERVICE_ADMIN_TOKEN": "admin-s3cret-0123456789abcdef",
        "SERVICE_WEBHOOK_URL": "https://hooks.example/T0/B0/s3cretpath",
        "SERVICE_WEBHOOK_SECRET": "hook-s3cret",
        "DATABASE_URL": "postgresql://syncd:pg-s3cret@db/syncd",
        "SERVICE_WAL_CONNSTR": "postgresql://repl:wal-s3cret@db/syncd",
    }
    shown = repr(from_env(secrets))
    for value in ("ab" * 32, "cd" * 32, "s3cret"):
        assert value not in shown, shown

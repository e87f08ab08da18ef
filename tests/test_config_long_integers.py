"""An integer setting of more than 4300 digits was refused with Python's own
message ("Exceeds the limit (4300 digits) for integer string conversion ...
use sys.set_int_max_str_digits() to increase the limit"), which speaks of an
interpreter setting rather than of syncd's, or for most of them as "'111...'
is not an integer" repeating all the digits. No setting takes a number near
a hundred characters (64 bits are 20 digits), so a longer value is refused
before it is read, in the config's own line, without repeating it; this
holds whatever Python's limit is (PYTHONINTMAXSTRDIGITS may lower it to 640)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from syncd.config import MAX_NUMBER_CHARS, ConfigError, from_env
from tests.conftest import start_to_the_end

INTEGER_SETTINGS = (
    "SERVICE_RATE_LIMIT",
    "SERVICE_MAX_BODY_BYTES",
    "SERVICE_MAX_TOKEN_TTL_MS",
    "SERVICE_MAX_CONNECTIONS",
    "SERVICE_SUBSCRIBER_BUFFER_BYTES",
    "SERVICE_MAX_SUBSCRIPTIONS",
    "SERVICE_OP_ID_WINDOW",
    "SERVICE_MAX_CRDT_BYTES",
    "SERVICE_NAMESPACE_MAX_CRDTS",
    "SERVICE_NAMESPACE_MAX_BYTES",
    "SERVICE_OP_ID_TTL_S",
    "SERVICE_JSON_MAX_DEPTH",
    "SERVICE_METRICS_MAX_CRDT_SERIES",
)
PAST_PYTHON = "1" * 5000  # more digits than int() reads by default (4300)
LONG = "9" * (MAX_NUMBER_CHARS + 1)


def refusal(name: str, value: str) -> str:
    with pytest.raises(ConfigError) as info:
        from_env({name: value})
    return str(info.value)


def test_a_number_setting_takes_up_to_a_hundred_characters() -> None:
    assert MAX_NUMBER_CHARS == 100
    padded = "0" * (MAX_NUMBER_CHARS - 2) + "42"
    assert from_env({"SERVICE_RATE_LIMIT": padded}).rate_limit == 42
    assert from_env({"SERVICE_HISTORY_RETENTION": padded[3:] + "ops"}).history_retention.ops == 42
    assert from_env({"SERVICE_BIND": f"127.0.0.1:{padded}"}).port == 42


@pytest.mark.parametrize("value", [PAST_PYTHON, LONG, "0" * 5000, " " + LONG + "\n"])
@pytest.mark.parametrize("name", INTEGER_SETTINGS)
def test_a_longer_integer_setting_is_refused_in_the_configs_own_line(name: str, value: str) -> None:
    length = len(value.strip())
    message = refusal(name, value)
    assert message.startswith(f"{name}: ")
    assert f"{length} characters long" in message
    assert f"(at most {MAX_NUMBER_CHARS} characters)" in message
    assert "set_int_max_str_digits" not in message and "\n" not in message
    assert len(message) < 200  # the value itself is not repeated


@pytest.mark.parametrize("value", [PAST_PYTHON + "ops", PAST_PYTHON + "d", LONG + "s"])
def test_a_longer_history_retention_is_refused_in_the_configs_own_line(value: str) -> None:
    message = refusal("SERVICE_HISTORY_RETENTION", value)
    assert message == (
        f"SERVICE_HISTORY_RETENTION: a value {len(value)} characters long"
        f" is no setting's number (at most {MAX_NUMBER_CHARS} characters)"
    )


def test_a_longer_port_is_refused_in_the_configs_own_line() -> None:
    message = refusal("SERVICE_BIND", f"127.0.0.1:{PAST_PYTHON}")
    assert message == (
        f"SERVICE_BIND: a port {len(PAST_PYTHON)} characters long"
        f" is no setting's number (at most {MAX_NUMBER_CHARS} characters)"
    )


def test_the_real_process_refuses_a_long_integer_in_one_line(tmp_path: Path) -> None:
    # Python's limit lowered to its least: the line is the config's all the same.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = start_to_the_end(
            tmp_path / "data",
            SERVICE_BIND=f"127.0.0.1:{port}",
            SERVICE_HISTORY_RETENTION="7" * 700 + "ops",
            PYTHONINTMAXSTRDIGITS="640",
        )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.decode().strip().splitlines() == [
        "syncd: SERVICE_HISTORY_RETENTION: a value 703 characters long"
        f" is no setting's number (at most {MAX_NUMBER_CHARS} characters)"
    ]
    assert not (tmp_path / "data").exists()

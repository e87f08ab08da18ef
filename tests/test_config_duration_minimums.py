"""Every timeout and interval setting took any positive number, however
small: SERVICE_SSE_PING_S=1e-9 made the event streams' shared keep-alive
timer tick every 1/16 ns (the loop busy with it for as long as a stream is
open), SERVICE_HEADER_TIMEOUT_S=1e-9 closed every connection before its first
byte. Each now has a named minimum (syncd/config.py says why), and a smaller
value stops the start with one line naming the variable and the minimum,
exit 2, as any other bad value does."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from syncd.config import (
    MIN_DRAIN_S,
    MIN_PING_S,
    MIN_SHUTDOWN_WAIT_S,
    MIN_TIMEOUT_S,
    ConfigError,
    from_env,
)
from tests.conftest import start_to_the_end

MINIMUMS = {
    "SERVICE_HEADER_TIMEOUT_S": ("header_timeout_s", MIN_TIMEOUT_S),
    "SERVICE_KEEPALIVE_TIMEOUT_S": ("keepalive_timeout_s", MIN_TIMEOUT_S),
    "SERVICE_SEND_TIMEOUT_S": ("send_timeout_s", MIN_TIMEOUT_S),
    "SERVICE_WS_PING_S": ("ws_ping_s", MIN_PING_S),
    "SERVICE_SSE_PING_S": ("sse_ping_s", MIN_PING_S),
    "SERVICE_SHUTDOWN_TIMEOUT_S": ("shutdown_timeout_s", MIN_SHUTDOWN_WAIT_S),
    "SERVICE_WEBHOOK_DRAIN_S": ("webhook_drain_s", MIN_SHUTDOWN_WAIT_S),
    "SERVICE_SHUTDOWN_DRAIN_S": ("shutdown_drain_s", MIN_DRAIN_S),
}


@pytest.mark.parametrize("name", sorted(MINIMUMS))
@pytest.mark.parametrize("tiny", ["1e-9", "0.000001"])
def test_a_value_below_the_minimum_is_refused(name: str, tiny: str) -> None:
    minimum = MINIMUMS[name][1]
    with pytest.raises(ConfigError) as info:
        from_env({name: tiny})
    zero = " 0 or" if name == "SERVICE_SHUTDOWN_DRAIN_S" else ""
    assert str(info.value) == f"{name}: must be{zero} at least {minimum:g}, got {tiny}"


@pytest.mark.parametrize("name", sorted(MINIMUMS))
def test_the_minimum_itself_is_taken(name: str) -> None:
    field, minimum = MINIMUMS[name]
    assert getattr(from_env({name: f"{minimum:g}"}), field) == minimum


def test_the_minimums_are_below_the_defaults() -> None:
    defaults = from_env({})
    for field, minimum in MINIMUMS.values():
        assert getattr(defaults, field) == 0 or getattr(defaults, field) >= minimum, field


def test_zero_still_switches_the_drain_off() -> None:
    assert from_env({"SERVICE_SHUTDOWN_DRAIN_S": "0"}).shutdown_drain_s == 0


def test_the_real_process_refuses_a_tiny_ping_in_one_line(tmp_path: Path) -> None:
    # A port in use: before this check the start went on to the bind check.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = start_to_the_end(
            tmp_path / "data", SERVICE_BIND=f"127.0.0.1:{port}", SERVICE_SSE_PING_S="1e-9"
        )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.decode().strip().splitlines() == [
        f"syncd: SERVICE_SSE_PING_S: must be at least {MIN_PING_S:g}, got 1e-9"
    ]
    assert not (tmp_path / "data").exists()

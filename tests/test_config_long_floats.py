"""A duration or size setting (read as a float) thousands of characters long
was refused in a line that repeated it whole ("must be at most 86400, got
1111...", 5000 characters to the journal). Past MAX_NUMBER_CHARS it is
refused as the integer settings are: its length, not its text."""

from __future__ import annotations

import pytest

from syncd.config import MAX_NUMBER_CHARS, ConfigError, from_env

FLOAT_SETTINGS = (
    "SERVICE_HEADER_TIMEOUT_S",
    "SERVICE_KEEPALIVE_TIMEOUT_S",
    "SERVICE_SEND_TIMEOUT_S",
    "SERVICE_WS_PING_S",
    "SERVICE_SSE_PING_S",
    "SERVICE_SHUTDOWN_TIMEOUT_S",
    "SERVICE_SHUTDOWN_DRAIN_S",
    "SERVICE_WEBHOOK_DRAIN_S",
    "SERVICE_MEMORY_BUDGET_MB",
)


@pytest.mark.parametrize(
    "value", ["1" * 5000, "0." + "0" * 4998 + "1", "2" * (MAX_NUMBER_CHARS + 1)]
)
@pytest.mark.parametrize("name", FLOAT_SETTINGS)
def test_a_longer_number_setting_is_refused_without_repeating_it(name: str, value: str) -> None:
    with pytest.raises(ConfigError) as info:
        from_env({name: value})
    assert str(info.value) == (
        f"{name}: a value {len(value)} characters long is no setting's number"
        f" (at most {MAX_NUMBER_CHARS} characters)"
    )


def test_a_number_setting_of_a_hundred_characters_is_read() -> None:
    padded = "0" * (MAX_NUMBER_CHARS - 4) + "2.50"
    assert from_env({"SERVICE_WS_PING_S": padded}).ws_ping_s == 2.5

"""SERVICE_HISTORY_RETENTION took any count or age ("99999999999999999999d").
Nothing overflowed (the stores compare Python ints, PostgreSQL a numeric),
but past a point a larger value keeps nothing more: ops are stamped in
milliseconds since 1970, so an age of a century already keeps all of them,
and no seq passes 2**63 - 1. Such a value is a mistake, and is refused as any
other setting past its maximum is: one line naming the variable and the
maximum, exit 2."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from syncd.config import MAX_RETENTION_AGE_MS, MAX_RETENTION_OPS, ConfigError, from_env
from tests.conftest import start_to_the_end

DAY_MS = 86_400_000
TOO_OLD = "99999999999999999999d"


def refusal(value: str) -> str:
    with pytest.raises(ConfigError) as info:
        from_env({"SERVICE_HISTORY_RETENTION": value})
    return str(info.value)


def test_the_retention_maximums() -> None:
    assert MAX_RETENTION_AGE_MS == 36_500 * DAY_MS  # 100 years
    assert MAX_RETENTION_OPS == 2**63 - 1  # the largest seq


@pytest.mark.parametrize("value", ["36500d", "876000h", "52560000m", "3153600000s"])
def test_a_retention_of_a_hundred_years_is_taken(value: str) -> None:
    taken = from_env({"SERVICE_HISTORY_RETENTION": value}).history_retention
    assert taken.age_ms == MAX_RETENTION_AGE_MS


def test_a_retention_of_the_largest_seq_in_ops_is_taken() -> None:
    taken = from_env({"SERVICE_HISTORY_RETENTION": f"{MAX_RETENTION_OPS}ops"}).history_retention
    assert taken.ops == MAX_RETENTION_OPS


@pytest.mark.parametrize("value", ["36501d", "876001h", "3153600001s", TOO_OLD, " 1000000000000s "])
def test_a_retention_age_past_a_hundred_years_is_refused(value: str) -> None:
    assert refusal(value) == (
        f"SERVICE_HISTORY_RETENTION: must be at most 36500d (100 years), got {value.strip()}"
    )


@pytest.mark.parametrize("value", [f"{2**63}ops", "99999999999999999999ops"])
def test_a_retention_count_past_the_largest_seq_is_refused(value: str) -> None:
    assert refusal(value) == (
        f"SERVICE_HISTORY_RETENTION: must be at most {MAX_RETENTION_OPS}ops, got {value}"
    )


def test_the_real_process_refuses_a_retention_of_ages_in_one_line(tmp_path: Path) -> None:
    # A port in use: without this check the start went on to the bind check.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = start_to_the_end(
            tmp_path / "data", SERVICE_BIND=f"127.0.0.1:{port}", SERVICE_HISTORY_RETENTION=TOO_OLD
        )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.decode().strip().splitlines() == [
        f"syncd: SERVICE_HISTORY_RETENTION: must be at most 36500d (100 years), got {TOO_OLD}"
    ]
    assert not (tmp_path / "data").exists()

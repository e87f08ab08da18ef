"""SERVICE_OP_ID_TTL_S had no maximum, unlike every other duration (a day).
A CRDT remembers every op_id younger than the TTL, past its window in the
aged tier (16 bytes an id, in its snapshots too), so a TTL of years is memory
that grows with every op on a busy CRDT and is never let go; op ids exist for
retries, minutes after the first send. It is capped at a day like the other
durations: a larger value stops the start with one line, exit 2."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from syncd.config import ConfigError, from_env
from syncd.crdt.opids import OP_ID_TTL_MS
from tests.conftest import start_to_the_end

DAY_S = 86_400
TOO_LONG = "99999999999999999999"


def test_the_op_id_ttl_takes_up_to_a_day() -> None:
    assert from_env({"SERVICE_OP_ID_TTL_S": str(DAY_S)}).op_id_ttl_s == DAY_S
    assert from_env({"SERVICE_OP_ID_TTL_S": "0"}).op_id_ttl_s == 0  # the window alone
    assert from_env({}).op_id_ttl_s == OP_ID_TTL_MS // 1000


@pytest.mark.parametrize("value", [str(DAY_S + 1), "31536000", TOO_LONG])
def test_an_op_id_ttl_past_a_day_is_refused(value: str) -> None:
    with pytest.raises(ConfigError) as info:
        from_env({"SERVICE_OP_ID_TTL_S": value})
    assert str(info.value) == f"SERVICE_OP_ID_TTL_S: must be at most {DAY_S}, got {value}"


def test_the_real_process_refuses_a_ttl_of_ages_in_one_line(tmp_path: Path) -> None:
    # A port in use: without this check the start went on to the bind check.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = start_to_the_end(
            tmp_path / "data", SERVICE_BIND=f"127.0.0.1:{port}", SERVICE_OP_ID_TTL_S=TOO_LONG
        )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.decode().strip().splitlines() == [
        f"syncd: SERVICE_OP_ID_TTL_S: must be at most {DAY_S}, got {TOO_LONG}"
    ]
    assert not (tmp_path / "data").exists()

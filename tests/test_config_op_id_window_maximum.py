"""SERVICE_OP_ID_WINDOW had no maximum. Each id of the window is remembered
with its answer (about 250 bytes, syncd/crdt/opids.py) and the window is
never trimmed below its size, so a busy CRDT holds that many for good: a
window of a billion was gigabytes per CRDT. It is capped at 65536 (16 MB per
busy CRDT): a larger value stops the start with one line, exit 2."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from syncd.config import MAX_OP_ID_WINDOW, ConfigError, from_env
from syncd.crdt.engine import OP_ID_WINDOW
from tests.conftest import start_to_the_end

MOST = 65_536
TOO_MANY = "1000000000"


def test_the_op_id_window_takes_up_to_its_maximum() -> None:
    assert MAX_OP_ID_WINDOW == MOST
    assert from_env({"SERVICE_OP_ID_WINDOW": str(MOST)}).op_id_window == MOST
    assert from_env({}).op_id_window == OP_ID_WINDOW


@pytest.mark.parametrize("value", [str(MOST + 1), TOO_MANY, "99999999999999999999"])
def test_a_larger_op_id_window_is_refused(value: str) -> None:
    with pytest.raises(ConfigError) as info:
        from_env({"SERVICE_OP_ID_WINDOW": value})
    assert str(info.value) == f"SERVICE_OP_ID_WINDOW: must be at most {MOST}, got {value}"


def test_the_real_process_refuses_a_huge_window_in_one_line(tmp_path: Path) -> None:
    # A port in use: without this check the start went on to the bind check.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = start_to_the_end(
            tmp_path / "data", SERVICE_BIND=f"127.0.0.1:{port}", SERVICE_OP_ID_WINDOW=TOO_MANY
        )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.decode().strip().splitlines() == [
        f"syncd: SERVICE_OP_ID_WINDOW: must be at most {MOST}, got {TOO_MANY}"
    ]
    assert not (tmp_path / "data").exists()

"""SERVICE_SUBSCRIBER_BUFFER_BYTES becomes each WebSocket's write-buffer mark,
which the event loop keeps in a C int: past 2147483647 every WebSocket
upgrade failed with an OverflowError traceback in the log (the client saw
the connection drop). Such a value now stops the start with one line; the
largest one taken serves WebSockets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from syncd.config import MAX_SUBSCRIBER_BUFFER_BYTES, ConfigError, from_env
from tests.conftest import start_to_the_end
from tests.ws.support import op, open_ws, recv_kind, send_mp


def test_the_largest_buffer_the_loop_takes_is_the_limit() -> None:
    assert MAX_SUBSCRIBER_BUFFER_BYTES == 2**31 - 1
    top = from_env({"SERVICE_SUBSCRIBER_BUFFER_BYTES": str(MAX_SUBSCRIBER_BUFFER_BYTES)})
    assert top.subscriber_buffer_bytes == MAX_SUBSCRIBER_BUFFER_BYTES
    for value in (2**31, 2**63, 10**26):
        with pytest.raises(ConfigError, match="at most 2147483647"):
            from_env({"SERVICE_SUBSCRIBER_BUFFER_BYTES": str(value)})


def test_a_buffer_past_it_stops_the_start_with_one_line(tmp_path: Path) -> None:
    proc = start_to_the_end(tmp_path / "data", SERVICE_SUBSCRIBER_BUFFER_BYTES=str(2**31))
    assert proc.returncode == 2
    lines = proc.stderr.decode().strip().splitlines()
    assert lines == [
        "syncd: SERVICE_SUBSCRIBER_BUFFER_BYTES: must be at most 2147483647, got 2147483648"
    ]


async def test_the_largest_buffer_serves_websockets(spawn_server: Any) -> None:
    server = spawn_server({"SERVICE_SUBSCRIBER_BUFFER_BYTES": str(MAX_SUBSCRIBER_BUFFER_BYTES)})
    async with open_ws(server) as ws:
        await send_mp(ws, {"kind": "subscribe", "id": "gc:big", "ref": 1})
        await recv_kind(ws, "snapshot")
        ack = await op(ws, "gc:big", {"op": "increment"}, ref=2)
        assert ack["kind"] == "ack", ack
    assert server.terminate() == 0
    assert "Traceback" not in server.log()

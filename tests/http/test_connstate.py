"""The HTTP connection's phases: the table itself, and every move it allows taken
by a real connection to the real server (each connection's moves recorded)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from syncd.http.connstate import TRANSITIONS, ConnectionState, IllegalTransition, Phase
from tests.conftest import ADMIN, read_until_closed

Moves = list[tuple[Phase, Phase]]
AUTH = f"Authorization: Bearer {ADMIN}\r\n"


@pytest.fixture
def moves(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[int, Moves]]:
    """Every move of every connection, by connection (the ConnectionState's id)."""
    recorded: dict[int, Moves] = {}
    original = ConnectionState.to

    def recording(self: ConnectionState, phase: Phase) -> None:
        before = self.phase
        original(self, phase)
        recorded.setdefault(id(self), []).append((before, phase))

    monkeypatch.setattr(ConnectionState, "to", recording)
    yield recorded


def paths(recorded: dict[int, Moves]) -> list[list[str]]:
    out = []
    for moves in recorded.values():
        path = [moves[0][0].name] + [after.name for _, after in moves]
        out.append(path)
    return out


def test_the_table_allows_exactly_its_moves() -> None:
    for start in Phase:
        for end in Phase:
            state = ConnectionState()
            state.phase = start
            if end in TRANSITIONS[start]:
                state.to(end)
                assert state.phase is end
            else:
                with pytest.raises(IllegalTransition):
                    state.to(end)
                assert state.phase is start
    assert ConnectionState().phase is Phase.IDLE
    assert {p for p in Phase if not TRANSITIONS[p]} == {Phase.UPGRADED, Phase.CLOSED}


async def exchange(port: int, data: bytes, *, close: bool = True) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    if close:
        writer.write_eof()
    answer = await read_until_closed(reader)
    writer.close()
    return answer


async def settle() -> None:
    await asyncio.sleep(0.05)


async def test_keep_alive_then_close(make_server: Any, moves: dict[int, Moves]) -> None:
    server = await make_server()
    request = b"GET /health/live HTTP/1.1\r\nHost: x\r\n\r\n"
    last = b"GET /health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    answer = await exchange(server.port, request + last, close=False)
    assert answer.count(b"200 OK") == 2
    await settle()
    # IDLE -> BUSY -> IDLE (kept alive) -> BUSY -> LINGERING (half-closed) -> CLOSED
    assert paths(moves) == [["IDLE", "BUSY", "IDLE", "BUSY", "LINGERING", "CLOSED"]]


async def test_a_parse_error_is_answered_from_idle(
    make_server: Any, moves: dict[int, Moves]
) -> None:
    server = await make_server()
    answer = await exchange(server.port, b"NOT HTTP AT ALL\r\n\r\n", close=False)
    assert b" 400 " in answer.split(b"\r\n", 1)[0]
    await settle()
    assert paths(moves) == [["IDLE", "LINGERING", "CLOSED"]]


async def test_the_peer_leaving_while_idle(make_server: Any, moves: dict[int, Moves]) -> None:
    server = await make_server()
    assert await exchange(server.port, b"") == b""
    await settle()
    assert paths(moves) == [["IDLE", "CLOSED"]]


async def test_an_idle_connection_times_out(make_server: Any, moves: dict[int, Moves]) -> None:
    server = await make_server(keepalive_timeout_s=0.1)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"GET /health/live HTTP/1.1\r\nHost: x\r\n\r\n")
    assert b"200 OK" in await read_until_closed(reader)  # closed by the keep-alive timeout
    writer.close()
    await settle()
    assert paths(moves) == [["IDLE", "BUSY", "IDLE", "CLOSED"]]


async def test_a_stream_until_the_peer_leaves(make_server: Any, moves: dict[int, Moves]) -> None:
    server = await make_server()
    async with httpx.AsyncClient(base_url=server.url) as http:
        answer = await http.post(
            "/v1/namespaces/n/crdts/gc:s/ops",
            json={"op": "increment"},
            headers={"authorization": f"Bearer {ADMIN}"},
        )
        assert answer.status_code == 200
    moves.clear()
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(
        f"GET /v1/namespaces/n/crdts/gc:s/events HTTP/1.1\r\nHost: x\r\n{AUTH}\r\n".encode()
    )
    await reader.readuntil(b"data: ")
    writer.close()
    await settle()
    assert ["IDLE", "BUSY", "STREAMING", "CLOSED"] in paths(moves)


async def test_an_upgrade_hands_the_connection_over(
    make_server: Any, moves: dict[int, Moves]
) -> None:
    server = await make_server()
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(
        b"GET /v1/namespaces/n/ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
        b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        b"Sec-WebSocket-Version: 13\r\n" + AUTH.encode() + b"\r\n"
    )
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101")
    writer.close()
    await settle()
    assert paths(moves) == [["IDLE", "BUSY", "UPGRADED"]]


async def test_the_peer_leaving_while_busy(make_server: Any, moves: dict[int, Moves]) -> None:
    server = await make_server(fsync="always")
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    body = b'{"op": "increment"}'
    writer.write(
        b"POST /v1/namespaces/n/crdts/gc:b/ops HTTP/1.1\r\nHost: x\r\n"
        + AUTH.encode()
        + b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
        + body
    )
    writer.transport.abort()  # gone before the answer (the op waits for its fsync)
    await asyncio.sleep(0.3)
    assert paths(moves)[0][:2] == ["IDLE", "BUSY"]
    assert paths(moves)[0][-1] == "CLOSED"


async def test_a_refusal_at_accept_lingers(make_server: Any, moves: dict[int, Moves]) -> None:
    server = await make_server(max_connections=1)
    first_reader, first_writer = await asyncio.open_connection("127.0.0.1", server.port)
    await settle()
    answer = await exchange(server.port, b"", close=False)
    assert b" 503 " in answer.split(b"\r\n", 1)[0]
    first_writer.close()
    await settle()
    assert ["IDLE", "LINGERING", "CLOSED"] in paths(moves)

"""SSE reads that end between their authorization and their start: the start
waits for the ops in flight to be durable (a gated store holds them), and
meanwhile the client leaves, the token is revoked, the server stops. Nothing
of the stream may outlive that: no subscription on the hub, no stream counted,
nothing written after the end."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import socket
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import msgpack

from syncd.http.handlers.events import SseSubscriber
from tests.conftest import ADMIN, RunningServer
from tests.store.support import Faults, gated_server
from tests.ws.support import NS, mint, wait_for

DOC = "gc:window"
EVENTS = f"/v1/namespaces/{NS}/crdts/{DOC}/events"


def _streams(server: RunningServer) -> list[SseSubscriber]:
    return [s for s in server.app.hub.subscribers(NS, DOC) if isinstance(s, SseSubscriber)]


def _active(server: RunningServer) -> float:
    value: float = server.app.metrics.sse_connections_active._value.get()
    return value


@contextlib.asynccontextmanager
async def held_start(
    data_dir: Path, ttl_ms: int = 3_600_000
) -> AsyncIterator[tuple[RunningServer, threading.Event, socket.socket, str]]:
    """A server whose log writes wait on a gate, an op of ``DOC`` in flight
    behind it, and a raw client whose GET of the events waits for that op:
    authorized and subscribed, not started. Yields the server, the gate, the
    client's socket and its token."""
    async with gated_server(data_dir) as (server, faults):
        token = mint(ttl_ms=ttl_ms)
        auth = {"authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(base_url=server.url, headers=auth, timeout=30) as client:
            ops = f"/v1/namespaces/{NS}/crdts/{DOC}/ops"
            r = await client.post(ops, json={"op": "increment", "amount": 1})
            assert r.status_code == 200, r.text
            gate = _hold(faults)
            in_flight = asyncio.ensure_future(
                client.post(ops, json={"op": "increment", "amount": 1})
            )
            await wait_for(faults.entered.is_set)
            sock = socket.create_connection(("127.0.0.1", server.port))
            sock.sendall(
                f"GET {EVENTS} HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {token}\r\n\r\n".encode()
            )
            await wait_for(lambda: len(_streams(server)) == 1)
            try:
                yield server, gate, sock, token
            finally:
                gate.set()
                sock.close()
                with contextlib.suppress(Exception):
                    await in_flight


def _hold(faults: Faults) -> threading.Event:
    gate = threading.Event()
    faults.entered.clear()
    faults.gate = gate
    return gate


async def test_a_client_that_closes_before_the_start_leaves_nothing(tmp_path: Path) -> None:
    async with held_start(tmp_path / "data") as (server, gate, sock, _):
        sock.close()
        await asyncio.sleep(0.2)
        gate.set()
        await wait_for(lambda: not _streams(server))
        assert _active(server) == 0


async def test_a_client_eof_before_the_start_ends_the_stream(tmp_path: Path) -> None:
    async with held_start(tmp_path / "data") as (server, gate, sock, _):
        sock.shutdown(socket.SHUT_WR)  # as at a started stream: the client is done
        await asyncio.sleep(0.2)
        gate.set()
        await wait_for(lambda: not _streams(server))
        assert _active(server) == 0


def _read_all(sock: socket.socket) -> bytes:
    sock.settimeout(10)
    data = bytearray()
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            data += chunk
    return bytes(data)


async def test_a_token_revoked_before_the_start_gets_only_the_end(tmp_path: Path) -> None:
    async with held_start(tmp_path / "data") as (server, gate, sock, _):
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as admin:
            r = await admin.post(
                f"/v1/namespaces/{NS}/revocations",
                json={"client_id": 7, "before_ms": time.time_ns() // 1_000_000 + 1},
                headers={"authorization": f"Bearer {ADMIN}"},
            )
            assert r.status_code == 200, r.text
        gate.set()
        raw = await asyncio.to_thread(_read_all, sock)
        head, _, body = raw.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 ")
        assert body == b'event: end\ndata: {"error":"token_revoked","message":"token revoked"}\n\n'
        await wait_for(lambda: not _streams(server))
        assert _active(server) == 0


async def test_a_server_stopping_before_the_start_closes_the_stream(tmp_path: Path) -> None:
    async with held_start(tmp_path / "data") as (server, gate, sock, _):
        stopping = asyncio.ensure_future(server.server.shutdown())
        await asyncio.sleep(0.2)
        gate.set()
        raw = await asyncio.to_thread(_read_all, sock)
        await asyncio.wait_for(stopping, 15)
        assert not _streams(server)
        assert _active(server) == 0
        assert raw.startswith(b"HTTP/1.1 200 ")  # started, then closed with the server


async def test_a_token_expired_before_the_start_gets_only_the_end(tmp_path: Path) -> None:
    ttl_ms = 1500
    async with held_start(tmp_path / "data", ttl_ms) as (server, gate, sock, _):
        await asyncio.sleep(ttl_ms / 1000 + 0.1)
        gate.set()
        raw = await asyncio.to_thread(_read_all, sock)
        head, _, body = raw.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 ")
        assert body == b'event: end\ndata: {"error":"token_expired","message":"token expired"}\n\n'
        await wait_for(lambda: not _streams(server))
        assert _active(server) == 0


async def test_a_crdt_deleted_before_the_start_is_sent_its_deleted_event(
    tmp_path: Path,
) -> None:
    async with held_start(tmp_path / "data") as (server, gate, sock, token):
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            deleting = asyncio.ensure_future(
                client.delete(
                    f"/v1/namespaces/{NS}/crdts/{DOC}",
                    headers={"authorization": f"Bearer {ADMIN}"},
                )
            )
            await asyncio.sleep(0.2)
            gate.set()
            r = await deleting
            assert r.status_code == 204, r.text
        sock.settimeout(5)
        data = b""
        while data.count(b"\n\n") < 3:
            data += sock.recv(65536)
        blocks = data.partition(b"\r\n\r\n")[2].split(b"\n\n")
        kinds = [
            msgpack.unpackb(base64.b64decode(b.rpartition(b"data: ")[2]))["kind"]
            for b in blocks[:3]
        ]
        # The state it was in when the start was taken, then its deletion.
        assert kinds == ["snapshot", "synced", "deleted"]
        assert len(_streams(server)) == 1  # open: the next life streams on it

"""SERVICE_SHUTDOWN_DRAIN_S on a real ``syncd`` process: after SIGTERM the node
serves on (new connections too) while /health/ready answers 503 ``draining``,
each answer closing its connection (WebSockets stay), then shuts down as
before; a second signal ends the drain, and one during the shutdown ends its
waits. Also the setting's validation, and the systemd unit's stop timeout that
must cover it."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import signal
import socket
import time
from pathlib import Path
from typing import Any

import httpx
import msgpack
import pytest

from syncd.config import (
    DEFAULT_SHUTDOWN_TIMEOUT_S,
    DEFAULT_WEBHOOK_DRAIN_S,
    MAX_DURATION_S,
    ConfigError,
    from_env,
)
from syncd.ws.framing import CLOSE_GOING_AWAY
from tests.conftest import ADMIN
from tests.http.support import issue, op
from tests.http.test_openapi import answer_schema, check
from tests.webhooks.test_webhooks_shutdown import SlowReceiver
from tests.ws.support import RawWs, client_frame, close_code, parse_frame

ROOT = Path(__file__).resolve().parents[1]
READY = b"GET /health/ready HTTP/1.1\r\nHost: t\r\n\r\n"
LIVE = b"GET /health/live HTTP/1.1\r\nHost: t\r\n\r\n"
TOKEN_BODY = json.dumps({"client_id": 1, "permissions": {"read": ["*"], "write": ["*"]}}).encode()
ISSUE_TOKEN = (
    b"POST /v1/namespaces/app/tokens HTTP/1.1\r\nHost: t\r\n"
    + f"Authorization: Bearer {ADMIN}\r\nContent-Type: application/json\r\n".encode()
    + f"Content-Length: {len(TOKEN_BODY)}\r\n\r\n".encode()
    + TOKEN_BODY
)


class Conn:
    """One keep-alive client connection, read with a plain parser of its own."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.buffer = b""
        self.headers: dict[str, str] = {}
        """The last answer's headers, names in lower case."""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def response(self) -> tuple[int, dict[str, Any]]:
        while b"\r\n\r\n" not in self.buffer:
            self._read()
        head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        self.headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            self.headers[name.strip().lower()] = value.strip()
        length = int(self.headers.get("content-length", "0"))
        while len(self.buffer) < length:
            self._read()
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return int(lines[0].split(" ")[1]), json.loads(body)

    def ask(self, request: bytes) -> tuple[int, dict[str, Any]]:
        self.send(request)
        return self.response()

    def closed_after_answer(self) -> bool:
        """The last answer said ``Connection: close``, and then the server
        closed the connection (nothing more came before its FIN)."""
        if self.headers.get("connection", "").lower() != "close" or self.buffer:
            return False
        try:
            return self.sock.recv(65536) == b""
        except ConnectionResetError:
            return True

    def upgrade(self) -> bytes:
        """Switch to a WebSocket on the native endpoint; the 101 head."""
        key = base64.b64encode(os.urandom(16))
        self.send(
            b"GET /v1/namespaces/demo/ws HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: "
            + key
            + f"\r\nAuthorization: Bearer {ADMIN}\r\n\r\n".encode()
        )
        while b"\r\n\r\n" not in self.buffer:
            self._read()
        head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        return head

    def frame(self) -> tuple[int, bytes]:
        """The next WebSocket frame from the server: (opcode, payload)."""
        buffer = bytearray(self.buffer)
        while (frame := parse_frame(buffer)) is None:
            self._read()
            buffer = bytearray(self.buffer)
        self.buffer = bytes(buffer)
        return frame

    def close(self) -> None:
        self.sock.close()

    def _read(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed by the server after {self.buffer!r}")
        self.buffer += chunk


def notify_socket(tmp_path: Path) -> tuple[socket.socket, str]:
    path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(5)
    return sock, path


def wait_for(sock: socket.socket, message: str) -> None:
    while message not in sock.recv(4096).decode():
        pass


def test_sigterm_drains_serving_everything_but_readiness_then_exits(
    spawn_server: Any, tmp_path: Path
) -> None:
    notify, path = notify_socket(tmp_path)
    server = spawn_server({"SERVICE_SHUTDOWN_DRAIN_S": "1", "NOTIFY_SOCKET": path})
    wait_for(notify, "READY=1")
    held = Conn(server.port)  # open before the signal, kept alive through it
    assert held.ask(READY)[0] == 200
    assert "connection" not in held.headers  # kept alive before the signal
    in_flight = Conn(server.port)
    in_flight.send(READY[:-2])  # the head is not complete yet when the signal comes
    ws = Conn(server.port)  # a WebSocket open before the signal
    assert ws.upgrade().startswith(b"HTTP/1.1 101")
    time.sleep(0.05)
    signalled = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    wait_for(notify, "STOPPING=1")  # at the drain's start, not after it

    # Every answer during the drain closes its connection (keep-alive clients
    # move to other nodes one by one), and every request is served.
    in_flight.send(b"\r\n")
    fresh = Conn(server.port)  # a new connection is still taken
    fresh.send(READY + LIVE)  # pipelined: the second one is never answered here
    for conn in (in_flight, fresh):
        status, body = conn.response()
        assert (status, body["status"]) == (503, "draining"), body
        check(body, answer_schema("/health/ready", "get", 503))  # as syncd/openapi.json says
        assert conn.closed_after_answer(), conn.headers
    status, body = held.ask(ISSUE_TOKEN)  # real work goes on
    assert status == 200 and body["token"]
    assert held.closed_after_answer(), held.headers
    live = Conn(server.port)
    assert live.ask(LIVE) == (200, {"status": "live"})
    assert live.closed_after_answer(), live.headers
    # The WebSocket is left alone during the drain ...
    ws.send(client_frame(0x2, msgpack.packb({"kind": "ping"})))
    opcode, payload = ws.frame()
    assert (opcode, msgpack.unpackb(payload)) == (0x2, {"kind": "pong"})
    assert time.monotonic() - signalled < 1.0  # (all of the above was within the drain)
    # ... and closed as going away at the shutdown after it.
    opcode, payload = ws.frame()
    assert (opcode, close_code(payload)) == (0x8, CLOSE_GOING_AWAY)
    assert time.monotonic() - signalled >= 1.0
    ws.send(client_frame(0x8, payload))  # the close handshake's answer: no waiting for it

    assert server.proc.wait(10) == 0
    took = time.monotonic() - signalled
    assert took >= 1.0, took  # the drain was not cut short
    assert "draining for 1 s" in server.log() and "syncd stopped" in server.log()
    with pytest.raises(OSError):
        Conn(server.port)
    for conn in (held, in_flight, fresh, live, ws):
        conn.close()
    notify.close()


def test_a_second_signal_ends_the_drain(spawn_server: Any) -> None:
    server = spawn_server({"SERVICE_SHUTDOWN_DRAIN_S": "60"})
    conn = Conn(server.port)
    assert conn.ask(READY)[0] == 200
    server.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 5
    while conn.ask(READY)[0] != 503:  # until the first signal is handled: draining
        assert time.monotonic() < deadline
        time.sleep(0.01)
    hurried = time.monotonic()
    server.proc.send_signal(signal.SIGINT)
    assert server.proc.wait(10) == 0
    assert time.monotonic() - hurried < 5
    assert "second stop signal" in server.log() and "syncd stopped" in server.log()
    conn.close()


@pytest.mark.parametrize(
    "mute_websocket", [True, False], ids=["closing-websockets", "delivering-webhooks"]
)
async def test_another_signal_during_the_shutdown_ends_its_waits(
    spawn_server: Any, tmp_path: Path, mute_websocket: bool
) -> None:
    """The shutdown after the drain waits for WebSocket close handshakes (up to
    5 s for a peer that never answers), then for the webhook drain (60 s here,
    the receiver never answers): another signal during either ends them all at
    once, the store is still closed cleanly, and every acknowledged op is there
    after a restart."""
    receiver = await SlowReceiver(delay=3600).start()
    loop = asyncio.get_running_loop()
    try:
        server = spawn_server(
            {"SERVICE_WEBHOOK_URL": receiver.url, "SERVICE_WEBHOOK_DRAIN_S": "60"}
        )
        async with httpx.AsyncClient(base_url=server.url) as client:
            h = await issue(client)
            for _ in range(10):
                r = await op(client, h, "gc:n", {"op": "increment", "amount": 1})
                assert r.status_code == 200
        # Never answers the server's close frame.
        mute = await RawWs.connect(server) if mute_websocket else None
        server.proc.send_signal(signal.SIGTERM)
        # The listener closes once the shutdown proper has begun.
        deadline = time.monotonic() + 5
        while True:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", server.port)
            except OSError:
                break
            writer.close()
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        if mute is not None:
            opcode, payload = await mute.frame()
            assert (opcode, close_code(payload)) == (0x8, CLOSE_GOING_AWAY)
        await asyncio.sleep(0.3)  # into the wait (the handshake's, or the webhooks')
        hurried = time.monotonic()
        server.proc.send_signal(signal.SIGINT)
        code = await loop.run_in_executor(None, server.proc.wait, 10)
        took = time.monotonic() - hurried
        assert code == 0, server.log()
        assert took < 3, took  # neither the 5 s close timeout nor the 60 s of webhooks
        log = server.log()
        assert "another stop signal" in log, log
        if mute is not None:
            assert "1 WebSocket connections waiting for their close handshake" in log, log
            assert await mute.eof()
            mute.close()
        assert "webhooks: 10 events not delivered at shutdown (the drain was cut short" in log
        assert "syncd stopped" in log, log
        # The store was closed cleanly: its key directory table is written at
        # a clean stop only (syncd/store/embedded/hint.py), not after a kill.
        assert (tmp_path / "data" / "history" / "index.hint").exists()

        again = spawn_server()  # the same data directory
        async with httpx.AsyncClient(base_url=again.url) as client:
            h = await issue(client)
            r = await client.get("/v1/namespaces/app/crdts/gc:n", headers=h)
            assert r.status_code == 200, r.text
            assert r.json()["value"] == 10, r.json()
        assert again.terminate() == 0
    finally:
        await receiver.close()


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("-1", "must be 0 or positive, got -1"),
        ("-0.5", "must be 0 or positive, got -0.5"),
        ("nan", "must be 0 or positive, got nan"),
        ("inf", "must be at most 86400, got inf"),
        ("-inf", "must be 0 or positive, got -inf"),
        ("1e999", "must be at most 86400, got 1e999"),
        ("86400.5", "must be at most 86400, got 86400.5"),
        ("soon", "'soon' is not a number"),
    ],
)
def test_a_bad_drain_is_refused_naming_the_variable(value: str, problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        from_env({"SERVICE_SHUTDOWN_DRAIN_S": value})
    assert str(info.value) == f"SERVICE_SHUTDOWN_DRAIN_S: {problem}"


def test_the_drain_is_off_unless_set_and_takes_zero_to_a_day() -> None:
    assert from_env({}).shutdown_drain_s == 0
    assert from_env({"SERVICE_SHUTDOWN_DRAIN_S": ""}).shutdown_drain_s == 0
    assert from_env({"SERVICE_SHUTDOWN_DRAIN_S": "0"}).shutdown_drain_s == 0
    assert from_env({"SERVICE_SHUTDOWN_DRAIN_S": "2.5"}).shutdown_drain_s == 2.5
    top = from_env({"SERVICE_SHUTDOWN_DRAIN_S": str(MAX_DURATION_S)})
    assert top.shutdown_drain_s == MAX_DURATION_S
    # 0 stays refused where it would mean no time at all.
    with pytest.raises(ConfigError, match="must be positive"):
        from_env({"SERVICE_SHUTDOWN_TIMEOUT_S": "0"})


def test_the_units_stop_timeout_covers_drain_shutdown_and_webhooks() -> None:
    """systemd kills what is still running TimeoutStopSec after SIGTERM: it must
    outlast the drain, the in-flight deadline and the webhook drain, with the
    example environment file's values (commented out or not) or the defaults."""
    unit = (ROOT / "systemd" / "syncd.service").read_text()
    stop = re.search(r"^TimeoutStopSec=(\d+)$", unit, flags=re.M)
    assert stop is not None
    example = (ROOT / "systemd" / "syncd.env").read_text()
    values = dict(re.findall(r"^#?(SERVICE_[A-Z_]+)=(.*)$", example, flags=re.M))
    assert "SERVICE_SHUTDOWN_DRAIN_S" in values
    needed = (
        float(values["SERVICE_SHUTDOWN_DRAIN_S"])
        + float(values.get("SERVICE_SHUTDOWN_TIMEOUT_S") or DEFAULT_SHUTDOWN_TIMEOUT_S)
        + float(values.get("SERVICE_WEBHOOK_DRAIN_S") or DEFAULT_WEBHOOK_DRAIN_S)
    )
    assert int(stop.group(1)) > needed

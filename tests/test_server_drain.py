"""SERVICE_SHUTDOWN_DRAIN_S on a real ``syncd`` process: after SIGTERM the node
serves on (new connections too) while /health/ready answers 503 ``draining``,
then shuts down as before; a second signal ends the drain. Also the setting's
validation, and the systemd unit's stop timeout that must cover it."""

from __future__ import annotations

import json
import re
import signal
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from syncd.config import (
    DEFAULT_SHUTDOWN_TIMEOUT_S,
    DEFAULT_WEBHOOK_DRAIN_S,
    MAX_DURATION_S,
    ConfigError,
    from_env,
)
from tests.conftest import ADMIN
from tests.http.test_openapi import answer_schema, check

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

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def response(self) -> tuple[int, dict[str, Any]]:
        while b"\r\n\r\n" not in self.buffer:
            self._read()
        head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        while len(self.buffer) < length:
            self._read()
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return int(lines[0].split(" ")[1]), json.loads(body)

    def ask(self, request: bytes) -> tuple[int, dict[str, Any]]:
        self.send(request)
        return self.response()

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
    in_flight = Conn(server.port)
    in_flight.send(READY[:-2])  # the head is not complete yet when the signal comes
    time.sleep(0.05)
    signalled = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    wait_for(notify, "STOPPING=1")  # at the drain's start, not after it

    in_flight.send(b"\r\n")
    fresh = Conn(server.port)  # a new connection is still taken
    fresh.send(READY + LIVE)  # pipelined
    for conn in (in_flight, held, fresh):
        status, body = conn.ask(READY) if conn is held else conn.response()
        assert (status, body["status"]) == (503, "draining"), body
        check(body, answer_schema("/health/ready", "get", 503))  # as syncd/openapi.json says
    assert fresh.response() == (200, {"status": "live"})
    status, body = held.ask(ISSUE_TOKEN)  # real work goes on
    assert status == 200 and body["token"]

    assert server.proc.wait(10) == 0
    took = time.monotonic() - signalled
    assert took >= 1.0, took  # the drain was not cut short
    assert "draining for 1 s" in server.log() and "syncd stopped" in server.log()
    with pytest.raises(OSError):
        Conn(server.port)
    for conn in (held, in_flight, fresh):
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

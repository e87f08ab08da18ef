"""SERVICE_MAX_CONNECTIONS on a TLS port, against the real server process:
connections still in their handshake count toward it, so clients that open
TCP and never send a ClientHello cannot hold descriptors past it (plus
TLS_HANDSHAKES_PAST_LIMIT) for the handshake timeout; the ones beyond are
closed at once, and the server serves again as soon as they go."""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest

from syncd.server import TLS_HANDSHAKES_PAST_LIMIT
from tests.pki import Pki, client_context, handshake, make_pki

MAX_CONNECTIONS = 2
BEYOND = 6
"""Idle connections opened past what the server may hold."""


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server has closed ``sock`` (EOF or reset) without a word."""
    sock.settimeout(0)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True


def live_over_tls(port: int, pki: Pki) -> bytes:
    with handshake(port, client_context(pki)) as tls:
        tls.sendall(b"GET /health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        return tls.recv(64)


def test_connections_in_their_handshake_count_toward_the_limit(spawn_server: Any, pki: Pki) -> None:
    cert, key = pki.issue("server")
    server = spawn_server(
        {
            "SERVICE_TLS_CERT": str(cert),
            "SERVICE_TLS_KEY": str(key),
            "SERVICE_MAX_CONNECTIONS": str(MAX_CONNECTIONS),
        },
        ready=False,
    )
    deadline = time.monotonic() + 20
    while True:
        try:
            assert live_over_tls(server.port, pki).startswith(b"HTTP/1.1 200")
            break
        except OSError:
            assert server.proc.poll() is None, server.log()
            assert time.monotonic() < deadline, server.log()
            time.sleep(0.05)
    held = MAX_CONNECTIONS + TLS_HANDSHAKES_PAST_LIMIT
    idle = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(held + BEYOND)]
    try:
        # The handshake timeout is 10 s: the ones beyond are closed long before.
        deadline = time.monotonic() + 2
        while sum(closed_by_server(s) for s in idle[held:]) < BEYOND:
            assert time.monotonic() < deadline, "connections past the bound were held"
            time.sleep(0.02)
        # Less one: the probe's connection above may not be gone from the count yet.
        assert not any(closed_by_server(s) for s in idle[: held - 1])
    finally:
        for sock in idle:
            sock.close()
    deadline = time.monotonic() + 5
    while True:
        try:
            answer = live_over_tls(server.port, pki)
        except OSError:
            answer = b""
        if answer.startswith(b"HTTP/1.1 200"):
            break
        assert time.monotonic() < deadline, answer
        time.sleep(0.05)

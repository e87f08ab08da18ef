"""``service_connections_open`` on a TLS port, against the real server process:
it counts what SERVICE_MAX_CONNECTIONS counts there, connections still in
their TLS handshake included, so the ratio to ``service_connections_max``
says how close new clients are to being refused."""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest

from tests.pki import Pki, client_context, handshake, make_pki, start_tls

IDLE = 5
"""TCP connections that never send a ClientHello."""


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def connections_open(port: int, pki: Pki) -> float:
    """``service_connections_open`` read over TLS (its own connection is one)."""
    with handshake(port, client_context(pki)) as tls:
        tls.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        answer = b""
        while chunk := tls.recv(65536):
            answer += chunk
    for line in answer.decode().splitlines():
        if line.startswith("service_connections_open "):
            return float(line.split()[1])
    raise AssertionError(answer[:300])


def test_connections_in_their_handshake_are_open_connections(spawn_server: Any, pki: Pki) -> None:
    cert, key = pki.issue("server")
    server = start_tls(spawn_server, cert, key, client_context(pki))
    assert connections_open(server.port, pki) == 1
    idle = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(IDLE)]
    try:
        deadline = time.monotonic() + 2
        while (seen := connections_open(server.port, pki)) < IDLE + 1:
            assert time.monotonic() < deadline, f"{seen} open with {IDLE} in their handshake"
            time.sleep(0.02)
        assert seen == IDLE + 1
    finally:
        for sock in idle:
            sock.close()
    # Gone from the count as soon as they close.
    deadline = time.monotonic() + 2
    while (seen := connections_open(server.port, pki)) != 1:
        assert time.monotonic() < deadline, f"{seen} open after the idle ones closed"
        time.sleep(0.02)

"""Plain HTTP on the TLS port, against the real server on a real socket, on
uvloop (production) and on asyncio's own loop: a request line gets a plaintext
400 saying the port speaks HTTPS and a close (as Go's net/http and nginx
answer); bytes that are neither TLS nor HTTP get a close without a word; a
client that sends nothing is still cut at the handshake timeout; TLS clients
are served as before; and none of them stays counted toward the connection
limit."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import uvloop

from syncd.server import Server
from tests.conftest import base_settings
from tests.pki import Pki, client_context, handshake, make_pki

HEADER_TIMEOUT_S = 0.5
"""The handshake timeout of these servers: short, so that silent clients end fast."""

WAIT_S = 10.0
"""How long a client waits for the server at most (generous: a loaded machine)."""

LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "uvloop": uvloop.new_event_loop,
    "asyncio": asyncio.SelectorEventLoop,
}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(params=sorted(LOOPS))
def on_tls_server(
    request: pytest.FixtureRequest, pki: Pki, tmp_path: Path
) -> Callable[[Callable[[int], None]], None]:
    """Run ``client(port)`` (blocking, in a thread) against a TLS server on
    the loop of the parameter, then check that no connection stays counted."""
    cert, key = pki.issue("server")

    def run(client: Callable[[int], None]) -> None:
        async def scenario() -> None:
            settings = base_settings(
                tmp_path / "data",
                tls_cert=cert,
                tls_key=key,
                header_timeout_s=HEADER_TIMEOUT_S,
            )
            server = Server(settings)
            await server.start()
            try:
                await asyncio.to_thread(client, server.port)
                await until(lambda: server.connections_open() == 0)
            finally:
                await server.shutdown()
                if server.certificates is not None:
                    server.certificates.close()

        with asyncio.Runner(loop_factory=LOOPS[request.param]) as runner:
            runner.run(scenario())

    return run


async def until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, "the connection stayed counted"
        await asyncio.sleep(0.01)


def read_to_close(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes (a reset counts as a close)."""
    got = b""
    while True:
        try:
            chunk = sock.recv(4096)
        except ConnectionResetError:
            return got
        if not chunk:
            return got
        got += chunk


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)


def assert_https_please(answer: bytes) -> None:
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("ascii").split("\r\n")
    assert lines[0] == "HTTP/1.1 400 Bad Request", answer
    headers = {
        name.lower(): value.strip() for name, _, value in (h.partition(":") for h in lines[1:])
    }
    assert headers["content-type"] == "application/json"
    assert headers["connection"] == "close"
    assert int(headers["content-length"]) == len(body)
    error = json.loads(body)
    assert error["error"] == "bad_request"
    assert "https://" in error["message"]


def test_a_plain_http_request_gets_a_400_saying_https(
    on_tls_server: Callable[[Callable[[int], None]], None],
) -> None:
    def client(port: int) -> None:
        with connect(port) as plain:
            plain.sendall(b"GET /health/live HTTP/1.1\r\nHost: x\r\n\r\n")
            assert_https_please(read_to_close(plain))
        # The request line in pieces, and a body still coming after the answer.
        with connect(port) as plain:
            plain.sendall(b"PO")
            time.sleep(0.05)
            plain.sendall(b"ST /v1/namespaces/t/crdts/gc:x/ops HTTP/1.1\r\n")
            time.sleep(0.05)
            plain.sendall(b"Host: x\r\ncontent-length: 2\r\n\r\n{}")
            assert_https_please(read_to_close(plain))

    on_tls_server(client)


def test_tls_clients_are_served_as_before(
    on_tls_server: Callable[[Callable[[int], None]], None], pki: Pki
) -> None:
    def client(port: int) -> None:
        for _ in range(3):
            with handshake(port, client_context(pki)) as tls:
                assert tls.selected_alpn_protocol() == "http/1.1"
                tls.sendall(b"GET /health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                assert read_to_close(tls).startswith(b"HTTP/1.1 200")

    on_tls_server(client)


@pytest.mark.parametrize(
    "garbage",
    [b"\x00\x01\x02garbage", b"\r\n\r\n", b" GET / HTTP/1.1\r\n", b"GET\r\n", b"G" * 200],
    ids=["binary", "blank lines", "leading space", "no space", "endless token"],
)
def test_bytes_neither_tls_nor_http_get_a_close(
    on_tls_server: Callable[[Callable[[int], None]], None], garbage: bytes
) -> None:
    def client(port: int) -> None:
        with connect(port) as plain:
            plain.sendall(garbage)
            assert read_to_close(plain) == b""

    on_tls_server(client)


@pytest.mark.parametrize(
    "first",
    [b"", b"\x16\x03\x01", b"GET"],
    ids=["nothing", "a third of a record header", "a method"],
)
def test_a_client_that_stops_is_cut_at_the_handshake_timeout(
    on_tls_server: Callable[[Callable[[int], None]], None], first: bytes
) -> None:
    def client(port: int) -> None:
        with connect(port) as silent:
            if first:
                silent.sendall(first)
            started = time.monotonic()
            assert read_to_close(silent) == b""
            waited = time.monotonic() - started
            # Cut at the timeout (less what passed before the clock started), well before WAIT_S.
            assert waited < WAIT_S / 2, waited

    on_tls_server(client)

"""Shared fixtures: real servers on real sockets.

``make_server(**overrides)`` starts the real server in this process on an
ephemeral port (fast, one event loop); ``spawn_server(env)`` starts
``python -m syncd`` as a subprocess for tests that kill or signal it.
Every HTTP-facing test runs against both parsers through ``http_parser``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import httpx._transports.default as httpx_transports
import pytest
import uvloop

from syncd.config import Settings
from syncd.server import Server

ADMIN = "test-admin-secret"
SIGNING_KEY_HEX = "11" * 32

_DEFAULT_TLS = httpx.create_ssl_context()
_make_tls = getattr(httpx_transports, "create_ssl_context", None)


def _shared_default_tls(verify: Any = True, cert: Any = None, trust_env: bool = True) -> Any:
    """httpx's TLS context for a client made with the default ``verify``: one
    for the whole run. httpx makes one for each client (and each proxy
    mount), loading the CA bundle each time: about 0.06 s of CPU, most of
    making a client, and the suite makes thousands of clients of plain-HTTP
    test servers. A client given its own context or CA (the TLS tests) is
    left as it was."""
    if verify is True and cert is None and trust_env:
        return _DEFAULT_TLS
    return _make_tls(verify=verify, cert=cert, trust_env=trust_env)


if _make_tls is not None:  # httpx's private hook: a release without it runs as before
    httpx_transports.create_ssl_context = _shared_default_tls


def pytest_asyncio_loop_factories(config: Any, item: Any) -> dict[str, Callable[[], Any]]:
    """Every async test runs on uvloop, as the server does in production."""
    return {"uvloop": uvloop.new_event_loop}


SLOW_FIRST = (
    "tests/perf/",
    "tests/browser/",
    "tests/cluster/",
    "tests/store/embedded/test_crash.py",
    "tests/fuzz/",
    "tests/deploy/",
    "tests/yjs/test_y_websocket.py",
    "tests/test_tour.py",
    "tests/limits/",
)
"""Files whose tests take longest (several seconds each: processes started,
killed, measured). ``make test`` gives the suite's files to its workers one at a
time in collection order, so these go first: one left to the end keeps a worker
busy for a minute or two while the other has nothing left."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = config.rootpath

    def rank(item: pytest.Item) -> int:
        path = item.path.relative_to(root).as_posix()
        for i, prefix in enumerate(SLOW_FIRST):
            if path.startswith(prefix):
                return i
        return len(SLOW_FIRST)

    items.sort(key=rank)  # stable: the rest keep their order


@pytest.fixture(params=["h11", "httptools"])
def http_parser(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def base_settings(data_dir: Path, parser: str = "h11", **overrides: Any) -> Settings:
    settings = Settings(
        host="127.0.0.1",
        port=0,
        data_dir=data_dir,
        signing_key=bytes.fromhex(SIGNING_KEY_HEX),
        admin_token=ADMIN,
        fsync="never",
        http_parser=parser,  # type: ignore[arg-type]
        node_id="test",
    )
    return replace(settings, **overrides)


class RunningServer:
    def __init__(self, server: Server) -> None:
        self.server = server
        self.app = server.app

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture
async def make_server(tmp_path: Path, http_parser: str) -> AsyncIterator[Callable[..., Any]]:
    servers: list[Server] = []

    async def start(**overrides: Any) -> RunningServer:
        data_dir = overrides.pop("data_dir", tmp_path / f"data{len(servers)}")
        server = Server(base_settings(data_dir, http_parser, **overrides))
        await server.start()
        servers.append(server)
        return RunningServer(server)

    yield start
    for server in servers:
        with contextlib.suppress(Exception):
            await server.shutdown()


@pytest.fixture
async def server(make_server: Callable[..., Any]) -> RunningServer:
    result: RunningServer = await make_server()
    return result


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Subprocess:
    def __init__(self, proc: subprocess.Popen[bytes], port: int, log_path: Path) -> None:
        self.proc = proc
        self.port = port
        self.log_path = log_path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def terminate(self, timeout: float = 15) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


def start_to_the_end(
    data_dir: Path, timeout: float = 20, **env: str
) -> subprocess.CompletedProcess[bytes]:
    """``python -m syncd`` on ``data_dir`` (the test signing key, a port it will
    not get to) run until it exits: for starts that must be refused. A start
    that hangs instead (blocked on a FIFO) fails at ``timeout``."""
    return subprocess.run(
        [sys.executable, "-m", "syncd"],
        env={
            **os.environ,
            "SERVICE_BIND": "127.0.0.1:1",
            "SERVICE_DATA_DIR": str(data_dir),
            "SERVICE_SIGNING_KEY": SIGNING_KEY_HEX,
            **env,
        },
        capture_output=True,
        timeout=timeout,
    )


def wait_ready(port: int, proc: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2) as s:
            s.sendall(b"GET /health/live HTTP/1.1\r\nHost: x\r\n\r\n")
            if s.recv(64).startswith(b"HTTP/1.1 200"):
                return
        time.sleep(0.05)
    raise TimeoutError("server did not become ready")


@pytest.fixture
def spawn_server(tmp_path: Path) -> Iterator[Callable[..., Subprocess]]:
    procs: list[Subprocess] = []

    def spawn(
        env: dict[str, str] | None = None, *, port: int | None = None, ready: bool = True
    ) -> Subprocess:
        port = port or free_port()
        full_env = {
            **os.environ,
            "SERVICE_BIND": f"127.0.0.1:{port}",
            "SERVICE_DATA_DIR": str(tmp_path / "data"),
            "SERVICE_SIGNING_KEY": SIGNING_KEY_HEX,
            "SERVICE_ADMIN_TOKEN": ADMIN,
            "SERVICE_FSYNC": "never",
            **(env or {}),
        }
        log_path = tmp_path / f"server{len(procs)}.log"
        with open(log_path, "wb") as log_file:
            proc = subprocess.Popen(
                [sys.executable, "-m", "syncd"],
                env=full_env,
                stdout=log_file,
                stderr=subprocess.STDOUT,
            )
        sub = Subprocess(proc, port, log_path)
        procs.append(sub)
        if ready:
            wait_ready(port, proc)
        return sub

    yield spawn
    for sub in procs:
        if sub.proc.poll() is None:
            sub.kill()


async def open_raw(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port)


async def read_until_closed(reader: asyncio.StreamReader, timeout: float = 5) -> bytes:
    """Everything the peer sent before it closed.

    A reset counts as closed: a client that writes after the server closed
    gets an RST, and the kernel may report that before the FIN is read.
    """
    data = bytearray()
    try:
        async with asyncio.timeout(timeout):
            while chunk := await reader.read(65536):
                data += chunk
    except ConnectionResetError:
        pass
    return bytes(data)


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """Read one fixed-length HTTP response (a plain client, not the server's code)."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    body = await reader.readexactly(length) if length else b""
    return status, headers, body

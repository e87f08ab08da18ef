"""Slow clients against a real subprocess server.

- 1000 connections trickling request-head bytes (perf/lib/slowloris.py, in a
  process of its own so its CPU is not the server's loop nor the measuring
  client's) do not keep a normal client from being answered within 100 ms,
  and each is closed by the header timeout, counted from its first byte.
- A WebSocket client that subscribes and then never reads does not grow the
  server's memory past its bound (SERVICE_SUBSCRIBER_BUFFER_BYTES) while
  another client writes far more than that to the CRDT it watches.
"""

from __future__ import annotations

import base64
import json
import os
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import msgpack

from tests.conftest import ADMIN, Subprocess
from tests.fuzz.support import check_healthy, client_frame, rss_bytes

ROOT = Path(__file__).resolve().parents[2]
TRICKLERS = 1000
HEADER_TIMEOUT_S = 3.0
ANSWER_WITHIN_S = 0.1
PROBES = 20


def raise_fd_limit(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(needed, hard), hard))


def timed_get(port: int) -> float:
    started = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"GET /health/live HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := sock.recv(4096):
            data += chunk
    assert data.startswith(b"HTTP/1.1 200 "), data[:100]
    return time.perf_counter() - started


def test_tricklers_do_not_delay_a_normal_client(spawn_server: Callable[..., Subprocess]) -> None:
    raise_fd_limit(2 * TRICKLERS + 256)  # the server inherits it
    server = spawn_server({"SERVICE_HEADER_TIMEOUT_S": str(HEADER_TIMEOUT_S)})
    loris = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "perf" / "lib" / "slowloris.py"),
            "--port",
            str(server.port),
            "--connections",
            str(TRICKLERS),
            "--interval",
            "0.5",
            "--duration",
            str(HEADER_TIMEOUT_S + 3),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert loris.stdout is not None
        assert loris.stdout.readline().strip() == "ready"
        time.sleep(0.6)  # every trickler has sent its first bytes
        took = []
        for _ in range(PROBES):
            took.append(timed_get(server.port))
            time.sleep(0.05)
        out, _ = loris.communicate(timeout=60)
    finally:
        if loris.poll() is None:
            loris.kill()
            loris.wait()
    result = json.loads(out.strip().splitlines()[-1])
    assert max(took) < ANSWER_WITHIN_S, sorted(round(t * 1000, 1) for t in took)
    # Every trickler was cut by the header timeout, counted from its first byte.
    assert result["closed_by_server"] == TRICKLERS, result
    closed_after = result["closed_after_s"]
    assert closed_after["min"] >= HEADER_TIMEOUT_S - 0.2, result
    assert closed_after["max"] <= HEADER_TIMEOUT_S + 2.0, result
    check_healthy(server.port)
    assert "Traceback" not in server.log()


BOUND = 256 * 1024
"""The subscriber bound given to the server below."""
VALUE_BYTES = 60_000
OPS = 600
"""Deltas of about VALUE_BYTES each: 36 MB, far past the bound, for the reader
that never reads."""
RSS_SLACK = 16 * 1024 * 1024
"""Allocator slack on top of the bound: large values churn through malloc."""


def post_op(port: int, crdt_id: str, value: str) -> None:
    body = json.dumps({"op": "set", "value": value}).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(
            f"POST /v1/namespaces/app/crdts/{crdt_id}/ops HTTP/1.1\r\nHost: t\r\n"
            f"Authorization: Bearer {ADMIN}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert data.startswith(b"HTTP/1.1 200 "), data[:200]


def test_websocket_reader_that_never_reads_stays_within_its_bound(
    spawn_server: Callable[..., Subprocess],
) -> None:
    server = spawn_server({"SERVICE_SUBSCRIBER_BUFFER_BYTES": str(BOUND)})
    pid = server.proc.pid
    # Warm up: the replay tail and allocator reach their steady size first.
    for i in range(300):
        post_op(server.port, "lw:big", f"{i:04d}" + "v" * VALUE_BYTES)
    time.sleep(0.3)
    before = rss_bytes(pid)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    sock.connect(("127.0.0.1", server.port))
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        f"GET /v1/namespaces/app/ws?token={ADMIN} HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {key}\r\n\r\n".encode()
        + client_frame(0x2, msgpack.packb({"kind": "subscribe", "id": "lw:big"}))
    )
    # ... and never reads again.
    for i in range(OPS):
        post_op(server.port, "lw:big", f"{i:04d}" + "w" * VALUE_BYTES)
    time.sleep(0.3)
    after = rss_bytes(pid)
    check_healthy(server.port)
    sock.close()
    grew = after - before
    assert grew <= BOUND + RSS_SLACK, f"RSS grew {grew / 2**20:.1f} MiB"
    assert "Traceback" not in server.log()

"""``syncd health`` against a server that trickles its answer: the check is
bounded as a whole by HEALTH_TIMEOUT_S, not per read. A 200 sent a byte
every 0.1 s kept each read under the socket timeout, so the check waited
for all of it (past the Dockerfile's 3 s ``--timeout``) and called the
server healthy; now it says no answer within the bound (exit 1)."""

from __future__ import annotations

import socket
import threading
import time

from syncd.cli.health import HEALTH_TIMEOUT_S
from tests.cli.test_health import health

ANSWER = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 15\r\n"
    b'Connection: close\r\n\r\n{"status":"ok"}'
)
BYTE_EVERY_S = 0.1
"""One byte this often: ``ANSWER`` then takes far longer than the bound."""


def test_a_trickled_answer_is_no_answer_within_the_bound() -> None:
    assert len(ANSWER) * BYTE_EVERY_S > 3 * HEALTH_TIMEOUT_S
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    sent_all = threading.Event()

    def trickle() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            try:
                for i in range(len(ANSWER)):
                    conn.sendall(ANSWER[i : i + 1])
                    time.sleep(BYTE_EVERY_S)
            except OSError:
                return  # the client gave up: what the test wants
            sent_all.set()

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    try:
        done = health({"SERVICE_BIND": f"127.0.0.1:{port}"})
    finally:
        listener.close()
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert f"no answer within {HEALTH_TIMEOUT_S:g} s" in done.stderr
    thread.join(timeout=len(ANSWER) * BYTE_EVERY_S + 10)
    assert not sent_all.is_set()

"""perf.lib.servers.process: a server's stderr never blocks it, and explains an early exit."""

from __future__ import annotations

import socket
import sys
import time

import pytest

from perf.lib.servers import free_port, process

CHATTY_SERVER = """
import socket, sys
sys.stderr.write("x" * (1 << 20))  # far more than a pipe holds
sys.stderr.flush()
sock = socket.socket()
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
sock.bind(("127.0.0.1", int(sys.argv[1])))
sock.listen()
while True:
    sock.accept()[0].close()
"""


def test_a_server_that_logs_more_than_a_pipe_holds_still_starts() -> None:
    port = free_port()
    started = time.monotonic()
    with process([sys.executable, "-c", CHATTY_SERVER, str(port)], port) as proc:
        assert proc.poll() is None
        with socket.create_connection(("127.0.0.1", port), 5):
            pass
    # With its stderr on an unread pipe it blocked before listening: 30 s, then TimeoutError.
    assert time.monotonic() - started < 20


def test_an_exit_before_listening_shows_the_end_of_stderr() -> None:
    port = free_port()
    failing = "import sys; sys.stderr.write('early\\n' * 2000 + 'the reason it died'); sys.exit(3)"
    with pytest.raises(RuntimeError) as raised, process([sys.executable, "-c", failing], port):
        pass
    message = str(raised.value)
    assert message.startswith("server exited with 3: ")
    assert message.endswith("the reason it died")
    assert len(message) < 4100  # the end of it, not all 12 KB

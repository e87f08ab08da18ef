"""An HTTP/1.0 client keeps its connection only when the answer says so
(RFC 9112 appendix C.2.2): a 1.0 request with ``Connection: keep-alive``
that the server keeps open is answered with ``Connection: keep-alive``."""

from __future__ import annotations

from tests.conftest import RunningServer, open_raw, read_response


async def test_a_kept_http10_connection_says_keep_alive(server: RunningServer) -> None:
    reader, writer = await open_raw(server.port)
    try:
        # A fixed answer, an error and a 404: every answer on a kept connection.
        for target in (b"/health/live", b"/v1/namespaces/app/crdts/gc:x", b"/nowhere"):
            writer.write(b"GET " + target + b" HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            status, headers, _ = await read_response(reader)
            assert headers.get("connection", "").lower() == "keep-alive", (target, status, headers)
        # The connection is still open: one more request on it is answered.
        writer.write(b"GET /health/live HTTP/1.0\r\n\r\n")
        status, headers, _ = await read_response(reader)
        assert status == 200 and headers["connection"] == "close"
        assert await reader.read() == b""
    finally:
        writer.close()


async def test_http11_answers_carry_no_keep_alive_header(server: RunningServer) -> None:
    reader, writer = await open_raw(server.port)
    try:
        writer.write(b"GET /health/live HTTP/1.1\r\nHost: t\r\nConnection: keep-alive\r\n\r\n")
        status, headers, _ = await read_response(reader)
        assert status == 200 and "connection" not in headers
    finally:
        writer.close()

"""Edge cases found by driving a running server with hostile requests, both parsers."""

from __future__ import annotations

import asyncio

from tests.conftest import ADMIN, RunningServer, open_raw, read_until_closed


def sse_active(server: RunningServer) -> float:
    value = server.app.metrics.sse_connections_active._value.get()
    return float(value)


async def test_head_on_the_event_stream_has_no_body(server: RunningServer) -> None:
    """HEAD gets the head GET would get and no body: the stream's events after
    a HEAD's head would be read by the client as the next answer."""
    reader, writer = await open_raw(server.port)
    writer.write(
        b"HEAD /v1/namespaces/app/crdts/gc:a/events HTTP/1.1\r\nHost: t\r\n"
        + f"Authorization: Bearer {ADMIN}\r\n\r\n".encode()
    )
    data = await read_until_closed(reader, timeout=5)
    writer.close()
    head, sep, body = data.partition(b"\r\n\r\n")
    assert sep and head.startswith(b"HTTP/1.1 200 "), data
    assert b"content-type: text/event-stream" in head
    assert body == b""
    # No subscriber is left behind by the stream that never started.
    for _ in range(50):
        if sse_active(server) == 0:
            break
        await asyncio.sleep(0.02)
    assert sse_active(server) == 0

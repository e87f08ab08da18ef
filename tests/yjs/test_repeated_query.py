"""The y-websocket and Hocuspocus upgrades refuse a parameter they take
given twice (``token``, ``origin``) with 400 ``bad_request`` before any
socket exists, as an ordinary HTTP error answer like every refused upgrade:
a proxy or log filter may have checked one copy and the server used the
other. What the providers send, the room in the path and each parameter of
their ``params`` object once, still connects."""

from __future__ import annotations

import json

import pytest

from tests.conftest import RunningServer, open_raw, read_response
from tests.ws.support import NS, mint

KEY = "dGhlIHNhbXBsZSBub25jZQ=="


async def _upgrade(server: RunningServer, target: str) -> tuple[int, bytes]:
    reader, writer = await open_raw(server.port)
    writer.write(
        (
            f"GET /v1/namespaces/{NS}/{target} HTTP/1.1\r\nHost: t\r\n"
            "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
            f"Sec-WebSocket-Key: {KEY}\r\n\r\n"
        ).encode()
    )
    status, _, body = await read_response(reader)
    writer.close()
    return status, body


@pytest.mark.parametrize(
    ("target", "name"),
    [
        ("yjs/notes?token={t}&token=bogus", "token"),
        ("yjs/notes?token=bogus&token={t}", "token"),
        ("yjs/notes?token={t}&token={t}", "token"),
        ("yjs/notes?token={t}&origin=agent:a&origin=agent:b", "origin"),
        ("hocuspocus?origin=agent:a&origin=agent:b", "origin"),
    ],
)
async def test_repeated_parameter_is_400_before_the_upgrade(
    server: RunningServer, target: str, name: str
) -> None:
    status, body = await _upgrade(server, target.format(t=mint()))
    assert status == 400
    assert json.loads(body) == {"error": "bad_request", "message": f"{name}: given more than once"}


@pytest.mark.parametrize(
    "target",
    [
        "yjs/notes?token={t}",
        "yjs/notes?token={t}&origin=agent%3Adraft-7",  # y-websocket's params, encoded
        "yjs/yd:notes?origin=agent:a&token={t}&_=1&_=2",  # an unknown one may repeat
        "hocuspocus",
        "hocuspocus?origin=agent:a",
        "hocuspocus?origin=agent:a&token=x&token=y",  # no ?token= here: ignored
    ],
)
async def test_what_providers_send_still_connects(server: RunningServer, target: str) -> None:
    status, body = await _upgrade(server, target.format(t=mint()))
    assert status == 101, body

"""The limits a Yjs peer can run into with one message, at their edges on a
real socket: SERVICE_MAX_BODY_BYTES for a y-websocket or Hocuspocus message
(close 1009), a Hocuspocus document name of MAX_NAME_BYTES (close 1002 past
it) and a Yjs update of MAX_UPDATE_BYTES (over HTTP 413, over y-websocket
close 1007), each: exactly at the limit is taken, one byte more is refused."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import httpx
import pytest
import websockets
from pycrdt import Decoder, Doc, Encoder, Map

from syncd.crdt.ydoc import MAX_UPDATE_BYTES
from syncd.yjs import hocuspocus
from syncd.yjs.hocuspocus import MAX_NAME_BYTES
from syncd.yjs.protocol import sync_update
from tests.conftest import ADMIN, RunningServer
from tests.ws.support import NS, mint
from tests.yjs.support import var_string
from tests.yjs.test_hocuspocus_names import lib0_string

WAIT_S = 5.0
LIMIT = 1024
"""SERVICE_MAX_BODY_BYTES for the message-size tests."""


def awareness(size: int) -> bytes:
    """A y-websocket awareness message of exactly ``size`` bytes (one client,
    its state padded)."""

    def build(pad: int) -> bytes:
        inner = Encoder()
        inner.write_var_uint(1)  # clients
        inner.write_var_uint(1)  # client id
        inner.write_var_uint(1)  # clock
        inner.write_var_string('{"p":"' + "y" * pad + '"}')
        payload = inner.to_bytes()
        length = Encoder()
        length.write_var_uint(len(payload))
        return b"\x01" + length.to_bytes() + payload

    pad = size - len(build(0))
    while len(build(pad)) > size:
        pad -= 1
    message = build(pad)
    assert len(message) == size
    return message


def update_of(size: int) -> bytes:
    """A Yjs update of exactly ``size`` bytes: one map entry holding a string."""

    def build(n: int) -> bytes:
        doc: Doc[Any] = Doc(client_id=1)  # a client id's var-uint of one byte, always
        doc.get("m", type=Map)["k"] = "x" * n
        return doc.get_update()

    n = size - len(build(0))
    while len(build(n)) > size:
        n -= 1
    while len(build(n)) < size:
        n += 1
    update = build(n)
    assert len(update) == size
    return update


async def closed_with(ws: Any) -> tuple[int | None, str]:
    with pytest.raises(websockets.ConnectionClosed):
        while True:
            await asyncio.wait_for(ws.recv(), WAIT_S)
    return ws.close_code, ws.close_reason


async def test_a_y_websocket_message_of_the_body_limit_is_read_one_more_byte_closes_1009(
    make_server: Any,
) -> None:
    server: RunningServer = await make_server(max_body_bytes=LIMIT)
    url = f"ws://127.0.0.1:{server.port}/v1/namespaces/{NS}/yjs/notes?token={mint()}"
    async with websockets.connect(url, ping_interval=None) as ws:
        await ws.send(awareness(LIMIT))
        await ws.send(b"\x03")  # query awareness: answered with the state just sent
        while True:
            message = await asyncio.wait_for(ws.recv(), WAIT_S)
            assert isinstance(message, bytes)
            if message[:1] == b"\x01" and b"y" * 100 in message:
                break
        await ws.send(awareness(LIMIT + 1))
        code, reason = await closed_with(ws)
    assert code == 1009 and f"over {LIMIT} bytes" in reason


async def test_a_hocuspocus_message_of_the_body_limit_is_read_one_more_byte_closes_1009(
    make_server: Any,
) -> None:
    server: RunningServer = await make_server(max_body_bytes=LIMIT)
    url = f"ws://127.0.0.1:{server.port}/v1/namespaces/{NS}/hocuspocus"
    async with websockets.connect(url, ping_interval=None) as ws:
        auth = var_string("notes") + b"\x02\x00" + var_string(mint())
        version = "3" * (LIMIT - len(auth) - 2)  # two bytes of var-uint length
        message = auth + var_string(version)
        assert len(message) == LIMIT
        await ws.send(message)
        data = await asyncio.wait_for(ws.recv(), WAIT_S)
        name, kind, rest = hocuspocus.parse(data)
        assert (name, kind, rest[0]) == ("notes", hocuspocus.MESSAGE_AUTH, 2)  # authenticated
        await ws.send(message + b"\x00")
        code, reason = await closed_with(ws)
    assert code == 1009 and f"over {LIMIT} bytes" in reason


async def test_a_hocuspocus_name_of_max_name_bytes_is_read_one_more_byte_closes_1002(
    server: RunningServer,
) -> None:
    url = f"ws://127.0.0.1:{server.port}/v1/namespaces/{NS}/hocuspocus"
    async with websockets.connect(url, ping_interval=None) as ws:
        # Read, and denied by name: no document id is that long.
        longest = "é" * (MAX_NAME_BYTES // 2)  # the bound is in bytes
        await ws.send(lib0_string(longest) + b"\x02\x00" + var_string(mint()))
        name, kind, rest = hocuspocus.parse(await asyncio.wait_for(ws.recv(), WAIT_S))
        assert (name, kind) == (longest, hocuspocus.MESSAGE_AUTH)
        denied = Decoder(rest)
        assert denied.read_var_uint() == hocuspocus.AUTH_PERMISSION_DENIED
        assert denied.read_var_string().startswith("invalid_id")
        # The socket is still open for a document it may have.
        await ws.send(var_string("notes") + b"\x02\x00" + var_string(mint()))
        name, kind, rest = hocuspocus.parse(await asyncio.wait_for(ws.recv(), WAIT_S))
        assert (name, kind, rest[0]) == ("notes", hocuspocus.MESSAGE_AUTH, 2)
        await ws.send(var_string("x" * (MAX_NAME_BYTES + 1)) + b"\x02\x00" + var_string(mint()))
        code, reason = await closed_with(ws)
    assert code == 1002 and "malformed" in reason


async def test_a_yjs_update_of_max_update_bytes_is_applied_one_more_byte_is_refused(
    make_server: Any,
) -> None:
    server: RunningServer = await make_server(max_body_bytes=8 * MAX_UPDATE_BYTES)
    at, over = update_of(MAX_UPDATE_BYTES), update_of(MAX_UPDATE_BYTES + 1)
    headers = {"authorization": f"Bearer {ADMIN}"}
    async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=WAIT_S) as client:
        base = f"/v1/namespaces/{NS}/crdts"
        r = await client.post(
            f"{base}/yd:http-at/ops", json={"op": "update", "update": base64.b64encode(at).decode()}
        )
        assert r.status_code == 200, r.text
        r = await client.post(
            f"{base}/yd:http-over/ops",
            json={"op": "update", "update": base64.b64encode(over).decode()},
        )
        assert r.status_code == 413 and r.json()["error"] == "payload_too_large"
        assert str(MAX_UPDATE_BYTES) in r.json()["message"]
        assert (await client.get(f"{base}/yd:http-over")).status_code == 404

        url = f"ws://127.0.0.1:{server.port}/v1/namespaces/{NS}/yjs"
        async with websockets.connect(f"{url}/ws-at?token={mint()}", max_size=None) as ws:
            await ws.send(sync_update(at))
            for _ in range(100):  # applied once it is durable
                if (await client.get(f"{base}/yd:ws-at")).status_code == 200:
                    break
                await asyncio.sleep(0.02)
            assert (await client.get(f"{base}/yd:ws-at")).status_code == 200
        async with websockets.connect(f"{url}/ws-over?token={mint()}", max_size=None) as ws:
            await ws.send(sync_update(over))
            code, reason = await closed_with(ws)
        assert code == 1007 and reason.startswith("payload_too_large")
        assert (await client.get(f"{base}/yd:ws-over")).status_code == 404

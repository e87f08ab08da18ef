"""Long var-uints from a peer, on a real server: refused at once, never
decoded at a cost that grows with their square.

pycrdt's ``Decoder.read_var_uint`` adds each 7-bit group to a Python int
shifted ever further, so a var-uint of n continuation bytes costs O(n²):
one 1 MB message of ``0xff`` bytes (under the default message limit) held
the event loop, and every connection of the server, for about a minute. Each
place a var-uint of the peer's is read is tried here: the y-websocket message
type, the Hocuspocus document name's length, an awareness client id, and a
Hocuspocus auth token's length.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
import websockets
from pycrdt import Encoder

from syncd.yjs.protocol import Reader
from tests.conftest import RunningServer
from tests.http.support import issue

LONG = 400_000
"""Continuation bytes: about ten seconds of pycrdt's decoding, nothing for a
linear one."""

PROMPT_S = 2.0
"""The refusal comes well within this (it takes milliseconds)."""


def _bytes(data: bytes) -> bytes:
    encoder = Encoder()
    encoder.write_var_uint(len(data))
    return encoder.to_bytes() + data


LONG_VAR_UINT = b"\xff" * LONG + b"\x01"


def _y_websocket_type() -> bytes:
    return LONG_VAR_UINT


def _awareness_client_id() -> bytes:
    # An awareness message: one client, its id a long var-uint.
    return b"\x01" + _bytes(b"\x01" + LONG_VAR_UINT + b"\x01\x02{}")


def _hocuspocus_name() -> bytes:
    return LONG_VAR_UINT + b"notes"


def _hocuspocus_token() -> bytes:
    # An auth message for "notes", its token's length a long var-uint.
    return _bytes(b"notes") + b"\x02\x00" + LONG_VAR_UINT


@pytest.fixture
async def client(server: RunningServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url) as c:
        yield c


@pytest.mark.parametrize(
    ("endpoint", "message", "code"),
    [
        ("yjs", _y_websocket_type, 1002),
        ("yjs", _awareness_client_id, 1008),
        ("hocuspocus", _hocuspocus_name, 1002),
        ("hocuspocus", _hocuspocus_token, 1002),
    ],
)
async def test_a_long_var_uint_is_refused_at_once_and_the_server_stays_responsive(
    server: RunningServer,
    client: httpx.AsyncClient,
    endpoint: str,
    message: Callable[[], bytes],
    code: int,
) -> None:
    headers = await issue(client)
    token = headers["authorization"].removeprefix("Bearer ")
    path = "yjs/notes?token=" + token if endpoint == "yjs" else "hocuspocus"
    url = f"ws://127.0.0.1:{server.port}/v1/namespaces/app/{path}"
    ws: Any = await websockets.connect(url, max_size=None)
    data = message()
    started = time.monotonic()
    await ws.send(data)
    with pytest.raises(websockets.ConnectionClosed):
        while True:
            await asyncio.wait_for(ws.recv(), 30)
    elapsed = time.monotonic() - started
    assert ws.close_code == code
    assert elapsed < PROMPT_S, f"{elapsed:.1f} s to refuse {len(data)} bytes"
    # The server is still there for everyone else.
    r = await client.get("/v1/namespaces/app/crdts/yd:notes", headers=headers)
    assert r.status_code == 404


@pytest.mark.parametrize(
    ("data", "value"),
    [
        (b"\x00", 0),
        (b"\x7f", 127),
        (b"\x80\x01", 128),
        (b"\xff\xff\xff\xff\x0f", 2**32 - 1),
        (b"\x80\x80\x80\x00", 0),  # over-long, as lib0 reads it
        (b"\xff\xff\xff\xff\xff\xff\xff\x0f", 2**53 - 1),
    ],
)
def test_var_uints_read_as_lib0_reads_them(data: bytes, value: int) -> None:
    reader = Reader(data + b"rest")
    assert reader.var_uint() == value
    assert reader.rest() == b"rest"


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x80",  # truncated
        b"\xff\xff\xff\xff\xff\xff\xff\x10",  # 2**53: past lib0's integers
        b"\xff" * 20 + b"\x01",
        b"\x80" * 20 + b"\x01",
    ],
)
def test_a_var_uint_lib0_refuses_is_refused(data: bytes) -> None:
    with pytest.raises(ValueError):
        Reader(data).var_uint()


def test_a_byte_string_longer_than_what_follows_is_refused() -> None:
    with pytest.raises(ValueError):
        Reader(b"\x05abc").byte_string()
    assert Reader(b"\x03abc").byte_string() == b"abc"

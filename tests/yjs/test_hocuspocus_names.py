"""Hocuspocus document names outside ASCII, on a real socket: every answer
names its document as the provider wrote it, a lib0 var-string whose length
counts UTF-8 bytes. The server wrote the length in characters (pycrdt's
``Encoder.write_var_string``), so a provider read the name cut inside a
character and the rest of the message askew: a denial it could not read, and
with ``sessionAwareness`` (``name\\0session``) every message of a document it
had opened."""

from __future__ import annotations

import asyncio

import pytest
import websockets
from pycrdt import Encoder

from syncd.yjs import hocuspocus
from tests.conftest import RunningServer
from tests.ws.support import NS, mint

WAIT_S = 5.0


def lib0_string(text: str) -> bytes:
    """lib0's var-string: the length in UTF-8 bytes, then the bytes (pycrdt's
    ``Encoder.write_var_string`` writes the length in characters)."""
    data = text.encode()
    length = Encoder()
    length.write_var_uint(len(data))
    return length.to_bytes() + data


@pytest.mark.parametrize("name", ["café", "notes\0séance-é", "日本語"])
async def test_a_hocuspocus_name_outside_ascii_is_echoed_as_lib0_writes_it(
    server: RunningServer, name: str
) -> None:
    """The name before the session id is a document (ASCII, or refused); the
    server's answer names the document as the provider did, its length in
    bytes: counted in characters, the provider read a name cut inside a
    character and the rest of the message askew."""
    url = f"ws://127.0.0.1:{server.port}/v1/namespaces/{NS}/hocuspocus"
    async with websockets.connect(url, ping_interval=None) as ws:
        await ws.send(lib0_string(name) + b"\x02\x00" + lib0_string(mint()))
        data = await asyncio.wait_for(ws.recv(), WAIT_S)
        got, kind, rest = hocuspocus.parse(data)
        assert (got, kind) == (name, hocuspocus.MESSAGE_AUTH)
        if name.startswith("notes\0"):
            assert rest == b"\x02" + lib0_string("read-write")
            # the document's own messages carry the name as well
            data = await asyncio.wait_for(ws.recv(), WAIT_S)
            assert hocuspocus.parse(data)[0] == name
        else:
            assert rest[0] == hocuspocus.AUTH_PERMISSION_DENIED

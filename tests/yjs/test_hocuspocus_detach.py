"""A Hocuspocus document closed by its provider while its update waits for
the token's rate limit: the update is dropped with the document, and the
socket's other documents go on (the socket was closed 1013 under them)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from pycrdt import Decoder

from syncd.yjs import hocuspocus
from syncd.yjs.protocol import sync_update
from tests.conftest import RunningServer
from tests.http.support import issue
from tests.ws.support import RawWs, client_frame
from tests.yjs.test_hocuspocus import _token, _update, auth, on

NS = "app"
PATH = f"/v1/namespaces/{NS}/hocuspocus"
CLOSE_DOCUMENT = b"\x07"
"""Hocuspocus's close message (type 7): the provider leaves that document."""


async def _next(raw: RawWs, name: str, kind: int) -> bytes:
    """The body of the next message of ``kind`` for ``name``; fails on a close frame."""
    while True:
        opcode, payload = await raw.frame()
        assert opcode != 0x8, f"socket closed: {payload!r}"
        if opcode == 0x2:
            got, got_kind, rest = hocuspocus.parse(payload)
            if (got, got_kind) == (name, kind):
                return rest


async def test_a_closed_documents_update_over_the_rate_limit_leaves_the_socket_open(
    make_server: Any,
) -> None:
    server: RunningServer = await make_server(rate_limit=3)
    async with httpx.AsyncClient(base_url=server.url) as client:
        token = _token(await issue(client))
        raw = await RawWs.connect(server, path=PATH)
        for name in ("a", "b"):
            raw.send(client_frame(0x2, auth(name, token)))
            answer = Decoder(await _next(raw, name, 2))
            assert answer.read_var_uint() == 2  # authenticated
        # The token's rate is used up (the two auths and this burst).
        h = {"authorization": f"Bearer {token}"}
        while (await client.get(f"/v1/namespaces/{NS}/crdts/yd:b", headers=h)).status_code != 429:
            pass
        # One read: an update of "a", then the provider closes "a".
        raw.send(
            client_frame(0x2, on("a", sync_update(_update("late"))))
            + client_frame(0x2, on("a", CLOSE_DOCUMENT))
        )
        await asyncio.sleep(0.1)  # the update met the limit with "a" closed
        # "b" goes on: its update is applied once the limit allows.
        raw.send(client_frame(0x2, on("b", sync_update(_update("kept")))))
        assert await _next(raw, "b", 8) == b"\x01"
        r = await client.get(f"/v1/namespaces/{NS}/crdts/yd:b?root=content", headers=h)
        assert r.json()["value"] == "kept"
        raw.writer.close()

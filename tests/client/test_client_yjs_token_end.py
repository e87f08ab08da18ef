"""YjsProvider when the server ends its connection for good: its document
deleted (4410), its token ended (4401).

A deleted document's providers are closed with 4410 so that they do not send
it back (syncd/yjs/channel.py): the provider reconnected after every close
and sent its copy, which created the document again. And a token is no
longer fixed: a function gives one for each connect, so a provider whose
token ends (4401) goes on with a new one; with a fixed token the next
handshake is refused 401 and it stops, as before."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from pycrdt import Doc, Text

from syncd.client.yjs import YjsProvider
from tests.client.conftest import make_token
from tests.conftest import RunningServer
from tests.http.support import ADMIN_HEADERS

WAIT_S = 5.0
SHORT_TTL_MS = 1500
"""A token life that ends within a test, yet outlives a connect and a sync."""


async def _eventually(check: Any, timeout: float = WAIT_S) -> None:
    for _ in range(int(timeout / 0.02)):
        if await check():
            return
        await asyncio.sleep(0.02)
    assert await check()


async def test_a_deleted_documents_provider_stops_and_does_not_send_it_back(
    server: RunningServer,
) -> None:
    doc: Doc[Any] = Doc()
    crdt = "/v1/namespaces/app/crdts/yd:doomed"
    async with (
        httpx.AsyncClient(base_url=server.url, headers=ADMIN_HEADERS) as admin,
        YjsProvider(server.url, "app", "doomed", doc, make_token()) as provider,
    ):
        await asyncio.wait_for(provider.synced.wait(), WAIT_S)
        doc.get("content", type=Text).insert(0, "soon deleted")

        async def written() -> bool:
            return (await admin.get(crdt)).status_code == 200

        await _eventually(written)
        assert (await admin.delete(crdt)).status_code == 204
        # Past the reconnects' backoff (0.1, 0.2, 0.4 s ...): nobody sent it back.
        await asyncio.sleep(1.5)
        assert (await admin.get(crdt)).status_code == 404
        assert provider.closed == (4410, "document deleted")
        assert not provider.synced.is_set()


async def test_a_token_function_gives_the_next_connect_a_new_token(
    server: RunningServer,
) -> None:
    issued: list[str] = []

    async def token() -> str:
        issued.append(make_token(ttl_ms=SHORT_TTL_MS))
        return issued[-1]

    doc: Doc[Any] = Doc()
    text = doc.get("content", type=Text)
    async with (
        httpx.AsyncClient(base_url=server.url, headers=ADMIN_HEADERS) as admin,
        YjsProvider(server.url, "app", "renewed", doc, token) as provider,
    ):
        await asyncio.wait_for(provider.synced.wait(), WAIT_S)
        for word in ("first", "second"):
            # The token ends (the server closes with 4401); typed after that, it arrives.
            await asyncio.sleep(SHORT_TTL_MS / 1000 + 0.3)
            text.insert(len(str(text)), word)

            async def arrived(w: str = word) -> bool:
                r = await admin.get("/v1/namespaces/app/crdts/yd:renewed?root=content")
                return r.status_code == 200 and w in r.json()["value"]

            await _eventually(arrived)
        assert provider.refused is None and provider.closed is None
        assert len(issued) >= 3


async def test_a_plain_function_works_too_and_a_fixed_token_stops_when_it_ends(
    server: RunningServer,
) -> None:
    with_function = YjsProvider(
        server.url, "app", "plain", Doc(), lambda: make_token(ttl_ms=SHORT_TTL_MS)
    )
    fixed = YjsProvider(server.url, "app", "plain", Doc(), make_token(ttl_ms=SHORT_TTL_MS))
    async with with_function, fixed:
        await asyncio.wait_for(with_function.synced.wait(), WAIT_S)
        await asyncio.wait_for(fixed.synced.wait(), WAIT_S)
        await asyncio.sleep(SHORT_TTL_MS / 1000 + 0.5)

        async def stopped() -> bool:
            return fixed.refused is not None

        await _eventually(stopped)
        assert fixed.refused == 401
        await asyncio.wait_for(with_function.synced.wait(), WAIT_S)
        assert with_function.refused is None


async def test_a_token_function_that_fails_is_asked_again(server: RunningServer) -> None:
    calls: list[int] = []

    def token() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise OSError("the token service is away")
        return make_token()

    async with YjsProvider(server.url, "app", "later", Doc(), token) as provider:
        await asyncio.wait_for(provider.synced.wait(), WAIT_S)
    assert len(calls) == 3

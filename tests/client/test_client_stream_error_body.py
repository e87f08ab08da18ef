"""A stream ended by the service's ``error`` (WebSocket) or ``end`` event
(SSE) raises a ServiceError whose ``body`` is that error, as a refused HTTP
request's is: ``error``, ``message`` and, over the WebSocket, the ``id`` the
refusal is about, so a subscription of several ids can tell which one ended
it. The body was empty: only the text of ``message`` named the id."""

from __future__ import annotations

import asyncio

import pytest

from syncd.client import AsyncClient, ServiceError
from tests.client.conftest import NS, make_token
from tests.conftest import RunningServer

WAIT_S = 10.0


async def test_a_refused_subscription_names_its_id(server: RunningServer) -> None:
    async with AsyncClient(server.url, make_token(3, read=("gc:*",)), NS) as client:
        stream = client.subscribe(["gc:open", "or:secret"])
        with pytest.raises(ServiceError) as info:
            async with asyncio.timeout(WAIT_S):
                while True:
                    await anext(stream)
        error = info.value
        assert (error.status, error.code) == (403, "forbidden")
        assert error.body == {"id": "or:secret", "error": "forbidden", "message": error.message}


async def test_an_sse_end_event_is_the_body(server: RunningServer) -> None:
    token = make_token(4)
    async with AsyncClient(server.url, token, NS) as client:
        async with client.events("gc:ends") as stream:
            async with asyncio.timeout(WAIT_S):
                await anext(stream)  # the snapshot: the stream is open
            async with AsyncClient(server.url, make_token(1, admin=True), NS) as admin:
                response = await admin.http.post(
                    f"{server.url}/v1/namespaces/{NS}/revocations", json={"client_id": 4}
                )
                assert response.status_code == 200, response.text
            with pytest.raises(ServiceError) as info:
                async with asyncio.timeout(WAIT_S):
                    while True:
                        await anext(stream)
        error = info.value
        assert error.code == "token_revoked"
        assert error.body == {"error": "token_revoked", "message": error.message}

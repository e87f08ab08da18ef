"""``?token=`` on a WebSocket upgrade or an event stream
(docs/permissions.md#who-is-asking) is used whenever the ``Authorization``
header holds no bearer, on a real server: a browser on a site behind HTTP
Basic authentication sends its ``Basic`` credentials with those requests
too, and cannot send another header. A ``Bearer`` header still wins.

Found by probing: any ``Authorization`` header at all was taken as the
credential, so such a browser's ``?token=`` got 401 ``invalid_token``
("authorization must be 'Bearer <token>'") on both routes."""

from __future__ import annotations

import json
from typing import Any

import httpx
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from tests.http.support import issue

BASIC = "Basic dXNlcjpwYXNz"  # user:pass, as a browser resends it


async def events_status(client: httpx.AsyncClient, query: str, header: str | None) -> int:
    headers = {"authorization": header} if header is not None else {}
    url = f"/v1/namespaces/app/crdts/gc:a/events{query}"
    async with client.stream("GET", url, headers=headers) as r:
        return r.status_code


def ws_url(server: Any, token: str) -> str:
    return f"ws://127.0.0.1:{server.port}/v1/namespaces/app/ws?token={token}"


async def test_a_basic_header_leaves_the_query_token_in_force(server: Any) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        token = (await issue(client, read=["*"]))["authorization"].split()[1]
        assert await events_status(client, f"?token={token}", BASIC) == 200
        # A Bearer header wins over the query, whatever each holds.
        assert await events_status(client, f"?token={token}", "Bearer nope.nope") == 401
        # Without a query token, a header that is no bearer is still refused.
        r = await client.get(
            "/v1/namespaces/app/crdts/gc:a/events", headers={"authorization": BASIC}
        )
        assert r.status_code == 401
        assert r.json()["message"] == "authorization must be 'Bearer <token>'"
    async with connect(
        ws_url(server, token), additional_headers={"Authorization": BASIC}, proxy=None
    ) as ws:
        await ws.send(json.dumps({"kind": "ping", "ref": 1}))
        assert json.loads(await ws.recv()) == {"kind": "pong", "ref": 1}
    try:
        async with connect(
            ws_url(server, token), additional_headers={"Authorization": "Bearer x.y"}, proxy=None
        ):
            raise AssertionError("the upgrade was accepted")
    except InvalidStatus as exc:
        assert exc.response.status_code == 401

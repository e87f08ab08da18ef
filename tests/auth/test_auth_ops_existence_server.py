"""An op on an id the token may not write is 403 whatever the op, over HTTP
and the WebSocket: the op was planned before the permission was checked, so
an op of another type on an id without a type prefix answered 409
``type_mismatch`` naming the stored type when the id existed (403 when it
did not), and an op without a type 403 when it existed (400
``unknown_type`` when it did not): a token that may neither read nor write
the id learnt whether it exists and what it holds."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect

from tests.conftest import RunningServer
from tests.http.support import ADMIN_HEADERS, issue
from tests.ws.support import send_json, ws_url

NS = "app"
OPS: list[Any] = [
    {"type": "orset", "op": "add", "element": 1},
    {"op": "increment"},
    [{"type": "gcounter", "op": "increment"}, {"type": "orset", "op": "add", "element": 1}],
    {"type": "gcounter", "op": "bogus"},
]


@pytest.mark.parametrize("http_parser", ["h11"], indirect=True)
async def test_ops_on_an_id_the_token_may_not_write_are_403(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        r = await client.post(
            f"/v1/namespaces/{NS}/crdts/secret/ops",
            json={"type": "gcounter", "op": "increment"},
            headers=ADMIN_HEADERS,
        )
        assert r.status_code == 200, r.text
        headers = await issue(client, NS, 9, read=["gc:public"], write=["gc:public"])
        for crdt_id in ("secret", "absent"):
            for body in OPS:
                r = await client.post(
                    f"/v1/namespaces/{NS}/crdts/{crdt_id}/ops", json=body, headers=headers
                )
                assert (r.status_code, r.json()["error"]) == (403, "forbidden"), (
                    crdt_id,
                    body,
                    r.text,
                )
        token = headers["authorization"].removeprefix("Bearer ")
        async with connect(ws_url(server, token, NS), proxy=None, compression=None) as ws:
            for ref, body in enumerate(OPS):
                await send_json(ws, {"kind": "op", "ref": ref, "id": "secret", "op": body})
                answer = json.loads(await asyncio.wait_for(ws.recv(), 5))
                assert (answer["kind"], answer["error"]) == ("error", "forbidden"), (body, answer)

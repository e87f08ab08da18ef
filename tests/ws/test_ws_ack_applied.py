"""The WebSocket ``ack`` carries what ``POST …/ops`` answers: ``applied`` (the
ops of the message applied, now or by the first message with their op_id) and
``duplicate`` on a repeat, on a real server."""

from __future__ import annotations

from typing import Any

import httpx

from tests.conftest import ADMIN, RunningServer
from tests.ws.support import NS, op, open_ws

AUTH = {"authorization": f"Bearer {ADMIN}"}


async def _http(server: RunningServer, crdt_id: str, body: Any) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=server.url) as client:
        r = await client.post(f"/v1/namespaces/{NS}/crdts/{crdt_id}/ops", json=body, headers=AUTH)
    assert r.status_code == 200, r.text
    answer: dict[str, Any] = r.json()
    return answer


async def test_ack_says_how_many_ops_were_applied_as_http_does(server: RunningServer) -> None:
    batch = [{"op": "increment", "op_id": "b1"}, {"op": "increment", "op_id": "b2"}]
    async with open_ws(server) as ws:
        first = await op(ws, "gc:ws", batch, ref=1)
        again = await op(ws, "gc:ws", batch, ref=2)
        single = await op(ws, "gc:ws", {"op": "increment"}, ref=3)
    assert first == {"kind": "ack", "ref": 1, "seq": 2, "applied": 2}
    assert again == {"kind": "ack", "ref": 2, "seq": 2, "applied": 2, "duplicate": True}
    assert single == {"kind": "ack", "ref": 3, "seq": 3, "applied": 1}
    # The same requests over HTTP answer the same fields.
    http_first = await _http(server, "gc:http", batch)
    http_again = await _http(server, "gc:http", batch)
    for ack, answer in ((first, http_first), (again, http_again)):
        assert {k: v for k, v in answer.items() if k != "ok"} == {
            k: v for k, v in ack.items() if k not in ("kind", "ref")
        }

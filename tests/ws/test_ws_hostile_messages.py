"""Client messages that are well-formed on the wire but not as data, found by
driving a running server."""

from __future__ import annotations

import httpx

from tests.conftest import ADMIN, RunningServer
from tests.ws.support import open_ws, recv


async def test_unpaired_surrogate_in_a_json_message_is_bad_request(server: RunningServer) -> None:
    """A text frame is valid UTF-8, but ``\\ud800`` inside its JSON is no UTF-8
    string: the op was applied, then could not be packed for the log, and the
    store refused every client's writes until it had rebuilt its state."""
    async with open_ws(server) as ws:
        await ws.send(
            '{"kind":"op","id":"pn:x","ref":1,"op":{"op":"increment","amount":1,"op_id":"\\ud800"}}'
        )
        answer = await recv(ws)
        assert answer["kind"] == "error" and answer["error"] == "bad_request", answer
        assert "surrogate" in answer["message"]
        await ws.send('{"kind":"op","id":"pn:x","ref":2,"op":{"op":"increment","amount":1}}')
        answer = await recv(ws)
        assert answer["kind"] == "ack" and answer["ref"] == 2, answer
    async with httpx.AsyncClient(base_url=server.url) as client:
        r = await client.get("/health/ready")
        assert r.status_code == 200, r.text
        r = await client.get(
            "/v1/namespaces/demo/crdts/pn:x", headers={"authorization": f"Bearer {ADMIN}"}
        )
        assert r.json()["value"] == 1

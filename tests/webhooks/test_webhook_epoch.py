"""A webhook event names its CRDT's life (``epoch``), as every op delta does
(docs/protocol.md): a deleted CRDT's id, written to again, starts a new life
at seq 1, and a delete sends no event. Without the epoch a receiver that
sorts or skips by ``seq`` per ``(ns, crdt_id)``, as docs/webhooks.md advises,
took the new life's events for old ones (seq 1 after seq 3)."""

from __future__ import annotations

from typing import Any

import httpx

from tests.http.support import ADMIN_HEADERS, issue, op
from tests.webhooks.webhook_receiver import Receiver

SECRET = "hook-secret"


async def test_events_carry_the_epoch_of_their_crdts_life(
    make_server: Any, make_receiver: Any
) -> None:
    receiver: Receiver = await make_receiver(secret=SECRET)
    srv = await make_server(webhook_url=receiver.url, webhook_secret=SECRET)
    url = "/v1/namespaces/app/crdts/gc:hits"
    async with httpx.AsyncClient(base_url=srv.url) as client:
        h = await issue(client)
        for _ in range(3):
            assert (await op(client, h, "gc:hits", {"op": "increment"})).status_code == 200
        first_life = (await client.get(url, headers=h)).json()["epoch"]
        assert (await client.delete(url, headers=ADMIN_HEADERS)).status_code == 204
        r = await op(client, h, "gc:hits", [{"op": "increment"}, {"op": "increment"}])
        assert r.status_code == 200, r.text
        second_life = (await client.get(url, headers=h)).json()["epoch"]
        await receiver.wait_for(5)
    assert first_life != second_life
    assert all(req.signature_ok for req in receiver.requests)
    events = sorted((req.json() for req in receiver.requests), key=lambda e: e["event_id"])
    lives = {(e["epoch"], e["seq"]) for e in events}
    assert lives == {
        (first_life, 1),
        (first_life, 2),
        (first_life, 3),
        (second_life, 1),
        (second_life, 2),
    }

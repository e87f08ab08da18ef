"""``POST …/ops?return=state`` answers the CRDT's state, a read, so it needs
the read permission as ``GET`` does: a token that may write an id but not
read it (a counter it may only increment) got the whole state with its op.
Refused before anything is applied (403), as the other checks of the
request are; without ``return`` the same token's op goes on."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import RunningServer
from tests.http.support import ADMIN_HEADERS, issue

NS = "app"
PATH = f"/v1/namespaces/{NS}/crdts/gc:votes/ops"


@pytest.mark.parametrize("http_parser", ["h11"], indirect=True)
async def test_return_state_needs_the_read_permission(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        writers = [
            await issue(client, NS, 9, read=["gc:other"], write=["gc:votes"]),
            await issue(
                client, NS, 10, rules={"r": [{"p": "gc:other"}], "w": [{"p": "gc:*", "o": 1}]}
            ),
        ]
        for headers in writers:
            r = await client.post(f"{PATH}?return=state", json={"op": "increment"}, headers=headers)
            assert (r.status_code, r.json()["error"]) == (403, "forbidden"), r.text
            assert "state" not in r.json()
        r = await client.get(f"/v1/namespaces/{NS}/crdts/gc:votes", headers=ADMIN_HEADERS)
        assert r.status_code == 404, r.text  # the refused requests applied nothing
        for headers in writers:
            r = await client.post(PATH, json={"op": "increment"}, headers=headers)
            assert r.status_code == 200, r.text
        reader = await issue(client, NS, 11, read=["gc:votes"], write=["gc:votes"])
        r = await client.post(f"{PATH}?return=state", json={"op": "increment"}, headers=reader)
        assert r.status_code == 200 and r.json()["state"] is not None, r.text

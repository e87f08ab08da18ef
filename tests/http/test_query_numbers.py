"""Numbers in query strings: ASCII digits only, never a 500."""

from __future__ import annotations

import httpx

from tests.conftest import RunningServer
from tests.http.support import issue


async def test_non_ascii_digits_are_400(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        for value in ("%C2%B2", "%D9%A1", "1%C2%B2"):
            r = await client.get(f"/v1/namespaces/app/crdts?limit={value}", headers=h)
            assert r.status_code == 400, value
            r = await client.get(
                f"/v1/namespaces/app/crdts/gc:x/events?since={value}&epoch=e", headers=h
            )
            assert r.status_code == 400, value

"""The served OpenAPI document's ``servers`` lead back to the server that
served it (OpenAPI 3.1 4.8.5: a relative URL is relative to the document's
location), on a real server.

It named ``http://localhost:3000`` (the default bind): a document fetched
from any other address, loaded into Swagger UI or a client generator, sent
every request to the user's own machine instead of to the server it came
from."""

from __future__ import annotations

from urllib.parse import urljoin

import httpx

from syncd.http.handlers.openapi import OPENAPI_PATH
from tests.conftest import RunningServer


async def test_the_documented_server_is_the_one_that_served_the_document(
    server: RunningServer,
) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        document_url = server.url + OPENAPI_PATH
        r = await client.get(OPENAPI_PATH)
        assert r.status_code == 200
        servers = r.json()["servers"]
        assert servers, "no servers: tools take '/' then, which is what is wanted"
        base = urljoin(document_url, servers[0]["url"])
        assert base.rstrip("/") == server.url
        # And a documented path under it answers.
        r = await client.get(base.rstrip("/") + "/health/live")
        assert r.status_code == 200, r.text

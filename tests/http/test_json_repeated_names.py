"""A JSON body whose object gives a name twice (``{"op":"increment","op":
"decrement"}``) is refused 400 with a message naming it, at any depth, on a
real server with both parsers: the decoder kept the last value silently, so
what a client or a proxy reading the first one meant and what the server
applied could differ. Refusing costs about 0.5 us per small op body (see
``_object_without_repeats``); the same names in different objects are fine."""

from __future__ import annotations

import httpx

from tests.conftest import RunningServer
from tests.http.support import ADMIN_HEADERS

OPS = "/v1/namespaces/app/crdts/gc:x/ops"
JSON = {**ADMIN_HEADERS, "content-type": "application/json"}


async def test_a_repeated_name_is_refused(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        for body in (
            b'{"op":"increment","op":"decrement"}',
            b'[{"op":"increment","amount":1,"amount":2}]',
            b'[{"op":"increment","origin":"a","x":{"a":1,"a":2}}]',
        ):
            r = await client.post(OPS, content=body, headers=JSON)
            assert r.status_code == 400, (body, r.text)
            answer = r.json()
            assert answer["error"] == "bad_request", answer
            assert "given more than once" in answer["message"], answer
        # Nothing was applied; the same name in two objects is no repeat.
        r = await client.post(
            OPS,
            content=b'[{"op":"increment","amount":1},{"op":"increment","amount":2}]',
            headers=JSON,
        )
        assert r.status_code == 200, r.text
        r = await client.get("/v1/namespaces/app/crdts/gc:x", headers=ADMIN_HEADERS)
        assert r.json()["value"] == 3, r.text

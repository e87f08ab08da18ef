"""Numbers in query strings: ASCII digits only, never a 500."""

from __future__ import annotations

import httpx

from tests.conftest import RunningServer
from tests.http.support import ADMIN_HEADERS, issue


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


async def test_leading_zeros_do_not_count_against_the_digit_bounds(server: RunningServer) -> None:
    """A number's leading zeros are taken however many there are (as the
    parsers take them in Content-Length): the bounds on digits are on the
    value's, so ``since``, ``before``, ``at``, ``client_id`` and ``limit``
    with zeros in front are the number they spell, not 400."""
    zeros = "0" * 30
    crdt = "/v1/namespaces/app/crdts/gc:zeros"
    async with httpx.AsyncClient(base_url=server.url, headers=ADMIN_HEADERS) as client:
        for _ in range(2):
            r = await client.post(f"{crdt}/ops", json={"op": "increment"})
            assert r.status_code == 200
        r = await client.get(f"{crdt}?at={zeros}1")
        assert r.status_code == 200 and r.json()["seq"] == 1, r.json()
        r = await client.get(f"{crdt}/history?before={zeros}2&limit={zeros}1&client_id={zeros}0")
        assert r.status_code == 200, r.json()
        r = await client.get(f"{crdt}/history?before={zeros}3&limit={zeros}1")
        assert r.status_code == 200 and [op["seq"] for op in r.json()["ops"]] == [2], r.json()
        r = await client.get(f"/v1/namespaces/app/crdts?limit={zeros}1")
        assert r.status_code == 200 and len(r.json()["crdts"]) == 1, r.json()
        # Only the events' head: a GET's stream would not end.
        r = await client.head(f"{crdt}/events?since={zeros}1")
        assert r.status_code == 200, r.headers
        # Still bounded: more significant digits, or zero as a limit, is 400.
        for query in ("since=1" + "0" * 20, "since=" + "1" * 21):
            r = await client.head(f"{crdt}/events?{query}")
            assert r.status_code == 400, query
        r = await client.get(f"{crdt}?at={zeros}1" + "0" * 18)
        assert r.status_code == 400
        r = await client.get(f"/v1/namespaces/app/crdts?limit={zeros}")
        assert r.status_code == 400

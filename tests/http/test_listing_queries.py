"""The listing route's query (``prefix``, ``limit``, ``cursor``) over real
sockets: each is used or refused with a 400 naming it, never dropped or
passed to the store as text no id can hold (docs/http-api.md#listing-crdts)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from syncd.crdt.engine import MAX_LIST_LIMIT
from syncd.http.handlers.listing import MAX_ID_CHARS
from tests.conftest import RunningServer
from tests.http.support import ADMIN_HEADERS
from tests.store.pgnodes import pg_db, pg_url, schema

__all__ = ["pg_db", "pg_url", "schema"]  # the PostgreSQL fixtures, for the store's case

LIST = "/v1/namespaces/app/crdts"
IDS = ("gc:a", "gc:a+b", "gc:b", "gc:c")

REFUSED: tuple[tuple[str, str], ...] = (
    # limit: out of range, not decimal digits, too long for its range
    ("limit=0", "limit: an integer from 1 to 1000 is required"),
    (f"limit={MAX_LIST_LIMIT + 1}", "limit: an integer from 1 to 1000 is required"),
    ("limit=-1", "limit: "),
    ("limit=1.5", "limit: "),
    ("limit=%D9%A3", "limit: "),  # an Arabic-Indic 3
    ("limit=1" + "0" * 30, "limit: "),  # leading zeros are taken: "000001" is 1
    ("limit=", "limit: "),
    # each known parameter once: which of two was meant is a guess
    ("limit=1&limit=2", "limit: given more than once"),
    ("prefix=gc:&prefix=or:", "prefix: given more than once"),
    ("cursor=gc:a&cursor=gc:b", "cursor: given more than once"),
    # text no id can hold (a NUL was a 500 on PostgreSQL)
    ("cursor=%00", "cursor: "),
    ("cursor=gc%00a", "cursor: "),
    ("cursor=a/b", "cursor: "),
    ("cursor=" + "a" * (MAX_ID_CHARS + 1), "cursor: "),
    ("prefix=%00", "prefix: "),
    ("prefix=gc:%00", "prefix: "),
    ("prefix=%C3%A9", "prefix: "),
    ("prefix=" + "a" * (MAX_ID_CHARS + 1), "prefix: "),
    # a + unencoded is a space: gc:a b, just before gc:a+b, answered its page again
    ("limit=1&cursor=gc:a+b", "cursor: the next of a previous page (an id) is required (a + "),
    (
        "prefix=gc:a+",
        "prefix: at most 256 characters of A-Z a-z 0-9 . _ : ~ @ + = -, as ids are (a + ",
    ),
)


async def _answers(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url, headers=ADMIN_HEADERS) as http:
        for crdt_id in IDS:
            r = await http.post(f"{LIST}/{crdt_id}/ops", json={"op": "increment"})
            assert r.status_code == 200, r.text
        for query, start in REFUSED:
            r = await http.get(f"{LIST}?{query}")
            assert r.status_code == 400, (query, r.status_code, r.text)
            assert r.json()["error"] == "bad_request", (query, r.text)
            assert r.json()["message"].startswith(start), (query, r.text)

        async def ids(query: str) -> tuple[list[str], str | None]:
            r = await http.get(f"{LIST}?{query}")
            assert r.status_code == 200, (query, r.text)
            return [item["id"] for item in r.json()["crdts"]], r.json()["next"]

        # What is taken still works, at its limits; a repeated unknown name is ignored.
        assert await ids(f"limit={MAX_LIST_LIMIT}") == (list(IDS), None)
        assert await ids("limit=1&_=1&_=2") == (["gc:a"], "gc:a")
        assert await ids("limit=" + "0" * 30 + "1") == (["gc:a"], "gc:a")
        assert await ids("limit=1&cursor=gc:a") == (["gc:a+b"], "gc:a+b")
        assert await ids("limit=1&cursor=gc:a%2Bb") == (["gc:b"], "gc:b")
        assert await ids("cursor=") == (list(IDS), None)  # empty: the first page
        assert await ids("cursor=" + "z" * MAX_ID_CHARS) == (
            [],
            None,
        )  # a valid id past every other
        assert await ids("prefix=" + "g" * MAX_ID_CHARS) == ([], None)
        assert await ids("prefix=gc:b") == (["gc:b"], None)
        assert await ids("prefix=") == (list(IDS), None)


async def test_listing_parameters_are_used_or_refused_naming_them(
    make_server: Callable[..., Any],
) -> None:
    await _answers(await make_server())


async def test_listing_parameters_on_postgresql(
    make_server: Callable[..., Any], pg_url: str
) -> None:
    """The same answers on PostgreSQL, which refused a NUL in the cursor or
    prefix as a database error (500)."""
    await _answers(await make_server(database_url=pg_url, node_id="listing"))

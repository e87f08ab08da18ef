"""``POST .../revert`` over real sockets: one writer's ops taken back for every
type, as an ordinary write (durable, in the history, fanned out), idempotent
with an op_id and across repeats, and every refusal a clear JSON error."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from typing import Any

import httpx
import msgpack
import pytest
from pycrdt import Doc, Text

import syncd.revert
from tests.conftest import RunningServer
from tests.http.support import issue, op

BASE = "/v1/namespaces/app/crdts"
HUMAN, AGENT = 7, 9


@pytest.fixture
async def client(server: RunningServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url) as c:
        yield c


async def revert(
    client: httpx.AsyncClient, h: dict[str, str], crdt_id: str, body: Any
) -> httpx.Response:
    return await client.post(f"{BASE}/{crdt_id}/revert", json=body, headers=h)


async def read(client: httpx.AsyncClient, h: dict[str, str], crdt_id: str) -> Any:
    return (await client.get(f"{BASE}/{crdt_id}", headers=h)).json()


async def test_an_agent_task_is_taken_back_and_the_human_text_stays(
    client: httpx.AsyncClient,
) -> None:
    human = await issue(client, client_id=HUMAN)
    agent = await issue(client, client_id=AGENT)

    async def edit(h: dict[str, str], body: dict[str, Any], origin: str | None = None) -> None:
        r = await op(client, h, "rg:doc", body, query=f"?origin={origin}" if origin else "")
        assert r.status_code == 200, r.text

    await edit(human, {"op": "insert", "index": 0, "text": "Dear team, the launch is Monday."})
    await edit(agent, {"op": "insert", "index": 10, "text": " (summary: launch)"}, "agent:t1")
    await edit(human, {"op": "insert", "index": 0, "text": "Hi! "})
    at = (await read(client, human, "rg:doc"))["text"].index("Monday.")
    await edit(agent, {"op": "delete", "index": at, "count": 7}, "agent:t1")
    await edit(agent, {"op": "insert", "index": 0, "text": ">> "}, "agent:t2")  # another task
    await edit(human, {"op": "insert", "index": 6, "text": "?"})  # after ">> Hi!"
    before = (await read(client, human, "rg:doc"))["text"]
    assert "(summary: launch)" in before and "Monday" not in before
    r = await revert(client, human, "rg:doc", {"origin": "agent:t1", "op_id": "undo-t1"})
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["ok"] and answer["matched"] == 2 and answer["applied"] == 2
    assert answer["since_seq"] == 1 and answer["until_seq"] == 6
    text = (await read(client, human, "rg:doc"))["text"]
    assert text == ">> Hi!? Dear team, the launch is Monday."
    # Its ops are in the history, by the reverting client, marked.
    ops = (await client.get(f"{BASE}/rg:doc/history?origin=revert", headers=human)).json()["ops"]
    assert len(ops) == 2 and all(o["client_id"] == HUMAN for o in ops)
    assert ops[0]["reverts"] == {"origin": "agent:t1", "since_seq": 1, "until_seq": 6}
    assert {o["op_id"] for o in ops} == {"undo-t1/0", "undo-t1/1"}
    # The same op_id: the first answer again, nothing applied twice.
    again = await revert(client, human, "rg:doc", {"origin": "agent:t1", "op_id": "undo-t1"})
    assert again.json() == {"ok": True, "seq": answer["seq"], "duplicate": True}
    # Without an op_id too: the ops it took back are taken back already.
    third = await revert(client, human, "rg:doc", {"origin": "agent:t1"})
    assert third.json()["applied"] == 0 and third.json()["matched"] == 0
    assert (await read(client, human, "rg:doc"))["text"] == text
    # The other task of the same client is still there, and goes on its own.
    r = await revert(client, human, "rg:doc", {"client_id": AGENT})
    assert r.json()["matched"] == 1  # agent:t2's insert; agent:t1's were taken back
    assert (await read(client, human, "rg:doc"))["text"] == "Hi!? Dear team, the launch is Monday."


async def test_a_client_reverted_twice_and_one_that_reverts_itself(
    client: httpx.AsyncClient,
) -> None:
    human = await issue(client, client_id=HUMAN)
    agent = await issue(client, client_id=AGENT)
    await op(client, human, "rg:t", {"op": "insert", "index": 0, "text": "keep this"})
    await op(client, agent, "rg:t", {"op": "delete", "index": 0, "count": 5})  # "this"
    await op(client, agent, "rg:t", {"op": "insert", "index": 4, "text": " AI"})
    assert (await read(client, human, "rg:t"))["text"] == "this AI"
    # The agent takes itself back: its revert ops are by client 9 too.
    r = await revert(client, agent, "rg:t", {"client_id": AGENT})
    assert r.json()["applied"] == 2
    assert (await read(client, human, "rg:t"))["text"] == "keep this"
    # Reverting client 9 again leaves both its ops (taken back) and its revert.
    r = await revert(client, human, "rg:t", {"client_id": AGENT})
    assert r.json()["matched"] == 0
    await op(client, agent, "rg:t", {"op": "delete", "index": 0, "count": 5})
    r = await revert(client, human, "rg:t", {"client_id": AGENT})
    assert r.json()["matched"] == 1
    assert (await read(client, human, "rg:t"))["text"] == "keep this"
    # A revert of client 9's reverts (origin "revert") redoes what they took
    # back where that is not taken back otherwise: " AI" comes back; "keep "
    # stays, since the human's revert brought it back too.
    r = await revert(client, human, "rg:t", {"client_id": AGENT, "origin": "revert"})
    assert r.json()["matched"] == 2
    assert (await read(client, human, "rg:t"))["text"] == "keep this AI"


async def test_since_and_until_bound_the_ops_taken_back(client: httpx.AsyncClient) -> None:
    agent = await issue(client, client_id=AGENT)
    for amount in (1, 10, 100, 1000):
        await op(client, agent, "pn:c", {"op": "increment", "amount": amount})
    r = await revert(client, agent, "pn:c", {"client_id": AGENT, "since_seq": 2, "until_seq": 3})
    assert r.json()["matched"] == 2 and r.json()["since_seq"] == 2
    assert (await read(client, agent, "pn:c"))["value"] == 1001
    # until_seq past the current seq stops there.
    r = await revert(client, agent, "pn:c", {"client_id": AGENT, "since_seq": 4, "until_seq": 99})
    assert r.json()["until_seq"] == 5 and (await read(client, agent, "pn:c"))["value"] == 1


def _yjs_edit(doc: Doc[Any], edit: Any) -> str:
    state = doc.get_state()
    edit(doc.get("content", type=Text))
    return base64.b64encode(doc.get_update(state)).decode()


async def test_every_revertible_type(client: httpx.AsyncClient) -> None:
    human = await issue(client, client_id=HUMAN)
    agent = await issue(client, client_id=AGENT)
    h_doc, a_doc = Doc(), Doc()
    first = _yjs_edit(h_doc, lambda t: t.insert(0, "human text"))
    a_doc.apply_update(base64.b64decode(first))
    second = _yjs_edit(a_doc, lambda t: t.insert(5, "AGENT "))
    cases: list[tuple[str, list[tuple[dict[str, str], dict[str, Any]]], Any]] = [
        (
            "pn:p",
            [(human, {"op": "increment", "amount": 5}), (agent, {"op": "decrement", "amount": 9})],
            5,
        ),
        (
            "lw:r",
            [(human, {"op": "set", "value": "mine"}), (agent, {"op": "set", "value": "ai"})],
            "mine",
        ),
        (
            "or:s",
            [
                (human, {"op": "add", "element": "a"}),
                (agent, {"op": "add", "element": "b"}),
                (agent, {"op": "remove", "element": "a"}),
            ],
            ["a"],
        ),
        (
            "tr:t",
            [
                (human, {"op": "add", "id": "n1"}),
                (agent, {"op": "add", "id": "ai", "parent": "n1"}),
                (agent, {"op": "update", "id": "n1", "data": {"by": "ai"}}),
            ],
            {"id": "root", "data": {}, "children": [{"id": "n1", "data": {}, "children": []}]},
        ),
    ]
    for crdt_id, writes, expected in cases:
        for h, body in writes:
            assert (await op(client, h, crdt_id, body)).status_code == 200
        r = await revert(client, human, crdt_id, {"client_id": AGENT})
        assert r.status_code == 200, (crdt_id, r.text)
        assert (await read(client, human, crdt_id))["value"] == expected, crdt_id
    await op(client, human, "yd:d", {"op": "update", "update": first})
    await op(client, agent, "yd:d", {"op": "update", "update": second})
    r = await revert(client, human, "yd:d", {"client_id": AGENT})
    assert r.status_code == 200 and r.json()["applied"] == 1
    view = await client.get(f"{BASE}/yd:d?root=content&as=text", headers=human)
    assert view.json()["value"] == "human text"


@pytest.mark.parametrize(
    ("crdt_id", "body"),
    [("gc:g", {"op": "increment"}), ("pr:p", {"op": "update", "data": {"x": 1}})],
)
async def test_types_that_cannot_revert_answer_409(
    client: httpx.AsyncClient, crdt_id: str, body: dict[str, Any]
) -> None:
    h = await issue(client)
    await op(client, h, crdt_id, body)
    r = await revert(client, h, crdt_id, {"client_id": 7})
    assert r.status_code == 409 and r.json()["error"] == "not_revertible" and r.json()["message"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ([], "body"),
        ({}, "client_id, origin"),
        ({"client_id": None}, "client_id, origin"),
        ({"client_id": -1}, "client_id"),
        ({"client_id": "7"}, "client_id"),
        ({"client_id": 2**53}, "client_id"),
        ({"origin": ""}, "origin"),
        ({"origin": "x" * 129}, "origin"),
        ({"client_id": 7, "since_seq": 0}, "since_seq"),
        ({"client_id": 7, "since_seq": "1"}, "since_seq"),
        ({"client_id": 7, "until_seq": -1}, "until_seq"),
        ({"client_id": 7, "since_seq": 3, "until_seq": 2}, "until_seq"),
        ({"client_id": 7, "since_seq": 9}, "since_seq"),  # the future
        ({"client_id": 7, "op_id": ""}, "op_id"),
        ({"client_id": 7, "op_id": 5}, "op_id"),
        ({"client_id": 7, "seq": 1}, "seq"),
    ],
)
async def test_bad_bodies_are_400_naming_the_field(
    client: httpx.AsyncClient, body: Any, field: str
) -> None:
    h = await issue(client)
    await op(client, h, "pn:c", {"op": "increment"})
    r = await revert(client, h, "pn:c", body)
    assert r.status_code == 400 and r.json()["error"] == "bad_request", r.text
    assert r.json()["message"].startswith(f"{field}:"), r.text
    assert (await read(client, h, "pn:c"))["seq"] == 1


async def test_who_may_revert(client: httpx.AsyncClient) -> None:
    h = await issue(client)
    await op(client, h, "pn:c", {"op": "increment"})
    reader = await issue(client, client_id=8, write=[])
    r = await revert(client, reader, "pn:c", {"client_id": 7})
    assert (r.status_code, r.json()["error"]) == (403, "forbidden")
    narrow = await issue(
        client, client_id=8, rules={"r": [{"p": "*"}], "w": [{"p": "pn:*", "o": 1}]}
    )
    r = await revert(client, narrow, "pn:c", {"client_id": 7})
    assert (r.status_code, r.json()["error"]) == (403, "forbidden")  # a decrement: not allowed
    assert (await read(client, h, "pn:c"))["value"] == 1
    assert (await revert(client, h, "pn:nope", {"client_id": 7})).status_code == 404
    assert (await client.post(f"{BASE}/pn:c/revert", json={"client_id": 7})).status_code == 401


async def test_expired_history_is_410_with_the_oldest_seq(make_server: Any) -> None:
    from syncd.store.history_index import Retention

    server = await make_server(history_retention=Retention(ops=10))
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        for _ in range(3):
            await op(client, h, "pn:c", [{"op": "increment"}] * 200)
        await server.app.store.compact_now()
        await server.app.store.compact_history()
        r = await revert(client, h, "pn:c", {"client_id": 7, "since_seq": 3})
        assert r.status_code == 410 and r.json()["error"] == "history_expired", r.text
        oldest = r.json()["oldest"]
        assert 3 < oldest <= 590
        # Without since_seq, what is retained: from the oldest on.
        r = await revert(client, h, "pn:c", {"client_id": 7})
        assert r.status_code == 200 and r.json()["since_seq"] == oldest + 1
        assert (await read(client, h, "pn:c"))["value"] == oldest


async def test_a_window_past_the_limit_is_400(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(syncd.revert, "MAX_REVERT_WINDOW", 5)
    h = await issue(client)
    await op(client, h, "pn:c", [{"op": "increment"}] * 8)
    r = await revert(client, h, "pn:c", {"client_id": 7})
    assert r.status_code == 400 and r.json()["message"].startswith("since_seq:")
    r = await revert(client, h, "pn:c", {"client_id": 7, "since_seq": 4})
    assert r.status_code == 200 and r.json()["matched"] == 5
    assert (await read(client, h, "pn:c"))["value"] == 3


async def test_a_revert_fans_out_like_any_write(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        await op(client, h, "pn:c", {"op": "increment", "amount": 4, "origin": "agent:x"})
        async with client.stream("GET", f"{BASE}/pn:c/events", headers=h) as sse:
            lines = sse.aiter_lines()

            async def next_data() -> dict[str, Any]:
                async for line in lines:
                    if line.startswith("data:"):
                        decoded: dict[str, Any] = msgpack.unpackb(base64.b64decode(line[5:]))
                        return decoded
                raise AssertionError("stream ended")

            assert (await asyncio.wait_for(next_data(), 5))["kind"] == "snapshot"
            assert (await asyncio.wait_for(next_data(), 5))["kind"] == "synced"  # the start's end
            r = await revert(client, h, "pn:c", {"origin": "agent:x"})
            assert r.status_code == 200
            delta = await asyncio.wait_for(next_data(), 5)
            assert delta["seq"] == 2 and delta["op"]["op"] == "decrement"
            assert delta["origin"] == "revert"
            assert delta["reverts"] == {"origin": "agent:x", "since_seq": 1, "until_seq": 1}

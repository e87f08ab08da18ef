"""Yjs documents over HTTP: updates as ops, reads, root views, the past, errors."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from pycrdt import Doc, Map, Text

from tests.conftest import RunningServer
from tests.http.support import issue, op

BASE = "/v1/namespaces/app/crdts"


@pytest.fixture
async def client(server: RunningServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url) as c:
        yield c


def _typing(words: list[str]) -> list[str]:
    """One base64 update per word typed into root ``content``; a title in ``meta``."""
    doc: Doc[Any] = Doc(client_id=99)
    text = doc.get("content", type=Text)
    updates: list[bytes] = []
    doc.observe(lambda event: updates.append(event.update))
    for word in words:
        text += word
    doc.get("meta", type=Map)["title"] = "notes"
    return [base64.b64encode(u).decode() for u in updates]


async def test_updates_apply_and_read_back_as_one_update_and_views(
    client: httpx.AsyncClient,
) -> None:
    h = await issue(client)
    updates = _typing(["hello", " ", "world"])
    for update in updates[:2]:
        r = await op(client, h, "yd:notes", {"op": "update", "update": update})
        assert r.status_code == 200, r.text
    r = await op(client, h, "yd:notes", [{"op": "update", "update": u} for u in updates[2:]])
    assert r.json()["seq"] == len(updates)
    read = (await client.get(f"{BASE}/yd:notes", headers=h)).json()
    assert read["type"] == "ydoc" and read["seq"] == len(updates)
    doc: Doc[Any] = Doc()
    doc.apply_update(base64.b64decode(read["value"]))
    assert str(doc.get("content", type=Text)) == "hello world"
    assert base64.b64decode(read["state_vector"]) == doc.get_state()
    text = (await client.get(f"{BASE}/yd:notes?root=content&as=text", headers=h)).json()
    assert text["value"] == "hello world" and text["root"] == "content"
    meta = (await client.get(f"{BASE}/yd:notes?root=meta&as=map", headers=h)).json()
    assert meta["value"] == {"title": "notes"}
    # The past: right after the second update.
    past = (await client.get(f"{BASE}/yd:notes?root=content&at=2", headers=h)).json()
    assert past["value"] == "hello " and past["seq"] == 2
    full = (await client.get(f"{BASE}/yd:notes?format=crdt", headers=h)).json()
    assert set(full["state"]) == {"update"}


@pytest.mark.parametrize(
    ("query", "status"),
    [
        ("?root=content&as=html", 400),
        ("?root=&as=text", 400),
        ("?root=" + "x" * 300, 400),
    ],
)
async def test_bad_root_views_are_400(client: httpx.AsyncClient, query: str, status: int) -> None:
    h = await issue(client)
    await op(client, h, "yd:notes", {"op": "update", "update": _typing(["a"])[0]})
    r = await client.get(f"{BASE}/yd:notes{query}", headers=h)
    assert r.status_code == status and r.json()["error"] == "bad_request"


async def test_root_views_are_for_yjs_documents_only(client: httpx.AsyncClient) -> None:
    h = await issue(client)
    await op(client, h, "gc:n", {"op": "increment"})
    r = await client.get(f"{BASE}/gc:n?root=content", headers=h)
    assert r.status_code == 409 and r.json()["error"] == "type_mismatch"
    assert (await client.get(f"{BASE}/yd:none?root=content", headers=h)).status_code == 404


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"op": "update", "update": "%%%"}, 400, "invalid_op"),
        ({"op": "update", "update": base64.b64encode(b"\x01\x02\x03").decode()}, 400, "invalid_op"),
        ({"op": "update"}, 400, "invalid_op"),
        ({"op": "insert", "index": 0, "text": "x"}, 400, "invalid_op"),
    ],
)
async def test_bad_updates_get_clear_errors_and_change_nothing(
    client: httpx.AsyncClient, body: dict[str, Any], status: int, code: str
) -> None:
    h = await issue(client)
    await op(client, h, "yd:notes", {"op": "update", "update": _typing(["kept"])[0]})
    r = await op(client, h, "yd:notes", body)
    assert r.status_code == status and r.json()["error"] == code
    text = (await client.get(f"{BASE}/yd:notes?root=content", headers=h)).json()
    assert text["value"] == "kept" and text["seq"] == 1


async def test_an_update_over_the_body_limit_is_413(make_server: Any) -> None:
    server: RunningServer = await make_server(max_body_bytes=4096)
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        big = _typing(["x" * 8000])[0]
        r = await op(client, h, "yd:big", {"op": "update", "update": big})
        assert r.status_code == 413


async def test_restore_of_a_yjs_document_is_409(client: httpx.AsyncClient) -> None:
    h = await issue(client)
    for update in _typing(["a", "b"]):
        await op(client, h, "yd:notes", {"op": "update", "update": update})
    r = await client.post(f"{BASE}/yd:notes/restore", json={"seq": 1}, headers=h)
    assert r.status_code == 409 and r.json()["error"] == "not_restorable"


async def test_an_update_with_an_op_id_applies_once(client: httpx.AsyncClient) -> None:
    h = await issue(client)
    update = _typing(["once"])[0]
    body = {"op": "update", "update": update, "op_id": "edit-1"}
    first = (await op(client, h, "yd:notes", body)).json()
    again = (await op(client, h, "yd:notes", body)).json()
    assert first["seq"] == again["seq"] == 1 and again.get("duplicate") is True
    read = (await client.get(f"{BASE}/yd:notes", headers=h)).json()
    assert read["seq"] == 1


async def test_the_snapshot_holds_the_merged_document_not_the_updates(make_server: Any) -> None:
    """Typing and deleting the same text again and again: the updates add up,
    the snapshot's document stays the size of what is left."""
    server: RunningServer = await make_server(rate_limit=1_000_000)
    client = httpx.AsyncClient(base_url=server.url)
    h = await issue(client)
    doc: Doc[Any] = Doc(client_id=5)
    text = doc.get("content", type=Text)
    updates: list[bytes] = []
    doc.observe(lambda event: updates.append(event.update))
    for _ in range(50):
        text += "some words to type"
        del text[0 : len(str(text)) - 4]
    for update in updates:
        body = {"op": "update", "update": base64.b64encode(update).decode()}
        assert (await op(client, h, "yd:churn", body)).status_code == 200
    await server.app.store.compact_now()
    state = (await client.get(f"{BASE}/yd:churn?format=crdt", headers=h)).json()["state"]
    merged = base64.b64decode(state["update"])
    assert len(merged) * 5 < sum(len(u) for u in updates)
    fresh: Doc[Any] = Doc()
    fresh.apply_update(merged)
    assert str(fresh.get("content", type=Text)) == str(text)
    await client.aclose()

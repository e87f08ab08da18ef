"""Attribution over real sockets: ``origin`` on ops, on batches (``?origin=``)
and on WebSocket op messages; ``/history`` shows it and filters by writer
(``?client_id=``, ``?origin=``), within its scan bound; it survives a restart."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect

import syncd.history.reads
from tests.conftest import RunningServer
from tests.http.support import issue, op
from tests.ws.support import ws_url

BASE = "/v1/namespaces/app/crdts"


@pytest.fixture
async def client(server: RunningServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url) as c:
        yield c


async def history(client: httpx.AsyncClient, h: dict[str, str], query: str = "") -> Any:
    r = await client.get(f"{BASE}/rg:doc/history{query}", headers=h)
    assert r.status_code == 200, r.text
    return r.json()


async def test_origins_are_kept_shown_and_filtered(client: httpx.AsyncClient) -> None:
    human = await issue(client, client_id=7)
    agent = await issue(client, client_id=9)
    assert (
        await op(client, human, "rg:doc", {"op": "insert", "index": 0, "text": "hi"})
    ).is_success
    r = await op(
        client, agent, "rg:doc", {"op": "insert", "index": 2, "text": "!", "origin": "agent:t1"}
    )
    assert r.is_success
    # A batch's origin reaches its ops that name none of their own.
    batch = [
        {"op": "insert", "index": 0, "text": ">"},
        {"op": "insert", "index": 0, "text": "#", "origin": "agent:t2"},
    ]
    assert (await op(client, agent, "rg:doc", batch, query="?origin=agent:t1")).is_success
    page = await history(client, human)
    assert [(o["client_id"], o.get("origin")) for o in page["ops"]] == [
        (9, "agent:t2"),
        (9, "agent:t1"),
        (9, "agent:t1"),
        (7, None),
    ]
    assert "origin" not in page["ops"][-1]
    by_origin = await history(client, human, "?origin=agent:t1")
    assert [o["seq"] for o in by_origin["ops"]] == [3, 2]
    by_client = await history(client, human, "?client_id=7")
    assert [o["seq"] for o in by_client["ops"]] == [1]
    both = await history(client, human, "?client_id=9&origin=agent:t2")
    assert [o["seq"] for o in both["ops"]] == [4]
    assert (await history(client, human, "?client_id=7&origin=agent:t2"))["ops"] == []
    # Pages of a filter follow the same cursor as unfiltered ones.
    first = await history(client, human, "?client_id=9&limit=2")
    assert [o["seq"] for o in first["ops"]] == [4, 3] and first["next"] == 3
    rest = await history(client, human, "?client_id=9&limit=2&before=3")
    assert [o["seq"] for o in rest["ops"]] == [2] and rest["next"] is None


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("?origin=", "origin"),
        ("?origin=" + "x" * 129, "origin"),
        ("?client_id=x", "client_id"),
        ("?client_id=-1", "client_id"),
        ("?client_id=9007199254740992", "client_id"),
    ],
)
async def test_bad_filters_are_400(client: httpx.AsyncClient, query: str, field: str) -> None:
    h = await issue(client)
    await op(client, h, "rg:doc", {"op": "insert", "index": 0, "text": "a"})
    r = await client.get(f"{BASE}/rg:doc/history{query}", headers=h)
    assert r.status_code == 400 and r.json()["error"] == "bad_request"
    assert r.json()["message"].startswith(f"{field}:")


async def test_a_bad_batch_origin_is_400_and_nothing_is_applied(client: httpx.AsyncClient) -> None:
    h = await issue(client)
    r = await op(client, h, "pn:c", {"op": "increment"}, query="?origin=" + "y" * 129)
    assert (r.status_code, r.json()["error"]) == (400, "bad_request")
    r = await op(client, h, "pn:c", {"op": "increment", "origin": ""})
    assert (r.status_code, r.json()["error"]) == (400, "invalid_op")
    assert (await client.get(f"{BASE}/pn:c", headers=h)).status_code == 404


async def test_a_filtered_page_stops_at_the_scan_bound(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer whose ops are far back: each page looks at MAX_HISTORY_SCAN
    records at most and says where to go on; following ``next`` finds them."""
    monkeypatch.setattr(syncd.history.reads, "MAX_HISTORY_SCAN", 10)
    rare = await issue(client, client_id=8)
    busy = await issue(client, client_id=7)
    await op(client, rare, "rg:doc", {"op": "insert", "index": 0, "text": "r"})
    for _ in range(25):
        await op(client, busy, "rg:doc", {"op": "insert", "index": 0, "text": "b"})
    found: list[int] = []
    pages = 0
    query = "?client_id=8"
    while True:
        page = await history(client, busy, query)
        pages += 1
        found += [o["seq"] for o in page["ops"]]
        if page["next"] is None:
            break
        query = f"?client_id=8&before={page['next']}"
    assert found == [1] and pages == 3  # 26 records, 10 a page


async def test_websocket_op_messages_carry_an_origin(
    server: RunningServer, client: httpx.AsyncClient
) -> None:
    h = await issue(client)
    token = h["authorization"].removeprefix("Bearer ")
    async with connect(ws_url(server, token, ns="app"), proxy=None) as ws:
        body = [{"op": "increment"}, {"op": "increment", "origin": "own"}]
        await ws.send(
            json.dumps({"kind": "op", "ref": 1, "id": "pn:c", "op": body, "origin": "ws-task"})
        )
        ack = json.loads(await ws.recv())
        assert ack["kind"] == "ack", ack
        await ws.send(
            json.dumps(
                {"kind": "op", "ref": 2, "id": "pn:c", "op": {"op": "increment"}, "origin": ""}
            )
        )
        error = json.loads(await ws.recv())
        assert error["kind"] == "error" and error["error"] == "bad_request", error
    page = (await client.get(f"{BASE}/pn:c/history", headers=h)).json()
    assert [o.get("origin") for o in page["ops"]] == ["own", "ws-task"]


async def test_origins_survive_a_restart(make_server: Any, tmp_path: Path) -> None:
    data_dir = tmp_path / "kept"
    server: RunningServer = await make_server(data_dir=data_dir)
    async with httpx.AsyncClient(base_url=server.url) as c:
        h = await issue(c)
        await op(c, h, "rg:doc", {"op": "insert", "index": 0, "text": "a", "origin": "agent:r"})
        await op(c, h, "rg:doc", {"op": "insert", "index": 1, "text": "b"})
    await server.server.shutdown()
    again: RunningServer = await make_server(data_dir=data_dir)
    async with httpx.AsyncClient(base_url=again.url) as c:
        page = await history(c, h, "?origin=agent:r")
        assert [(o["seq"], o["origin"]) for o in page["ops"]] == [(1, "agent:r")]

"""tree revert: what an op of the others that depends on the writer keeps
(docs/revert.md#tree): "the writer's earlier ops on its node and its parent",
nothing else.

An update or delete has no parent. The dependency search compared parents
as they were, None with None, so one op of the others that depended on the
writer (an update of a node the writer added) kept every update and delete
of the writer before it, on any node: those were not taken back.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from tests.conftest import RunningServer
from tests.http.support import issue, op

BASE = "/v1/namespaces/app/crdts"
HUMAN, AGENT = 7, 9


@pytest.fixture
def http_parser() -> str:
    return "httptools"


@pytest.fixture
async def client(server: RunningServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url) as c:
        yield c


async def test_a_dependent_update_keeps_only_the_add_it_needs(client: httpx.AsyncClient) -> None:
    human = await issue(client, client_id=HUMAN)
    agent = await issue(client, client_id=AGENT)
    writes = [
        (human, {"op": "add", "id": "notes", "data": {"title": "mine"}}),
        (human, {"op": "add", "id": "todo", "data": {"title": "todo"}}),
        (agent, {"op": "add", "id": "draft"}),
        (agent, {"op": "update", "id": "notes", "data": {"title": "by the agent"}}),
        (agent, {"op": "delete", "id": "todo"}),
        (human, {"op": "update", "id": "draft", "data": {"kept": True}}),
    ]
    for h, body in writes:
        r = await op(client, h, "tr:t", body)
        assert r.status_code == 200, r.text
    r = await client.post(f"{BASE}/tr:t/revert", json={"client_id": AGENT}, headers=human)
    assert r.status_code == 200, r.text
    value = (await client.get(f"{BASE}/tr:t", headers=human)).json()["value"]
    # The human's update of "draft" depends on the agent's add: that add stays.
    # The agent's update of "notes" and delete of "todo" depend on nothing of it.
    assert value == {
        "id": "root",
        "data": {},
        "children": [
            {"id": "draft", "data": {"kept": True}, "children": []},
            {"id": "notes", "data": {"title": "mine"}, "children": []},
            {"id": "todo", "data": {"title": "todo"}, "children": []},
        ],
    }


async def test_a_dependent_move_to_the_root_keeps_only_the_moved_nodes_add(
    client: httpx.AsyncClient,
) -> None:
    # The root is every top-level node's parent: taken for a node the move
    # depends on, it kept every add under the root and every update of the
    # root's data the writer made before it.
    human = await issue(client, client_id=HUMAN)
    agent = await issue(client, client_id=AGENT)
    writes = [
        (agent, {"op": "add", "id": "a"}),
        (agent, {"op": "add", "id": "b"}),
        (agent, {"op": "update", "id": "root", "data": {"title": "by the agent"}}),
        (human, {"op": "move", "id": "b", "parent": "root", "pos": "m"}),
    ]
    for h, body in writes:
        r = await op(client, h, "tr:top", body)
        assert r.status_code == 200, r.text
    r = await client.post(f"{BASE}/tr:top/revert", json={"client_id": AGENT}, headers=human)
    assert r.status_code == 200, r.text
    value = (await client.get(f"{BASE}/tr:top", headers=human)).json()["value"]
    assert value == {
        "id": "root",
        "data": {},
        "children": [{"id": "b", "data": {}, "children": []}],
    }

"""Yjs documents in a cluster: two ``python -m syncd`` nodes on one PostgreSQL
database, a y-websocket provider (syncd.client.yjs) on each, editing one
document at once; both providers and both nodes end with the same text."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from pycrdt import Doc, Text

from syncd.client.yjs import YjsProvider
from tests.cluster.pgdb import database_url
from tests.cluster.support import NS, client, node_env
from tests.conftest import Subprocess, wait_ready

pytestmark = pytest.mark.timeout(90)

Spawn = Callable[..., Subprocess]
WAIT_S = 20.0


async def _eventually(check: Callable[[], bool]) -> None:
    for _ in range(int(WAIT_S / 0.05)):
        if check():
            return
        await asyncio.sleep(0.05)
    assert check()


async def _token(port: int) -> str:
    async with client(port) as http:
        r = await http.post(
            f"/v1/namespaces/{NS}/tokens",
            json={"client_id": 5, "permissions": {"read": ["*"], "write": ["*"]}},
        )
        assert r.status_code == 200, r.text
        return str(r.json()["token"])


async def test_a_provider_on_each_node_edits_one_document(
    spawn_server: Spawn, cluster_db: str
) -> None:
    url = database_url(cluster_db)
    nodes = [spawn_server(node_env(url, f"y{i}"), ready=False) for i in range(2)]
    for node in nodes:
        wait_ready(node.port, node.proc)
    token = await _token(nodes[0].port)
    docs: list[Doc[Any]] = [Doc(), Doc()]
    providers = [
        YjsProvider(f"http://127.0.0.1:{node.port}", NS, "shared", doc, token)
        for node, doc in zip(nodes, docs, strict=True)
    ]
    for provider in providers:
        provider.start()
    try:
        for provider in providers:
            await asyncio.wait_for(provider.synced.wait(), WAIT_S)
        texts = [doc.get("content", type=Text) for doc in docs]
        for i in range(30):
            texts[0].insert(0, "a")
            texts[1].insert(len(str(texts[1])), str(i % 10))
            if i % 5 == 0:
                await asyncio.sleep(0.01)
        await _eventually(lambda: str(texts[0]) == str(texts[1]) and len(str(texts[0])) == 60)
        # Both nodes hold the same document, from the database.
        for node in nodes:
            async with client(node.port) as http:
                r = await http.get(f"/v1/namespaces/{NS}/crdts/yd:shared?root=content")
                assert r.status_code == 200 and r.json()["value"] == str(texts[0])
    finally:
        for provider in providers:
            await provider.close()


async def _metric(port: int, name: str) -> float:
    async with client(port) as http:
        text = (await http.get("/metrics")).text
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name))


async def test_awareness_reaches_providers_on_other_nodes(
    spawn_server: Spawn, cluster_db: str
) -> None:
    url = database_url(cluster_db)
    nodes = [spawn_server(node_env(url, f"a{i}"), ready=False) for i in range(2)]
    for node in nodes:
        wait_ready(node.port, node.proc)
    token = await _token(nodes[0].port)
    base = [f"http://127.0.0.1:{node.port}" for node in nodes]
    ada_doc, bob_doc = Doc[Any](), Doc[Any]()
    ada = YjsProvider(base[0], NS, "cursors", ada_doc, token)
    bob = YjsProvider(base[1], NS, "cursors", bob_doc, token)
    ada.start()
    try:
        await asyncio.wait_for(ada.synced.wait(), WAIT_S)
        ada.set_awareness({"user": {"name": "ada"}})
        # bob's node opens its room after ada's state is there: it asks for it.
        bob.start()
        await asyncio.wait_for(bob.synced.wait(), WAIT_S)
        await _eventually(lambda: bob.awareness.get(ada_doc.client_id) == {"user": {"name": "ada"}})
        bob.set_awareness({"user": {"name": "bob"}})
        await _eventually(lambda: ada.awareness.get(bob_doc.client_id) == {"user": {"name": "bob"}})
        ada.set_awareness({"user": {"name": "ada"}, "cursor": 3})
        await _eventually(lambda: bob.awareness.get(ada_doc.client_id, {}).get("cursor") == 3)
        assert await _metric(nodes[0].port, "service_cluster_awareness_sent_total") >= 2
        # ada's connection goes: node 0 tells node 1, which tells bob.
        await ada.close()
        await _eventually(lambda: ada_doc.client_id not in bob.awareness)
    finally:
        await ada.close()
        await bob.close()

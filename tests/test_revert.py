"""The revert service (syncd/revert.py) on a real server: over CRDTs that keep
leaving memory (a budget of one byte), across a restart, and when ops land
between reading the window and computing the revert (the revert is then
computed on the state it read, and those ops are concurrent to it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from syncd.auth.authenticator import ROOT
from syncd.store.base import Record
from tests.conftest import RunningServer
from tests.http.support import issue, op

BASE = "/v1/namespaces/app/crdts"
HUMAN, AGENT = 7, 9
TINY_MB = 1e-6
"""SERVICE_MEMORY_BUDGET_MB of about one byte: every CRDT leaves memory as
soon as nothing holds it."""


async def _story(client: httpx.AsyncClient) -> tuple[dict[str, str], str]:
    """A human and an agent edit rg:doc and or:tags; the text to expect back."""
    human = await issue(client, client_id=HUMAN)
    agent = await issue(client, client_id=AGENT)
    await op(client, human, "rg:doc", {"op": "insert", "index": 0, "text": "one two three"})
    await op(client, agent, "rg:doc", {"op": "delete", "index": 4, "count": 4}, query="?origin=a1")
    await op(client, human, "rg:doc", {"op": "insert", "index": 0, "text": "> "})
    await op(
        client, agent, "rg:doc", {"op": "insert", "index": 2, "text": "AI "}, query="?origin=a1"
    )
    await op(client, human, "or:tags", {"op": "add", "element": "draft"})
    await op(client, agent, "or:tags", {"op": "remove", "element": "draft", "origin": "a1"})
    return human, "> one two three"


async def _revert(client: httpx.AsyncClient, h: dict[str, str], crdt_id: str) -> Any:
    r = await client.post(f"{BASE}/{crdt_id}/revert", json={"origin": "a1"}, headers=h)
    assert r.status_code == 200, r.text
    return r.json()


async def test_revert_of_crdts_that_keep_leaving_memory(make_server: Any) -> None:
    server: RunningServer = await make_server(memory_budget_mb=TINY_MB)
    async with httpx.AsyncClient(base_url=server.url) as client:
        human, text = await _story(client)
        assert server.app.residency.stats.evictions > 0
        assert (await _revert(client, human, "rg:doc"))["applied"] == 2
        assert (await _revert(client, human, "or:tags"))["applied"] == 1
        doc = (await client.get(f"{BASE}/rg:doc", headers=human)).json()
        assert doc["text"] == text
        tags = (await client.get(f"{BASE}/or:tags", headers=human)).json()
        assert tags["value"] == ["draft"]
        assert (await _revert(client, human, "rg:doc"))["matched"] == 0  # taken back already


async def test_revert_after_a_restart_and_its_ops_survive_the_next(
    make_server: Any, tmp_path: Path
) -> None:
    data_dir = tmp_path / "kept"
    server: RunningServer = await make_server(data_dir=data_dir)
    async with httpx.AsyncClient(base_url=server.url) as client:
        human, text = await _story(client)
    await server.server.shutdown()
    again: RunningServer = await make_server(data_dir=data_dir)
    async with httpx.AsyncClient(base_url=again.url) as client:
        answer = await _revert(client, human, "rg:doc")
        assert answer["applied"] == 2 and answer["since_seq"] == 1
    await again.server.shutdown()
    third: RunningServer = await make_server(data_dir=data_dir)
    async with httpx.AsyncClient(base_url=third.url) as client:
        assert (await client.get(f"{BASE}/rg:doc", headers=human)).json()["text"] == text
        page = (await client.get(f"{BASE}/rg:doc/history?origin=revert", headers=human)).json()
        assert [o["reverts"]["origin"] for o in page["ops"]] == ["a1", "a1"]
        assert (await _revert(client, human, "rg:doc"))["matched"] == 0


async def test_ops_landing_during_the_revert_are_concurrent_to_it(server: RunningServer) -> None:
    """An op applied while the window is read: the revert is computed on the
    state the window ends with (the base and the window replayed) and merges
    with it; both the op and the revert are in effect."""
    app = server.app
    async with httpx.AsyncClient(base_url=server.url) as client:
        human, _ = await _story(client)
        history = app.store.history
        landed = []

        async def history_then_an_op(*args: Any) -> tuple[list[Record], int]:
            got = await history(*args)
            if not landed:
                landed.append(
                    await app.service.apply_ops(
                        "app", "rg:doc", {"op": "insert", "index": 0, "text": "NEW "}, ROOT, "http"
                    )
                )
            return got

        app.store.history = history_then_an_op  # type: ignore[method-assign]
        try:
            answer = await _revert(client, human, "rg:doc")
        finally:
            app.store.history = history  # type: ignore[method-assign]
        assert landed and answer["until_seq"] == 4  # the window ended before the new op
        doc = (await client.get(f"{BASE}/rg:doc", headers=human)).json()
        assert doc["text"] == "NEW > one two three"

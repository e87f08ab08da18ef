"""A revert whose ops meet an op applied while its window was read, one that
makes one of them refused: a tree's node the agent moved is deleted by the
human meanwhile. The revert's ops are computed on the state the window ends
with; before, they were staged one at a time on the state now, the move of
the deleted node was refused after the first op was applied and made
durable, the revert answered 400 with part of it done, and a repeat with its
op_id answered a duplicate. Now the ops that no longer apply are left out (the
delete wins over them, as at a replica) and the others are applied."""

from __future__ import annotations

from typing import Any

import httpx

from syncd.auth.authenticator import ROOT
from syncd.store.base import Retained
from tests.conftest import RunningServer
from tests.http.support import issue, op

BASE = "/v1/namespaces/app/crdts"
HUMAN, AGENT = 7, 9


async def test_a_tree_node_deleted_during_the_revert_leaves_out_only_its_move(
    server: RunningServer,
) -> None:
    app = server.app
    async with httpx.AsyncClient(base_url=server.url) as client:
        human = await issue(client, client_id=HUMAN)
        agent = await issue(client, client_id=AGENT)
        for node in ("a", "b", "c", "d"):
            assert (await op(client, human, "tr:t", {"op": "add", "id": node})).is_success
        for node, parent in (("a", "b"), ("c", "d")):
            move = {"op": "move", "id": node, "parent": parent}
            assert (await op(client, agent, "tr:t", move)).is_success
        history = app.store.history_window
        landed = []

        async def history_then_a_delete(*args: Any) -> tuple[Retained, int]:
            got = await history(*args)
            if not landed:  # d (and c with it) goes while the revert reads
                delete = {"op": "delete", "id": "d"}
                landed.append(await app.service.apply_ops("app", "tr:t", delete, ROOT, "http"))
            return got

        app.store.history_window = history_then_a_delete  # type: ignore[method-assign]
        try:
            body = {"client_id": AGENT, "op_id": "undo-1"}
            r = await client.post(f"{BASE}/tr:t/revert", json=body, headers=human)
        finally:
            app.store.history_window = history  # type: ignore[method-assign]
        assert landed
        assert r.status_code == 200, r.text
        assert r.json()["applied"] >= 1 and r.json()["until_seq"] == 6
        tree = (await client.get(f"{BASE}/tr:t", headers=human)).json()["value"]
        assert [(n["id"], n["children"]) for n in tree["children"]] == [("a", []), ("b", [])]
        assert (await client.post(f"{BASE}/tr:t/revert", json=body, headers=human)).json()[
            "duplicate"
        ]

"""A tree revert whose target would be deeper than the tree allows
(``MAX_TREE_DEPTH``): the others built deep under a subtree the writer had
lifted, so without the writer's move their nodes would sit below the limit.
The revert keeps that move, as it keeps any op of the writer that the
others' ops depend on (docs/revert.md#tree), instead of answering 400 for a
move of its own that the server refuses."""

from __future__ import annotations

import httpx
import pytest

from syncd.crdt.tree import MAX_TREE_DEPTH
from tests.conftest import RunningServer
from tests.http.support import issue, op

BASE = "/v1/namespaces/app/crdts"
CHAIN = 100
"""Nodes a0 … a99, each under the one before: a99 is 100 levels deep."""
LIFTED = 50
"""The writer moves a50 (and the 50 below it) up to the root."""


def chain(prefix: str, parent: str, count: int) -> list[dict[str, str]]:
    ops = []
    for i in range(count):
        ops.append({"op": "add", "id": f"{prefix}{i}", "parent": parent})
        parent = f"{prefix}{i}"
    return ops


@pytest.mark.parametrize(
    ("below", "moved_back"),
    [(MAX_TREE_DEPTH - CHAIN, True), (MAX_TREE_DEPTH - CHAIN + 1, False)],
    ids=["fits-without-the-move", "deeper-than-allowed-without-it"],
)
async def test_a_tree_revert_keeps_a_move_that_the_others_depth_depends_on(
    server: RunningServer, below: int, moved_back: bool
) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        other, writer = await issue(client, client_id=7), await issue(client, client_id=8)
        assert (await op(client, other, "tr:deep", chain("a", "root", CHAIN))).is_success
        lift = {"op": "move", "id": f"a{LIFTED}", "parent": "root"}
        assert (await op(client, writer, "tr:deep", lift)).is_success
        # Under a99, now 50 levels deep: `below` more levels fit (and would
        # fit without the move when the chain and they stay within the limit).
        built = await op(client, other, "tr:deep", chain("b", f"a{CHAIN - 1}", below))
        assert built.is_success, built.text
        before = (await client.get(f"{BASE}/tr:deep", headers=other)).json()

        r = await client.post(f"{BASE}/tr:deep/revert", json={"client_id": 8}, headers=other)
        assert r.status_code == 200, r.text
        assert r.json()["matched"] == 1
        assert r.json()["applied"] == (1 if moved_back else 0)
        after = (await client.get(f"{BASE}/tr:deep", headers=other)).json()
        top = [child["id"] for child in after["value"]["children"]]
        assert top == (["a0"] if moved_back else ["a0", f"a{LIFTED}"])
        if not moved_back:
            assert after["value"] == before["value"]

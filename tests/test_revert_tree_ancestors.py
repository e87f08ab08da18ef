"""A tree revert keeps the writer's ops that the others' ops depend on
through ancestors too (docs/revert.md#tree: "and the writer's ops it depends
on in turn"). The writer built a folder and a section in it; another writer
added a note under the section (or moved one of its own nodes there).
Reverting the writer keeps the section, and so the folder above it: the
section's add, kept for the note, cannot apply without the folder's. Before,
only the section's add was kept, it was skipped for want of its parent, and
the revert deleted the other writer's note, data and all (a move of theirs
was undone): their acknowledged op lost, with nothing of the writer's left
for it to depend on."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conftest import RunningServer
from tests.http.support import issue, op

BASE = "/v1/namespaces/app/crdts"
OTHER, WRITER = 7, 8

LEVELS = 4
"""The writer's chain of nodes above the other's: w0 at the root, w3 lowest."""


def chain() -> list[dict[str, Any]]:
    ops: list[dict[str, Any]] = []
    parent = "root"
    for i in range(LEVELS):
        ops.append({"op": "add", "id": f"w{i}", "parent": parent})
        parent = f"w{i}"
    return ops


def path_to(value: dict[str, Any], node_id: str) -> list[str] | None:
    """The ids from the root's child down to ``node_id``, or None."""
    for child in value["children"]:
        if child["id"] == node_id:
            return [node_id]
        below = path_to(child, node_id)
        if below is not None:
            return [child["id"], *below]
    return None


NOTE = {"op": "add", "id": "note", "data": {"text": "mine"}}
"""The other writer's node, at the root."""


@pytest.mark.parametrize("http_parser", ["httptools"], indirect=True)
@pytest.mark.parametrize(
    ("before", "after"),
    [
        ([], [{**NOTE, "parent": f"w{LEVELS - 1}"}]),
        ([NOTE], [{"op": "move", "id": "note", "parent": f"w{LEVELS - 1}"}]),
    ],
    ids=["added-under", "moved-under"],
)
async def test_a_revert_keeps_the_ancestors_the_others_node_needs(
    server: RunningServer, before: list[dict[str, Any]], after: list[dict[str, Any]]
) -> None:
    """The other writer's ops ``before`` the writer's chain and ``after`` it."""
    async with httpx.AsyncClient(base_url=server.url) as client:
        other, writer = await issue(client, client_id=OTHER), await issue(client, client_id=WRITER)
        for body in before:
            assert (await op(client, other, "tr:t", body)).is_success
        assert (await op(client, writer, "tr:t", chain())).is_success
        assert (await op(client, writer, "tr:t", {"op": "add", "id": "aside"})).is_success
        for body in after:
            assert (await op(client, other, "tr:t", body)).is_success
        r = await client.post(f"{BASE}/tr:t/revert", json={"client_id": WRITER}, headers=other)
        assert r.status_code == 200, r.text
        assert (r.json()["matched"], r.json()["applied"]) == (LEVELS + 1, 1)
        value = (await client.get(f"{BASE}/tr:t", headers=other)).json()["value"]
        # The chain stays for the note; the writer's aside, which nothing needs, goes.
        assert path_to(value, "note") == [*(f"w{i}" for i in range(LEVELS)), "note"]
        assert path_to(value, "aside") is None
        assert find(value, "note")["data"] == {"text": "mine"}


def find(value: dict[str, Any], node_id: str) -> dict[str, Any]:
    for child in value["children"]:
        if child["id"] == node_id:
            return child
        if path_to(child, node_id) is not None:
            return find(child, node_id)
    raise AssertionError(f"no node {node_id!r}")

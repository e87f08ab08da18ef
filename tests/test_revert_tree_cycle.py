"""A tree revert keeps a move of the writer's that kept another writer's
later move from being a cycle (docs/revert.md#tree), also where the node it
moved is further up the path than the other's move names. The other writer
built a > b > c (the writer lifted b out of a first), then moved a under c,
possible only because b (and c with it) no longer sat under a. Reverting the
writer keeps b's move. Before, only a move of a or c (the nodes the other's
move names) counted: b's move was taken back, the other's move skipped as a
cycle without it, and the revert put a back at the root, undoing their
acknowledged move."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import RunningServer
from tests.http.support import issue, op

BASE = "/v1/namespaces/app/crdts"
OTHER, WRITER = 7, 8


def ids_down(node: dict[str, object]) -> list[str]:
    """The ids on the path of first children below ``node``."""
    out: list[str] = []
    while node["children"]:
        node = node["children"][0]  # type: ignore[index]
        out.append(node["id"])  # type: ignore[arg-type]
    return out


@pytest.mark.parametrize("http_parser", ["httptools"], indirect=True)
async def test_a_revert_keeps_the_move_that_kept_the_others_move_from_a_cycle(
    server: RunningServer,
) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        other, writer = await issue(client, client_id=OTHER), await issue(client, client_id=WRITER)
        steps = [
            (other, {"op": "add", "id": "a"}),
            (other, {"op": "add", "id": "b", "parent": "a"}),
            (writer, {"op": "move", "id": "b", "parent": "root"}),
            (writer, {"op": "add", "id": "aside"}),
            (other, {"op": "add", "id": "c", "parent": "b"}),
            (other, {"op": "move", "id": "a", "parent": "c"}),
        ]
        for who, body in steps:
            r = await op(client, who, "tr:t", body)
            assert r.status_code == 200, r.text
        r = await client.post(f"{BASE}/tr:t/revert", json={"client_id": WRITER}, headers=other)
        assert r.status_code == 200, r.text
        assert (r.json()["matched"], r.json()["applied"]) == (2, 1)  # the aside goes
        value = (await client.get(f"{BASE}/tr:t", headers=other)).json()["value"]
        assert [child["id"] for child in value["children"]] == ["b"]
        assert ids_down(value) == ["b", "c", "a"]

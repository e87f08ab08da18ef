"""Undo and redo, symmetrical (docs/revert.md, "Repeats"): an undo is a
revert of a writer, a redo a revert of the reverts a client made (``{"client_id":
…, "origin": "revert"}``). On a real server, for every revertible type: undo,
redo, undo ends with the writer's work gone (before, the second undo matched
nothing: the first still counted as having taken the ops back); a redo sent
again without an op_id applies nothing (before, it took back the first redo);
and every further undo or redo takes the work back or brings it back again."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conftest import RunningServer
from tests.http.support import issue, op
from tests.test_revert import AGENT, BASE, HUMAN, Case, _cases

UNDO = {"origin": "a1"}
"""The agent's task (its ops carry the origin a1)."""
REDO = {"client_id": HUMAN, "origin": "revert"}
"""The reverts the human made."""

STEPS = [
    (UNDO, "without", True),
    (REDO, "with", True),
    (REDO, "with", False),  # a repeat: the first redo's ops stay
    (UNDO, "without", True),
    (UNDO, "without", False),  # a repeat: the second undo's ops stay
    (REDO, "with", True),
    (UNDO, "without", True),
    (REDO, "with", True),
]
"""Each step: the revert, which state it ends in, whether it applies ops."""


async def _value(client: httpx.AsyncClient, h: dict[str, str], case: Case) -> Any:
    crdt_id, _, field, _ = case
    if field == "root":
        url = f"{BASE}/{crdt_id}?root=content&as=text"
        return (await client.get(url, headers=h)).json()["value"]
    return (await client.get(f"{BASE}/{crdt_id}", headers=h)).json()[field]


@pytest.mark.parametrize("case", _cases(), ids=lambda case: case[0].split(":")[0])
async def test_undo_and_redo_take_the_work_back_and_bring_it_back_in_turn(
    server: RunningServer, case: Case
) -> None:
    crdt_id, writes, _, without = case
    async with httpx.AsyncClient(base_url=server.url) as client:
        human = await issue(client, client_id=HUMAN)
        agent = await issue(client, client_id=AGENT)
        for who, body in writes:
            h, query = (human, "") if who == HUMAN else (agent, "?origin=a1")
            assert (await op(client, h, crdt_id, body, query=query)).status_code == 200
        states = {"with": await _value(client, human, case), "without": without}
        assert states["with"] != without
        for n, (body, state, applies) in enumerate(STEPS):
            r = await client.post(f"{BASE}/{crdt_id}/revert", json=body, headers=human)
            assert r.status_code == 200, r.text
            step = f"step {n}: {body}"
            assert (r.json()["applied"] > 0) == applies, (step, r.json())
            assert await _value(client, human, case) == states[state], step


async def test_a_redo_of_two_writers_undos_is_not_undone_by_one_of_them(
    server: RunningServer,
) -> None:
    """One redo that brought back two tasks at once cannot be split between
    them: undoing one of them again takes back nothing (rather than the other
    task's work too), and undoing both by their client does."""
    async with httpx.AsyncClient(base_url=server.url) as client:
        human = await issue(client, client_id=HUMAN)
        agent = await issue(client, client_id=AGENT)
        await op(client, human, "or:s", {"op": "add", "element": "mine"})
        await op(client, agent, "or:s", {"op": "add", "element": "t1"}, query="?origin=t1")
        await op(client, agent, "or:s", {"op": "add", "element": "t2"}, query="?origin=t2")

        async def revert(body: dict[str, Any]) -> tuple[int, list[str]]:
            r = await client.post(f"{BASE}/or:s/revert", json=body, headers=human)
            assert r.status_code == 200, r.text
            value = (await client.get(f"{BASE}/or:s", headers=human)).json()["value"]
            return r.json()["applied"], sorted(value)

        assert await revert({"origin": "t1"}) == (1, ["mine", "t2"])
        assert await revert({"origin": "t2"}) == (1, ["mine"])
        assert await revert(REDO) == (2, ["mine", "t1", "t2"])
        assert await revert({"origin": "t1"}) == (0, ["mine", "t1", "t2"])


async def test_a_redo_of_one_undo_of_two_is_undone_with_its_task(server: RunningServer) -> None:
    """The way around the above: a redo with since_seq and until_seq at one
    undo's ops brings back that task alone, and undoing the task again takes
    it back."""
    async with httpx.AsyncClient(base_url=server.url) as client:
        human = await issue(client, client_id=HUMAN)
        agent = await issue(client, client_id=AGENT)
        await op(client, agent, "or:s", {"op": "add", "element": "t1"}, query="?origin=t1")
        await op(client, agent, "or:s", {"op": "add", "element": "t2"}, query="?origin=t2")

        async def revert(body: dict[str, Any]) -> tuple[int, int, list[str]]:
            r = await client.post(f"{BASE}/or:s/revert", json=body, headers=human)
            assert r.status_code == 200, r.text
            value = (await client.get(f"{BASE}/or:s", headers=human)).json()["value"]
            return r.json()["seq"], r.json()["applied"], sorted(value)

        first, _, _ = await revert({"origin": "t1"})
        assert (await revert({"origin": "t2"}))[1:] == (1, [])
        span = {"since_seq": first, "until_seq": first}
        assert (await revert({**REDO, **span}))[1:] == (1, ["t1"])
        assert (await revert({"origin": "t1"}))[1:] == (1, [])
        assert (await revert(REDO))[1:] == (2, ["t1", "t2"])


async def test_a_client_that_undid_itself_is_undone_again_after_a_redo(
    server: RunningServer,
) -> None:
    """An agent's revert of itself is its revert, not its work (a revert by
    client id alone leaves it); the human's redo of it brings the agent's
    work back, and reverting the agent by client id then takes that back."""
    async with httpx.AsyncClient(base_url=server.url) as client:
        human = await issue(client, client_id=HUMAN)
        agent = await issue(client, client_id=AGENT)
        await op(client, agent, "pn:c", {"op": "increment", "amount": 5})

        async def revert(h: dict[str, str], body: dict[str, Any]) -> tuple[int, int]:
            r = await client.post(f"{BASE}/pn:c/revert", json=body, headers=h)
            assert r.status_code == 200, r.text
            return r.json()["applied"], (await client.get(f"{BASE}/pn:c", headers=h)).json()[
                "value"
            ]

        assert await revert(agent, {"client_id": AGENT}) == (1, 0)
        assert await revert(human, {"client_id": AGENT}) == (0, 0)
        assert await revert(human, {"client_id": AGENT, "origin": "revert"}) == (1, 5)
        assert await revert(human, {"client_id": AGENT}) == (1, 0)
        assert await revert(human, {"client_id": AGENT}) == (0, 0)

"""A revert of an orset brings an element back, or keeps it, in the form a
read would show had the reverted writer's ops not been made: an element's
identity is its canonical JSON (``1``, ``1.0`` one element; ``-0.0``, ``0``
one element; ``true``, ``1`` and ``"1"`` three), and the set reads it in the
form of the add that made it. Table test over every ordered pair of forms,
on a real server: a human's ops alone read ``[x]``; the agent's ops on ``y``
around them are reverted, and the set must read ``[x]`` again, ``x``'s very
form (JSON text, since ``1 == 1.0 == True`` in Python). Each revert is
repeated and must then apply nothing."""

from __future__ import annotations

import itertools
import json
from typing import Any

import httpx

from tests.conftest import RunningServer
from tests.http.support import issue, op

BASE = "/v1/namespaces/app/crdts"
HUMAN, AGENT = 7, 9
FORMS: list[Any] = [1, 1.0, True, "1", -0.0, 0]
PAIRS: list[tuple[Any, Any]] = [
    *itertools.product(FORMS, FORMS),
    ({"a": [2.0]}, {"a": [2]}),
    ({"a": [2]}, {"a": [2.0]}),
]

Write = tuple[int, str, int]
"""(writer, op, 0 for x or 1 for y)."""

SCENARIOS: dict[str, tuple[list[Write], int | None]] = {
    # name: (writes, since_seq of the revert: None for all retained)
    "agent-re-adds": ([(HUMAN, "add", 0), (AGENT, "remove", 1), (AGENT, "add", 1)], None),
    "agent-re-adds-since": ([(HUMAN, "add", 0), (AGENT, "remove", 1), (AGENT, "add", 1)], 2),
    "agent-adds-first": ([(AGENT, "add", 1), (HUMAN, "add", 0)], None),
    "agent-removes": ([(HUMAN, "add", 0), (AGENT, "remove", 1)], None),
    "agent-removes-since": ([(HUMAN, "add", 0), (AGENT, "remove", 1)], 2),
    "human-re-adds": (
        [(HUMAN, "add", 0), (HUMAN, "remove", 0), (AGENT, "add", 1), (HUMAN, "add", 0)],
        None,
    ),
}


def shown(value: Any) -> str:
    """JSON text that tells 1, 1.0, true and -0.0 apart."""
    return json.dumps(value, sort_keys=True)


async def test_a_revert_leaves_the_set_in_the_form_the_other_writers_made(
    make_server: Any,
) -> None:
    server: RunningServer = await make_server(rate_limit=1_000_000)
    wrong: list[str] = []
    async with httpx.AsyncClient(base_url=server.url) as client:
        human = await issue(client, client_id=HUMAN)
        agent = await issue(client, client_id=AGENT)
        cases = itertools.product(SCENARIOS.items(), PAIRS)
        for n, ((name, (writes, since)), (x, y)) in enumerate(cases):
            crdt_id = f"or:f{n}"
            for who, verb, which in writes:
                h, query = (human, "") if who == HUMAN else (agent, "?origin=a1")
                body = {"op": verb, "element": (x, y)[which]}
                r = await op(client, h, crdt_id, body, query=query)
                assert r.status_code == 200, r.text
            request: dict[str, Any] = {"origin": "a1"}
            if since is not None:
                request["since_seq"] = since
            r = await client.post(f"{BASE}/{crdt_id}/revert", json=request, headers=human)
            assert r.status_code == 200, r.text
            got = (await client.get(f"{BASE}/{crdt_id}", headers=human)).json()["value"]
            if shown(got) != shown([x]):
                wrong.append(f"{name} x={shown(x)} y={shown(y)}: {shown(got)}")
            again = await client.post(f"{BASE}/{crdt_id}/revert", json=request, headers=human)
            if again.json().get("applied") != 0:
                wrong.append(f"{name} x={shown(x)} y={shown(y)}: second revert {again.text}")
    assert not wrong, "\n".join(wrong)

"""The same revert sent twice at once (a client's retry while the first is
still running) takes the writer's ops back once (docs/revert.md, "Repeats":
without an op_id a repeat is harmless). Before, the second read its window
before the first's ops were durable, so it did not see them as taken back,
and applied the same ops again: a counter taken back twice, deleted text
brought back twice."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from tests.conftest import RunningServer
from tests.http.support import issue, op

BASE = "/v1/namespaces/app/crdts"
HUMAN, AGENT = 7, 9


async def _twice(client: httpx.AsyncClient, h: dict[str, str], crdt_id: str, body: Any) -> Any:
    url = f"{BASE}/{crdt_id}/revert"
    answers = await asyncio.gather(*(client.post(url, json=body, headers=h) for _ in range(2)))
    assert [r.status_code for r in answers] == [200, 200], [r.text for r in answers]
    return [r.json() for r in answers]


async def test_a_revert_sent_twice_at_once_takes_the_ops_back_once(
    server: RunningServer,
) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        human = await issue(client, client_id=HUMAN)
        agent = await issue(client, client_id=AGENT)
        await op(client, human, "pn:c", {"op": "increment", "amount": 1})
        await op(client, agent, "pn:c", {"op": "increment", "amount": 10})
        await op(client, human, "rg:t", {"op": "insert", "index": 0, "text": "hello world"})
        await op(client, agent, "rg:t", {"op": "delete", "index": 5, "count": 6})

        first, second = await _twice(client, human, "pn:c", {"client_id": AGENT})
        assert sorted([first["applied"], second["applied"]]) == [0, 1]
        read = (await client.get(f"{BASE}/pn:c", headers=human)).json()
        assert (read["value"], read["seq"]) == (1, 3)

        await _twice(client, human, "rg:t", {"client_id": AGENT})
        read = (await client.get(f"{BASE}/rg:t", headers=human)).json()
        assert read["text"] == "hello world"


async def test_with_an_op_id_the_second_answers_a_duplicate(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        human = await issue(client, client_id=HUMAN)
        agent = await issue(client, client_id=AGENT)
        await op(client, human, "rg:t", {"op": "insert", "index": 0, "text": "ab"})
        await op(client, agent, "rg:t", {"op": "insert", "index": 1, "text": "XY"})
        await op(client, agent, "rg:t", {"op": "delete", "index": 0, "count": 1})
        answers = await _twice(client, human, "rg:t", {"client_id": AGENT, "op_id": "u-1"})
        assert sorted(a.get("duplicate", False) for a in answers) == [False, True]
        done = next(a for a in answers if "duplicate" not in a)
        assert done["applied"] == 2
        read = (await client.get(f"{BASE}/rg:t", headers=human)).json()
        assert (read["text"], read["seq"]) == ("ab", done["seq"])

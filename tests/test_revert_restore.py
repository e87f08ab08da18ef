"""A restore takes back every op after its target seq (docs/revert.md,
"Repeats"): its records carry ``restores`` (``to_seq``, ``until_seq``), and
a later revert leaves the ops it took back alone, as it leaves those an
earlier revert took back. On a real server over HTTP: a writer's work that
a restore took back is not taken back a second time by reverting the
writer (before, a counter's +5 ended at -5), its work after the restore is;
a restore's ops are its caller's write (reverting the caller takes them
back, and with them what the restore took back; work a restore brought back
is the caller's); a writer that restored its own work away and is then
reverted ends as if it never wrote; and the mark reaches /history and
deltas."""

from __future__ import annotations

import asyncio
import base64
import random
from itertools import pairwise
from typing import Any

import httpx
import msgpack
import pytest

from syncd.revert import _Spans
from tests.conftest import RunningServer
from tests.http.support import issue, op

BASE = "/v1/namespaces/app/crdts"
HUMAN, AGENT, RESTORER = 7, 9, 11

Case = tuple[str, list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]], str]
"""A CRDT id, the human's writes, the agent's (origin a1) first writes, its
writes after the restore, and the read field."""

CASES: list[Case] = [
    (
        "pn:votes",
        [{"op": "increment", "amount": 3}],
        [{"op": "increment", "amount": 5}],
        [{"op": "decrement", "amount": 2}],
        "value",
    ),
    (
        "rg:doc",
        [{"op": "insert", "index": 0, "text": "one two three"}],
        [{"op": "delete", "index": 4, "count": 4}, {"op": "insert", "index": 0, "text": "AI "}],
        [{"op": "delete", "index": 0, "count": 4}, {"op": "insert", "index": 0, "text": "X"}],
        "text",
    ),
    (
        "or:tags",
        [{"op": "add", "element": "draft"}, {"op": "add", "element": "keep"}],
        [{"op": "remove", "element": "draft"}, {"op": "add", "element": "ai"}],
        [{"op": "remove", "element": "keep"}, {"op": "add", "element": "more"}],
        "value",
    ),
]


MORE_CASES: list[Case] = [
    (
        "lw:title",
        [{"op": "set", "value": "Plan"}],
        [{"op": "set", "value": "AI plan"}],
        [{"op": "set", "value": "AI plan 2"}],
        "value",
    ),
    (
        "tr:outline",
        [{"op": "add", "id": "intro"}],
        [
            {"op": "add", "id": "ai", "parent": "intro"},
            {"op": "update", "id": "intro", "data": {"by": "ai"}},
        ],
        [
            {"op": "add", "id": "ai2"},
            {"op": "update", "id": "intro", "data": {"by": "ai2"}},
        ],
        "value",
    ),
]
"""The other restorable types, on the embedded store only."""


class Doc:
    """One CRDT on the server, written by the human, the agent and the restorer."""

    def __init__(self, client: httpx.AsyncClient, crdt_id: str, field: str) -> None:
        self.client, self.crdt_id, self.field = client, crdt_id, field
        self.h: dict[int, dict[str, str]] = {}

    async def start(self) -> Doc:
        for who in (HUMAN, AGENT, RESTORER):
            self.h[who] = await issue(self.client, client_id=who)
        return self

    async def write(self, who: int, body: dict[str, Any], origin: str = "") -> int:
        query = f"?origin={origin}" if origin else ""
        r = await op(self.client, self.h[who], self.crdt_id, body, query=query)
        assert r.status_code == 200, r.text
        return int(r.json()["seq"])

    async def value(self) -> Any:
        r = await self.client.get(f"{BASE}/{self.crdt_id}", headers=self.h[HUMAN])
        value = r.json()[self.field]
        return sorted(value) if isinstance(value, list) else value

    async def seq(self) -> int:
        r = await self.client.get(f"{BASE}/{self.crdt_id}", headers=self.h[HUMAN])
        return int(r.json()["seq"])

    async def restore(self, who: int, seq: int) -> dict[str, Any]:
        url = f"{BASE}/{self.crdt_id}/restore"
        r = await self.client.post(url, json={"seq": seq}, headers=self.h[who])
        assert r.status_code == 200, r.text
        answer: dict[str, Any] = r.json()
        return answer

    async def revert(self, who: int, body: dict[str, Any]) -> dict[str, Any]:
        url = f"{BASE}/{self.crdt_id}/revert"
        r = await self.client.post(url, json=body, headers=self.h[who])
        assert r.status_code == 200, r.text
        answer: dict[str, Any] = r.json()
        return answer

    async def history(self) -> list[dict[str, Any]]:
        url = f"{BASE}/{self.crdt_id}/history?limit=1000"
        r = await self.client.get(url, headers=self.h[HUMAN])
        ops: list[dict[str, Any]] = r.json()["ops"]
        return ops[::-1]


@pytest.mark.parametrize("case", CASES + MORE_CASES, ids=lambda case: case[0].split(":")[0])
async def test_a_writer_restored_away_is_not_taken_back_again_and_its_later_work_is(
    server: RunningServer, case: Case
) -> None:
    crdt_id, mine, first, later, field = case
    async with httpx.AsyncClient(base_url=server.url) as client:
        doc = await Doc(client, crdt_id, field).start()
        for body in mine:
            before = await doc.write(HUMAN, body)
        for body in first:
            await doc.write(AGENT, body, "a1")
        last = await doc.seq()
        with_agent = await doc.value()
        restored = await doc.restore(RESTORER, before)
        assert restored["applied"] > 0
        without_agent = await doc.value()
        assert without_agent != with_agent

        records = [o for o in await doc.history() if "restores" in o]
        assert records and all(
            o["restores"] == {"to_seq": before, "until_seq": last}
            and o["client_id"] == RESTORER
            and "origin" not in o
            for o in records
        )
        assert [o["seq"] for o in records][-1] == restored["seq"]

        undo = await doc.revert(HUMAN, {"origin": "a1"})
        assert (undo["applied"], undo["matched"]) == (0, 0), undo
        assert await doc.value() == without_agent

        for body in later:
            await doc.write(AGENT, body, "a1")
        assert await doc.value() != without_agent
        undo = await doc.revert(HUMAN, {"origin": "a1"})
        assert undo["applied"] > 0 and undo["matched"] == len(later), undo
        assert await doc.value() == without_agent


async def test_a_restore_of_a_counter_leaves_nothing_to_take_back_twice(
    server: RunningServer,
) -> None:
    """The documented case: an agent's +5, restored away, reverted: 0, not -5."""
    async with httpx.AsyncClient(base_url=server.url) as client:
        doc = await Doc(client, "pn:c", "value").start()
        await doc.write(AGENT, {"op": "increment", "amount": 5}, "a1")
        await doc.restore(HUMAN, 0)
        assert (await doc.revert(HUMAN, {"origin": "a1"}))["applied"] == 0
        assert (await doc.revert(HUMAN, {"client_id": AGENT}))["applied"] == 0
        assert await doc.value() == 0


async def test_reverting_the_restorer_takes_its_restore_back_with_its_own_ops(
    server: RunningServer,
) -> None:
    """A restore's ops are its caller's write: reverting the caller takes
    them back (the restore's span does not stand for the revert that takes
    the restore back), so the CRDT ends as if the caller never wrote."""
    async with httpx.AsyncClient(base_url=server.url) as client:
        doc = await Doc(client, "pn:c", "value").start()
        await doc.write(RESTORER, {"op": "increment", "amount": 3})
        await doc.write(AGENT, {"op": "increment", "amount": 5}, "a1")
        await doc.restore(RESTORER, 0)
        assert await doc.value() == 0
        undo = await doc.revert(HUMAN, {"client_id": RESTORER})
        assert undo["matched"] == 2 and undo["applied"] == 1, undo
        assert await doc.value() == 5


@pytest.mark.parametrize("case", CASES, ids=lambda case: case[0].split(":")[0])
async def test_a_writer_that_restored_its_own_work_away_is_reverted_to_nothing(
    server: RunningServer, case: Case
) -> None:
    """The agent restores its own work away: reverting it (by client id,
    which selects the restore's ops) takes back both, which leaves the CRDT
    as the restore left it (counting the restore's span as taken back while
    taking its ops back would bring the agent's work back)."""
    crdt_id, mine, first, _, field = case
    async with httpx.AsyncClient(base_url=server.url) as client:
        doc = await Doc(client, crdt_id, field).start()
        for body in mine:
            before = await doc.write(HUMAN, body)
        for body in first:
            await doc.write(AGENT, body)
        await doc.restore(AGENT, before)
        without_agent = await doc.value()
        await doc.revert(HUMAN, {"client_id": AGENT})
        assert await doc.value() == without_agent


async def test_a_restores_mark_reaches_subscribers_in_its_deltas(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        doc = await Doc(client, "pn:c", "value").start()
        await doc.write(AGENT, {"op": "increment", "amount": 5}, "a1")
        url = f"{BASE}/pn:c/events"
        async with client.stream("GET", url, headers=doc.h[HUMAN]) as sse:
            lines = sse.aiter_lines()

            async def next_data() -> dict[str, Any]:
                async for line in lines:
                    if line.startswith("data:"):
                        decoded: dict[str, Any] = msgpack.unpackb(base64.b64decode(line[5:]))
                        return decoded
                raise AssertionError("stream ended")

            assert (await asyncio.wait_for(next_data(), 5))["kind"] == "snapshot"
            assert (await asyncio.wait_for(next_data(), 5))["kind"] == "synced"
            await doc.restore(HUMAN, 0)
            delta = await asyncio.wait_for(next_data(), 5)
            assert delta["seq"] == 2 and delta["op"]["op"] == "decrement"
            assert delta["restores"] == {"to_seq": 0, "until_seq": 1}


async def test_an_undone_restore_brings_work_back_that_is_no_single_writers(
    server: RunningServer,
) -> None:
    """The documented limit: undoing a restore (reverting its caller) brings
    back what it took back as that revert's ops, of no single writer. A
    later revert of one of those writers cannot take that work back: it is
    refused (409, saying what to do instead), not answered as if the writer
    had nothing in effect (before: 200, matched 0, applied 0, the agent's +5
    still there). Its work outside the undone restore's span is taken back."""
    async with httpx.AsyncClient(base_url=server.url) as client:
        doc = await Doc(client, "pn:c", "value").start()
        await doc.write(AGENT, {"op": "increment", "amount": 5}, "a1")
        restored = await doc.restore(RESTORER, 0)
        undone = await doc.revert(HUMAN, {"client_id": RESTORER})
        assert undone["applied"] == 1
        assert await doc.value() == 5
        url = f"{BASE}/pn:c/revert"
        for body in ({"origin": "a1"}, {"client_id": AGENT}):
            r = await client.post(url, json=body, headers=doc.h[HUMAN])
            assert r.status_code == 409, r.text
            assert r.json()["error"] == "not_revertible"
            message = r.json()["message"]
            assert f"restore at seq {restored['seq']}" in message, message
            assert f"revert at seq {undone['seq']}" in message, message
            assert f"client_id {HUMAN}, origin 'revert'" in message, message
            assert "restore to seq 0" in message and f"since_seq {restored['seq']}" in message
        assert await doc.value() == 5
        # Past the undone restore's span the writer's work goes as usual.
        await doc.write(AGENT, {"op": "increment", "amount": 2}, "a1")
        later = await doc.revert(HUMAN, {"origin": "a1", "since_seq": restored["seq"]})
        assert (later["matched"], later["applied"]) == (1, 1), later
        assert await doc.value() == 5
        # Redoing the undo (the restore stands again) lets the writer be
        # reverted as before: nothing of its restored-away work is taken back twice.
        span = {"since_seq": undone["seq"], "until_seq": undone["seq"]}
        redo = await doc.revert(HUMAN, {"client_id": HUMAN, "origin": "revert", **span})
        assert redo["applied"] == 1, redo
        assert await doc.value() == 0
        again = await doc.revert(HUMAN, {"origin": "a1"})
        assert again["applied"] == 0, again
        assert await doc.value() == 0


async def test_work_a_restore_brought_back_is_its_callers(server: RunningServer) -> None:
    """A restore to before an undo brings the agent's work back as the
    restorer's ops: undoing the agent again leaves it (its ops stay taken
    back by the first undo), and reverting the restorer takes it back."""
    async with httpx.AsyncClient(base_url=server.url) as client:
        doc = await Doc(client, "pn:c", "value").start()
        await doc.write(AGENT, {"op": "increment", "amount": 5}, "a1")
        undone = await doc.revert(HUMAN, {"origin": "a1"})
        assert await doc.value() == 0
        await doc.restore(RESTORER, undone["seq"] - 1)
        assert await doc.value() == 5
        assert (await doc.revert(HUMAN, {"origin": "a1"}))["applied"] == 0
        assert await doc.value() == 5
        assert (await doc.revert(HUMAN, {"client_id": RESTORER}))["applied"] == 1
        assert await doc.value() == 0


def test_spans_merge_as_a_set_of_seqs_would() -> None:
    """The standing restores' spans (syncd.revert._Spans): overlapping and
    touching ranges merge, and a seq is covered exactly when a range added
    holds it."""
    rng = random.Random(7)
    for _ in range(200):
        spans, seqs = _Spans(), set[int]()
        for _ in range(rng.randrange(1, 12)):
            lo = rng.randrange(0, 60)
            hi = lo + rng.randrange(-2, 15)
            spans.add(lo, hi)
            seqs.update(range(lo, hi + 1))
        ranges = list(spans)
        assert all(hi + 1 < lo for (_, hi), (lo, _) in pairwise(ranges))
        assert {s for lo, hi in ranges for s in range(lo, hi + 1)} == seqs
        assert all(spans.covers(s) == (s in seqs) for s in range(-2, 80))

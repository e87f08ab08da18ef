"""The revert service (syncd/revert.py) on a real server, for every revertible
type: over CRDTs that keep leaving memory (a budget of one byte), across a
restart, and when ops land
between reading the window and computing the revert (the revert is then
computed on the state it read, and those ops are concurrent to it)."""

from __future__ import annotations

import asyncio
import base64
import gc
from pathlib import Path
from typing import Any

import httpx
from pycrdt import Doc, Text

from syncd.auth.authenticator import ROOT
from syncd.history.reads import Writer
from syncd.store.base import Retained
from tests.conftest import RunningServer
from tests.http.support import issue, op

BASE = "/v1/namespaces/app/crdts"
HUMAN, AGENT = 7, 9
TINY_MB = 1e-6
"""SERVICE_MEMORY_BUDGET_MB of about one byte: every CRDT leaves memory as
soon as nothing holds it."""


def _yjs(doc: Doc[Any], edit: Any) -> dict[str, Any]:
    state = doc.get_state()
    edit(doc.get("content", type=Text))
    return {"op": "update", "update": base64.b64encode(doc.get_update(state)).decode()}


Case = tuple[str, list[tuple[int, dict[str, Any]]], str, Any]


def _cases() -> list[Case]:
    """Per revertible type: (id, writes by HUMAN or AGENT, the read field, its
    value once the agent is reverted). The agent's ops carry the origin a1."""
    person, bot = Doc(), Doc()
    typed = _yjs(person, lambda t: t.insert(0, "typed"))
    bot.apply_update(base64.b64decode(typed["update"]))
    outline = {"id": "root", "data": {}, "children": [{"id": "intro", "data": {}, "children": []}]}
    return [
        (
            "rg:doc",
            [
                (HUMAN, {"op": "insert", "index": 0, "text": "one two three"}),
                (AGENT, {"op": "delete", "index": 4, "count": 4}),
                (HUMAN, {"op": "insert", "index": 0, "text": "> "}),
                (AGENT, {"op": "insert", "index": 2, "text": "AI "}),
            ],
            "text",
            "> one two three",
        ),
        (
            "or:tags",
            [
                (HUMAN, {"op": "add", "element": "draft"}),
                (AGENT, {"op": "remove", "element": "draft"}),
                (AGENT, {"op": "add", "element": "ai"}),
            ],
            "value",
            ["draft"],
        ),
        (
            "pn:votes",
            [(HUMAN, {"op": "increment", "amount": 3}), (AGENT, {"op": "increment", "amount": 40})],
            "value",
            3,
        ),
        (
            "lw:title",
            [(HUMAN, {"op": "set", "value": "Plan"}), (AGENT, {"op": "set", "value": "AI plan"})],
            "value",
            "Plan",
        ),
        (
            "tr:outline",
            [
                (HUMAN, {"op": "add", "id": "intro"}),
                (AGENT, {"op": "add", "id": "ai", "parent": "intro"}),
                (AGENT, {"op": "update", "id": "intro", "data": {"by": "ai"}}),
            ],
            "value",
            outline,
        ),
        (
            "yd:page",
            [(HUMAN, typed), (AGENT, _yjs(bot, lambda t: t.insert(5, " by AI")))],
            "root",
            "typed",
        ),
    ]


async def _story(client: httpx.AsyncClient) -> tuple[dict[str, str], str]:
    """A human and an agent edit a CRDT of every revertible type; the text of
    rg:doc to expect back."""
    human = await issue(client, client_id=HUMAN)
    agent = await issue(client, client_id=AGENT)
    for crdt_id, writes, _, _ in _cases():
        for who, body in writes:
            h, query = (human, "") if who == HUMAN else (agent, "?origin=a1")
            r = await op(client, h, crdt_id, body, query=query)
            assert r.status_code == 200, r.text
    return human, "> one two three"


async def _revert(client: httpx.AsyncClient, h: dict[str, str], crdt_id: str) -> Any:
    r = await client.post(f"{BASE}/{crdt_id}/revert", json={"origin": "a1"}, headers=h)
    assert r.status_code == 200, r.text
    return r.json()


async def _check(client: httpx.AsyncClient, h: dict[str, str], case: Case) -> None:
    crdt_id, _, field, expected = case
    if field == "root":
        url = f"{BASE}/{crdt_id}?root=content&as=text"
        assert (await client.get(url, headers=h)).json()["value"] == expected, crdt_id
    else:
        assert (await client.get(f"{BASE}/{crdt_id}", headers=h)).json()[field] == expected


async def _revert_all(client: httpx.AsyncClient, human: dict[str, str]) -> None:
    """Revert the agent on each CRDT (at least one op applied) and check it."""
    for case in _cases():
        assert (await _revert(client, human, case[0]))["applied"] >= 1, case[0]
        await _check(client, human, case)


async def test_revert_of_crdts_that_keep_leaving_memory(make_server: Any) -> None:
    server: RunningServer = await make_server(memory_budget_mb=TINY_MB)
    async with httpx.AsyncClient(base_url=server.url) as client:
        human, _ = await _story(client)
        assert server.app.residency.stats.evictions > 0
        await _revert_all(client, human)
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
        await _revert_all(client, human)
    await again.server.shutdown()
    third: RunningServer = await make_server(data_dir=data_dir)
    async with httpx.AsyncClient(base_url=third.url) as client:
        for case in _cases():
            await _check(client, human, case)
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
        history = app.store.history_window
        landed = []

        async def history_then_an_op(*args: Any) -> tuple[Retained, int]:
            got = await history(*args)
            if not landed:
                landed.append(
                    await app.service.apply_ops(
                        "app", "rg:doc", {"op": "insert", "index": 0, "text": "NEW "}, ROOT, "http"
                    )
                )
            return got

        app.store.history_window = history_then_an_op  # type: ignore[method-assign]
        try:
            answer = await _revert(client, human, "rg:doc")
        finally:
            app.store.history_window = history  # type: ignore[method-assign]
        assert landed and answer["until_seq"] == 4  # the window ended before the new op
        doc = (await client.get(f"{BASE}/rg:doc", headers=human)).json()
        assert doc["text"] == "NEW > one two three"


async def test_a_long_revert_is_measured_once_after_its_answer(make_server: Any) -> None:
    """The revert's ops are staged as one batch: the CRDT's size is measured
    once after all of them (over RESIZE_EVERY_OPS here), not in the middle;
    and the cyclic collector, off while a revert runs, is as it was after it."""
    server: RunningServer = await make_server(max_crdt_bytes=0)  # no quota measures
    app = server.app
    measured: list[str] = []
    noted = app.engine.on_measured
    assert noted is not None

    def spy(ns: str, crdt_id: str, size: int) -> None:
        measured.append(crdt_id)
        noted(ns, crdt_id, size)

    app.engine.on_measured = spy
    async with httpx.AsyncClient(base_url=server.url) as client:
        human = await issue(client, client_id=HUMAN)
        agent = await issue(client, client_id=AGENT)
        await op(client, human, "rg:long", {"op": "insert", "index": 0, "text": "ab" * 300})
        deletes = [{"op": "delete", "index": i} for i in range(300)]  # every b
        assert (await op(client, agent, "rg:long", deletes)).status_code == 200
        entry = app.engine.get("app", "rg:long")
        assert entry is not None and entry.unsized_ops == 0  # a batch: measured after it
        measured.clear()
        assert gc.isenabled()
        answer = await client.post(
            f"{BASE}/rg:long/revert", json={"client_id": AGENT}, headers=human
        )
        assert answer.json()["applied"] == 300
        await asyncio.sleep(0)
        assert measured == ["rg:long"] and entry.unsized_ops == 0
        assert gc.isenabled()
        assert (await client.get(f"{BASE}/rg:long", headers=human)).json()["text"] == "ab" * 300
        gc.disable()
        try:
            r = await client.post(
                f"{BASE}/rg:long/revert", json={"client_id": HUMAN}, headers=human
            )
            assert r.json()["applied"] == 1
            assert not gc.isenabled()
        finally:
            gc.enable()


async def test_the_collector_is_on_again_in_the_step_after_the_revert(
    server: RunningServer,
) -> None:
    """Off while a revert runs and still off as it returns, so the answer
    goes out in that step without a collection over what the revert left
    behind; on again in the loop's next step."""
    app = server.app
    async with httpx.AsyncClient(base_url=server.url) as client:
        human = await issue(client, client_id=HUMAN)
        agent = await issue(client, client_id=AGENT)
        await op(client, human, "rg:gc", {"op": "insert", "index": 0, "text": "ab"})
        await op(client, agent, "rg:gc", {"op": "insert", "index": 2, "text": "cd"})
    principal = app.auth.authenticate(human["authorization"], "app")
    assert gc.isenabled()
    answer = await app.reverts.revert(
        "app", "rg:gc", Writer(AGENT, None), None, None, principal, None, "http"
    )
    assert answer["applied"] == 1
    assert not gc.isenabled()
    await asyncio.sleep(0)
    assert gc.isenabled()


def _update(doc: Doc[Any], edit: Any) -> dict[str, Any]:
    """The update ``edit`` makes to ``doc``'s text root "content", as an op."""
    return _yjs(doc, lambda text: edit(text))


async def _text(client: httpx.AsyncClient, h: dict[str, str], crdt_id: str) -> Any:
    url = f"{BASE}/{crdt_id}?root=content&as=text"
    return (await client.get(url, headers=h)).json()["value"]


async def test_reverting_a_yjs_update_that_waited_for_another_writers(
    server: RunningServer,
) -> None:
    """The agent's update builds on text of the human's that reaches the
    server after it: Yrs holds it as pending until the human's comes, and
    integrates it in that update's transaction. Before: the revert's undo
    manager saw the agent's text come in with the human's update, not the
    agent's, and the revert applied nothing."""
    async with httpx.AsyncClient(base_url=server.url) as client:
        human = await issue(client, client_id=HUMAN)
        agent = await issue(client, client_id=AGENT)
        person, bot = Doc(), Doc()
        first = _update(person, lambda t: t.insert(0, "hello "))
        bot.apply_update(base64.b64decode(first["update"]))
        later = _update(person, lambda t: t.insert(6, "world"))
        bot.apply_update(base64.b64decode(later["update"]))
        built_on = _update(bot, lambda t: t.insert(11, " by AI"))
        for h, body in ((human, first), (agent, built_on), (human, later)):
            assert (await op(client, h, "yd:wait", body)).status_code == 200
        assert await _text(client, human, "yd:wait") == "hello world by AI"
        r = await client.post(f"{BASE}/yd:wait/revert", json={"client_id": AGENT}, headers=human)
        assert r.status_code == 200, r.text
        assert r.json()["applied"] == 1
        assert await _text(client, human, "yd:wait") == "hello world"


async def test_reverting_a_yjs_update_another_writers_waited_for_keeps_theirs(
    server: RunningServer,
) -> None:
    """The human's update builds on the agent's text and reaches the server
    first: it integrates in the agent's update's transaction. Before: the
    revert took the human's text back with the agent's."""
    async with httpx.AsyncClient(base_url=server.url) as client:
        human = await issue(client, client_id=HUMAN)
        agent = await issue(client, client_id=AGENT)
        person, bot = Doc(), Doc()
        first = _update(person, lambda t: t.insert(0, "notes: "))
        bot.apply_update(base64.b64decode(first["update"]))
        suggestion = _update(bot, lambda t: t.insert(7, "AI"))
        person.apply_update(base64.b64decode(suggestion["update"]))
        typed = _update(person, lambda t: t.insert(9, " typed"))
        for h, body in ((human, first), (human, typed), (agent, suggestion)):
            assert (await op(client, h, "yd:built", body)).status_code == 200
        assert await _text(client, human, "yd:built") == "notes: AI typed"
        r = await client.post(f"{BASE}/yd:built/revert", json={"client_id": AGENT}, headers=human)
        assert r.status_code == 200, r.text
        assert await _text(client, human, "yd:built") == "notes:  typed"

"""An update that waits for its dependency survives a snapshot and a restart.

A writer's second update reaches the server before its first and waits; the
document is snapshotted (a history checkpoint on the embedded store, a
snapshot row on PostgreSQL) and the server restarts. Before, the snapshot
held the merged document alone: the waiting update, answered and in the
log, was gone from the document read back, and when its dependency came
only the first update's text was there.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any, Final

import httpx
from pycrdt import Doc, Text

from syncd.auth import ROOT
from syncd.store.history_index import CHECKPOINT_MIN_BYTES, Retention
from tests.conftest import Subprocess
from tests.crdt.crdt_testlib import dependent_updates
from tests.http.support import issue
from tests.store.pgnodes import NS, StartNode, sql_conn

CRDT: Final = "/v1/namespaces/app/crdts/yd:notes"
FILLER_UPDATES: Final = 4
"""Updates of another writer after the one that waits: the op bytes of the
first three pass CHECKPOINT_MIN_BYTES, so the embedded store writes a
checkpoint of the document after the fourth."""


def _fillers() -> list[bytes]:
    """Another writer's updates to another root (FILLER_UPDATES)."""
    doc: Doc[Any] = Doc(client_id=99)
    text = doc.get("filler", type=Text)
    size = CHECKPOINT_MIN_BYTES // (FILLER_UPDATES - 1) + 1
    updates: list[bytes] = []
    for _ in range(FILLER_UPDATES):
        seen = doc.get_state()
        text.insert(len(text), "x" * size)
        updates.append(doc.get_update(seen))
    return updates


def _op(update: bytes) -> dict[str, Any]:
    return {"op": "update", "update": base64.b64encode(update).decode()}


async def _post(client: httpx.AsyncClient, headers: dict[str, str], body: Any) -> None:
    r = await client.post(f"{CRDT}/ops", headers=headers, json=body)
    assert r.status_code == 200, r.text


async def _served(client: httpx.AsyncClient, headers: dict[str, str]) -> Doc[Any]:
    r = await client.get(CRDT, headers=headers)
    assert r.status_code == 200, r.text
    served: Doc[Any] = Doc()
    served.apply_update(base64.b64decode(r.json()["value"]))
    return served


def _assert_as_never_restarted(served: Doc[Any], updates: list[bytes]) -> None:
    """``served`` is what a client that got ``updates`` holds."""
    client: Doc[Any] = Doc()
    for update in updates:
        client.apply_update(update)
    assert str(served.get("content", type=Text)) == "hello world"
    assert served.get_state() == client.get_state()
    assert str(served.get("filler", type=Text)) == str(client.get("filler", type=Text))


async def test_a_waiting_update_survives_a_checkpoint_and_a_restart(
    spawn_server: Callable[..., Subprocess],
) -> None:
    """The embedded store, the server's process restarted: the document is
    read back from its newest history checkpoint (taken after the update
    that waits) and the ops after it."""
    _, first, second = dependent_updates()
    fillers = _fillers()
    proc = spawn_server()
    async with httpx.AsyncClient(base_url=proc.url) as client:
        headers = await issue(client)
        await _post(client, headers, _op(second))  # its dependency has not arrived
        for update in fillers:  # one op a request: no batch
            await _post(client, headers, _op(update))
        assert str((await _served(client, headers)).get("content", type=Text)) == ""
    assert proc.terminate() == 0
    proc = spawn_server()
    async with httpx.AsyncClient(base_url=proc.url) as client:
        await _post(client, headers, _op(first))  # the dependency, after the restart
        _assert_as_never_restarted(await _served(client, headers), [first, second, *fillers])
    assert proc.terminate() == 0


async def test_a_waiting_update_survives_a_postgresql_snapshot_and_a_restart(
    start_node: StartNode,
) -> None:
    """PostgreSQL: the snapshot row (written as the document's seq crosses a
    multiple of snapshot_every, the ops behind it pruned) holds it, and a
    node started afresh reads the document from that row."""
    _, first, second = dependent_updates()
    filler = _fillers()[0]
    options: dict[str, Any] = {
        "snapshot_every": 2,
        "ops_retained": 0,
        "settings": {"history_retention": Retention(ops=0)},
    }
    a = await start_node("a", **options)
    for update in (second, filler):
        await a.service.apply_ops(NS, "yd:notes", _op(update), ROOT, "http")
    await a.close()
    with sql_conn(a.settings.database_url or "") as conn:
        assert conn.execute("SELECT seq FROM snapshots").fetchall() == [(2,)]
        assert conn.execute("SELECT count(*) FROM ops WHERE seq = 1").fetchone() == (0,)
    b = await start_node("b", **options)
    await b.service.apply_ops(NS, "yd:notes", _op(first), ROOT, "http")
    read = b.engine.read(NS, "yd:notes")
    assert read is not None
    served: Doc[Any] = Doc()
    served.apply_update(base64.b64decode(read["value"]))
    _assert_as_never_restarted(served, [first, second, filler])

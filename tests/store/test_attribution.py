"""Both stores keep an op's ``origin`` with its record, and only when it has
one: the embedded store's log and history files (read back after a restart)
and PostgreSQL's ``ops`` rows (read back by a node started afterwards)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgpack

from syncd.app import App
from syncd.auth.authenticator import ROOT
from syncd.history.reads import Writer
from tests.conftest import base_settings
from tests.store.pgnodes import NS, StartNode, op, sql_conn

BODY = [
    {"op": "insert", "index": 0, "text": "ab", "origin": "agent:s1"},
    {"op": "insert", "index": 2, "text": "c"},
]


async def _origins(app: App, writer: Writer | None = None) -> list[Any]:
    page = await app.history.page(NS, "rg:t", None, 100, writer)
    return [(o["seq"], o.get("origin")) for o in page["ops"]]


async def test_the_embedded_store_keeps_origins_across_a_restart(tmp_path: Path) -> None:
    settings = base_settings(tmp_path / "data")
    app = App(settings)
    await app.start()
    await app.service.apply_ops(NS, "rg:t", BODY, ROOT, "http")
    await app.close()
    again = App(settings)
    await again.start()
    try:
        assert await _origins(again) == [(2, None), (1, "agent:s1")]
        assert await _origins(again, Writer(origin="agent:s1")) == [(1, "agent:s1")]
    finally:
        await again.close()


async def test_postgresql_keeps_origins_in_the_op_rows(start_node: StartNode, pg_url: str) -> None:
    first = await start_node("a")
    await op(first, "rg:t", BODY)
    with sql_conn(pg_url) as conn:
        rows = conn.execute("SELECT seq, record FROM ops ORDER BY seq").fetchall()
    records = [msgpack.unpackb(raw) for _, raw in rows]
    assert [r.get("origin") for r in records] == ["agent:s1", None]
    assert "origin" not in records[1]  # absent, not null: the record stays small
    second = await start_node("b")
    assert await _origins(second, Writer(client_id=ROOT.client_id, origin="agent:s1")) == [
        (1, "agent:s1")
    ]

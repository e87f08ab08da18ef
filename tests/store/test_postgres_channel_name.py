"""The NOTIFY channel is one per database and schema, whatever the schema's
name: PostgreSQL takes channel names of at most 63 bytes. A schema name long
in bytes (non-ASCII) made a channel pg_notify refused, so every write
answered 503; two long schema names that start alike shared one channel, so
each deployment's nodes heard the other's ops and awareness notices. Real
nodes on the suite's PostgreSQL."""

from __future__ import annotations

from urllib.parse import quote

import psycopg
import pytest

from syncd.app import App
from syncd.store.postgres import channel_name
from tests.cluster.pgdb import database_url
from tests.store.pgnodes import NS, StartNode, eventually, full, load, op, settled

pytestmark = pytest.mark.timeout(60)


def _schema_url(pg_db: str, name: str) -> str:
    with psycopg.connect(database_url(pg_db), autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
    return f"{database_url(pg_db)}?options=" + quote(f'-csearch_path="{name}"')


def _notices(app: App) -> int:
    assert app.cluster is not None
    return app.cluster.stats.notices


async def test_a_schema_name_long_in_bytes_takes_writes_that_reach_the_other_node(
    start_node: StartNode, pg_db: str
) -> None:
    url = _schema_url(pg_db, "ß" * 31)  # 62 bytes: the name PostgreSQL allows
    a = await start_node("a", url=url)
    b = await start_node("b", url=url)
    await settled(a)
    await settled(b)
    await op(a, "gc:c", {"op": "increment", "amount": 1})  # was 503: channel name too long
    await load(b, "gc:c")
    await op(a, "gc:c", {"op": "increment", "amount": 2})
    await eventually(lambda: full(b, "gc:c") == full(a, "gc:c"))
    assert a.engine.read(NS, "gc:c") is not None
    assert b.engine.read(NS, "gc:c")["value"] == 3  # type: ignore[index]


async def test_long_schema_names_that_start_alike_have_channels_of_their_own(
    start_node: StartNode, pg_db: str
) -> None:
    first = _schema_url(pg_db, "tenant_" + "x" * 55 + "1")  # 63 characters each
    second = _schema_url(pg_db, "tenant_" + "x" * 55 + "2")
    a = await start_node("a", url=first)
    b = await start_node("b", url=first)
    other = await start_node("c", url=second)
    for app in (a, b, other):
        await settled(app)
    assert a.store.channel != other.store.channel  # type: ignore[attr-defined]
    heard = _notices(other)
    await op(a, "gc:c", {"op": "increment", "amount": 1})
    await load(b, "gc:c")
    await op(a, "gc:c", {"op": "increment", "amount": 1})
    await eventually(lambda: full(b, "gc:c") == full(a, "gc:c"))
    assert _notices(other) == heard  # the other deployment heard nothing of it


def test_channel_names_fit_and_stay_as_they_were_where_they_fitted() -> None:
    assert channel_name("public") == "syncd:public"
    assert channel_name("a" * 57) == "syncd:" + "a" * 57
    for schema in ("a" * 58, "a" * 63, "ß" * 31, "日本" * 10, "a" * 57 + "ß"):
        name = channel_name(schema)
        assert len(name.encode()) <= 63, name
        assert name.startswith("syncd:")
    assert channel_name("a" * 62 + "1") != channel_name("a" * 62 + "2")
    assert channel_name("ß" * 30 + "a") != channel_name("ß" * 30 + "b")

"""presence: a server clock behind the horizon its state carries.

The horizon is server time, stored with the state: records with
``stamp + MAX_TTL_MS <= horizon`` are dropped, by the op that carries a new
horizon and by every delta applied after it. A server whose wall clock
stepped back (a restart on a host whose clock was reset, a VM restored from
a snapshot, a cluster node more than MAX_FOLLOW_AHEAD_MS behind the one that
moved the horizon) stamps a new entry with its own time. More than
MAX_TTL_MS behind the horizon, that stamp counted as pruned: the update
answered 200, was written and fanned out, and every replica dropped it, so
the entry never showed. A stamp is now never below the horizon.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

import syncd.crdt.clock
from syncd.crdt.presence import MAX_TTL_MS, Presence
from tests.conftest import ADMIN
from tests.crdt.crdt_testlib import PROPERTY, ctx, roundtrip_msgpack
from tests.ws.support import mint

T = 1_700_000_000_000
BEHIND_MS = 10 * 60_000
"""How far the clock steps back: past MAX_TTL_MS and MAX_FOLLOW_AHEAD_MS."""

HEADERS = {"Authorization": f"Bearer {ADMIN}"}
PATH = "/v1/namespaces/demo/crdts/pr:room"


def test_an_update_behind_the_horizon_is_kept_and_live_for_its_ttl() -> None:
    p = Presence.new()
    p.apply_op({"op": "update", "data": {"a": 1}}, ctx(1, T))  # horizon T
    now = T - BEHIND_MS
    delta = p.apply_op({"op": "update", "data": {"b": 2}, "ttl_ms": 1000}, ctx(2, now))
    assert delta["stamp"] + MAX_TTL_MS > T
    assert delta["expires_at"] == now + 1000  # its life is the server's time
    assert p.view(now)["value"] == {"1": {"a": 1}, "2": {"b": 2}}
    assert p.view(now + 1000)["value"] == {"1": {"a": 1}}
    replica = Presence.new()
    replica.apply_op({"op": "update", "data": {"a": 1}}, ctx(1, T))
    replica.apply_delta(roundtrip_msgpack(delta))
    assert replica.state() == p.state()
    # A later sweep of the horizon drops it only once it has expired.
    p.apply_op({"op": "update"}, ctx(3, delta["stamp"] + MAX_TTL_MS))
    assert "2" not in p.state()["clients"]


def test_a_leave_behind_the_horizon_still_ends_the_entry() -> None:
    p = Presence.new()
    p.apply_op({"op": "update", "data": {"a": 1}}, ctx(1, T))
    now = T - BEHIND_MS
    p.apply_op({"op": "update", "data": {"b": 2}}, ctx(2, now))
    p.apply_op({"op": "leave"}, ctx(2, now))
    assert p.view(now)["value"] == {"1": {"a": 1}}


@pytest.fixture
def http_parser() -> str:
    return "httptools"


async def test_after_a_restart_with_the_clock_behind_a_new_entry_shows(
    make_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    first = await make_server(data_dir=data)
    async with httpx.AsyncClient(base_url=first.url, headers=HEADERS) as http:
        r = await http.post(f"{PATH}/ops", json={"op": "update", "data": {"before": True}})
        assert r.status_code == 200, r.text
    await first.server.shutdown()

    real = time.time_ns
    behind = BEHIND_MS * 1_000_000
    monkeypatch.setattr(time, "time_ns", lambda: real() - behind)
    monkeypatch.setattr(syncd.crdt.clock, "_time_ns", lambda: real() - behind)
    second = await make_server(data_dir=data)
    other = {"Authorization": f"Bearer {mint(client_id=5)}"}
    async with httpx.AsyncClient(base_url=second.url, headers=HEADERS) as http:
        r = await http.post(
            f"{PATH}/ops",
            json={"op": "update", "data": {"after": True}, "ttl_ms": MAX_TTL_MS},
            headers=other,
        )
        assert r.status_code == 200, r.text
        read = (await http.get(PATH)).json()
        assert read["value"].get("5") == {"after": True}, read


@PROPERTY
@given(data=st.data())
def test_every_acknowledged_update_shows_at_the_servers_time_whatever_the_clock_does(
    data: st.DataObject,
) -> None:
    p, now = Presence.new(), T
    for i in range(data.draw(st.integers(1, 30), label="ops")):
        now += data.draw(st.sampled_from([0, 1, 1500, 60_000, 400_000, -1, -400_000, -900_000]))
        client = data.draw(st.integers(1, 3), label="client")
        if data.draw(st.booleans(), label="leave"):
            p.apply_op({"op": "leave"}, ctx(client, now))
            assert str(client) not in p.view(now)["value"]
        else:
            p.apply_op({"op": "update", "data": {"i": i}}, ctx(client, now))
            assert p.view(now)["value"][str(client)] == {"i": i}

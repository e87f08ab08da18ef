"""presence: entries, expiry by the injected time, leave tombstones, pruning."""

from __future__ import annotations

from typing import Any

import pytest

from syncd.crdt.presence import (
    DEFAULT_TTL_MS,
    MAX_DATA_BYTES,
    MAX_TTL_MS,
    MIN_TTL_MS,
    PRUNE_INTERVAL_MS,
    Presence,
)
from syncd.errors import ApiError
from tests.crdt.crdt_testlib import ctx

T = 1_700_000_000_000


def refuse(p: Presence, op: dict[str, Any], field: str) -> None:
    before = p.state()
    with pytest.raises(ApiError) as info:
        p.apply_op(op, ctx(1, T))
    assert info.value.code == "invalid_op"
    assert info.value.message.startswith(f"{field}:"), info.value.message
    assert p.state() == before


def test_update_view_and_expiry_follow_the_given_time() -> None:
    p = Presence.new()
    delta = p.apply_op({"op": "update", "data": {"x": 1}}, ctx(4, T))
    assert delta == {
        "op": "update",
        "client_id": 4,
        "stamp": T,
        "expires_at": T + DEFAULT_TTL_MS,
        "data": {"x": 1},
        "horizon": T,
    }
    p.apply_op({"op": "update", "data": {"y": 2}, "ttl_ms": 1000}, ctx(12, T))
    assert p.view(T) == {
        "value": {"4": {"x": 1}, "12": {"y": 2}},
        "expires_at": {"4": T + DEFAULT_TTL_MS, "12": T + 1000},
    }
    assert p.view(T + 1000) == {"value": {"4": {"x": 1}}, "expires_at": {"4": T + DEFAULT_TTL_MS}}
    assert p.view(T + DEFAULT_TTL_MS) == {"value": {}, "expires_at": {}}


def test_leave_removes_the_callers_entry_only() -> None:
    p = Presence.new()
    p.apply_op({"op": "update", "data": {"a": 1}}, ctx(1, T))
    p.apply_op({"op": "update", "data": {"b": 1}}, ctx(2, T))
    delta = p.apply_op({"op": "leave"}, ctx(1, T))
    assert delta == {"op": "leave", "client_id": 1, "stamp": T + 1}
    assert p.view(T)["value"] == {"2": {"b": 1}}


def test_leave_and_update_commute_by_stamp() -> None:
    server = Presence.new()
    update = server.apply_op({"op": "update", "data": {"a": 1}}, ctx(1, T))
    leave = server.apply_op({"op": "leave"}, ctx(1, T + 5))
    back = Presence.new()
    back.apply_delta(leave)
    back.apply_delta(update)
    assert back.view(T)["value"] == {}
    assert back.state() == server.state()


def test_bare_update_is_a_heartbeat_that_keeps_the_data() -> None:
    p = Presence.new()
    p.apply_op({"op": "update", "data": {"cursor": 3}, "ttl_ms": 2000}, ctx(1, T))
    p.apply_op({"op": "update"}, ctx(1, T + 1500))
    assert p.view(T + 3000) == {
        "value": {"1": {"cursor": 3}},
        "expires_at": {"1": T + 1500 + DEFAULT_TTL_MS},
    }
    q = Presence.new()
    q.apply_op({"op": "update"}, ctx(2, T))
    assert q.view(T)["value"] == {"2": {}}


@pytest.mark.parametrize("busy", [False, True], ids=["quiet", "busy"])
def test_heartbeat_after_expiry_keeps_no_data_whether_or_not_pruned(busy: bool) -> None:
    # An expired entry has no data to keep. Its record may or may not still be
    # held (another writer's op moves the horizon and prunes it): that must
    # not decide what the heartbeat shows.
    p = Presence.new()
    p.apply_op({"op": "update", "data": {"name": "old"}, "ttl_ms": MIN_TTL_MS}, ctx(1, T))
    later = T + MAX_TTL_MS + PRUNE_INTERVAL_MS
    if busy:
        p.apply_op({"op": "update", "data": {}}, ctx(2, later))
    p.apply_op({"op": "update"}, ctx(1, later + 1))
    assert p.view(later + 1)["value"]["1"] == {}


def test_heartbeat_keeps_the_data_until_the_entry_expires() -> None:
    # Live while now < expires_at (the view's rule), so at expires_at it is gone.
    p = Presence.new()
    p.apply_op({"op": "update", "data": {"a": 1}, "ttl_ms": MIN_TTL_MS}, ctx(1, T))
    p.apply_op({"op": "update", "ttl_ms": MIN_TTL_MS}, ctx(1, T + MIN_TTL_MS - 1))
    assert p.view(T + MIN_TTL_MS)["value"] == {"1": {"a": 1}}
    q = Presence.new()
    q.apply_op({"op": "update", "data": {"a": 1}, "ttl_ms": MIN_TTL_MS}, ctx(1, T))
    q.apply_op({"op": "update"}, ctx(1, T + MIN_TTL_MS))
    assert q.view(T + MIN_TTL_MS)["value"] == {"1": {}}


def test_heartbeat_after_leave_keeps_no_data() -> None:
    p = Presence.new()
    p.apply_op({"op": "update", "data": {"a": 1}}, ctx(1, T))
    p.apply_op({"op": "leave"}, ctx(1, T + 1))
    p.apply_op({"op": "update"}, ctx(1, T + 2))
    assert p.view(T + 2)["value"] == {"1": {}}


def test_ttl_limits() -> None:
    p = Presence.new()
    p.apply_op({"op": "update", "ttl_ms": MIN_TTL_MS}, ctx(1, T))
    p.apply_op({"op": "update", "ttl_ms": MAX_TTL_MS}, ctx(1, T))
    for ttl in (MIN_TTL_MS - 1, MAX_TTL_MS + 1, 1500.0, "2000", True, None):
        if ttl is None:
            continue
        refuse(p, {"op": "update", "ttl_ms": ttl}, "ttl_ms")


def test_data_must_be_an_object_within_64_kib() -> None:
    p = Presence.new()
    for bad in ([1], "x", 5, {"k": b"x"}):
        refuse(p, {"op": "update", "data": bad}, "data")
    fits = {"k": "x" * (MAX_DATA_BYTES - len('{"k":""}'))}
    p.apply_op({"op": "update", "data": fits}, ctx(1, T))
    refuse(p, {"op": "update", "data": {"k": fits["k"] + "x"}}, "data")
    refuse(p, {"op": "join"}, "op")


def test_old_records_are_pruned_past_the_horizon() -> None:
    p = Presence.new()
    p.apply_op({"op": "update", "ttl_ms": MAX_TTL_MS}, ctx(1, T))
    p.apply_op({"op": "leave"}, ctx(2, T))
    assert set(p.state()["clients"]) == {"1", "2"}
    # Still within the horizon: kept.
    later = T + MAX_TTL_MS - 1
    d = p.apply_op({"op": "update"}, ctx(3, later))
    assert d["horizon"] == later
    assert set(p.state()["clients"]) == {"1", "2", "3"}
    # Past it, on the next sweep: both old records go, the view never changed.
    sweep = later + PRUNE_INTERVAL_MS
    before = p.view(sweep)
    d = p.apply_op({"op": "update"}, ctx(3, sweep))
    assert d["horizon"] == sweep
    assert set(p.state()["clients"]) == {"3"}
    # Dropped records were expired already; client 3 just refreshed its own.
    assert before["value"] == {}
    assert p.view(sweep)["value"] == {"3": {}}
    # A stale delta from before the horizon does not come back.
    stale = Presence.new().apply_op({"op": "update"}, ctx(1, T))
    p.apply_delta(stale)
    assert set(p.state()["clients"]) == {"3"}


def test_no_sweep_between_intervals() -> None:
    p = Presence.new()
    first = p.apply_op({"op": "update"}, ctx(1, T))
    assert first["horizon"] == T
    second = p.apply_op({"op": "update"}, ctx(1, T + PRUNE_INTERVAL_MS - 1))
    assert "horizon" not in second


def test_state_shape() -> None:
    p = Presence.new()
    p.apply_op({"op": "update", "data": {"a": 1}}, ctx(1, T))
    p.apply_op({"op": "leave"}, ctx(2, T))
    assert p.state() == {
        "horizon": T,
        "clients": {
            "1": {"stamp": T, "expires_at": T + DEFAULT_TTL_MS, "data": {"a": 1}},
            "2": {"stamp": T, "left": True},
        },
    }

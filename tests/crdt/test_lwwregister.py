"""lwwregister: the winner, server stamps, the 60 s limit, views."""

from __future__ import annotations

from typing import Any

import pytest

from syncd.crdt.clock import MAX_CLOCK_SKEW_MS
from syncd.crdt.lwwregister import LWWRegister
from syncd.errors import ApiError
from tests.crdt.crdt_testlib import ctx

NOW = 1_700_000_000_000


def refuse(reg: LWWRegister, op: dict[str, Any], field: str) -> None:
    before = reg.state()
    with pytest.raises(ApiError) as info:
        reg.apply_op(op, ctx(1, NOW))
    assert info.value.code == "invalid_op"
    assert info.value.message.startswith(f"{field}:"), info.value.message
    assert reg.state() == before


def test_empty_register_view() -> None:
    assert LWWRegister.new().view(0) == {"value": None, "timestamp": None, "client_id": None}


def test_set_without_timestamp_uses_the_server_clock() -> None:
    reg = LWWRegister.new()
    delta = reg.apply_op({"op": "set", "value": "a"}, ctx(5, NOW))
    assert delta == {"op": "set", "value": "a", "timestamp": NOW, "client_id": 5}
    assert reg.view(0) == {"value": "a", "timestamp": NOW, "client_id": 5}


def test_server_stamped_set_supersedes_a_future_timestamp() -> None:
    reg = LWWRegister.new()
    reg.apply_op({"op": "set", "value": "future", "timestamp": NOW + 30_000}, ctx(9, NOW))
    delta = reg.apply_op({"op": "set", "value": "now"}, ctx(1, NOW))
    assert delta["timestamp"] == NOW + 30_001
    assert reg.view(0)["value"] == "now"
    # ... and within one millisecond, successive server-stamped sets still order.
    reg.apply_op({"op": "set", "value": "again"}, ctx(1, NOW))
    assert reg.view(0) == {"value": "again", "timestamp": NOW + 30_002, "client_id": 1}


def test_highest_timestamp_then_client_id_wins() -> None:
    reg = LWWRegister.new()
    reg.apply_op({"op": "set", "value": "b", "timestamp": 100}, ctx(2, NOW))
    reg.apply_op({"op": "set", "value": "older", "timestamp": 99}, ctx(9, NOW))
    assert reg.view(0)["value"] == "b"
    reg.apply_op({"op": "set", "value": "tie-low", "timestamp": 100}, ctx(1, NOW))
    assert reg.view(0)["value"] == "b"
    reg.apply_op({"op": "set", "value": "tie-high", "timestamp": 100}, ctx(3, NOW))
    assert reg.view(0) == {"value": "tie-high", "timestamp": 100, "client_id": 3}


def test_same_timestamp_and_client_is_decided_by_the_value_everywhere() -> None:
    server = LWWRegister.new()
    d1 = server.apply_op({"op": "set", "value": "b", "timestamp": 5}, ctx(1, NOW))
    d2 = server.apply_op({"op": "set", "value": "a", "timestamp": 5}, ctx(1, NOW))
    for order in ([d1, d2], [d2, d1]):
        replica = LWWRegister.new()
        for delta in order:
            replica.apply_delta(delta)
        assert replica.state() == server.state()


def test_value_tie_break_compares_code_points_not_utf16_units() -> None:
    # U+FFFF is below U+1F600 as a code point (and in UTF-8), above it as a
    # UTF-16 unit (0xD83D): a client ordering by UTF-16 would keep the other
    # value (docs/data-model.md#lwwregister says which order it is).
    server = LWWRegister.new()
    d1 = server.apply_op({"op": "set", "value": "\U0001f600", "timestamp": 5}, ctx(1, NOW))
    d2 = server.apply_op({"op": "set", "value": "\uffff", "timestamp": 5}, ctx(1, NOW))
    assert server.view(0)["value"] == "\U0001f600"
    replica = LWWRegister.new()
    for delta in (d2, d1):
        replica.apply_delta(delta)
    assert replica.state() == server.state()


def test_timestamp_limit_is_60_seconds_ahead() -> None:
    reg = LWWRegister.new()
    reg.apply_op({"op": "set", "value": 1, "timestamp": NOW + MAX_CLOCK_SKEW_MS}, ctx(1, NOW))
    refuse(reg, {"op": "set", "value": 2, "timestamp": NOW + MAX_CLOCK_SKEW_MS + 1}, "timestamp")


@pytest.mark.parametrize("timestamp", [-1, 1.5, "5", True, [1], 2**53])
def test_timestamp_must_be_a_non_negative_integer(timestamp: Any) -> None:
    refuse(LWWRegister.new(), {"op": "set", "value": 1, "timestamp": timestamp}, "timestamp")


def test_value_is_required_json() -> None:
    refuse(LWWRegister.new(), {"op": "set"}, "value")
    refuse(LWWRegister.new(), {"op": "set", "value": b"raw"}, "value")
    refuse(LWWRegister.new(), {"op": "get", "value": 1}, "op")
    reg = LWWRegister.new()
    reg.apply_op({"op": "set", "value": None, "timestamp": 0}, ctx(1, NOW))
    assert reg.view(0) == {"value": None, "timestamp": 0, "client_id": 1}

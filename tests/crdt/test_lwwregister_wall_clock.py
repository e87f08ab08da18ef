"""The lwwregister limit on a client timestamp (docs/data-model.md#lwwregister:
at most 60 s ahead) is measured from the server's wall clock, not from the
engine's hybrid clock: that one follows other nodes' stamps up to 60 s past
the wall clock, and a limit on top of it let a timestamp up to ~120 s ahead
in (one node with a fast clock doubled every other node's allowance)."""

from __future__ import annotations

from typing import Any

import pytest

from syncd.crdt.clock import MAX_CLOCK_SKEW_MS, MAX_FOLLOW_AHEAD_MS, wall_clock_ms
from syncd.crdt.engine import Engine
from syncd.errors import ApiError

NS = "ns1"
SLACK_MS = 5_000
"""Room for the wall clock to move while the test runs (a loaded machine)."""


def apply(engine: Engine, crdt_id: str, op: dict[str, Any], client_id: int = 1) -> Any:
    return engine.apply(engine.plan(NS, crdt_id, op), client_id)


def pushed_ahead_engine() -> Engine:
    """An engine whose hybrid clock followed another node's stamp as far
    past the wall clock as it follows one."""
    elsewhere = Engine()
    record = apply(elsewhere, "gc:elsewhere", {"op": "increment"}, 2).records[0]
    record["ts"] = wall_clock_ms() + 10 * MAX_FOLLOW_AHEAD_MS  # a node with a wild clock
    engine = Engine()
    assert engine.replay(record)
    assert engine.now_ms() >= wall_clock_ms() + MAX_FOLLOW_AHEAD_MS - SLACK_MS
    return engine


def test_a_timestamp_90_s_ahead_of_the_wall_clock_is_refused_on_a_pushed_clock() -> None:
    engine = pushed_ahead_engine()
    with pytest.raises(ApiError) as refused:
        apply(engine, "lw:x", {"op": "set", "value": "far", "timestamp": wall_clock_ms() + 90_000})
    assert refused.value.status == 400 and refused.value.code == "invalid_op"
    assert refused.value.message.startswith("timestamp:"), refused.value.message
    assert engine.read(NS, "lw:x") is None


def test_a_timestamp_within_the_limit_of_the_wall_clock_is_taken_on_a_pushed_clock() -> None:
    engine = pushed_ahead_engine()
    timestamp = wall_clock_ms() + MAX_CLOCK_SKEW_MS - SLACK_MS
    apply(engine, "lw:x", {"op": "set", "value": "near", "timestamp": timestamp})
    read = engine.read(NS, "lw:x")
    assert read is not None and read["value"] == "near" and read["timestamp"] == timestamp


def test_a_server_stamped_set_still_wins_on_a_pushed_clock() -> None:
    """Server stamps keep following the hybrid clock: a set without a
    timestamp supersedes the client's, whatever the wall clock says."""
    engine = pushed_ahead_engine()
    timestamp = wall_clock_ms() + MAX_CLOCK_SKEW_MS - SLACK_MS
    apply(engine, "lw:x", {"op": "set", "value": "client", "timestamp": timestamp})
    apply(engine, "lw:x", {"op": "set", "value": "server"})
    read = engine.read(NS, "lw:x")
    assert read is not None and read["value"] == "server" and read["timestamp"] > timestamp

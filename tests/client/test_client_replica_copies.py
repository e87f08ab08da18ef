"""What a replica hands out (``value``, ``view()``, ``state()``, the deltas
its callbacks and ``changes()`` get) is the caller's to change: it held the
replica's own objects, so a caller adding to a returned list or dict changed
the replica, which then showed what the service never had (and merged it into
later states). Against the real server."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from syncd.client import AsyncClient, Replica, ops
from tests.client.conftest import NS, make_token
from tests.conftest import RunningServer

WAIT_S = 10.0

CASES: list[tuple[str, list[dict[str, Any]]]] = [
    ("lw:doc", [ops.lwwregister_set({"tags": ["a"]}), ops.lwwregister_set({"meta": {"n": 1}})]),
    ("os:set", [ops.orset_add({"k": [1]}), ops.orset_add([2, {"x": 3}])]),
    ("pr:room", [ops.presence_update({"at": [1]}), ops.presence_update({"cursor": [1, 2]})]),
    (
        "rg:list",
        [ops.rga_insert(index=0, values=[{"v": [1]}]), ops.rga_insert(index=1, values=[[2]])],
    ),
    ("tr:tree", [ops.tree_add("a", data={"tags": ["x"]}), ops.tree_add("b", "a", data={"n": [1]})]),
]
"""Per CRDT: the write made before the replica follows (in its snapshot),
then the ones it gets as op deltas."""


def _deface(value: Any) -> None:
    """Change every list and dict inside ``value`` in place."""
    if isinstance(value, dict):
        for item in list(value.values()):
            _deface(item)
        value["defaced"] = True
    elif isinstance(value, list):
        for item in list(value):
            _deface(item)
        value.append("defaced")


@pytest.mark.parametrize(("crdt_id", "writes"), CASES, ids=[c[0] for c in CASES])
async def test_changing_what_a_replica_returns_leaves_it_alone(
    server: RunningServer, crdt_id: str, writes: list[dict[str, Any]]
) -> None:
    async with AsyncClient(server.url, make_token(3), NS) as client:
        await client.apply(crdt_id, writes[0])  # exists before the snapshot
        replica = await Replica.follow(client, crdt_id)
        try:
            seen: list[dict[str, Any]] = []
            replica.on_change(lambda _replica, delta: (seen.append(delta), _deface(delta)))
            feed = replica.changes()
            for write in writes[1:]:
                await client.apply(crdt_id, write)
            expected = (await client.fetch(crdt_id))["value"]
            await replica.wait_for_seq(len(writes), WAIT_S)
            async with asyncio.timeout(WAIT_S):
                for _ in writes[1:]:
                    _deface(await feed.__anext__())
            assert len(seen) == len(writes) - 1
            _deface(replica.value)
            _deface(replica.view())
            _deface(replica.state())
            assert replica.value == expected
            assert replica.view() is not None and replica.view()["value"] == expected  # type: ignore[index]
            # The state still loads as the service's: nothing defaced got in.
            fresh = Replica(crdt_id)
            snapshot = {"id": crdt_id, "kind": "snapshot", "type": replica.type, "seq": 1}
            fresh.apply({**snapshot, "state": replica.state()})
            assert fresh.value == expected
        finally:
            await replica.close()


def test_a_delta_given_to_apply_may_be_changed_after() -> None:
    replica = Replica("lw:mine")
    op = {"id": "lw:mine", "kind": "op", "seq": 1, "epoch": "e1", "type": "lwwregister"}
    op["op"] = {"op": "set", "value": {"a": [1]}, "timestamp": 5, "client_id": 1}
    assert replica.apply(op)
    op["op"]["value"]["a"].append(2)  # the caller reuses its delta
    assert replica.value == {"a": [1]}

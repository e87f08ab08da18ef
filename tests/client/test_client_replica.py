"""The client-side replica equals the server after random ops from several clients."""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from syncd.client import AsyncClient, Replica, ReplicaLagError, ServiceError, ops
from syncd.errors import ApiError
from tests.client.conftest import NS, make_token
from tests.conftest import RunningServer

OPS_PER_CLIENT = int(os.environ.get("SYNCD_CLIENT_REPLICA_OPS", "25"))
WAIT_S = 10.0

Op = dict[str, Any]
OpMaker = Callable[[random.Random, int, int], Op]


def _gcounter(rng: random.Random, client: int, i: int) -> Op:
    return ops.gcounter_increment(rng.randint(1, 5))


def _pncounter(rng: random.Random, client: int, i: int) -> Op:
    amount = rng.randint(1, 5)
    return (
        ops.pncounter_increment(amount) if rng.random() < 0.5 else ops.pncounter_decrement(amount)
    )


def _orset(rng: random.Random, client: int, i: int) -> Op:
    element = rng.choice(["a", "b", 1, {"k": 2}, [3]])
    return ops.orset_add(element) if rng.random() < 0.6 else ops.orset_remove(element)


def _lww(rng: random.Random, client: int, i: int) -> Op:
    return ops.lwwregister_set(rng.choice(["x", 7, {"by": client}, None, [i]]))


def _presence(rng: random.Random, client: int, i: int) -> Op:
    if rng.random() < 0.2:
        return ops.presence_leave()
    return ops.presence_update({"i": i}, ttl_ms=rng.randint(1000, 300_000))


def _rga(rng: random.Random, client: int, i: int) -> Op:
    if rng.random() < 0.7:
        index = rng.randint(0, 3)
        if rng.random() < 0.5:
            return ops.rga_insert(index=index, text=rng.choice(["a", "bc", "def"]))
        return ops.rga_insert(index=index, values=[i, {"c": client}])
    return ops.rga_delete(index=rng.randint(0, 3), count=rng.randint(1, 2))


def _tree(rng: random.Random, client: int, i: int) -> Op:
    nodes = ["root", "base", *(f"n{c}-{k}" for c in range(3) for k in range(i))]
    roll = rng.random()
    if roll < 0.5:
        return ops.tree_add(
            f"n{client}-{i}", rng.choice(nodes), data={"i": i}, pos=str(rng.randint(0, 9))
        )
    node = rng.choice(nodes[1:])
    if roll < 0.75:
        return ops.tree_move(node, rng.choice(nodes), pos=str(rng.randint(0, 9)))
    if roll < 0.9:
        return ops.tree_update(node, {"u": i})
    return ops.tree_delete(node)


MAKERS: dict[str, OpMaker] = {
    "gcounter": _gcounter,
    "pncounter": _pncounter,
    "orset": _orset,
    "lwwregister": _lww,
    "presence": _presence,
    "rga": _rga,
    "tree": _tree,
}


FIRST: dict[str, Op] = {"tree": ops.tree_add("base"), "rga": ops.rga_insert(index=0, text="start")}
"""An op that surely applies, so random refusals cannot leave the CRDT uncreated."""


@pytest.fixture
async def server(make_server: Callable[..., Any]) -> RunningServer:
    # Longer runs (SYNCD_CLIENT_REPLICA_OPS) would meet the 100/s per-token default.
    running: RunningServer = await make_server(rate_limit=1_000_000)
    return running


@pytest.fixture
async def clients(server: RunningServer) -> AsyncIterator[list[AsyncClient]]:
    made = [AsyncClient(server.url, make_token(client_id), NS) for client_id in (11, 12, 13)]
    yield made
    for client in made:
        await client.aclose()


async def _writer(client: AsyncClient, crdt_id: str, maker: OpMaker, seed: int, index: int) -> None:
    rng = random.Random(seed)
    for i in range(OPS_PER_CLIENT):
        try:
            if rng.random() < 0.2:  # a batch now and then
                await client.batch(crdt_id, [maker(rng, index, i), maker(rng, index, i)])
            else:
                await client.apply(crdt_id, maker(rng, index, i))
        except ServiceError as exc:
            # Random ops can be refused (an index past the end, a cycle, a deleted node).
            assert exc.code in ("invalid_op", "cycle"), exc
        if rng.random() < 0.3:
            await asyncio.sleep(0)


async def _converged(replica: Replica, reader: AsyncClient, crdt_id: str) -> dict[str, Any]:
    full = await reader.fetch(crdt_id, crdt_format=True)
    await replica.wait_for_seq(full["seq"], WAIT_S)
    assert replica.seq == full["seq"] and replica.epoch == full["epoch"]
    if replica.type != "presence":  # presence values depend on the reading clock
        view = await reader.read(crdt_id)
        assert replica.view() == view
    assert replica.state() == full["state"]
    return full


@pytest.mark.parametrize("type_name", sorted(MAKERS))
async def test_replica_equals_server_after_random_ops(
    clients: list[AsyncClient], type_name: str
) -> None:
    crdt_id = f"random-{type_name}"
    seed = int(os.environ.get("SYNCD_CLIENT_REPLICA_SEED", random.randrange(2**32)))
    print(f"seed {seed} (SYNCD_CLIENT_REPLICA_SEED)")
    # Start before the CRDT exists: the replica begins from the seq-0 snapshot.
    async with await clients[0].replica(crdt_id, type_name) as replica:
        assert not replica.exists and replica.value is None
        await clients[0].apply(
            crdt_id, FIRST.get(type_name) or MAKERS[type_name](random.Random(), 0, 0)
        )
        await asyncio.gather(
            *(
                _writer(client, crdt_id, MAKERS[type_name], seed + n, n)
                for n, client in enumerate(clients)
            )
        )
        await _converged(replica, clients[1], crdt_id)
        if type_name != "presence":  # presence values depend on the reading clock
            view = await clients[1].read(crdt_id)
            assert view is not None
            assert replica.view() == view, f"seed {seed}"


@pytest.mark.parametrize("via", ["ws", "sse"])
async def test_replica_from_existing_state_and_changes(
    clients: list[AsyncClient], via: str
) -> None:
    writer = clients[1]
    ids = (await writer.rga_insert("doc", index=0, text="hi"))["ids"]
    replica = await clients[0].replica("doc", via=via)
    seen: list[tuple[int, Any]] = []
    remove = replica.on_change(lambda r, delta: seen.append((delta["seq"], r.value)))
    replica.on_change(lambda r, delta: 1 / 0)  # a broken callback harms nobody
    changes = replica.changes()
    assert replica.value == ["h", "i"] and replica.seq == 1 and replica.snapshots == 1
    await writer.rga_insert("doc", after=ids[-1], text="!")
    await writer.rga_delete("doc", ids=[ids[0]])
    first = await asyncio.wait_for(anext(changes), WAIT_S)
    second = await asyncio.wait_for(anext(changes), WAIT_S)
    assert (first["seq"], second["seq"]) == (2, 3)
    assert seen == [(2, ["h", "i", "!"]), (3, ["i", "!"])]
    remove()
    await writer.rga_insert("doc", index=0, text="x")
    await replica.wait_for_seq(4, WAIT_S)
    assert len(seen) == 2 and replica.view() == await writer.read("doc")
    await replica.close()
    assert (await anext(changes))["seq"] == 4  # applied before the close
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(anext(changes), WAIT_S)


async def test_replica_follows_delete_and_new_life(
    clients: list[AsyncClient], server: RunningServer
) -> None:
    await clients[0].gcounter_increment("gc:life", 5)
    async with await clients[0].replica("gc:life") as replica:
        assert replica.value == 5
        async with AsyncClient(server.url, make_token(1, admin=True), NS) as admin:
            await admin.delete_crdt("gc:life")
        await _until(lambda: not replica.exists)
        await clients[1].gcounter_increment("gc:life", 2)
        await replica.wait_for_seq(1, WAIT_S)
        assert replica.value == 2


async def test_replica_refused_raises(server: RunningServer) -> None:
    async with AsyncClient(server.url, make_token(3, read=()), NS) as client:
        with pytest.raises(ServiceError):
            await client.replica("gc:x")
    with pytest.raises(ValueError):
        await Replica.follow(client, "gc:x", via="carrier-pigeon")


async def _until(predicate: Callable[[], bool]) -> None:
    async with asyncio.timeout(WAIT_S):
        while not predicate():
            await asyncio.sleep(0.01)


# -- the pure part ------------------------------------------------------------


def _snapshot(seq: int, state: Any, epoch: str | None = "e") -> dict[str, Any]:
    return {
        "kind": "snapshot",
        "id": "c",
        "type": "gcounter",
        "seq": seq,
        "epoch": epoch,
        "state": state,
    }


def test_apply_refuses_what_does_not_follow_on() -> None:
    from syncd.crdt.base import OpContext
    from syncd.crdt.gcounter import GCounter

    server = GCounter.new()
    deltas = [
        server.apply_op({"op": "increment", "amount": n}, OpContext(1, 0, s))
        for s, n in ((1, 2), (2, 3))
    ]
    replica = Replica("c")
    assert replica.type is None and not replica.apply({"kind": "op", "id": "other", "seq": 1})
    assert replica.apply(_snapshot(0, None, None)) and replica.value is None
    first = {"kind": "op", "id": "c", "type": "gcounter", "seq": 1, "epoch": "e", "op": deltas[0]}
    second = {**first, "seq": 2, "op": deltas[1]}
    assert not replica.apply({**second, "seq": 3})  # a gap
    assert replica.apply(first) and replica.value == 2
    assert not replica.apply(first)  # a repeat
    assert replica.apply(second) and replica.value == 5 and replica.seq == 2
    assert not replica.apply({**second, "seq": 3, "epoch": "other"})  # another life, mid-way
    assert replica.apply(_snapshot(9, server.state(), "e")) and replica.seq == 9
    assert replica.apply({"kind": "deleted", "id": "c"}) and not replica.exists and replica.seq == 0
    assert not replica.apply({"kind": "mystery", "id": "c"})
    with pytest.raises(ApiError):
        Replica("c", "hyperloglog")


async def test_changes_reader_too_far_behind_is_told() -> None:
    replica = Replica("c", "gcounter")
    changes = replica.changes(buffer=2)
    pending: Awaitable[Any] = asyncio.ensure_future(anext(changes))
    await asyncio.sleep(0)
    replica.apply(_snapshot(0, None, None))
    assert (await pending)["seq"] == 0
    for seq in range(1, 4):
        replica.apply(
            {
                "kind": "snapshot",
                "id": "c",
                "type": "gcounter",
                "seq": seq,
                "epoch": "e",
                "state": {"counts": {}},
            }
        )
    assert (await anext(changes))["seq"] == 1
    assert (await anext(changes))["seq"] == 2
    with pytest.raises(ReplicaLagError):
        await anext(changes)
    assert replica.seq == 3  # the replica itself is current

"""The ``synced`` message that ends every subscription's start (docs/protocol.md#resuming).

Before it, a resume that was already up to date got nothing until the next
op, so a client could not tell "caught up" from "still waiting".
"""

from __future__ import annotations

import json

import msgpack

from tests.conftest import RunningServer
from tests.ws.support import NS, op, open_ws, recv, send_json, send_mp


async def _write(server: RunningServer, crdt_id: str, count: int) -> str:
    """``count`` ops on ``crdt_id``; the epoch they are in."""
    async with open_ws(server) as writer:
        for ref in range(1, count + 1):
            ack = await op(writer, crdt_id, {"op": "increment", "amount": 1}, ref=ref)
            assert ack["seq"] == ref
    async with open_ws(server) as ws:
        await send_mp(ws, {"kind": "subscribe", "id": crdt_id})
        snapshot = await recv(ws, synced=True)
    epoch: str = snapshot["epoch"]
    return epoch


async def test_snapshot_start_ends_with_synced_before_live_deltas(server: RunningServer) -> None:
    epoch = await _write(server, "gc:s", 2)
    async with open_ws(server) as ws:
        await send_mp(ws, {"kind": "subscribe", "id": "gc:s"})
        assert (await recv(ws, synced=True))["kind"] == "snapshot"
        synced = await recv(ws, synced=True)
        assert synced == {"kind": "synced", "ns": NS, "id": "gc:s", "seq": 2, "epoch": epoch}
        await send_mp(ws, {"kind": "op", "id": "gc:s", "op": {"op": "increment"}, "ref": 9})
        kinds = {(await recv(ws, synced=True))["kind"], (await recv(ws, synced=True))["kind"]}
        assert kinds == {"ack", "op"}  # the live delta and its ack; no second synced


async def test_up_to_date_resume_gets_synced_alone(server: RunningServer) -> None:
    epoch = await _write(server, "gc:u", 3)
    async with open_ws(server) as ws:
        await send_mp(ws, {"kind": "subscribe", "id": "gc:u", "since": 3, "epoch": epoch})
        assert await recv(ws, synced=True) == {
            "kind": "synced",
            "ns": NS,
            "id": "gc:u",
            "seq": 3,
            "epoch": epoch,
        }
        await send_mp(ws, {"kind": "ping", "ref": "p"})
        assert await recv(ws, synced=True) == {"kind": "pong", "ref": "p"}  # nothing else came


async def test_replay_is_followed_by_synced_at_its_last_seq(server: RunningServer) -> None:
    epoch = await _write(server, "gc:r", 3)
    async with open_ws(server) as ws:
        await send_mp(ws, {"kind": "subscribe", "id": "gc:r", "since": 1, "epoch": epoch})
        assert [
            (m["kind"], m["seq"])
            for m in [await recv(ws, synced=True), await recv(ws, synced=True)]
        ] == [
            ("op", 2),
            ("op", 3),
        ]
        assert await recv(ws, synced=True) == {
            "kind": "synced",
            "ns": NS,
            "id": "gc:r",
            "seq": 3,
            "epoch": epoch,
        }


async def test_synced_comes_in_the_subscribe_encoding(server: RunningServer) -> None:
    epoch = await _write(server, "gc:e", 1)
    async with open_ws(server) as ws:
        await send_json(ws, {"kind": "subscribe", "id": "gc:e", "since": 1, "epoch": epoch})
        raw = await ws.recv()
        assert isinstance(raw, str)
        assert json.loads(raw) == {
            "kind": "synced",
            "ns": NS,
            "id": "gc:e",
            "seq": 1,
            "epoch": epoch,
        }
        await send_mp(ws, {"kind": "subscribe", "id": "gc:unborn"})
        assert msgpack.unpackb(await ws.recv())["kind"] == "snapshot"
        raw = await ws.recv()
        assert isinstance(raw, bytes)
        assert msgpack.unpackb(raw) == {
            "kind": "synced",
            "ns": NS,
            "id": "gc:unborn",
            "seq": 0,
            "epoch": None,
        }


async def test_other_epoch_gets_snapshot_then_synced_at_the_current_life(
    server: RunningServer,
) -> None:
    epoch = await _write(server, "gc:o", 2)
    async with open_ws(server) as ws:
        await send_mp(ws, {"kind": "subscribe", "id": "gc:o", "since": 5, "epoch": "not-it"})
        assert (await recv(ws, synced=True))["kind"] == "snapshot"
        assert await recv(ws, synced=True) == {
            "kind": "synced",
            "ns": NS,
            "id": "gc:o",
            "seq": 2,
            "epoch": epoch,
        }

"""Messages over a live connection: subscribe, ops and their answers, errors, encodings."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import msgpack

from syncd.auth.permissions import V1Permissions
from tests.conftest import ADMIN, RunningServer
from tests.ws.support import (
    NS,
    RawWs,
    client_frame,
    mint,
    op,
    open_ws,
    recv,
    recv_kind,
    send_json,
    send_mp,
)


async def test_subscribe_gets_snapshot_in_the_subscribe_encoding(server: RunningServer) -> None:
    async with open_ws(server) as writer:
        assert (await op(writer, "gc:n", {"op": "increment", "amount": 5}))["seq"] == 1
    async with open_ws(server) as ws:
        await send_mp(ws, {"kind": "subscribe", "id": "gc:n"})
        raw = await ws.recv()
        assert isinstance(raw, bytes)
        snap = msgpack.unpackb(raw)
        assert snap["kind"] == "snapshot"
        assert (snap["ns"], snap["id"], snap["type"], snap["seq"]) == (NS, "gc:n", "gcounter", 1)
        assert snap["epoch"] and snap["state"] is not None
        assert msgpack.unpackb(await ws.recv())["kind"] == "synced"
        await send_json(ws, {"kind": "subscribe", "id": "gc:unborn"})
        raw = await ws.recv()
        assert isinstance(raw, str)
        assert json.loads(raw) == {
            "kind": "snapshot",
            "ns": NS,
            "id": "gc:unborn",
            "type": "gcounter",
            "seq": 0,
            "epoch": None,
            "state": None,
        }


async def test_op_ack_comes_after_durability(make_server: Any, tmp_path: Any) -> None:
    data_dir = tmp_path / "durable"
    server = await make_server(data_dir=data_dir)
    async with open_ws(server) as ws:
        answer = await op(ws, "rg:doc", {"op": "insert", "index": 0, "text": "hi"}, ref="r1")
        assert answer["kind"] == "ack" and answer["ref"] == "r1" and answer["seq"] == 1
        assert len(answer["ids"]) == 2  # the op's answer extras ride along
        await server.server.shutdown()
    # A fresh server on the same directory holds what was acknowledged.
    again = await make_server(data_dir=data_dir)
    async with httpx.AsyncClient(base_url=again.url) as client:
        r = await client.get(
            f"/v1/namespaces/{NS}/crdts/rg:doc", headers={"authorization": f"Bearer {ADMIN}"}
        )
    assert r.json()["text"] == "hi"


async def test_second_connection_gets_the_delta(server: RunningServer) -> None:
    async with open_ws(server) as sub, open_ws(server, mint(client_id=9)) as pub:
        await send_mp(sub, {"kind": "subscribe", "id": "or:s"})
        assert (await recv(sub))["kind"] == "snapshot"
        ack = await op(pub, "or:s", [{"op": "add", "element": "a"}, {"op": "add", "element": "b"}])
        assert ack == {"kind": "ack", "ref": 1, "seq": 2, "applied": 2}
        first, second = await recv(sub), await recv(sub)
        assert (first["kind"], first["seq"], first["client_id"]) == ("op", 1, 9)
        assert first["op"]["element"] == "a" and second["seq"] == 2


async def test_json_frames_work_end_to_end(server: RunningServer) -> None:
    async with open_ws(server) as ws:
        await send_json(ws, {"kind": "subscribe", "id": "lw:r"})
        assert json.loads(await ws.recv())["kind"] == "snapshot"
        assert json.loads(await ws.recv())["kind"] == "synced"
        await send_json(
            ws, {"kind": "op", "id": "lw:r", "op": {"op": "set", "value": [1]}, "ref": 3}
        )
        replies = [json.loads(await ws.recv()) for _ in range(2)]
        kinds = sorted(r["kind"] for r in replies)
        assert kinds == ["ack", "op"]
        ack = next(r for r in replies if r["kind"] == "ack")
        assert ack == {"kind": "ack", "ref": 3, "seq": 1, "applied": 1}
        await send_json(ws, {"kind": "ping"})
        assert json.loads(await ws.recv()) == {"kind": "pong"}


async def test_acks_come_in_order_for_pipelined_ops(server: RunningServer) -> None:
    async with open_ws(server) as ws:
        for i in range(200):
            body: Any = {"op": "increment"} if i != 50 else {"op": "nope"}
            await send_mp(ws, {"kind": "op", "id": "gc:p", "op": body, "ref": i})
        answers = [await recv(ws) for _ in range(200)]
    assert [a["ref"] for a in answers] == list(range(200))
    assert answers[50]["kind"] == "error" and answers[50]["error"] == "invalid_op"
    acks = [a["seq"] for a in answers if a["kind"] == "ack"]
    assert acks == list(range(1, 200))


async def test_duplicate_op_id_is_flagged(server: RunningServer) -> None:
    async with open_ws(server) as ws:
        first = await op(ws, "gc:d", {"op": "increment", "op_id": "x"}, ref=1)
        again = await op(ws, "gc:d", {"op": "increment", "op_id": "x"}, ref=2)
    assert first == {"kind": "ack", "ref": 1, "seq": 1, "applied": 1}
    assert again == {"kind": "ack", "ref": 2, "seq": 1, "applied": 1, "duplicate": True}


async def test_forbidden_ops_and_reads_get_errors(server: RunningServer) -> None:
    token = mint(permissions=V1Permissions(read=("gc:mine*",), write=("gc:mine*",)))
    async with open_ws(server, token) as ws:
        assert (await op(ws, "gc:mine1", {"op": "increment"}, ref="ok"))["kind"] == "ack"
        answer = await op(ws, "gc:theirs", {"op": "increment"}, ref="no")
        assert answer["kind"] == "error" and answer["error"] == "forbidden"
        assert answer["ref"] == "no" and answer["message"]
        await send_mp(ws, {"kind": "subscribe", "id": "gc:theirs", "ref": 5})
        answer = await recv(ws)
        assert answer["kind"] == "error" and answer["error"] == "forbidden"
        assert answer["ref"] == 5 and answer["id"] == "gc:theirs"
        answer = await op(ws, "gc:mine1", {"op": "increment", "client_id": 99}, ref="cid")
        assert answer["error"] == "forbidden"


async def test_malformed_messages_get_errors_and_the_connection_stays(
    server: RunningServer,
) -> None:
    cases: list[tuple[bytes | str, str, Any]] = [
        (b"\xc1", "bad_request", None),  # not msgpack
        (msgpack.packb([1, 2]), "bad_request", None),  # not a map
        ("{nope", "bad_request", None),  # not JSON
        ('"text"', "bad_request", None),  # JSON, not an object
        (msgpack.packb({"kind": "dance", "ref": 4}), "bad_request", 4),
        (msgpack.packb({"kind": "op", "op": {"op": "increment"}, "ref": 5}), "bad_request", 5),
        (msgpack.packb({"kind": "op", "id": "gc:x", "ref": 6}), "bad_request", 6),
        (
            msgpack.packb({"kind": "op", "id": "gc:x", "op": {"op": "increment"}}),
            "bad_request",
            None,
        ),
        (msgpack.packb({"kind": "op", "id": "bad/id", "op": {}, "ref": 7}), "invalid_id", 7),
        (
            msgpack.packb({"kind": "op", "id": "x", "op": {"op": "increment"}, "ref": 8}),
            "unknown_type",
            8,
        ),
        (msgpack.packb({"kind": "op", "id": "gc:x", "op": 3, "ref": 9}), "bad_request", 9),
        (
            msgpack.packb(
                {"kind": "op", "id": "or:x", "op": {"op": "add", "element": b"\x00"}, "ref": 10}
            ),
            "invalid_op",
            10,
        ),
        (msgpack.packb({"kind": "subscribe", "ref": 11}), "bad_request", 11),
        (
            msgpack.packb({"kind": "subscribe", "id": "gc:x", "since": -1, "ref": 12}),
            "bad_request",
            12,
        ),
        (
            msgpack.packb({"kind": "subscribe", "id": "gc:x", "epoch": 5, "ref": 13}),
            "bad_request",
            13,
        ),
        (msgpack.packb({"kind": "unsubscribe"}), "bad_request", None),
        (msgpack.packb({"kind": "ping", "x": msgpack.ExtType(5, b"e")}), "bad_request", None),
    ]
    async with open_ws(server) as ws:
        for data, code, ref in cases:
            await ws.send(data)
            answer = await recv(ws)
            assert answer["kind"] == "error", data
            assert answer["error"] == code, (data, answer)
            assert answer.get("ref") == ref, data
            assert isinstance(answer["message"], str)
            # The answer comes in the frame's own encoding.
        await ws.send("[1]")
        assert isinstance(await ws.recv(), str)
        await send_mp(ws, {"kind": "ping"})
        assert await recv(ws) == {"kind": "pong"}


async def test_nesting_is_bounded_like_json(make_server: Any) -> None:
    server = await make_server(json_max_depth=8)
    ok: Any = {"kind": "ping"}
    deep: Any = {"kind": "ping"}
    for _ in range(7):
        ok = {"k": ok}
    for _ in range(8):
        deep = {"k": deep}
    ok["kind"] = deep["kind"] = "ping"
    async with open_ws(server) as ws:
        await send_mp(ws, ok)
        assert await recv(ws) == {"kind": "pong"}
        await send_mp(ws, deep)
        answer = await recv(ws)
        assert answer["error"] == "bad_request" and "deeper" in answer["message"]
        await send_json(ws, deep)
        answer = await recv(ws)
        assert answer["error"] == "bad_request" and "deeper" in answer["message"]


async def test_each_op_counts_against_the_rate_limit(make_server: Any) -> None:
    server = await make_server(rate_limit=3)
    async with open_ws(server, mint()) as ws:  # the upgrade is the first request
        assert (await op(ws, "gc:r", {"op": "increment"}, ref=1))["kind"] == "ack"
        assert (await op(ws, "gc:r", {"op": "increment"}, ref=2))["kind"] == "ack"
        answer = await op(ws, "gc:r", {"op": "increment"}, ref=3)
        assert answer["kind"] == "error" and answer["error"] == "rate_limited"
        assert answer["retry_after"] >= 1
        # A ping is not counted: it still works (a subscribe is: see
        # test_ws_subscribe_rate).
        await send_mp(ws, {"kind": "ping"})
        assert await recv(ws) == {"kind": "pong"}


async def test_unsubscribe_stops_deltas(server: RunningServer) -> None:
    async with open_ws(server) as ws:
        await send_mp(ws, {"kind": "subscribe", "id": "gc:u"})
        await recv_kind(ws, "snapshot")
        await send_mp(ws, {"kind": "unsubscribe", "id": "gc:u"})
        await send_mp(ws, {"kind": "unsubscribe", "id": "gc:never"})  # silently nothing
        assert await op(ws, "gc:u", {"op": "increment"}) == {
            "kind": "ack",
            "ref": 1,
            "seq": 1,
            "applied": 1,
        }
        await send_mp(ws, {"kind": "ping"})
        assert await recv(ws) == {"kind": "pong"}  # no delta came before it


async def test_max_subscriptions_per_connection(make_server: Any) -> None:
    server = await make_server(max_subscriptions=2)
    async with open_ws(server) as ws:
        for crdt_id in ("gc:1", "gc:2", "gc:2"):  # subscribing again does not count twice
            await send_mp(ws, {"kind": "subscribe", "id": crdt_id})
            assert (await recv(ws))["kind"] == "snapshot"
        await send_mp(ws, {"kind": "subscribe", "id": "gc:3", "ref": "third"})
        answer = await recv(ws)
        assert answer["kind"] == "error" and answer["error"] == "bad_request"
        assert answer["id"] == "gc:3" and answer["ref"] == "third"
        assert "2 subscriptions" in answer["message"]
        await send_mp(ws, {"kind": "unsubscribe", "id": "gc:1"})
        await send_mp(ws, {"kind": "subscribe", "id": "gc:3"})
        assert (await recv(ws))["kind"] == "snapshot"


async def test_since_and_epoch_replay_only_the_missing_ops(server: RunningServer) -> None:
    async with open_ws(server) as ws:
        for i in range(3):
            await op(ws, "gc:h", {"op": "increment"}, ref=i)
        await send_mp(ws, {"kind": "subscribe", "id": "gc:h"})
        snap = await recv_kind(ws, "snapshot")
    assert snap["seq"] == 3
    async with open_ws(server) as ws:
        for i in range(2):
            await op(ws, "gc:h", {"op": "increment"}, ref=i)
    async with open_ws(server) as ws:
        await send_mp(ws, {"kind": "subscribe", "id": "gc:h", "since": 3, "epoch": snap["epoch"]})
        replay = [await recv(ws), await recv(ws)]
        assert [(d["kind"], d["seq"]) for d in replay] == [("op", 4), ("op", 5)]
        seen: list[dict[str, Any]] = []
        await op(ws, "gc:h", {"op": "increment"}, ref="live", skipped=seen)
        delta = seen[0] if seen else await recv(ws)
        assert (delta["kind"], delta["seq"]) == ("op", 6)
        # Up to date: nothing until the next op.
        await send_mp(ws, {"kind": "subscribe", "id": "gc:h", "since": 6, "epoch": snap["epoch"]})
        await send_mp(ws, {"kind": "ping"})
        assert await recv(ws) == {"kind": "pong"}
        # Another epoch: a snapshot.
        await send_mp(ws, {"kind": "subscribe", "id": "gc:h", "since": 2, "epoch": "other"})
        snap2 = await recv(ws)
        assert (snap2["kind"], snap2["seq"]) == ("snapshot", 6)


async def test_deleted_crdt_reaches_subscribers_and_new_life_follows(
    server: RunningServer,
) -> None:
    async with open_ws(server) as ws:
        await op(ws, "gc:z", {"op": "increment"})
        await send_mp(ws, {"kind": "subscribe", "id": "gc:z"})
        first = await recv_kind(ws, "snapshot")
        async with httpx.AsyncClient(base_url=server.url) as client:
            r = await client.delete(
                f"/v1/namespaces/{NS}/crdts/gc:z", headers={"authorization": f"Bearer {ADMIN}"}
            )
            assert r.status_code == 204
        assert await recv(ws) == {"kind": "deleted", "ns": NS, "id": "gc:z"}
        seen: list[dict[str, Any]] = []
        await op(ws, "gc:z", {"op": "increment"}, ref=2, skipped=seen)
        delta = seen[0] if seen else await recv(ws)
        assert delta["seq"] == 1 and delta["epoch"] != first["epoch"]


async def test_many_connections_run_concurrently(server: RunningServer) -> None:
    async def client(n: int) -> list[int]:
        async with open_ws(server, mint(client_id=n)) as ws:
            return [(await op(ws, f"gc:c{n}", {"op": "increment"}, ref=i))["seq"] for i in range(5)]

    results = await asyncio.gather(*(client(n) for n in range(10)))
    assert all(r == [1, 2, 3, 4, 5] for r in results)


async def test_ops_of_one_read_are_answered_each_in_order(make_server: Any) -> None:
    # One write: the server reads these ops together and applies them as one
    # run. Each still gets its own answer (an error for the bad ones), in
    # order, the pong queued among them, and only durable ops are acked.
    server = await make_server(fsync="batch")
    limited = V1Permissions(read=("*",), write=("gc:*",))
    raw = await RawWs.connect(server, mint(permissions=limited))
    bodies: list[Any] = [
        {"op": "increment"},
        {"op": "nope"},
        {"op": "increment", "op_id": "once"},
        {"op": "increment", "op_id": "once"},
    ]
    frames = b""
    for ref, body in enumerate(bodies):
        frames += client_frame(
            0x2, msgpack.packb({"kind": "op", "id": "gc:r", "op": body, "ref": ref})
        )
    frames += client_frame(0x2, msgpack.packb({"kind": "ping", "ref": "p"}))
    frames += client_frame(
        0x2, msgpack.packb({"kind": "op", "id": "lw:no", "op": {"op": "set", "value": 1}, "ref": 4})
    )
    frames += client_frame(
        0x2, msgpack.packb({"kind": "op", "id": "gc:r", "op": {"op": "increment"}, "ref": 5})
    )
    raw.send(frames)
    answers = [msgpack.unpackb((await raw.frame())[1]) for _ in range(7)]
    assert [a.get("ref") for a in answers] == [0, 1, 2, 3, "p", 4, 5]
    assert [a["kind"] for a in answers] == ["ack", "error", "ack", "ack", "pong", "error", "ack"]
    assert answers[1]["error"] == "invalid_op" and answers[5]["error"] == "forbidden"
    assert [answers[i]["seq"] for i in (0, 2, 3, 6)] == [1, 2, 2, 3]
    assert answers[3]["duplicate"] is True
    assert server.app.store.stats.records_written == 3
    raw.writer.close()

"""Every helper through the client against the real server, then read."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest

from syncd.client import (
    AsyncClient,
    Client,
    ServiceError,
    TransportError,
    new_op_id,
    ops,
    with_retries,
    with_retries_sync,
)
from tests.client.conftest import NS, make_token
from tests.conftest import RunningServer


@pytest.fixture
async def client(server: RunningServer) -> Any:
    async with AsyncClient(server.url, make_token(7), NS) as c:
        yield c


async def test_counters(client: AsyncClient) -> None:
    answer = await client.gcounter_increment("visits", 3)
    assert answer == {"ok": True, "seq": 1, "applied": 1}
    await client.gcounter_increment("visits")
    view = await client.read("visits")
    assert view is not None
    assert (view["type"], view["seq"], view["value"], view["counts"]) == (
        "gcounter",
        2,
        4,
        {"7": 4},
    )
    await client.pncounter_increment("balance", 10)
    await client.pncounter_decrement("balance", 4)
    await client.pncounter_decrement("balance")
    view = await client.read("balance")
    assert view is not None and view["value"] == 5 and view["type"] == "pncounter"


async def test_orset_and_register(client: AsyncClient) -> None:
    await client.orset_add("cart", {"sku": 1})
    await client.orset_add("cart", "b")
    await client.orset_remove("cart", "b")
    await client.orset_remove("cart", "never-there")  # a successful no-op
    view = await client.read("cart")
    assert view is not None and view["value"] == [{"sku": 1}] and view["seq"] == 4
    await client.lwwregister_set("title", "one")
    answer = await client.lwwregister_set("title", {"v": 2}, return_state=True)
    assert answer["state"]["value"] == {"v": 2}
    await client.lwwregister_set("title", "old", timestamp=1)  # loses to the later write
    view = await client.read("title")
    assert view is not None and view["value"] == {"v": 2} and view["client_id"] == 7


async def test_presence(client: AsyncClient) -> None:
    await client.presence_update("room", {"cursor": 3}, ttl_ms=60_000)
    view = await client.read("room")
    assert view is not None and view["value"] == {"7": {"cursor": 3}}
    await client.presence_update("room")  # a heartbeat keeps the data
    view = await client.read("room")
    assert view is not None and view["value"] == {"7": {"cursor": 3}}
    await client.presence_leave("room")
    view = await client.read("room")
    assert view is not None and view["value"] == {}


async def test_rga(client: AsyncClient) -> None:
    first = await client.rga_insert("doc", index=0, text="hello")
    assert len(first["ids"]) == 5
    await client.rga_insert("doc", after=first["ids"][-1], text="!")
    await client.rga_insert("doc", after=None, text=">")
    await client.rga_delete("doc", index=1, count=2)  # "he"
    await client.rga_delete("doc", ids=[first["ids"][4]])  # "o"
    view = await client.read("doc")
    assert view is not None and view["text"] == ">ll!"
    values = await client.rga_insert("list", index=0, values=[1, {"a": 2}])
    assert len(values["ids"]) == 2
    view = await client.read("list")
    assert view is not None and view["value"] == [1, {"a": 2}]


async def test_tree(client: AsyncClient) -> None:
    await client.tree_add("outline", "a", data={"t": "A"})
    await client.tree_add("outline", "b", "a", pos="1")
    await client.tree_add("outline", "c", data={"t": "C"}, pos="0")
    await client.tree_move("outline", "c", "a", pos="0")
    await client.tree_update("outline", "a", {"t": "A2"})
    await client.tree_delete("outline", "b")
    view = await client.read("outline")
    assert view is not None
    assert view["value"] == {
        "id": "root",
        "data": {},
        "children": [
            {
                "id": "a",
                "data": {"t": "A2"},
                "children": [{"id": "c", "data": {"t": "C"}, "children": []}],
            }
        ],
    }
    with pytest.raises(ServiceError) as info:
        await client.tree_move("outline", "a", "c")
    assert (info.value.status, info.value.code) == (409, "cycle")


async def test_read_unknown_and_refusals(client: AsyncClient, server: RunningServer) -> None:
    assert await client.read("nothing-here") is None
    assert await client.read_state("nothing-here") is None
    with pytest.raises(ServiceError) as info:
        await client.fetch("nothing-here")
    assert (info.value.status, info.value.code) == (404, "not_found")
    await client.gcounter_increment("gc:c")
    with pytest.raises(ServiceError) as info:
        await client.orset_add("gc:c", 1)
    assert (info.value.status, info.value.code) == (409, "type_mismatch")
    with pytest.raises(ServiceError) as info:
        await client.gcounter_increment("gc:c", 0)
    assert info.value.code == "invalid_op" and not info.value.retryable
    reader = AsyncClient(server.url, make_token(8, write=()), NS)
    assert await reader.read("gc:c") is not None
    with pytest.raises(ServiceError) as info:
        await reader.gcounter_increment("gc:c")
    assert info.value.status == 403
    # read: None only for a CRDT that does not exist; a refusal raises, so a
    # missing permission is not taken for a missing CRDT.
    outsider = AsyncClient(server.url, make_token(9, read=("x*",)), NS)
    for call in (outsider.read, outsider.read_state):
        with pytest.raises(ServiceError) as info:
            await call("gc:c")
        assert (info.value.status, info.value.code) == (403, "forbidden")
    await outsider.aclose()
    await reader.aclose()


async def test_read_state_and_batch(client: AsyncClient) -> None:
    answer = await client.batch(
        "cart", [ops.orset_add("a"), ops.orset_add("b"), ops.orset_remove("a")], return_state=True
    )
    assert (answer["seq"], answer["applied"], answer["state"]["value"]) == (3, 3, ["b"])
    state = await client.read_state("cart")
    assert state is not None and state["seq"] == 3 and "state" in state and "value" not in state
    with pytest.raises(ValueError):
        await client.batch("cart", [])
    with pytest.raises(ServiceError):  # all or none
        await client.batch("cart", [ops.orset_add("c"), ops.gcounter_increment()])
    view = await client.read("cart")
    assert view is not None and view["value"] == ["b"] and view["seq"] == 3


async def test_op_id_applies_once(client: AsyncClient) -> None:
    key = new_op_id()
    first = await client.gcounter_increment("n", 5, op_id=key)
    again = await client.gcounter_increment("n", 5, op_id=key)
    assert again["duplicate"] is True and again["seq"] == first["seq"]
    answer = await client.apply_retrying(
        "n", [ops.gcounter_increment(1), ops.gcounter_increment(2)], op_id="k"
    )
    repeat = await client.apply_retrying(
        "n", [ops.gcounter_increment(1), ops.gcounter_increment(2)], op_id="k"
    )
    assert repeat["duplicate"] is True and repeat["seq"] == answer["seq"]
    view = await client.read("n")
    assert view is not None and view["value"] == 8


async def test_with_retries_same_op_id_until_success(client: AsyncClient) -> None:
    seen: list[str] = []
    delays: list[float] = []

    async def flaky(op_id: str) -> Any:
        seen.append(op_id)
        answer = await client.gcounter_increment("r", 2, op_id=op_id)
        if len(seen) < 3:
            raise TransportError("the answer was lost")  # after the service applied it
        return answer

    async def sleep(delay: float) -> None:
        delays.append(delay)

    answer = await with_retries(flaky, sleep=sleep)
    assert len(set(seen)) == 1 and len(seen) == 3 and len(delays) == 2
    assert answer["duplicate"] is True
    view = await client.read("r")
    assert view is not None and view["value"] == 2  # applied once


async def test_with_retries_gives_up_and_skips_final_errors() -> None:
    calls: list[str] = []

    async def down(op_id: str) -> Any:
        calls.append(op_id)
        raise ServiceError(503, "unavailable", "store down")

    async def no_sleep(_: float) -> None:
        return None

    with pytest.raises(ServiceError):
        await with_retries(down, attempts=3, sleep=no_sleep)
    assert len(calls) == 3

    async def forbidden(op_id: str) -> Any:
        calls.append(op_id)
        raise ServiceError(403, "forbidden", "no")

    calls.clear()
    with pytest.raises(ServiceError):
        await with_retries(forbidden, attempts=3, sleep=no_sleep)
    assert len(calls) == 1
    with pytest.raises(ValueError):
        await with_retries(forbidden, attempts=0)


async def test_retry_after_is_honoured_up_to_a_bound() -> None:
    delays: list[float] = []

    async def limited(op_id: str) -> Any:
        if len(delays) < 2:
            raise ServiceError(429, "rate_limited", "too many requests", retry_after=1000.0)
        return "ok"

    async def sleep(delay: float) -> None:
        delays.append(delay)

    assert await with_retries(limited, sleep=sleep) == "ok"
    assert delays == [10.0, 10.0]


async def test_connection_refused_is_a_transport_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    async with AsyncClient(f"http://127.0.0.1:{port}", make_token(), NS) as client:
        with pytest.raises(TransportError):
            await client.read("x")
        with pytest.raises(TransportError):
            await client.apply_retrying("x", ops.gcounter_increment(), attempts=2)


async def test_list_delete_me(server: RunningServer, client: AsyncClient) -> None:
    for name in ("gc:a", "gc:b", "or:c"):
        await client.apply(
            name, {"op": "increment"} if name.startswith("gc") else {"op": "add", "element": 1}
        )
    page = await client.list_crdts(prefix="gc:", limit=1)
    assert [item["id"] for item in page["crdts"]] == ["gc:a"] and page["next"] == "gc:a"
    page = await client.list_crdts(prefix="gc:", cursor=page["next"])
    assert [item["id"] for item in page["crdts"]] == ["gc:b"]
    assert (await client.me())["client_id"] == 7
    with pytest.raises(ServiceError) as info:
        await client.delete_crdt("gc:a")
    assert info.value.status == 403
    async with AsyncClient(server.url, make_token(1, admin=True), NS) as admin:
        await admin.delete_crdt("gc:a")
        assert await admin.read("gc:a") is None
        with pytest.raises(ServiceError):
            await admin.delete_crdt("gc:a")


async def test_sync_client_every_helper(server: RunningServer) -> None:
    # The server runs on this thread's loop; the blocking client on another thread.
    await asyncio.to_thread(_sync_session, server.url)


def _sync_session(url: str) -> None:
    with Client(url, make_token(5), NS) as c:
        c.gcounter_increment("s-g", 2)
        c.pncounter_increment("s-p", 5)
        c.pncounter_decrement("s-p", 2)
        c.orset_add("s-o", "x")
        c.orset_remove("s-o", "x")
        c.orset_add("s-o", "y")
        c.lwwregister_set("s-l", [1, 2])
        c.presence_update("s-pr", {"here": True})
        c.presence_leave("s-pr")
        ids = c.rga_insert("s-r", index=0, text="abc")["ids"]
        c.rga_delete("s-r", ids=[ids[0]])
        c.rga_delete("s-r", index=0)
        c.tree_add("s-t", "n1")
        c.tree_add("s-t", "n2")
        c.tree_move("s-t", "n2", "n1")
        c.tree_update("s-t", "n1", {"x": 1})
        c.tree_delete("s-t", "n2")
        values = {
            name: (c.read(name) or {}).get("value")
            for name in ("s-g", "s-p", "s-o", "s-l", "s-pr", "s-r")
        }
        assert values == {"s-g": 2, "s-p": 3, "s-o": ["y"], "s-l": [1, 2], "s-pr": {}, "s-r": ["c"]}
        tree = c.read("s-t")
        assert tree is not None and tree["value"]["children"] == [
            {"id": "n1", "data": {"x": 1}, "children": []}
        ]
        assert c.read("nothing") is None and c.read_state("nothing") is None
        token = make_token(5)
        forged_token = token[:-2] + ("A" if token[-2] != "A" else "B") + token[-1]
        with Client(url, forged_token, NS) as forged:  # a bad signature: 401
            with pytest.raises(ServiceError) as info:
                forged.read("s-g")
            assert info.value.status == 401
        assert c.read_state("s-g") is not None
        answer = c.batch(
            "s-g", [ops.gcounter_increment(1), ops.gcounter_increment(1)], return_state=True
        )
        assert answer["state"]["value"] == 4
        first = c.apply_retrying("s-g", ops.gcounter_increment(1), op_id="same")
        assert (
            c.apply_retrying("s-g", ops.gcounter_increment(1), op_id="same")["seq"] == first["seq"]
        )
        assert [item["id"] for item in c.list_crdts(prefix="s-g")["crdts"]] == ["s-g"]
        assert c.me()["client_id"] == 5
        with pytest.raises(ServiceError):
            c.fetch("nothing")
    delays: list[float] = []

    def flaky(op_id: str) -> str:
        if not delays:
            raise TransportError("lost")
        return op_id

    assert with_retries_sync(flaky, op_id="k", sleep=delays.append) == "k"
    assert len(delays) == 1


def test_retry_after_seconds_or_an_http_date() -> None:
    """A proxy in front of the service may send Retry-After as a date; NaN
    and garbage are no wait at all, not a wait of NaN."""
    from syncd.client._http import retry_after_s

    now = 1_900_000_000.0
    assert retry_after_s("3") == 3.0 and retry_after_s("-2") == 0.0
    assert retry_after_s(email_date(now + 10), now=now) == 10.0
    assert retry_after_s(email_date(now - 10), now=now) == 0.0
    for useless in (None, "soon", "nan", "inf", ""):
        assert retry_after_s(useless) is None, useless


def email_date(epoch_s: float) -> str:
    import email.utils

    return email.utils.formatdate(epoch_s, usegmt=True)

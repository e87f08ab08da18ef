"""A Yjs document at SERVICE_MAX_CRDT_BYTES can still be trimmed over Yjs: an
update that only deletes items the document holds passes the limit, within
a bounded headroom (syncd.quotas.DELETION_HEADROOM_DIVISOR), while one with
new items is refused, on a real server with pycrdt providers."""

from __future__ import annotations

import asyncio
import base64
import random
from typing import Any

import httpx
import pytest
import websockets
from pycrdt import Doc, Map, Text, create_sync_message, create_update_message

from syncd.crdt.engine import Engine, state_bytes
from syncd.crdt.ydoc import YDoc, deletion_ranges
from syncd.errors import ApiError
from syncd.quotas import DELETION_RANGE_GROWTH, REMEASURE_MIN_BYTES, Limits, Quotas
from syncd.store.catalogue import Usage
from tests.conftest import RunningServer
from tests.http.support import issue

CRDT = "/v1/namespaces/app/crdts/yd:notes"
LIMIT = 4096
WAIT_S = 5.0


def _b64(update: bytes) -> str:
    return base64.b64encode(update).decode()


async def _fill(client: httpx.AsyncClient, headers: dict[str, str]) -> Doc[Any]:
    """The document written until the next insertion is refused (413), and
    a provider's copy of it."""
    doc: Doc[Any] = Doc()
    for size in (400, 100, 20, 1):  # each until refused: full to a few bytes
        while True:
            text = doc.get("content", type=Text)
            update = _change(doc, lambda t=text, n=size: t.insert(len(t), "y" * n))
            body = {"op": "update", "update": _b64(update)}
            r = await client.post(f"{CRDT}/ops", headers=headers, json=body)
            if r.status_code == 413:
                assert r.json()["error"] == "crdt_too_large"
                doc = _copy(client, await client.get(CRDT, headers=headers))
                break
            assert r.status_code == 200, r.text
    return doc


def _copy(client: httpx.AsyncClient, read: httpx.Response) -> Doc[Any]:
    doc: Doc[Any] = Doc()
    doc.apply_update(base64.b64decode(read.json()["value"]))
    return doc


def _change(doc: Doc[Any], edit: Any) -> bytes:
    before = doc.get_state()
    edit()
    return doc.get_update(before)


async def _send(ws: Any, update: bytes) -> None:
    await ws.send(create_update_message(update))


async def _closed(ws: Any) -> Any:
    with pytest.raises(websockets.ConnectionClosed) as closed:
        while True:
            await asyncio.wait_for(ws.recv(), WAIT_S)
    return closed.value.rcvd


async def _seq_reaches(client: httpx.AsyncClient, headers: dict[str, str], seq: int) -> Any:
    for _ in range(250):
        read = (await client.get(CRDT, headers=headers)).json()
        if read["seq"] >= seq:
            return read
        await asyncio.sleep(0.02)
    raise AssertionError(f"seq {seq} never reached")


async def test_a_document_at_its_limit_is_trimmed_over_yjs(make_server: Any) -> None:
    """Before: the deletion was refused like any update (1007
    crdt_too_large), so a full document could never shrink over Yjs."""
    server: RunningServer = await make_server(max_crdt_bytes=LIMIT, rate_limit=100_000)
    async with httpx.AsyncClient(base_url=server.url) as client:
        headers = await issue(client)
        token = headers["authorization"].removeprefix("Bearer ")
        url = f"ws://127.0.0.1:{server.port}/v1/namespaces/app/yjs/notes?token={token}"
        doc = await _fill(client, headers)
        seq = (await client.get(CRDT, headers=headers)).json()["seq"]
        text = doc.get("content", type=Text)

        # New items at the limit: refused, as before.
        async with websockets.connect(url) as ws:
            await ws.send(create_sync_message(doc))
            await _send(ws, _change(doc, lambda: text.insert(0, "z" * 100)))
            rcvd = await _closed(ws)
        assert rcvd.code == 1007 and "crdt_too_large" in rcvd.reason
        doc = _copy(client, await client.get(CRDT, headers=headers))
        text = doc.get("content", type=Text)

        async with websockets.connect(url) as ws:
            await ws.send(create_sync_message(doc))

            def trim() -> None:
                with doc.transaction():  # five ranges: past what a character counts
                    fifth = len(text) // 5
                    for k in range(4, -1, -1):
                        del text[k * fifth : k * fifth + fifth // 2]

            deletion = _change(doc, trim)
            assert deletion[:1] == b"\x00"  # no items: a delete set alone
            await _send(ws, deletion)
            read = await _seq_reaches(client, headers, seq + 1)
            assert str(
                _copy(client, await client.get(CRDT, headers=headers)).get("content", type=Text)
            ) == str(text)
            assert read["seq"] == seq + 1
            # Trimmed, it takes new text again.
            await _send(ws, _change(doc, lambda: text.insert(0, "again")))
            await _seq_reaches(client, headers, seq + 2)
            assert ws.close_code is None


async def test_at_the_limit_deletions_of_what_it_lacks_or_with_items_are_refused(
    make_server: Any,
) -> None:
    server: RunningServer = await make_server(max_crdt_bytes=LIMIT, rate_limit=100_000)
    async with httpx.AsyncClient(base_url=server.url) as client:
        headers = await issue(client)
        doc = await _fill(client, headers)
        seq = (await client.get(CRDT, headers=headers)).json()["seq"]
        # A deletion of items the document does not have (they would wait in
        # Yrs's pending delete set, which no measure sees).
        other: Doc[Any] = Doc()
        other_text = other.get("content", type=Text)
        other_text.insert(0, "q" * 50)

        def every_other() -> None:
            with other.transaction():
                for i in range(48, -1, -2):
                    del other_text[i : i + 1]

        ghost = _change(other, every_other)
        assert ghost[:1] == b"\x00"
        # A deletion with an item riding along.
        text = doc.get("content", type=Text)
        meta = doc.get("meta", type=Map)

        def both() -> None:
            with doc.transaction():
                del text[0:10]
                meta["k"] = "v" * 40

        mixed = _change(doc, both)
        for update in (ghost, mixed):
            body = {"op": "update", "update": _b64(update)}
            r = await client.post(f"{CRDT}/ops", headers=headers, json=body)
            assert r.status_code == 413 and r.json()["error"] == "crdt_too_large", r.text
        assert (await client.get(CRDT, headers=headers)).json()["seq"] == seq


def test_a_deletion_grows_a_state_by_at_most_its_ranges_bound() -> None:
    """Deleting inside an item splits it: the state can grow (every other
    character of one insertion: about 14 times). Per range of the update's
    delete set it grows by DELETION_RANGE_GROWTH at most, with the longest
    client ids."""
    rng = random.Random(5)
    engine = Engine()
    quotas = Quotas(Limits(), engine)
    for round_ in range(12):
        crdt_id = f"yd:d{round_}"
        writer: Doc[Any] = Doc(client_id=2**53 - 1 - round_)
        text = writer.get("t", type=Text)
        for _ in range(rng.randint(1, 6)):
            text.insert(rng.randint(0, len(text)), "x" * rng.randint(1, 600))
        body = {"op": "update", "update": _b64(writer.get_update())}
        engine.apply(engine.plan("ns", crdt_id, body), 1)
        entry = engine.get("ns", crdt_id)
        assert entry is not None
        for step in range(4):
            before_state = state_bytes(entry.crdt.state())

            def delete(w: Doc[Any] = writer, t: Text = text) -> None:
                with w.transaction():
                    every = rng.choice([2, 3, 7, 50])
                    for i in range(len(t) // every - 1, -1, -1):
                        if rng.random() < 0.7:
                            del t[i * every : i * every + 1]

            update = _change(writer, delete)
            ydoc = entry.crdt
            assert isinstance(ydoc, YDoc)
            ranges = deletion_ranges(_b64(update), ydoc.state_vector(), 10**9)
            assert ranges is not None
            body = {"op": "update", "update": _b64(update)}
            plan = engine.plan("ns", crdt_id, body)
            engine.apply(plan, 1)
            grown = state_bytes(entry.crdt.state()) - before_state
            assert grown <= ranges * DELETION_RANGE_GROWTH, (round_, step, grown, ranges)
        assert quotas.limits.max_crdt_bytes  # the default limit applies


def test_a_deletion_past_the_namespace_quota_passes_within_its_headroom() -> None:
    """The namespace has a headroom of its own (a sixteenth of
    SERVICE_NAMESPACE_MAX_BYTES, REMEASURE_MIN_BYTES at least): a deletion's
    bound (its ranges at DELETION_RANGE_GROWTH) passes a full namespace
    within it, and is refused past it. Before: refused at the quota."""
    engine = Engine()
    writer: Doc[Any] = Doc()
    text = writer.get("t", type=Text)
    text.insert(0, "x" * 3000)
    engine.apply(
        engine.plan("ns", "yd:a", {"op": "update", "update": _b64(writer.get_update())}), 1
    )
    entry = engine.get("ns", "yd:a")
    assert entry is not None
    held = state_bytes(entry.crdt.state())
    entry.state_bytes = held

    def delete() -> None:
        with writer.transaction():
            for i in range(2000, -1, -500):
                del text[i : i + 10]

    body = {"op": "update", "update": _b64(_change(writer, delete))}
    plan = engine.plan("ns", "yd:a", body)
    at_limit = Quotas(Limits(max_crdt_bytes=held), engine)
    assert at_limit.check(plan, None) >= 5 * DELETION_RANGE_GROWTH
    room = Usage(1, held, 0)
    roomy = Quotas(Limits(max_crdt_bytes=held, namespace_max_bytes=held + 10_000), engine)
    assert roomy.check(plan, room) >= 5 * DELETION_RANGE_GROWTH
    both = Quotas(Limits(max_crdt_bytes=held, namespace_max_bytes=held + 100), engine)
    assert both.check(plan, room) == 5 * DELETION_RANGE_GROWTH
    full = Quotas(Limits(max_crdt_bytes=0, namespace_max_bytes=held + 100), engine)
    assert full.check(plan, room) == 5 * DELETION_RANGE_GROWTH
    others = Usage(2, held + 100 + REMEASURE_MIN_BYTES - 4 * DELETION_RANGE_GROWTH, 0)
    with pytest.raises(ApiError) as refused:
        full.check(plan, others)  # room for four ranges past the quota, not five
    assert refused.value.code == "quota_exceeded"
    # Growth is refused at the quota, as ever.
    grow = _change(writer, lambda: text.insert(0, "g"))
    with pytest.raises(ApiError) as refused:
        full.check(engine.plan("ns", "yd:a", {"op": "update", "update": _b64(grow)}), room)
    assert refused.value.code == "quota_exceeded"

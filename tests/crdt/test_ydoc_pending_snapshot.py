"""A Yjs update that waits for its dependency is kept by the snapshot.

The snapshot of a document (the engine's entry map, what every store
writes as a snapshot or a history checkpoint) held the merged document
alone, and Yrs leaves what it holds as pending out of that: a document
snapshotted while an update waited and read back (a restart, or after it
left memory) had lost that update, acknowledged and durable, and when its
dependency came it was not integrated. The snapshot now carries the
pending updates beside the document, applied again after loading it.
"""

from __future__ import annotations

import base64
import contextlib
import random
from typing import Any, Final

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pycrdt import Doc, Text

from syncd.crdt.base import Base, OpContext
from syncd.crdt.engine import Engine
from syncd.crdt.ydoc import MAX_RETRIED_PENDING, YDoc, root_view
from syncd.errors import ApiError
from tests.crdt.crdt_testlib import dependent_updates
from tests.crdt.test_ydoc import (
    STUCK_DELIVERY,
    STUCK_SEED,
    _edits,
    _meaning,
    never_update,
    two_writers,
)

NS = "n"
ID = "yd:notes"
CTX = OpContext(client_id=1, now_ms=1, seq=1)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _op(update: bytes) -> dict[str, Any]:
    return {"op": "update", "update": _b64(update)}


def _write(engine: Engine, update: bytes, client_id: int = 1) -> None:
    engine.apply(engine.plan(NS, ID, _op(update)), client_id)


def _reloaded(engine: Engine) -> Engine:
    """A new engine with ``engine``'s document read back from its snapshot
    entry, as a store writes and reads it (msgpack)."""
    entry = engine.export_one(NS, ID)
    assert entry is not None
    again = Engine()
    again.import_entry(msgpack.unpackb(msgpack.packb(entry, use_bin_type=True), raw=False))
    return again


def _ydoc(engine: Engine) -> YDoc:
    entry = engine.get(NS, ID)
    assert entry is not None and isinstance(entry.crdt, YDoc)
    return entry.crdt


def _text(ydoc: YDoc, root: str = "content") -> str:
    return str(root_view(ydoc.encoded(), root, "text"))


def test_an_update_that_waits_survives_the_snapshot_and_integrates_after() -> None:
    _, first, second = dependent_updates()
    live = Engine()
    _write(live, second)  # its dependency has not arrived: it waits
    held = _ydoc(live).pending_bytes()
    assert held > 0 and _text(_ydoc(live)) == ""
    loaded = _reloaded(live)
    # Tracked again as waiting: the quotas count it, a joiner is sent it.
    assert _ydoc(loaded).pending_bytes() == held
    joiner: Doc[Any] = Doc()
    joiner.apply_update(_ydoc(loaded).diff(b"\x00"))
    joiner.apply_update(first)
    assert str(joiner.get("content", type=Text)) == "hello world"
    # The dependency comes after the reload: both are in the document, as in
    # one that never left memory.
    for engine in (live, loaded):
        _write(engine, first)
    assert _text(_ydoc(loaded)) == _text(_ydoc(live)) == "hello world"
    assert _ydoc(loaded).state_vector() == _ydoc(live).state_vector()
    assert _ydoc(loaded).pending_bytes() == 0


def test_a_snapshot_without_waiting_updates_is_the_document_alone() -> None:
    """Most snapshots: nothing waits, and the entry's state is what it was
    (so snapshots written before, without the field, load as ever)."""
    _, first, second = dependent_updates()
    live = Engine()
    for update in (first, second):
        _write(live, update)
    entry = live.export_one(NS, ID)
    assert entry is not None and entry["state"] == {"update": _b64(_ydoc(live).encoded())}
    assert _text(_ydoc(_reloaded(live))) == "hello world"


CUT_DELIVERIES: Final = 12
"""Random deliveries of two writers' updates, snapshotted and read back at
every point, beside the one where Yrs alone keeps an update waiting."""


def test_a_snapshot_at_any_point_of_a_delivery_ends_as_the_document_in_order() -> None:
    """Updates delivered out of order, the document snapshotted and read back
    after any of them: once all came, the same document as one that never
    left memory (including the delivery where Yrs alone keeps one waiting,
    which syncd applies again: its retry works on what was read back)."""
    cases = [(two_writers(len(STUCK_DELIVERY), STUCK_SEED), list(STUCK_DELIVERY))]
    for seed in range(CUT_DELIVERIES):
        rng = random.Random(seed)
        updates = two_writers(rng.randint(3, 8), seed)
        delivery = list(range(len(updates)))
        rng.shuffle(delivery)
        cases.append((updates, delivery))
    for updates, delivery in cases:
        in_order: Doc[Any] = Doc()
        for update in updates:
            in_order.apply_update(update)
        expected = str(in_order.get("content", type=Text))
        for cut in range(1, len(delivery)):
            engine = Engine()
            for i in delivery[:cut]:
                _write(engine, updates[i])
            engine = _reloaded(engine)
            for i in delivery[cut:]:
                _write(engine, updates[i])
            ydoc = _ydoc(engine)
            assert _text(ydoc) == expected, (delivery, cut)
            assert ydoc.state_vector() == in_order.get_state(), (delivery, cut)
            assert ydoc.pending_bytes() == 0, (delivery, cut)


def test_past_max_retried_pending_every_waiting_update_is_kept() -> None:
    """More updates wait than syncd applies again (MAX_RETRIED_PENDING): the
    snapshot keeps them all, in their order, as the quotas count them."""
    _, first, second = dependent_updates()
    live = Engine()
    _write(live, second)
    for i in range(MAX_RETRIED_PENDING + 1):
        _write(live, never_update(i))
    loaded = _reloaded(live)
    assert _ydoc(loaded).pending_bytes() == _ydoc(live).pending_bytes()
    entry = loaded.export_one(NS, ID)
    assert entry is not None and len(entry["state"]["pending"]) == MAX_RETRIED_PENDING + 2
    _write(loaded, first)
    assert _text(_ydoc(loaded)) == "hello world"


def test_a_batch_keeps_what_waits() -> None:
    """A batch of ops applies them to a copy of the document that then
    replaces it: the copy had left what waits out, and so the document."""
    _, first, second = dependent_updates()
    _, other, _ = dependent_updates(client_id=99)
    engine = Engine()
    _write(engine, second)
    engine.apply(engine.plan(NS, ID, [_op(other), _op(b"\x00\x00")]), 1)
    assert _ydoc(engine).pending_bytes() > 0
    _write(engine, first)
    assert _text(_ydoc(engine)) in ("hello worldhello", "hellohello world")
    # A merge takes what waits in the other document too.
    waiting = YDoc.new()
    waiting.apply_delta(_op(second))
    merged = YDoc.new()
    merged.merge(waiting)
    merged.apply_delta(_op(first))
    assert _text(merged) == "hello world"


def test_a_failed_update_after_a_snapshot_keeps_what_waits() -> None:
    """The snapshot folds the document into a new base to rebuild from; an
    update Yrs then fails on rebuilds the document from that base. What
    waited was in neither and was lost from memory too."""
    _, first, second = dependent_updates()
    engine = Engine()
    _write(engine, second)
    assert engine.export_one(NS, ID) is not None  # the snapshot folds
    ydoc = _ydoc(engine)
    ydoc._rebuild()  # what a failed apply does
    assert ydoc.pending_bytes() > 0
    _write(engine, first)
    assert _text(ydoc) == "hello world"


def test_the_snapshot_of_a_revert_base_keeps_what_waits() -> None:
    """A revert reads the base from a history checkpoint. A person's " world"
    waits for their "hello" when the checkpoint is taken; in the window,
    "hello" comes and a bot deletes " world" (marked). Reverting the bot
    brings " world" back; from a checkpoint without it, the bot's deletion
    had nothing to undo."""
    person, first, second = dependent_updates()
    bot: Doc[Any] = Doc(client_id=88)
    bot.apply_update(person.get_update())
    seen = bot.get_state()
    del bot.get("content", type=Text)[5:11]
    deletion = bot.get_update(seen)
    engine = Engine()
    _write(engine, second)
    checkpoint = engine.export_one(NS, ID)
    assert checkpoint is not None
    _write(engine, first)
    _write(engine, deletion, client_id=2)
    ydoc = _ydoc(engine)
    assert _text(ydoc) == "hello"
    base = Base(YDoc, checkpoint["state"], [])
    ops = ydoc.revert_ops([(_op(first), False), (_op(deletion), True)], base)
    assert ops
    for op in ops:
        _write(engine, base64.b64decode(op["update"]), client_id=9)
    assert _text(ydoc) == "hello world"
    # The base read as a document (?at=, a revert of other types) holds it too.
    built = base.crdt()
    assert isinstance(built, YDoc) and built.pending_bytes() > 0


HELD_BACK_CASES: Final = 12
"""Random documents with updates held back (so that later ones wait), and
sometimes a damaged update as well."""


@settings(max_examples=HELD_BACK_CASES, deadline=None)
@given(data=st.data())
def test_a_snapshot_reads_back_as_the_document_while_updates_wait(data: st.DataObject) -> None:
    """The document read back from its snapshot (or copied, as a batch
    does) is the one snapshotted, and goes on as it does. After a damaged
    update Yrs accepted, Yrs can disagree with itself (docs/yjs.md: a
    document built from the merged update is not laid out as one built
    update by update): such a snapshot still loads and reads, and the
    updates after it are applied or refused with a 400."""
    updates = _edits(24, seed=data.draw(st.integers(0, 3)))
    held = set(data.draw(st.lists(st.integers(0, 19), max_size=4), label="held"))
    ydoc = YDoc.new()
    for i in range(20):
        if i not in held:
            ydoc.apply_delta(_op(updates[i]))
    damaged = data.draw(st.booleans(), label="damaged")
    if damaged:
        source = bytearray(data.draw(st.sampled_from(updates)))
        at = data.draw(st.integers(0, len(source) - 1))
        source[at] = data.draw(st.integers(0, 255))
        with contextlib.suppress(ApiError):
            ydoc.apply_op({"op": "update", "update": _b64(bytes(source))}, CTX)
    state = msgpack.unpackb(msgpack.packb(ydoc.snapshot_state(), use_bin_type=True))
    copies = [YDoc.from_state(state), ydoc.clone()]
    for copy in copies:
        assert damaged or (
            _meaning(copy) == _meaning(ydoc) and copy.pending_bytes() == ydoc.pending_bytes()
        )
    for i in [*sorted(held), 20, 21, 22, 23]:
        for doc in (ydoc, *copies):
            try:
                doc.apply_delta(_op(updates[i]))
            except ApiError as exc:
                assert damaged and exc.status == 400
    for copy in copies:
        assert isinstance(_meaning(copy), tuple)
        assert damaged or _meaning(copy) == _meaning(ydoc)


@pytest.mark.parametrize(
    "pending",
    [3, "AAA=", [3], ["not base64!"], [_b64(b"\xff\xff\xff")]],
)
def test_a_state_whose_waiting_updates_do_not_read_is_refused(pending: Any) -> None:
    state = {"update": _b64(Doc().get_update()), "pending": pending}
    with pytest.raises(ApiError) as refused:
        YDoc.from_state(state)
    assert refused.value.status == 400 and "state.pending" in refused.value.message

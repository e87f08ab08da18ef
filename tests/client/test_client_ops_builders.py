"""Op builders and the resume/backoff/SSE logic: pure, no server."""

from __future__ import annotations

import base64

import msgpack
import pytest

from syncd.client import ops
from syncd.client.resume import Backoff, ResumeTracker, Verdict
from syncd.client.sse import SseEvent, SseParser, SseProtocolError, decode_delta, decode_end


def test_builders_name_the_type_and_carry_op_id() -> None:
    assert ops.gcounter_increment(3, op_id="k") == {
        "op": "increment",
        "type": "gcounter",
        "amount": 3,
        "op_id": "k",
    }
    assert ops.pncounter_decrement() == {"op": "decrement", "type": "pncounter", "amount": 1}
    assert ops.lwwregister_set({"a": 1}) == {"op": "set", "type": "lwwregister", "value": {"a": 1}}
    assert ops.lwwregister_set(None, timestamp=5)["timestamp"] == 5
    assert ops.presence_update() == {"op": "update", "type": "presence"}
    assert ops.rga_insert(after=None, text="x") == {
        "op": "insert",
        "type": "rga",
        "after": None,
        "text": "x",
    }
    assert ops.rga_delete(ids=["1@1"]) == {"op": "delete", "type": "rga", "ids": ["1@1"]}
    assert ops.tree_add("n") == {"op": "add", "type": "tree", "id": "n", "parent": "root"}


@pytest.mark.parametrize(
    "kwargs",
    [
        {"text": "x"},
        {"index": 0, "after": None, "text": "x"},
        {"index": 0},
        {"index": 0, "text": "a", "values": [1]},
    ],
)
def test_rga_insert_needs_one_place_and_one_content(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        ops.rga_insert(**kwargs)  # type: ignore[arg-type]


def test_rga_delete_needs_index_or_ids() -> None:
    with pytest.raises(ValueError):
        ops.rga_delete()
    with pytest.raises(ValueError):
        ops.rga_delete(ids=["1@1"], count=2)


def _op(seq: int, epoch: str = "e1", crdt_id: str = "a") -> dict[str, object]:
    return {"kind": "op", "id": crdt_id, "seq": seq, "epoch": epoch}


def _snap(seq: int, epoch: str | None = "e1", crdt_id: str = "a") -> dict[str, object]:
    return {"kind": "snapshot", "id": crdt_id, "seq": seq, "epoch": epoch}


def test_tracker_delivers_in_order_and_skips_repeats() -> None:
    t = ResumeTracker(["a"])
    assert t.resume_from("a") is None
    assert t.accept(_op(1)) is Verdict.SKIP  # nothing before the first snapshot
    assert t.accept(_snap(3)) is Verdict.DELIVER
    assert t.accept(_op(3)) is Verdict.SKIP
    assert t.accept(_op(4)) is Verdict.DELIVER
    assert t.resume_from("a") == (4, "e1")
    assert t.accept(_snap(4)) is Verdict.SKIP  # a reconnect's repeat
    assert t.accept(_snap(9)) is Verdict.DELIVER  # a jump in a snapshot replaces
    assert t.accept({"kind": "op", "id": "other", "seq": 1}) is Verdict.SKIP


def test_tracker_gap_resyncs_once_until_whole() -> None:
    t = ResumeTracker(["a"])
    t.accept(_snap(1))
    assert t.accept(_op(3)) is Verdict.RESYNC
    assert t.accept(_op(4)) is Verdict.SKIP  # already resyncing
    assert t.resume_from("a") == (1, "e1")
    assert t.accept(_op(2)) is Verdict.DELIVER  # the replay
    assert t.accept(_op(3)) is Verdict.DELIVER
    assert t.accept(_op(5)) is Verdict.RESYNC
    assert t.accept(_snap(5)) is Verdict.DELIVER


def test_tracker_lives_and_epochs() -> None:
    t = ResumeTracker(["a"])
    t.accept(_snap(0, None))
    assert t.accept(_op(1, "e1")) is Verdict.DELIVER  # created
    assert t.accept({"kind": "deleted", "id": "a"}) is Verdict.DELIVER
    assert t.resume_from("a") is None
    assert t.accept(_op(1, "e2")) is Verdict.DELIVER  # a new life
    assert t.accept(_op(2, "e3")) is Verdict.RESYNC  # another life, delete missed
    t2 = ResumeTracker(["a"])
    t2.accept(_snap(5, "e1"))
    assert t2.accept(_op(1, "e2")) is Verdict.RESYNC  # a missed delete: not applied on top


def test_backoff_grows_to_the_cap_with_jitter() -> None:
    b = Backoff(0.1, 1.0, rand=lambda: 1.0)
    assert [round(b.next_delay(), 3) for _ in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    for _ in range(2000):
        b.next_delay()  # no overflow however long the outage
    b.reset()
    low = Backoff(0.1, 1.0, rand=lambda: 0.0)
    assert low.next_delay() == pytest.approx(0.05)
    with pytest.raises(ValueError):
        Backoff(0, 1)


def _event(delta: dict[str, object]) -> bytes:
    return b"data: " + base64.b64encode(msgpack.packb(delta)) + b"\n\n"


def test_sse_parser_split_anywhere() -> None:
    stream = b": ping\n\n" + _event({"kind": "op", "seq": 1}) + _event({"kind": "op", "seq": 2})
    for cut in range(len(stream) + 1):
        parser = SseParser()
        got = parser.feed(stream[:cut]) + parser.feed(stream[cut:])
        assert [e.name for e in got] == ["message", "message"]
        assert [decode_delta(e.data)["seq"] for e in got] == [1, 2]


def test_sse_parser_crlf_multiline_and_other_fields() -> None:
    parser = SseParser()
    assert parser.feed(b"event: x\r\ndata: a\r\ndata:b\r\n\r\n") == [("x", b"a\nb")]
    assert parser.feed(b"id: 1\r\rdata: c\r") == []
    assert parser.feed(b"\n\r\n") == [("message", b"c")]  # the name lasts one event


def test_sse_parser_names_the_end_event() -> None:
    """The stream's last event when the read ends (docs/protocol.md#the-sse-stream)."""
    parser = SseParser()
    stream = _event({"kind": "op", "seq": 1}) + (
        b'event: end\ndata: {"error": "token_revoked", "message": "token revoked"}\n\n'
    )
    events = parser.feed(stream)
    assert [e.name for e in events] == ["message", "end"]
    assert decode_end(events[1].data) == {
        "kind": "error",
        "error": "token_revoked",
        "message": "token revoked",
    }
    # An event line without data dispatches nothing, and does not name the next event.
    assert parser.feed(b"event: end\n\n" + _event({"seq": 2})) == [
        SseEvent("message", _event({"seq": 2})[6:-2])
    ]
    for bad in (b"not json", b"[1]", b'{"message": "no code"}'):
        with pytest.raises(SseProtocolError):
            decode_end(bad)


def test_sse_parser_event_size_limit() -> None:
    parser = SseParser(max_event_bytes=100)
    parser.feed(b"data: " + b"A" * 60 + b"\n")
    with pytest.raises(SseProtocolError):
        parser.feed(b"data: " + b"A" * 60 + b"\n")
    with pytest.raises(SseProtocolError):
        SseParser(max_event_bytes=100).feed(b"data: " + b"A" * 200)
    with pytest.raises(SseProtocolError):  # complete in one chunk: still too large
        SseParser(max_event_bytes=100).feed(b"data: " + b"A" * 200 + b"\n\n")


def test_decode_delta_refuses_garbage() -> None:
    with pytest.raises(SseProtocolError):
        decode_delta(b"!!!")
    with pytest.raises(SseProtocolError):
        decode_delta(base64.b64encode(msgpack.packb([1, 2])))

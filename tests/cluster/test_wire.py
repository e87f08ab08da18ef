"""The pure parts of the PostgreSQL store: NOTIFY payloads, pgoutput messages, slot names."""

from __future__ import annotations

import base64
import os
import struct

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from syncd.cluster.notify import (
    NOTIFY_MAX_BYTES,
    SENDER_MAX,
    SINGLE_RECORD_MAX,
    BadNotice,
    Notice,
    pack_awareness,
    pack_awareness_query,
    pack_deleted,
    pack_records,
    pack_reference,
    unpack,
)
from syncd.cluster.pgoutput import PgOutputDecoder, PgOutputError
from syncd.cluster.wal import SLOT_NAME_MAX, slot_name

EXAMPLES = int(os.environ.get("SYNCD_HYPOTHESIS_EXAMPLES", "150"))
NODE = "n" * SENDER_MAX  # the longest sender tag


def record(seq: int, pad: int = 0) -> bytes:
    return msgpack.packb(
        {
            "kind": "op",
            "ns": "n",
            "id": "gc:a",
            "type": "gcounter",
            "seq": seq,
            "epoch": "e",
            "op": {"pad": "x" * pad},
        },
        use_bin_type=True,
    )


# -- NOTIFY payloads -------------------------------------------------------------------


def test_records_round_trip_in_one_payload() -> None:
    payloads, too_large = pack_records("node-1", [record(1), record(2)])
    assert too_large == [] and len(payloads) == 1
    notice = unpack(payloads[0])
    assert notice.node == "node-1" and notice.kind == "r"
    assert [r["seq"] for r in notice.records] == [1, 2]
    base64.b64decode(payloads[0], validate=True)  # the standard alphabet, padded


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=9000), max_size=40))
def test_payloads_stay_under_the_limit_and_keep_the_order(pads: list[int]) -> None:
    records = [record(i + 1, pad) for i, pad in enumerate(pads)]
    payloads, too_large = pack_records(NODE, records)
    carried = [r["seq"] for p in payloads for r in unpack(p).records]
    assert all(len(p) <= NOTIFY_MAX_BYTES for p in payloads)
    assert sorted(carried + [i + 1 for i in too_large]) == list(range(1, len(pads) + 1))
    assert carried == sorted(carried)
    for i in too_large:
        assert len(records[i]) > SINGLE_RECORD_MAX


def test_the_single_record_bound_is_exact_enough() -> None:
    fits = b"\x00" * SINGLE_RECORD_MAX
    payloads, too_large = pack_records(NODE, [fits])
    assert too_large == [] and len(payloads[0]) <= NOTIFY_MAX_BYTES
    # Past the hard limit nothing fits, whatever the node id.
    _, too_large = pack_records("a", [b"\x00" * (NOTIFY_MAX_BYTES // 4 * 3)])
    assert too_large == [0]


def test_sender_tags_are_bounded() -> None:
    with pytest.raises(ValueError, match="sender"):
        pack_records("n" * (SENDER_MAX + 1), [record(1)])


def test_references_and_deletes_round_trip() -> None:
    ref = unpack(pack_reference("a", "ns", "rg:doc", "ep", 7))
    assert (ref.kind, ref.ns, ref.id, ref.epoch, ref.seq) == ("ref", "ns", "rg:doc", "ep", 7)
    gone = unpack(pack_deleted("a", "ns", "rg:doc", "ep"))
    assert (gone.kind, gone.ns, gone.id, gone.epoch) == ("del", "ns", "rg:doc", "ep")


def test_awareness_and_queries_round_trip() -> None:
    payload = pack_awareness(NODE, "ns", "yd:doc", b"\x01\x02\x00")
    assert payload is not None
    notice = unpack(payload)
    assert (notice.kind, notice.node, notice.ns, notice.id, notice.update) == (
        "aw",
        NODE,
        "ns",
        "yd:doc",
        b"\x01\x02\x00",
    )
    query = unpack(pack_awareness_query(NODE, "ns", "yd:doc"))
    assert (query.kind, query.ns, query.id) == ("awq", "ns", "yd:doc")


def test_awareness_too_large_to_notify_is_not_packed() -> None:
    fits = pack_awareness(NODE, "ns", "yd:doc", b"x" * 5000)
    assert fits is not None and len(fits) <= NOTIFY_MAX_BYTES
    assert pack_awareness(NODE, "ns", "yd:doc", b"x" * 6000) is None


@pytest.mark.parametrize(
    "payload",
    [
        "not base64!",
        base64.b64encode(msgpack.packb(["a", "aw", ["ns", "yd:d", "text, not bytes"]])).decode(),
        base64.b64encode(msgpack.packb(["a", "aw", ["ns", "yd:d"]])).decode(),
        base64.b64encode(msgpack.packb(["a", "awq", ["ns", 5]])).decode(),
        base64.b64encode(b"\xc1").decode(),
        base64.b64encode(msgpack.packb([1, "r", []])).decode(),
        base64.b64encode(msgpack.packb(["a", "what", []])).decode(),
        base64.b64encode(msgpack.packb(["a", "r", [b"\x01"]])).decode(),
        base64.b64encode(
            msgpack.packb(["a", "r", [msgpack.packb({"kind": "op", "ns": 1})]])
        ).decode(),
        base64.b64encode(msgpack.packb(["a", "ref", [1]])).decode(),
        base64.b64encode(msgpack.packb({"a": 1})).decode(),
    ],
)
def test_foreign_payloads_are_refused(payload: str) -> None:
    with pytest.raises(BadNotice):
        unpack(payload)


def test_a_nodes_own_notice_comes_back_without_its_records_decoded() -> None:
    """PostgreSQL hands a node its own notifications too: their records are not
    decoded (a record here that would be refused shows it), others' still are."""
    payload = base64.b64encode(msgpack.packb(["me", "r", [record(1), b"\x01"]])).decode()
    own = unpack(payload, ignore="me")
    assert own.node == "me" and own.kind == "" and own.records == ()
    with pytest.raises(BadNotice):
        unpack(payload, ignore="someone else")
    with pytest.raises(BadNotice):
        unpack(payload)
    with pytest.raises(BadNotice):  # the header is still checked
        unpack(base64.b64encode(msgpack.packb([1, "r", []])).decode(), ignore="me")


@pytest.mark.parametrize("tag", ["a", "me", "n0.1a2b3c", "node-" + "x" * 27, "y" * 40])
def test_only_the_nodes_own_tag_is_passed_over_undecoded(tag: str) -> None:
    """The sender is told by the payload's first characters (whole base64 quads
    over the array header and the tag), for tags of every header size and
    alignment: a tag that only starts like it, or ends like it, is decoded."""
    payload, _ = pack_records(tag, [record(1)])
    assert unpack(payload[0], ignore=tag) == Notice(tag, "")
    for other in (tag + "z", tag[:-1], "z" + tag[1:], tag.upper() if tag.islower() else "q"):
        assert unpack(payload[0], ignore=other).records[0]["seq"] == 1
    damaged = "!" + payload[0][1:]  # not base64: the whole payload is refused as before
    with pytest.raises(BadNotice):
        unpack(damaged, ignore=tag)


# -- pgoutput --------------------------------------------------------------------------


def relation(oid: int, namespace: str, name: str, columns: list[str]) -> bytes:
    body = struct.pack("!I", oid) + namespace.encode() + b"\0" + name.encode() + b"\0" + b"d"
    body += struct.pack("!h", len(columns))
    for column in columns:
        body += b"\0" + column.encode() + b"\0" + struct.pack("!Ii", 17, -1)
    return b"R" + body


def insert(oid: int, values: list[tuple[bytes, bytes | None]]) -> bytes:
    body = struct.pack("!I", oid) + b"N" + struct.pack("!h", len(values))
    for form, value in values:
        body += form
        if value is not None:
            body += struct.pack("!i", len(value)) + value
    return b"I" + body


def test_inserts_decode_in_binary_and_text_form() -> None:
    decoder = PgOutputDecoder()
    assert decoder.feed(relation(7, "public", "ops", ["gid", "ns", "record"])) is None
    assert decoder.feed(b"B" + bytes(20)) is None  # Begin: skipped
    row = decoder.feed(insert(7, [(b"b", b"\x00" * 8), (b"t", b"n"), (b"b", b"\xff\x00raw")]))
    assert row is not None and row.relation.name == "ops" and row.relation.namespace == "public"
    assert row.value("record") == b"\xff\x00raw"
    row = decoder.feed(insert(7, [(b"t", b"1"), (b"n", None), (b"t", b"\\xff00")]))
    assert row is not None and row.value("record") == b"\xff\x00" and row.value("ns") is None
    with pytest.raises(PgOutputError, match="no column"):
        row.value("missing")
    escaped = decoder.feed(insert(7, [(b"t", b"1"), (b"t", b"n"), (b"t", b"abc")]))
    assert escaped is not None
    with pytest.raises(PgOutputError, match="not hex"):
        escaped.value("record")


@pytest.mark.parametrize(
    "message",
    [
        b"",
        insert(99, [(b"t", b"1")]),  # before its Relation message
        relation(7, "public", "ops", ["a"])[:-3],  # truncated
        b"R" + struct.pack("!I", 7) + b"public",  # unterminated string
    ],
)
def test_broken_messages_raise(message: bytes) -> None:
    with pytest.raises(PgOutputError):
        PgOutputDecoder().feed(message)


def test_broken_inserts_raise() -> None:
    decoder = PgOutputDecoder()
    decoder.feed(relation(7, "public", "ops", ["record"]))
    for message in (
        b"I" + struct.pack("!I", 7) + b"K",
        insert(7, [(b"x", None)]),
        insert(7, [(b"t", b"abc")])[:-1],
    ):
        with pytest.raises(PgOutputError):
            decoder.feed(message)


# -- slot names ------------------------------------------------------------------------


def test_slot_names_are_valid_identifiers() -> None:
    assert slot_name("service_wal", "node-A1") == "service_wal_node_a1"
    long = slot_name("w" * 40, "N" * 32)
    assert len(long) == SLOT_NAME_MAX
    assert long != slot_name("w" * 40, "N" * 31 + "M")  # the hash keeps them apart

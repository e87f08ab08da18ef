"""NOTIFY payloads between cluster nodes (pure: bytes in, notices out).

A payload is ``base64(msgpack([sender, kind, body]))`` (standard alphabet,
so it is plain ASCII as NOTIFY needs):

- ``"r"``: ``body`` is a list of op records, each already msgpack-encoded (the
  bytes stored in the ops table, not packed a second time);
- ``"ref"``: ``[ns, id, epoch, seq]`` of an op too large to notify: the
  receiver reads it from the ops table;
- ``"del"``: ``[ns, id, epoch]``: that life of that CRDT ended;
- ``"aw"``: ``[ns, id, update]``: a Yjs awareness update (cursors, names)
  from a connection on the sender, for the same document's rooms elsewhere;
- ``"awq"``: ``[ns, id]``: the sender just opened a room on that document:
  nodes with connections on it answer with their awareness states (``"aw"``).

PostgreSQL refuses payloads of 8000 bytes or more, so the records of one
commit are packed greedily into as few payloads as fit; a record that does not
fit alone is left to the replication stream (or sent as a reference).
"""

from __future__ import annotations

import base64
import binascii
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgpack

NOTIFY_MAX_BYTES: Final = 7999
"""The largest NOTIFY payload PostgreSQL accepts (it must be under 8000 bytes)."""

_RAW_MAX: Final = NOTIFY_MAX_BYTES // 4 * 3
"""Bytes of msgpack whose base64 form still fits (base64 turns 3 bytes into 4)."""

SENDER_MAX: Final = 40
"""Longest sender tag: SERVICE_NODE_ID (at most 32 characters, config.py), a
dot and a per-process suffix."""

_OUTER_OVERHEAD: Final = 1 + (2 + SENDER_MAX) + 2 + 5
"""The outer array header, the node id (str8 header), "r", the records' array header."""

_RECORD_OVERHEAD: Final = 5
"""The bin32 header in front of one record."""

SINGLE_RECORD_MAX: Final = _RAW_MAX - _OUTER_OVERHEAD - _RECORD_OVERHEAD
"""A record of at most this many bytes always fits in a payload on its own,
whatever the sender tag. The replication consumer applies only records larger
than this: the two paths overlap a little (harmless, replay is idempotent) and
never leave a gap."""


@dataclass(frozen=True, slots=True)
class Notice:
    node: str
    kind: str
    records: tuple[dict[str, Any], ...] = ()
    ns: str = ""
    id: str = ""
    epoch: str = ""
    seq: int = 0
    update: bytes = b""


class BadNotice(ValueError):
    """A payload on our channel that we did not write (or a newer syncd did)."""


def _encode(node: str, kind: str, body: Any) -> str:
    raw = msgpack.packb([node, kind, body], use_bin_type=True)
    return base64.b64encode(raw).decode("ascii")


def pack_records(node: str, records: Sequence[bytes]) -> tuple[list[str], list[int]]:
    """Payloads carrying ``records`` in order, and the indexes of those too large
    to travel in any payload. ``node`` is the sender tag (at most SENDER_MAX)."""
    if len(node.encode()) > SENDER_MAX:
        raise ValueError(f"sender tag longer than {SENDER_MAX} bytes")
    payloads: list[str] = []
    too_large: list[int] = []
    batch: list[bytes] = []
    size = _OUTER_OVERHEAD
    for index, record in enumerate(records):
        cost = len(record) + _RECORD_OVERHEAD
        if _OUTER_OVERHEAD + cost > _RAW_MAX:
            too_large.append(index)
            continue
        if size + cost > _RAW_MAX:
            payloads.append(_encode(node, "r", batch))
            batch, size = [], _OUTER_OVERHEAD
        batch.append(record)
        size += cost
    if batch:
        payloads.append(_encode(node, "r", batch))
    return payloads, too_large


def pack_reference(node: str, ns: str, crdt_id: str, epoch: str, seq: int) -> str:
    return _encode(node, "ref", [ns, crdt_id, epoch, seq])


def pack_deleted(node: str, ns: str, crdt_id: str, epoch: str) -> str:
    return _encode(node, "del", [ns, crdt_id, epoch])


def pack_awareness(node: str, ns: str, crdt_id: str, update: bytes) -> str | None:
    """The payload carrying an awareness update, or None when it would not fit
    (a room with very many cursors: it then stays on this node)."""
    payload = _encode(node, "aw", [ns, crdt_id, update])
    return payload if len(payload) <= NOTIFY_MAX_BYTES else None


def pack_awareness_query(node: str, ns: str, crdt_id: str) -> str:
    return _encode(node, "awq", [ns, crdt_id])


_RECORD_FIELDS: Final = (("ns", str), ("id", str), ("epoch", str), ("type", str), ("seq", int))


def unpack_record(raw: bytes) -> dict[str, Any]:
    record = msgpack.unpackb(raw, raw=False, strict_map_key=False)
    # Every other node's every op passes here: one expression for the good case.
    if (
        type(record) is dict
        and record.get("kind") == "op"
        and type(record.get("ns")) is str
        and type(record.get("id")) is str
        and type(record.get("epoch")) is str
        and type(record.get("type")) is str
        and type(record.get("seq")) is int
    ):
        return record
    if type(record) is not dict or record.get("kind") != "op":
        raise BadNotice("not an op record")
    for name, kind in _RECORD_FIELDS:
        if type(record.get(name)) is not kind:
            raise BadNotice(f"op record without a valid {name!r}")
    raise AssertionError("unreachable")  # pragma: no cover


@functools.lru_cache(maxsize=8)
def _sender_prefix(node: str) -> tuple[int, bytes]:
    """The start of every payload ``node`` sends, as base64 to cut and the bytes
    it decodes to: the array header and the sender tag, whole base64 quads."""
    head = b"\x93" + msgpack.packb(node, use_bin_type=True)
    return -(-len(head) // 3) * 4, head


def _sent_by(payload: str, node: str) -> bool:
    """Whether ``payload`` starts as ``node``'s payloads do, decoding only its first
    few dozen characters."""
    chars, head = _sender_prefix(node)
    try:
        return base64.b64decode(payload[:chars], validate=True)[: len(head)] == head
    except binascii.Error:
        return False


def unpack(payload: str, *, ignore: str | None = None) -> Notice:
    """The notice in ``payload``. One sent by ``ignore`` (this process: PostgreSQL
    delivers a node's own notifications to its listener too) comes back with its
    sender only (kind ""), not decoded past the sender tag: a node's own
    notices cost it a prefix's decoding, not the payload's (measured: 14 us for
    a 16-record payload, against 1.5 us)."""
    if ignore is not None and _sent_by(payload, ignore):
        return Notice(ignore, "")
    try:
        node, kind, body = msgpack.unpackb(
            base64.b64decode(payload, validate=True), raw=False, strict_map_key=False
        )
        if type(node) is not str or type(kind) is not str:
            raise BadNotice("bad header")
        if node == ignore:  # its tag packed another way than _sender_prefix's
            return Notice(node, "")
        if kind == "r":
            return Notice(node, kind, tuple([unpack_record(r) for r in body]))
        if kind == "ref":
            ns, crdt_id, epoch, seq = body
            return Notice(node, kind, ns=ns, id=crdt_id, epoch=epoch, seq=int(seq))
        if kind == "del":
            ns, crdt_id, epoch = body
            return Notice(node, kind, ns=ns, id=crdt_id, epoch=epoch)
        if kind == "aw":
            ns, crdt_id, update = body
            if type(ns) is not str or type(crdt_id) is not str or type(update) is not bytes:
                raise BadNotice("bad awareness notice")
            return Notice(node, kind, ns=ns, id=crdt_id, update=update)
        if kind == "awq":
            ns, crdt_id = body
            if type(ns) is not str or type(crdt_id) is not str:
                raise BadNotice("bad awareness query")
            return Notice(node, kind, ns=ns, id=crdt_id)
    except (ValueError, TypeError, binascii.Error, msgpack.UnpackException) as exc:
        raise BadNotice(str(exc)) from None
    raise BadNotice(f"unknown kind {kind!r}")

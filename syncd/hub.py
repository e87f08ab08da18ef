"""The broadcast hub: deltas in, the same bytes out to every subscriber.

Theory of operation
-------------------
``publish(delta)`` runs once per durable delta. The delta is wrapped in an
:class:`EncodedDelta` that encodes lazily and at most once per wire form:
msgpack, a WebSocket binary frame, a WebSocket text frame (JSON), and the SSE
event line. Server-to-client WebSocket frames are unmasked, so one frame's
bytes serve every connection; fan-out is a loop of ``deliver`` calls that end
in ``transport.write``. ``publish_many`` hands a stretch of one CRDT's
deltas (an op batch) to a subscriber that can take it in one call, their
frames joined once. No per-subscriber encoding and no wsproto call happen
on this path, and the hub never awaits a subscriber.

A subscriber decides for itself what to do when its peer falls behind (its
transport's buffer is over its bound): a WebSocket subscription skips deltas
and resyncs with a fresh snapshot once drained, and so does an SSE stream.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from itertools import groupby
from typing import Any, Protocol

from syncd.wire import WS_OPCODE_BINARY, WS_OPCODE_TEXT, pack, to_json, ws_frame


class EncodedDelta:
    """A delta and its wire forms, each built on first use and then shared."""

    __slots__ = ("_forms", "_json", "_msgpack", "_sse", "_ws_binary", "_ws_text", "delta", "seq")

    def __init__(self, delta: dict[str, Any]) -> None:
        self.delta = delta
        self.seq: int = delta.get("seq", 0)
        self._forms: dict[str, bytes] | None = None
        self._msgpack: bytes | None = None
        self._json: bytes | None = None
        self._ws_binary: bytes | None = None
        self._ws_text: bytes | None = None
        self._sse: bytes | None = None

    def msgpack(self) -> bytes:
        if self._msgpack is None:
            self._msgpack = pack(self.delta)
        return self._msgpack

    def json(self) -> bytes:
        if self._json is None:
            self._json = to_json(self.delta)
        return self._json

    def ws_binary(self) -> bytes:
        if self._ws_binary is None:
            self._ws_binary = ws_frame(WS_OPCODE_BINARY, self.msgpack())
        return self._ws_binary

    def ws_text(self) -> bytes:
        if self._ws_text is None:
            self._ws_text = ws_frame(WS_OPCODE_TEXT, self.json())
        return self._ws_text

    def sse(self) -> bytes:
        if self._sse is None:
            self._sse = b"data: " + base64.b64encode(self.msgpack()) + b"\n\n"
        return self._sse

    def form(self, name: str, build: Callable[[dict[str, Any]], bytes]) -> bytes:
        """Another wire form (a protocol's own frame, e.g. y-websocket's),
        built by ``build`` from the delta on first use and then shared."""
        forms = self._forms
        if forms is None:
            forms = self._forms = {}
        data = forms.get(name)
        if data is None:
            data = forms[name] = build(self.delta)
        return data


class EncodedRun:
    """Consecutive deltas of one CRDT published together (one op batch, one WS
    read's ops): their frames are joined once, so a subscriber past none of
    them takes them in one call and one queued buffer instead of one per delta."""

    __slots__ = (
        "_forms",
        "_ws_binary",
        "_ws_text",
        "epoch",
        "first_seq",
        "items",
        "last_seq",
        "last_ts",
        "plain",
    )

    def __init__(self, items: list[EncodedDelta]) -> None:
        self.items = items
        self.first_seq = items[0].seq
        self.last_seq = items[-1].seq
        self.epoch: str | None = items[-1].delta.get("epoch")
        # Plain: ops of one epoch with consecutive seqs. A subscriber whose last
        # seq is below the first takes every one of them (see WsSubscription)
        # if its read lasts past the latest of their times.
        plain = True
        last_ts = 0
        seq = self.first_seq - 1
        for encoded in items:
            delta = encoded.delta
            seq += 1
            if encoded.seq != seq or delta.get("kind") != "op" or delta.get("epoch") != self.epoch:
                plain = False
                break
            ts = delta.get("ts", 0)
            if ts > last_ts:
                last_ts = ts
        self.plain = plain
        self.last_ts: int = last_ts
        """The latest op time among the items (meaningful when ``plain``)."""
        self._ws_binary: bytes | None = None
        self._ws_text: bytes | None = None
        self._forms: dict[str, bytes] | None = None

    def form(self, name: str, build: Callable[[dict[str, Any]], bytes]) -> bytes:
        """The items' :meth:`EncodedDelta.form` joined, built once and shared."""
        forms = self._forms
        if forms is None:
            forms = self._forms = {}
        data = forms.get(name)
        if data is None:
            data = forms[name] = b"".join([item.form(name, build) for item in self.items])
        return data

    def ws_binary(self) -> bytes:
        if self._ws_binary is None:
            self._ws_binary = b"".join([encoded.ws_binary() for encoded in self.items])
        return self._ws_binary

    def ws_text(self) -> bytes:
        if self._ws_text is None:
            self._ws_text = b"".join([encoded.ws_text() for encoded in self.items])
        return self._ws_text


def _crdt_key(delta: dict[str, Any]) -> tuple[str, str]:
    return delta["ns"], delta["id"]


class Subscriber(Protocol):
    """What the hub hands deltas to (an SSE stream, a WebSocket subscription)."""

    def deliver(self, delta: EncodedDelta) -> None:
        """Take a delta. Must not block, await or raise."""
        ...

    def deliver_run(self, run: EncodedRun) -> None:
        """Take consecutive deltas of one CRDT (``run.items``), as ``deliver``
        would one by one; a subscriber may send them in one write."""
        ...


class DeliverEach:
    """``deliver_run`` for a subscriber that takes deltas one at a time."""

    __slots__ = ()  # so that a subscriber with slots of its own has no dict

    def deliver(self, delta: EncodedDelta) -> None:
        raise NotImplementedError

    def deliver_run(self, run: EncodedRun) -> None:
        for encoded in run.items:
            self.deliver(encoded)


Key = tuple[str, str]


class Hub:
    def __init__(self) -> None:
        self._subs: dict[Key, dict[Subscriber, None]] = {}
        self._count = 0

    def subscribe(self, ns: str, crdt_id: str, subscriber: Subscriber) -> None:
        subs = self._subs.setdefault((ns, crdt_id), {})
        if subscriber not in subs:
            subs[subscriber] = None
            self._count += 1

    def unsubscribe(self, ns: str, crdt_id: str, subscriber: Subscriber) -> None:
        key = (ns, crdt_id)
        subs = self._subs.get(key)
        if subs is not None and subs.pop(subscriber, 0) is None:
            self._count -= 1
            if not subs:
                del self._subs[key]

    def publish(self, delta: dict[str, Any]) -> int:
        """Hand ``delta`` to every subscriber of its CRDT; returns how many."""
        subs = self._subs.get((delta["ns"], delta["id"]))
        if not subs:
            return 0
        encoded = EncodedDelta(delta)
        # A subscriber may unsubscribe itself while we deliver; iterate a copy.
        for subscriber in tuple(subs):
            subscriber.deliver(encoded)
        return len(subs)

    def publish_many(self, deltas: list[dict[str, Any]]) -> None:
        """``publish`` each of ``deltas`` in order; each stretch of one CRDT's
        deltas goes to its subscribers in one :class:`EncodedRun`."""
        if len(deltas) == 1:  # one op's records, as most requests make: no grouping
            self.publish(deltas[0])
            return
        for key, group in groupby(deltas, key=_crdt_key):
            stretch = list(group)
            if len(stretch) == 1:
                self.publish(stretch[0])
                continue
            subs = self._subs.get(key)
            if not subs:
                continue
            run = EncodedRun([EncodedDelta(delta) for delta in stretch])
            for subscriber in tuple(subs):
                subscriber.deliver_run(run)

    def subscribed(self, ns: str, crdt_id: str) -> bool:
        """Whether the CRDT has any subscriber."""
        return (ns, crdt_id) in self._subs

    def subscribed_keys(self) -> list[Key]:
        """Every CRDT that has a subscriber (a copy: safe to hold across awaits)."""
        return list(self._subs)

    def subscribers(self, ns: str, crdt_id: str) -> Iterator[Subscriber]:
        return iter(tuple(self._subs.get((ns, crdt_id), ())))

    @property
    def count(self) -> int:
        return self._count
